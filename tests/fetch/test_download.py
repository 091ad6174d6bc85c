"""fetch(): real downloads from a loopback http.server into a real cache directory."""

from __future__ import annotations

import hashlib
import os
import tracemalloc

import httpx
import pytest

from lemonpack.errors import FetchError, IntegrityError
from lemonpack.fetch import ArtifactCache, Mirror, default_cache_root, fetch


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _entries(cache: ArtifactCache) -> list[str]:
    return sorted(os.listdir(cache.directory)) if cache.directory.exists() else []


@pytest.fixture
def cache(tmp_path):
    return ArtifactCache(tmp_path / "cache")


def _refusing_client() -> httpx.Client:
    """A client whose transport fails the test if any request reaches it."""
    def handler(request):
        raise AssertionError(f"network used: {request.url}")
    return httpx.Client(transport=httpx.MockTransport(handler))


def test_download_verifies_and_stores(server, cache):
    data = os.urandom(3 * (1 << 20) + 17)  # several 1 MiB chunks
    url = server.put("a/b/engine.bin", data)
    got = fetch(url, sha256=f"sha256:{_sha(data)}", cache=cache, progress=False)
    assert got.path == cache.directory / _sha(data)
    assert got.path.read_bytes() == data
    assert (got.sha256, got.url, got.fetched_from, got.from_cache, got.size) == (
        _sha(data), url, url, False, len(data))
    assert _entries(cache) == [_sha(data)]  # no temp files left
    assert cache.path_for(_sha(data)) == got.path


def test_warm_cache_hit_needs_no_server(server, cache):
    data = os.urandom(4096)
    url = server.put("x.bin", data)
    fetch(url, sha256=f"sha256:{_sha(data)}", cache=cache, progress=False)
    server.stop()
    with _refusing_client() as client:
        again = fetch(url, sha256=f"sha256:{_sha(data)}", cache=cache, progress=False, client=client)
    assert again.from_cache and again.path.read_bytes() == data
    assert again.fetched_from.startswith("file://")


def test_mismatch_raises_with_both_digests_and_leaves_nothing(server, cache):
    data = os.urandom(2 * (1 << 20))
    url = server.put("bad.bin", data)
    wrong = "0" * 64
    with pytest.raises(IntegrityError) as info:
        fetch(url, sha256=f"sha256:{wrong}", cache=cache, progress=False)
    err = info.value
    assert err.what == url
    assert err.expected == f"sha256:{wrong}" and err.actual == f"sha256:{_sha(data)}"
    assert wrong in str(err) and _sha(data) in str(err)
    assert _entries(cache) == []


def test_plain_http_to_non_loopback_is_refused_before_connecting(cache):
    with _refusing_client() as client:
        with pytest.raises(FetchError, match="plain http"):
            fetch("http://example.invalid/x.bin", sha256=None, cache=cache, client=client, progress=False)
    assert _entries(cache) == []


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/x", "file:///etc/passwd"])
def test_other_schemes_refused(cache, url):
    with _refusing_client() as client, pytest.raises(FetchError):
        fetch(url, sha256=None, cache=cache, client=client, progress=False)


def test_http_404_is_fetch_error(server, cache):
    url = f"{server.base}/missing.bin"
    with pytest.raises(FetchError) as info:
        fetch(url, sha256=None, cache=cache, progress=False)
    assert url in str(info.value) and "404" in str(info.value)
    assert _entries(cache) == []


def test_connection_refused_is_fetch_error(server, cache):
    url = f"{server.base}/gone.bin"
    server.stop()
    with pytest.raises(FetchError, match="gone.bin"):
        fetch(url, sha256=None, cache=cache, progress=False)


def test_roll_forward_records_observed_hash(server, cache):
    data = os.urandom(10000)
    url = server.put("rf.bin", data)
    got = fetch(url, sha256=None, cache=cache, progress=False)
    assert got.sha256 == _sha(data) and not got.from_cache
    server.stop()
    pinned = fetch(url, sha256=f"sha256:{got.sha256}", cache=cache, progress=False)
    assert pinned.from_cache and pinned.path == got.path


