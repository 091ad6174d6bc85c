"""The upstream relay's chunked-body walker (pure) and request bodies streaming through a real
``lemonpack serve`` with flat memory."""

from __future__ import annotations

import hashlib
import json
import os
import uuid

import pytest

from lemonpack.server.framing import ChunkWalker, FramingError
from lemonpack.server.upstream import UpstreamError, _framing
from multidict import CIMultiDict

BODY = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n"


@pytest.mark.parametrize("cut", [1, 2, 3, 7, len(BODY)])
def test_walker_finds_the_end_whatever_the_reads(cut):
    w = ChunkWalker()
    used = 0
    for i in range(0, len(BODY), cut):
        part = BODY[i:i + cut]
        n = w.feed(part)
        used += n
        if w.done:
            break
    assert w.done and used == len(BODY)


def test_walker_stops_at_the_end_and_rejects_garbage():
    w = ChunkWalker()
    assert w.feed(b"3\r\nabc\r\n0\r\n\r\nHTTP/1.1 200 OK") == len(b"3\r\nabc\r\n0\r\n\r\n") and w.done
    assert not ChunkWalker().feed(b"3\r\nab") == 0
    with pytest.raises(FramingError, match="chunk-size"):
        ChunkWalker().feed(b"zz\r\n")


def test_framing_rules():
    h = CIMultiDict
    assert _framing("GET", 200, h({"Content-Length": "5"})) == ("length", 5)
    assert _framing("HEAD", 200, h({"Content-Length": "5"})) == ("none", None)
    assert _framing("GET", 204, h()) == ("none", None)
    assert _framing("GET", 200, h({"Transfer-Encoding": "chunked"})) == ("chunked", None)
    assert _framing("GET", 200, h()) == ("close", None)
    with pytest.raises(UpstreamError):
        _framing("GET", 200, h([("Content-Length", "5"), ("Content-Length", "6")]))