def test_malformed_expected_digest(cache):
    with pytest.raises(ValueError):
        fetch("https://example.invalid/x", sha256="sha256:XYZ", cache=cache)
    with pytest.raises(ValueError):
        fetch("https://example.invalid/x", sha256=_sha(b""), cache=cache)  # missing prefix


def test_fetch_through_mirror(server, cache):
    data = os.urandom(5000)
    origin = "https://github.com/org/engine/releases/download/v1.2/engine-linux-rocm.tar.gz?raw=1"
    server.put("github.com/org/engine/releases/download/v1.2/engine-linux-rocm.tar.gz", data)
    mirror = Mirror(server.base + "/")
    got = fetch(origin, sha256=f"sha256:{_sha(data)}", cache=cache, mirror=mirror, progress=False)
    assert got.url == origin
    assert got.fetched_from == f"{server.base}/github.com/org/engine/releases/download/v1.2/engine-linux-rocm.tar.gz"
    assert got.path.read_bytes() == data


def test_insecure_mirror_needs_opt_in(cache):
    data = b"mirrored"
    seen = []

    def handler(request):
        seen.append(str(request.url))
        return httpx.Response(200, content=iter([data]))

    origin = "https://example.org/f.bin"
    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        with pytest.raises(FetchError, match="plain http"):
            fetch(origin, sha256=None, cache=cache, mirror=Mirror("http://10.1.2.3/m"), client=client)
        assert seen == []
        got = fetch(origin, sha256=f"sha256:{_sha(data)}", cache=cache, client=client, progress=False,
                    mirror=Mirror("http://10.1.2.3/m", allow_insecure=True))
    assert seen == ["http://10.1.2.3/m/example.org/f.bin"] and got.path.read_bytes() == data


def test_redirects_followed_on_loopback(server, cache):
    data = os.urandom(777)
    server.put("real.bin", data)
    server.httpd.redirects["/alias.bin"] = f"{server.base}/real.bin"
    got = fetch(f"{server.base}/alias.bin", sha256=None, cache=cache, progress=False)
    assert got.fetched_from == f"{server.base}/real.bin" and got.sha256 == _sha(data)


def test_redirect_https_to_http_refused(cache):
    def handler(request):
        if request.url.scheme == "https":
            return httpx.Response(302, headers={"Location": "http://127.0.0.1:9/x.bin"})
        raise AssertionError("followed a downgrade")

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        with pytest.raises(FetchError, match="down to plain http"):
            fetch("https://example.org/x.bin", sha256=None, cache=cache, client=client, progress=False)
    assert _entries(cache) == []


def test_redirect_loop_is_bounded(server, cache):
    server.httpd.redirects["/loop"] = f"{server.base}/loop"
    with pytest.raises(FetchError, match="redirects"):
        fetch(f"{server.base}/loop", sha256=None, cache=cache, progress=False)


def test_progress_bar_on_stderr(server, cache, capsys):
    data = os.urandom(1 << 20)
    url = server.put("p.bin", data)
    fetch(url, sha256=None, cache=cache, progress=True)
    captured = capsys.readouterr()
    assert captured.out == "" and "p.bin" in captured.err


def test_no_decoding_of_content_encoding(cache):
    """Bytes are hashed as served, even if the server labels them gzip-encoded."""
    import gzip
    body = gzip.compress(b"hello" * 100)

    def handler(request):
        assert request.headers["accept-encoding"] == "identity"
        return httpx.Response(200, content=iter([body]), headers={"Content-Encoding": "gzip"})

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        got = fetch("https://example.org/a.gz", sha256=None, cache=cache, client=client, progress=False)
    assert got.sha256 == _sha(body)


def test_memory_stays_flat_while_streaming(server, cache):
    data = os.urandom(32 << 20)
    url = server.put("big.bin", data)
    digest = _sha(data)
    del data
    tracemalloc.start()
    try:
        fetch(url, sha256=f"sha256:{digest}", cache=cache, progress=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak


def test_cache_root_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(tmp_path / "lp"))
    assert ArtifactCache().root == tmp_path / "lp" / "artifacts"
    monkeypatch.delenv("LEMONPACK_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_root() == tmp_path / "xdg" / "lemonpack"
    assert ArtifactCache().directory == tmp_path / "xdg" / "lemonpack" / "artifacts" / "sha256"


def test_cache_rejects_bad_digest(cache):
    with pytest.raises(ValueError):
        cache.path_for("../../etc/passwd")
    assert cache.path_for("a" * 64) is None


def test_corrupted_entry_is_rehashed_dropped_and_fetched_again(server, cache):
    data = os.urandom(3 * (1 << 20))
    url = server.put("e.bin", data)
    first = fetch(url, sha256=f"sha256:{_sha(data)}", cache=cache, progress=False)
    assert first.path.stat().st_mode & 0o777 == 0o444
    first.path.chmod(0o644)
    with open(first.path, "r+b") as f:  # one flipped byte, same size: stat facts could miss bit rot
        f.seek(1 << 20)
        f.write(bytes([data[1 << 20] ^ 1]))
    assert cache.verified(_sha(data)) is None and not first.path.exists()
    again = fetch(url, sha256=f"sha256:{_sha(data)}", cache=cache, progress=False)
    assert not again.from_cache and again.path.read_bytes() == data
    first.path.chmod(0o644)
    first.path.write_bytes(b"other")
    server.put("e.bin", b"other")  # the refetch is wrong too: exit 3, nothing cached
    with pytest.raises(IntegrityError):
        fetch(url, sha256=f"sha256:{_sha(data)}", cache=cache, progress=False)
    assert _entries(cache) == []


def test_partial_of_a_live_writer_is_never_swept(cache, tmp_path):
    """A temp whose lock another process holds stays; once that process dies it is stale."""
    import subprocess
    import sys

    fh, tmp = cache.staging()
    cache.discard(fh, tmp)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, sys, tempfile, time\n"
        f"fd, name = tempfile.mkstemp(dir={str(cache.directory)!r}, prefix='.tmp-')\n"
        "fcntl.flock(fd, fcntl.LOCK_EX); print(name, flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    try:
        live = holder.stdout.readline().strip()
        assert cache.sweep() == [] and os.path.exists(live)
        fh, mine = cache.staging()  # a new download sweeps too, and leaves it alone
        assert os.path.exists(live)
        cache.discard(fh, mine)
    finally:
        holder.kill()
        holder.wait(10)
    # the holder is reaped, so its lock is gone: the next sweep removes the temp
    cache.sweep()
    assert not os.path.exists(live)


def test_get_bytes_follows_checked_redirects_and_bounds_the_body(server):
    """Small documents verified by their reader (a catalogue index) are fetched through the
    same transport policy as artifacts: redirects one checked hop at a time, a redirect's
    body never taken for the document, a size bound, errors naming the URL."""
    from lemonpack.errors import FetchError
    from lemonpack.fetch.download import get_bytes

    url = server.put("doc.json", b'{"entries": []}')
    server.httpd.redirects["/moved.json"] = "/doc.json"
    assert get_bytes(f"{server.base}/moved.json", max_bytes=100) == b'{"entries": []}'
    with pytest.raises(FetchError, match=r"larger than 10 bytes"):
        get_bytes(url, max_bytes=10)
    with pytest.raises(FetchError, match=r"GET .*/missing.json failed: HTTP 404"):
        get_bytes(f"{server.base}/missing.json", max_bytes=100)
    server.httpd.redirects["/to-file"] = "file:///etc/passwd"
    with pytest.raises(FetchError, match="refusing"):
        get_bytes(f"{server.base}/to-file", max_bytes=100)
    with pytest.raises(FetchError, match="only http and https"):
        get_bytes("file:///etc/passwd", max_bytes=100)


def test_progress_lines_a_line_per_step_and_per_interval():
    from lemonpack.fetch.download import ProgressLines

    now = [0.0]
    out: list[str] = []
    meter = ProgressLines("m.gguf", out.append, total=10 << 20, step=25, interval=5.0, clock=lambda: now[0])
    for _ in range(10):  # 1 MiB a second
        now[0] += 1.0
        meter.advance(1 << 20)
    assert out == ["m.gguf: 10% (1.0 MiB of 10.0 MiB, 1.0 MiB/s)",  # the first bytes
                   "m.gguf: 30% (3.0 MiB of 10.0 MiB, 1.0 MiB/s)",  # 25% crossed
                   "m.gguf: 50% (5.0 MiB of 10.0 MiB, 1.0 MiB/s)",
                   "m.gguf: 80% (8.0 MiB of 10.0 MiB, 1.0 MiB/s)",
                   "m.gguf: 100% (10.0 MiB of 10.0 MiB, 1.0 MiB/s)"]
    out.clear()
    slow = ProgressLines("big", out.append, step=50, interval=5.0, clock=lambda: now[0])
    for _ in range(12):  # no total: the first bytes, then a line every 5 s while bytes arrive
        now[0] += 1.0
        slow(slow.done + 1024, None)
    now[0] += 60
    slow(slow.done, None)  # the bytes since the last line, however late
    now[0] += 60
    slow(slow.done, None)  # none since: no line
    assert out == ["big: 1.0 KiB, 1.0 KiB/s", "big: 6.0 KiB, 1.0 KiB/s", "big: 11.0 KiB, 1.0 KiB/s",
                   "big: 12.0 KiB, 171 B/s"]
    with pytest.raises(ValueError):
        ProgressLines("x", out.append, step=0)


def test_a_download_off_a_terminal_prints_progress_lines(server, cache, capsys):
    data = os.urandom(3 << 20)
    got = fetch(server.put("engine.tar.gz", data), sha256="sha256:" + _sha(data), cache=cache, progress=True)
    assert got.size == len(data)
    lines = capsys.readouterr().err.splitlines()  # pytest's stderr is no terminal: lines, not a bar
    assert lines[0].startswith("engine.tar.gz: ") and lines[-1].startswith("engine.tar.gz: 100% (3.0 MiB of 3.0 MiB")
    assert len(lines) <= 11 + 1, lines


# ---- large bodies: read from the socket into one reused buffer (httpclient.body) ----------------

def _spy_raw_socket(monkeypatch) -> list:
    from lemonpack import httpclient

    seen: list = []
    real = httpclient._raw_socket
    monkeypatch.setattr(httpclient, "_raw_socket", lambda resp: seen.append(real(resp)) or seen[-1])
    return seen


def test_a_large_download_is_read_from_the_socket_hashed_and_counted(server, cache, monkeypatch):
    from lemonpack.fetch import download
    from lemonpack.httpclient import RAW_BODY_MIN

    data = os.urandom(RAW_BODY_MIN + (5 << 20) + 123)
    url = server.put("large.bin", data)
    seen = _spy_raw_socket(monkeypatch)
    counted: list[int] = []

    class Meter:
        def __init__(self, *a, **k):
            pass

        def __enter__(self):
            return counted.append

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(download, "byte_meter", Meter)
    got = fetch(url, sha256=f"sha256:{_sha(data)}", cache=cache, progress=True)
    assert seen and seen[0] is not None  # the socket path, not httpx's 64 KiB pieces
    assert got.path.read_bytes() == data and got.size == len(data) and sum(counted) == len(data)
    assert max(counted) <= 1 << 20 and _entries(cache) == [_sha(data)]


def test_a_large_body_cut_short_is_a_fetch_error_and_leaves_nothing(cache, monkeypatch):
    import socket
    import threading

    from lemonpack.httpclient import RAW_BODY_MIN

    size = RAW_BODY_MIN + (4 << 20)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve():
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
            piece = b"\0" * (1 << 20)
            for _ in range((size >> 20) - 2):  # two MiB short
                conn.sendall(piece)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    seen = _spy_raw_socket(monkeypatch)
    try:
        with pytest.raises(FetchError, match="RemoteProtocolError"):
            fetch(f"http://127.0.0.1:{port}/short.bin", sha256=None, cache=cache, progress=False)
    finally:
        thread.join(10)
        listener.close()
    assert seen and seen[0] is not None
    assert _entries(cache) == []  # the temp file is gone, nothing committed