def _hwm(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.mark.slow
def test_a_large_upload_streams_through_with_flat_memory(tmp_path):
    from support.recipes import recipe_doc
    from support.serve_harness import Serve, engine

    bodies = tmp_path / "bodies"
    bodies.mkdir()
    s = Serve([recipe_doc("fake-audio", **engine("fake-audio", capabilities=("transcription",), extra=["--body-dir", str(bodies)]))],
              {"user.w": "fake-audio"}, root=str(tmp_path / "serve")).start()
    try:
        size = 96 << 20
        boundary = uuid.uuid4().hex
        head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nuser.w\r\n"
                f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
                f"Content-Type: audio/wav\r\n\r\n").encode()
        tail = f"\r\n--{boundary}--\r\n".encode()
        block = os.urandom(1 << 20)
        sha = hashlib.sha256(head)
        for _ in range(size >> 20):
            sha.update(block)
        sha.update(tail)
        # warm up (engine started), then measure the peak RSS growth of the upload itself
        st, _h, _d = s.post("/v1/audio/transcriptions", raw=head + block + tail,
                            headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
        assert st == 200
        before = _hwm(s.proc.pid)
        c = s.conn(timeout=120)
        c.putrequest("POST", "/v1/audio/transcriptions")
        c.putheader("Content-Type", f"multipart/form-data; boundary={boundary}")
        c.putheader("Content-Length", str(len(head) + size + len(tail)))
        c.endheaders()
        c.send(head)
        for _ in range(size >> 20):
            c.send(block)
        c.send(tail)
        r = c.getresponse()
        doc = json.loads(r.read())
        assert r.status == 200 and doc["len"] == len(head) + size + len(tail) and doc["sha256"] == sha.hexdigest()
        assert doc["framing"] == "content-length"
        grew = _hwm(s.proc.pid) - before
        assert grew < 24 << 20, f"serve's peak memory grew {grew >> 20} MiB for a {size >> 20} MiB upload"
    finally:
        s.stop()


def _serve_pieces(pieces_per_request):
    """An asyncio engine answering each request on a connection with the next list of raw
    pieces (written with a pause between them, so they arrive as separate reads)."""
    import asyncio

    conns = []

    async def handle(r, w):
        conns.append(w)
        for pieces in pieces_per_request:
            try:
                await r.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return
            for p in pieces:
                w.write(p)
                await w.drain()
                await asyncio.sleep(0.01)
        await r.read()
        w.close()

    return handle, conns


def test_relay_passes_chunked_bytes_unchanged_and_reuses_the_connection():
    import asyncio

    from lemonpack.server.upstream import Upstream

    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    first = [head + b"5\r\nhello\r\n", b"0\r\nX-T: 1\r\n\r", b"\n"]  # the end split across reads
    second = [head + b"3\r\nabc\r\n0\r\n\r\n"]
    handle, conns = _serve_pieces([first, second])

    async def main():
        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        pool = Upstream("127.0.0.1", port)
        got = []
        for _ in range(2):
            out = bytearray()

            async def write(b):
                out.extend(b)
            ans, lease = await pool.request("GET", "/", CIMultiDict(), None, None, lambda: True)
            await asyncio.wait_for(ans.relay(write), 5)
            lease.release(ans)
            got.append(bytes(out))
        pool.close()
        srv.close()
        return got

    got = asyncio.run(main())
    assert got == [b"5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n", b"3\r\nabc\r\n0\r\n\r\n"]
    assert len(conns) == 1  # one keep-alive connection served both


def test_relay_refuses_bytes_after_the_end_and_drops_the_connection():
    import asyncio

    from lemonpack.server.upstream import Upstream

    handle, conns = _serve_pieces([[b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nJUNK"]])

    async def main():
        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        pool = Upstream("127.0.0.1", srv.sockets[0].getsockname()[1])
        ans, lease = await pool.request("GET", "/", CIMultiDict(), None, None, lambda: True)

        async def write(b):
            pass
        with pytest.raises(UpstreamError, match="after the end"):
            await asyncio.wait_for(ans.relay(write), 5)
        lease.release(ans)
        assert pool._idle == []
        srv.close()

    asyncio.run(main())


def test_relay_paces_a_burst_of_small_events_and_never_a_slow_stream():
    """A burst of tiny chunks (an engine writing faster than they can be passed one by one)
    is read in a few pieces, the bytes unchanged; events further apart than the pacing gap
    are each passed on as they come (no pause)."""
    import asyncio
    import time

    from lemonpack.server.upstream import PACE_GAP, Upstream

    frame = b"%x\r\n%s\r\n" % (12, b"data: tok\n\n\n")
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"

    async def handle(r, w):
        req = await r.readuntil(b"\r\n\r\n")
        w.write(head)
        if b"/burst" in req:
            for _ in range(1000):  # one send each, one loop pass apart
                w.write(frame)
                await asyncio.sleep(0)
        else:
            for _ in range(5):
                w.write(frame)
                await w.drain()
                await asyncio.sleep(PACE_GAP * 5)
        w.write(b"0\r\n\r\n")
        await w.drain()
        w.close()

    async def main():
        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        pool = Upstream("127.0.0.1", srv.sockets[0].getsockname()[1])
        out = {}
        for path in ("/burst", "/slow"):
            pieces, stamps = [], []

            async def write(b):
                pieces.append(b)
                stamps.append(time.monotonic())
            t0 = time.monotonic()
            ans, lease = await pool.request("GET", path, CIMultiDict(), None, None, lambda: True)
            await asyncio.wait_for(ans.relay(write), 10)
            lease.release(ans)
            out[path] = (pieces, [s - t0 for s in stamps])
        pool.close()
        srv.close()
        return out

    out = asyncio.run(main())
    burst, _ = out["/burst"]
    assert b"".join(burst) == frame * 1000 + b"0\r\n\r\n"
    assert len(burst) < 100  # not one read per chunk
    slow, _ = out["/slow"]
    assert b"".join(slow) == frame * 5 + b"0\r\n\r\n"
    assert len(slow) >= 5  # every event passed on by itself, as it came
