"""Extraction and caches that cannot be fooled (issue 6, section 3; cases 02-05), through
the CLI with a real mirror on 127.0.0.1."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import json
import os
import signal
import stat
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

from lemonpack.digest import FileDigests

import pytest

from support.buildkit import blob, tags, tar_gz
from support.helpers import reshape_entry
from lemonpack.oci import verify_layout
from support.recipes import recipe_doc, write_recipe

pytestmark = pytest.mark.usefixtures("home")  # a private cache and config for every test

URL = "https://example.invalid/bt/artifact.tar.gz"
RECIPE = "hardening-test"


def recipe(tmp_path: Path, sha_hex: str, *, top_level: bool = False) -> Path:
    """A pinned variant_of recipe for :data:`URL`; ``top_level`` puts ``source`` at the top."""
    pin = {"source": URL, "sha256": "sha256:" + sha_hex}
    doc = recipe_doc(RECIPE, display_name="x", variant_of="llamacpp", version_policy="pinned", binary="llama-server",
                     block={} if top_level else pin, **(pin if top_level else {}))
    return write_recipe(tmp_path / "recipe.json", doc)


def tar_with(members: list[tuple[str, str, bytes | str]]) -> bytes:
    """A tar.gz of ``(kind, name, data-or-linkname)``; kind ``file``, ``sym``, ``hard``, ``dir``."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for kind, name, data in members:
            ti = tarfile.TarInfo(name)
            if kind == "file":
                ti.size, ti.mode = len(data), 0o755
                tf.addfile(ti, io.BytesIO(data))
                continue
            ti.type = {"sym": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE, "dir": tarfile.DIRTYPE}[kind]
            ti.mode = 0o755
            if kind != "dir":
                ti.linkname = data
            tf.addfile(ti)
    return gzip.compress(raw.getvalue(), mtime=0)


@pytest.fixture
def host(monkeypatch):
    monkeypatch.setenv("LEMONPACK_HOST_FACTS", '{"os": "linux", "accelerators": ["cpu"]}')


def _serve(site, data: bytes) -> str:
    site.put(URL, data)
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------ case 02: link chains

DEEP = "/".join(f"d{i}" for i in range(1, 25))
CHAIN = [("dir", DEEP, b""), ("sym", f"{DEEP}/s", "/".join([".."] * 24)),
         ("sym", "llama-server", f"{DEEP}/s/" + "/".join([".."] * 25) + "/usr/bin/id"),
         ("sym", "escape", f"{DEEP}/s/" + "/".join([".."] * 25) + "/etc")]


@pytest.mark.parametrize("top_level", [False, True])
def test_case02_symlink_chain_refused_by_install_and_build(tmp_path, site, lp, host, home, top_level):
    r = recipe(tmp_path, _serve(site, tar_with(CHAIN)), top_level=top_level)
    field = "source (used by platforms.linux.cpu)" if top_level else "platforms.linux.cpu.source"
    res = lp("install", r, "--yes", "--mirror", site.base)
    assert res.code == 5, res
    assert f"{r}: {field}" in res.text and "unsafe member 'llama-server'" in res.text
    assert "resolves outside" in res.text and str(home.cache) not in res.text
    assert not (home.cache / "external" / RECIPE).exists()
    assert [p.name for p in (home.cache / "external").iterdir()] == []  # no staging left
    res = lp("build", r, "--out", tmp_path / "oci", "--mirror", site.base)
    assert res.code == 5, res
    assert f"{r}: {field}" in res.text and "unsafe member 'llama-server'" in res.text
    assert str(home.cache) not in res.text and "scratch" not in res.text  # refused at extraction
    assert not (tmp_path / "oci").exists()


@pytest.mark.parametrize("members, member, why", [
    # a link checked while 'x' is missing cannot have '..' after it: 'x -> .' later would move it
    ([("sym", "a", "x/../../etc"), ("sym", "x", ".")], "a", "'..' after 'x'"),
    ([("dir", "sub", b""), ("sym", "d", "sub"), ("sym", "a", "d/../f"), ("sym", "d", ".")],
     "d", "replaces the symlink"),
    ([("dir", "sub", b""), ("sym", "l", "sub"), ("file", "l/llama-server", b"x")],
     "l/llama-server", "through the symlink 'l'"),
    ([("hard", "h", "../../etc/passwd")], "h", "leaves the destination"),
    ([("sym", "l", "."), ("file", "f", b"x"), ("hard", "h", "l/f")], "h", "goes through a symlink"),
    ([("sym", "a", "b"), ("sym", "b", "a")], "b", "more than 40 symlinks"),
    ([("file", "f", b"x"), ("sym", "a", "f/../../x")], "a", "'..' after 'f'"),
])
def test_later_members_cannot_redirect_checked_paths(tmp_path, site, lp, host, home, members, member, why):
    data = tar_with([("file", "llama-server", b"#!/bin/sh\n")] + members)
    r = recipe(tmp_path, _serve(site, data))
    for args in (("install", r, "--yes"), ("build", r, "--out", tmp_path / "oci")):
        res = lp(*args, "--mirror", site.base)
        assert res.code == 5, res
        assert f"unsafe member {member!r}" in res.text and why in res.text, res.text
    assert not (home.cache / "external" / RECIPE).exists() and not (tmp_path / "oci").exists()


def test_links_that_stay_inside_are_installed_and_packaged_alike(tmp_path, site, lp, host, home):
    members = [("dir", "lib/sub", b""), ("file", "lib/sub/real", b"payload"),
               ("sym", "lib/cur", "sub"), ("sym", "lib/up", "cur/../sub/real"),
               ("sym", "llama-server", "bin/run"), ("file", "bin/run", b"#!/bin/sh\n")]
    r = recipe(tmp_path, _serve(site, tar_with(members)))
    assert lp("install", r, "--yes", "--mirror", site.base).code == 0
    dest = home.cache / "external" / RECIPE
    assert (dest / "lib" / "up").read_bytes() == b"payload"
    res = lp("build", r, "--out", tmp_path / "oci", "--mirror", site.base)
    assert res.code == 0, res
    layout = tmp_path / "oci"
    manifest = json.loads(blob(layout, tags(layout)[f"{RECIPE}.linux-cpu"]["digest"]))
    with tarfile.open(fileobj=io.BytesIO(blob(layout, manifest["layers"][0]["digest"]))) as tf:
        links = {m.name: m.linkname for m in tf if m.issym()}
    prefix = f"opt/lemonpack/{RECIPE}/"
    assert links == {prefix + "lib/cur": "sub", prefix + "lib/up": "cur/../sub/real",
                     prefix + "llama-server": "bin/run"}


# ------------------------------------------------------------------ case 04: whiteouts

@pytest.mark.parametrize("name", ["lib/.wh.", "lib/.wh.libggml.so", ".wh..wh..opq", "d/.wh.x/f"])
def test_case04_whiteout_names_refused_by_build_and_install(tmp_path, site, lp, host, home, name):
    data = tar_gz([("llama-server", b"#!/bin/sh\n", 0o755), ("lib/libggml.so", b"so", 0o755), (name, b"", 0o755)])
    r = recipe(tmp_path, _serve(site, data))
    res = lp("build", r, "--out", tmp_path / "oci", "--mirror", site.base)
    assert res.code == 5, res
    assert f"{r}: platforms.linux.cpu.source" in res.text and f"unsafe member {name!r}" in res.text
    assert "whiteout" in res.text and not (tmp_path / "oci").exists()
    res = lp("install", r, "--yes", "--mirror", site.base)
    assert res.code == 5 and f"unsafe member {name!r}" in res.text
    assert not (home.cache / "external" / RECIPE).exists()


# ------------------------------------------------------------------ case 03: corrupted entries

TAMPERED = tar_gz([("llama-server", b"#!/bin/sh\necho TAMPERED\n", 0o755)])


def _layout_bytes(layout: Path) -> bytes:
    return b"".join(gzip.decompress(p.read_bytes()) if p.read_bytes()[:2] == b"\x1f\x8b" else p.read_bytes()
                    for p in (layout / "blobs" / "sha256").iterdir())


def test_case03_corrupted_artifact_entry_is_dropped_and_fetched_again(tmp_path, site, lp, host, home):
    good = tar_gz([("llama-server", b"#!/bin/sh\necho good\n", 0o755)])
    h = _serve(site, good)
    r = recipe(tmp_path, h)
    assert lp("install", r, "--yes", "--mirror", site.base).code == 0
    entry = home.cache / "artifacts" / "sha256" / h
    assert entry.stat().st_mode & 0o777 == 0o444
    entry.chmod(0o644)
    entry.write_bytes(TAMPERED)
    served = len(site.requests)
    res = lp("install", r, "--yes", "--mirror", site.base)
    assert res.code == 0, res
    assert b"TAMPERED" not in (home.cache / "external" / RECIPE / "llama-server").read_bytes()
    assert len(site.requests) == served + 1  # fetched again
    assert "lemonpack: warning: cache entry" in res.err and "does not hash to its name" in res.err  # said, on stderr
    assert hashlib.sha256(entry.read_bytes()).hexdigest() == h
    entry.chmod(0o644)
    entry.write_bytes(TAMPERED)
    res = lp("build", r, "--out", tmp_path / "oci", "--mirror", site.base)
    assert res.code == 0, res
    verify_layout(tmp_path / "oci")
    assert b"TAMPERED" not in _layout_bytes(tmp_path / "oci")


def test_case03_refetch_that_is_wrong_too_exits_3_and_changes_nothing(tmp_path, site, lp, host, home):
    h = _serve(site, tar_gz([("llama-server", b"#!/bin/sh\necho good\n", 0o755)]))
    r = recipe(tmp_path, h)
    assert lp("install", r, "--yes", "--mirror", site.base).code == 0
    before = (home.cache / "external" / RECIPE / "llama-server").read_bytes()
    entry = home.cache / "artifacts" / "sha256" / h
    entry.chmod(0o644)
    entry.write_bytes(TAMPERED)
    site.put(URL, TAMPERED)  # the mirror now serves other bytes too
    res = lp("install", r, "--yes", "--mirror", site.base)
    assert res.code == 3 and f"expected sha256:{h}" in res.text
    assert not entry.exists()
    assert (home.cache / "external" / RECIPE / "llama-server").read_bytes() == before
    res = lp("build", r, "--out", tmp_path / "oci", "--mirror", site.base)
    assert res.code == 3 and not (tmp_path / "oci").exists()


@pytest.mark.parametrize("damage", ["append", "other-gzip", "record-diff-id", "record-without-inputs",
                                    "record-other-epoch", "blob-is-a-directory", "record-is-a-directory"])
def test_case03_corrupted_layer_cache_entry_is_rebuilt(tmp_path, site, lp, home, damage):
    h = _serve(site, tar_gz([("llama-server", b"#!/bin/sh\necho good\n", 0o755)]))
    r = recipe(tmp_path, h)
    assert lp("build", r, "--out", tmp_path / "a", "--mirror", site.base).code == 0
    layers = home.cache / "layers"
    (rec,) = layers.glob("*.json")
    info = json.loads(rec.read_text())
    cached = layers / "blobs" / info["digest"][7:]
    assert cached.stat().st_nlink == 1  # the layout holds a copy, not a hard link
    cached.chmod(0o644)
    if damage == "append":
        cached.write_bytes(cached.read_bytes() + b"junk")
    elif damage == "other-gzip":
        cached.write_bytes(TAMPERED)
    elif damage == "record-diff-id":
        rec.write_text(json.dumps({**info, "diff_id": "sha256:" + "0" * 64}))
    elif damage == "record-without-inputs":  # the record format before it stated its inputs
        rec.write_text(json.dumps({k: info[k] for k in ("digest", "diff_id", "size")}))
    elif damage == "record-other-epoch":  # states inputs whose key is another name
        rec.write_text(json.dumps({**info, "epoch": info["epoch"] + 1}))
    elif damage == "blob-is-a-directory":
        cached.unlink()
        cached.mkdir()
        (cached / "f").write_bytes(b"x")
    else:
        rec.unlink()
        rec.mkdir()
    res = lp("build", r, "--out", tmp_path / "b", "--mirror", site.base)
    assert res.code == 0, res
    verify_layout(tmp_path / "b")
    # the rebuilt layout is the same image, byte for byte, and the cache is whole again
    assert tags(tmp_path / "b") == tags(tmp_path / "a")
    again = json.loads(rec.read_text())
    assert again == info and "stat" not in again
    assert FileDigests(layers / "digests" / "blobs.json").known(cached) == info["digest"]  # the rebuilt, hashed blob
    assert hashlib.sha256(cached.read_bytes()).hexdigest() == info["digest"][7:]


def test_layer_records_name_the_deflater_so_another_one_rebuilds(tmp_path, site, lp, home):
    """A layer's record states the format and the deflater with its version: a layer cached by
    another zlib-ng release (or lemonpack's earlier zlib format) is another key, never reused."""
    from lemonpack.builder.layercache import LAYER_FORMAT, LayerCache
    from lemonpack.oci.layer import deflater

    h = _serve(site, tar_gz([("llama-server", b"#!/bin/sh\necho good\n", 0o755)]))
    assert lp("build", recipe(tmp_path, h), "--out", tmp_path / "a", "--mirror", site.base).code == 0
    (rec,) = (home.cache / "layers").glob("*.json")
    info = json.loads(rec.read_text())
    assert info["format"] == f"{LAYER_FORMAT} {deflater()}" and deflater().startswith("zlib-ng ")
    other = {**info, "format": f"{LAYER_FORMAT} zlib-ng 0.0.0"}
    assert LayerCache.key_of(other) != rec.stem == LayerCache.key_of(info)
    assert LayerCache.inputs(h, "opt/x", 0, 2, "zstd")["format"] == f"{LAYER_FORMAT}+zstd"


def test_write_through_layout_does_not_reach_the_cache(tmp_path, site, lp, home):
    h = _serve(site, tar_gz([("llama-server", b"#!/bin/sh\necho good\n", 0o755)]))
    r = recipe(tmp_path, h)
    assert lp("build", r, "--out", tmp_path / "a", "--mirror", site.base).code == 0
    for p in (tmp_path / "a" / "blobs" / "sha256").iterdir():
        p.chmod(0o644)
        p.write_bytes(b"overwritten in the layout")
    assert lp("cache", "verify").code == 0  # nothing in the cache changed


# ------------------------------------------------------------------ trial k3: cache entries of every shape

OTHER_URL = "https://example.invalid/bt/other.tar.gz"


def _layout_files(layout: Path) -> dict[str, bytes]:
    return {str(p.relative_to(layout)): p.read_bytes() for p in sorted(layout.rglob("*")) if p.is_file()}


def _other_recipe(tmp_path: Path, site) -> Path:
    """A second recipe (id ``other-recipe``) with its own artifact, served by ``site``."""
    data = tar_gz([("llama-server", b"#!/bin/sh\necho OTHERRECIPE\n", 0o755)])
    site.put(OTHER_URL, data)
    return write_recipe(tmp_path / "other.json", recipe_doc(
        "other-recipe", display_name="o", variant_of="llamacpp", version_policy="pinned", binary="llama-server",
        block={"source": OTHER_URL, "sha256": "sha256:" + hashlib.sha256(data).hexdigest()}))


def _records(layers: Path) -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in layers.glob("*.json")}


def test_layer_record_of_another_recipe_is_never_used(tmp_path, site, lp, home):
    """Trial k3 'layer-record-swap': recipe B's record copied over recipe A's names a
    consistent blob, but not A's; the build of A must rebuild A's layer."""
    r = recipe(tmp_path, _serve(site, tar_gz([("llama-server", b"#!/bin/sh\necho good\n", 0o755)])))
    other = _other_recipe(tmp_path, site)
    assert lp("build", r, "--out", tmp_path / "cold", "--mirror", site.base).code == 0
    cold = _layout_files(tmp_path / "cold")
    (rec_a,) = _records(home.cache / "layers")
    assert lp("build", other, "--out", tmp_path / "o", "--mirror", site.base).code == 0
    (rec_b,) = set(_records(home.cache / "layers")) - {rec_a}
    layers = home.cache / "layers"
    a_info = json.loads((layers / rec_a).read_text())
    assert a_info["artifact"] == "sha256:" + hashlib.sha256(site.path_of(URL).read_bytes()).hexdigest()
    assert a_info["prefix"] == f"opt/lemonpack/{RECIPE}"
    (layers / rec_a).write_bytes((layers / rec_b).read_bytes())

    res = lp("cache", "verify", "--json")  # verify sees it without building
    assert res.code == 3
    (bad,) = res.json()["bad"]
    assert bad["name"] == rec_a[:-5] and "inputs of another layer" in bad["problem"]
    assert not (layers / rec_a).exists() and (layers / rec_b).exists()  # B's record and blob stay
    assert lp("cache", "verify").code == 0

    (layers / rec_a).write_bytes((layers / rec_b).read_bytes())
    res = lp("build", r, "--out", tmp_path / "warm", "--mirror", site.base)
    assert res.code == 0, res
    assert "inputs of another layer" in res.err  # said, as a warning
    assert _layout_files(tmp_path / "warm") == cold  # byte for byte the cold build
    assert b"OTHERRECIPE" not in _layout_bytes(tmp_path / "warm")
    whole = json.loads((layers / rec_a).read_text())  # the cache is whole again (new stat facts)
    assert {k: v for k, v in whole.items() if k != "stat"} == {k: v for k, v in a_info.items() if k != "stat"}
    assert lp("build", other, "--out", tmp_path / "o2", "--mirror", site.base).code == 0
    assert _layout_files(tmp_path / "o2") == _layout_files(tmp_path / "o")  # B's entry untouched


@pytest.mark.parametrize("kind", ["directory", "symlink", "fifo"])
def test_artifact_entry_that_is_not_a_regular_file_is_dropped_and_fetched(tmp_path, site, lp, host, home,
                                                                          kind):
    """Trial k3 'artifact-is-a-directory' / symlink: an entry must be a regular file by
    lstat; anything else is never used (not even a symlink to a good copy)."""
    h = _serve(site, tar_gz([("llama-server", b"#!/bin/sh\necho good\n", 0o755)]))
    r = recipe(tmp_path, h)
    assert lp("install", r, "--yes", "--mirror", site.base).code == 0
    entry = home.cache / "artifacts" / "sha256" / h
    outside = tmp_path / "outside-copy"
    reshape_entry(entry, kind, outside)
    served = len(site.requests)
    res = lp("install", r, "--yes", "--mirror", site.base)
    assert res.code == 0, res
    assert len(site.requests) == served + 1  # fetched again
    assert f"is a {kind}, not a regular file" in res.err
    assert stat.S_ISREG(os.lstat(entry).st_mode) and hashlib.sha256(entry.read_bytes()).hexdigest() == h
    reshape_entry(entry, kind, outside)
    res = lp("build", r, "--out", tmp_path / "oci", "--mirror", site.base)
    assert res.code == 0, res
    assert stat.S_ISREG(os.lstat(entry).st_mode)
    if kind == "symlink":
        assert outside.read_bytes() == site.path_of(URL).read_bytes()  # its target was not touched


@pytest.mark.parametrize("command", ["verify", "clean"])
@pytest.mark.parametrize("kind", ["directory", "symlink", "fifo"])
def test_cache_lists_and_removes_entries_of_every_shape(tmp_path, site, lp, host, home, kind, command):
    """Trial k3 'symlink-entry-listed' / 'symlink-entry-clean'."""
    h = _serve(site, tar_gz([("llama-server", b"#!/bin/sh\necho good\n", 0o755)]))
    assert lp("install", recipe(tmp_path, h), "--yes", "--mirror", site.base).code == 0
    entry = home.cache / "artifacts" / "sha256" / h
    outside = tmp_path / "outside-copy"
    reshape_entry(entry, kind, outside)
    stray = home.cache / "artifacts" / "sha256" / "not-a-digest"
    stray.write_bytes(b"?")
    res = lp("cache", "list", "--json")
    assert res.code == 0
    listed = {e["name"]: e for e in res.json()["entries"]}
    assert listed["sha256:" + h]["state"] == "bad" and kind in listed["sha256:" + h]["problem"]
    assert listed["not-a-digest"]["state"] == "bad"
    text = lp("cache", "list")
    assert f"[bad: not a regular file ({kind}" in text.out
    res = lp("cache", command, "--json")
    if command == "verify":
        assert res.code == 3
        assert {b["name"] for b in res.json()["bad"]} == {"sha256:" + h, "not-a-digest"}
    else:
        assert res.code == 0
    assert not os.path.lexists(entry) and not stray.exists()
    if kind == "symlink":
        assert outside.exists()  # the link went, not what it points to
    assert lp("cache", "list", "--json").json()["entries"] == []  # verify and clean both removed them


@pytest.mark.parametrize("args", [("cache", "list"), ("cache", "verify"), ("cache", "clean"),
                                  ("install", "{r}", "--yes"), ("build", "{r}", "--out", "{out}")])
@pytest.mark.parametrize("below", [False, True])
def test_cache_root_that_is_not_a_directory_is_one_error_line(tmp_path, site, lp, host, monkeypatch, args, below):
    """Trial k3 'cache-root-is-a-file': one line naming the path and the variable."""
    r = recipe(tmp_path, _serve(site, tar_gz([("llama-server", b"#!/bin/sh\n", 0o755)])))
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    root = afile / "sub" if below else afile
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(root))
    argv = [str(a).format(r=r, out=tmp_path / "oci") for a in args]
    res = lp(*argv, "--mirror", site.base) if argv[0] != "cache" else lp(*argv)
    assert res.code == 1, res
    (line,) = [ln for ln in res.err.splitlines() if ln.startswith("error")]
    assert str(root) in line and "LEMONPACK_CACHE_DIR" in line and "not a directory" in line
    assert afile.read_text() == "not a directory" and not (tmp_path / "oci").exists()


# ------------------------------------------------------------------ trial k2: the file system refuses a member

LONG = "x" * 300
DEEP_LONG = "/".join(["d" * 250] * 20) + "/f"  # each name fits NAME_MAX, the path exceeds PATH_MAX


@pytest.mark.parametrize("name", [LONG, f"lib/{LONG}", DEEP_LONG], ids=["component", "nested-component", "path"])
def test_member_the_file_system_refuses_is_exit_5_naming_it(tmp_path, site, lp, host, home, name):
    """Trial k2 'long-component': install and build agree, exit 5, one line naming the
    recipe file, the field and the member; no scratch path, no traceback."""
    data = tar_with([("file", "llama-server", b"#!/bin/sh\n"), ("file", name, b"x")])
    r = recipe(tmp_path, _serve(site, data))
    for args in (("install", r, "--yes"), ("build", r, "--out", tmp_path / "oci")):
        res = lp(*args, "--mirror", site.base)
        assert res.code == 5, res
        (line,) = [ln for ln in res.err.splitlines() if ln.startswith("error")]
        assert f"{r}: platforms.linux.cpu.source" in line and f"unsafe member {name!r}" in line
        assert "File name too long" in line and str(home.cache) not in line
    assert not (home.cache / "external" / RECIPE).exists() and not (tmp_path / "oci").exists()
    assert [p.name for p in (home.cache / "external").iterdir()] == []


_LIMITED = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))
from lemonpack.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("command", ["install", "build"])
def test_disk_refusing_a_write_is_not_blamed_on_the_archive(tmp_path, site, home, monkeypatch, command):
    """The disk (here: RLIMIT_FSIZE, a real EFBIG from the kernel, as ENOSPC would be)
    refuses a member: exit 1, one line naming recipe, field and member and saying it is
    the local disk; nothing installed or written."""
    big = tar_gz([("llama-server", b"#!/bin/sh\n", 0o755), ("model.bin", bytes(1 << 20), 0o644)])
    assert len(big) < 64 * 1024  # the download itself fits under the limit
    r = recipe(tmp_path, _serve(site, big))
    args = ["install", str(r), "--yes"] if command == "install" else ["build", str(r), "--out", str(tmp_path / "oci")]
    env = {**os.environ, "LEMONPACK_HOST_FACTS": '{"os": "linux", "accelerators": ["cpu"]}'}
    p = subprocess.run([sys.executable, "-c", _LIMITED, *args, "--mirror", site.base], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr
    (line,) = [ln for ln in p.stderr.splitlines() if ln.startswith("error")]
    assert f"{r}: platforms.linux.cpu.source" in line and "member 'model.bin'" in line
    assert "File too large" in line and "local disk, not of the archive" in line and str(home.cache) not in line
    assert not (home.cache / "external" / RECIPE).exists() and not (tmp_path / "oci").exists()


# ------------------------------------------------------------------ lemonpack cache

def test_cache_list_verify_clean(tmp_path, site, lp, host, home):
    data = tar_gz([("llama-server", b"#!/bin/sh\necho good\n", 0o755)])
    r = recipe(tmp_path, _serve(site, data))
    assert lp("build", r, "--out", tmp_path / "a", "--mirror", site.base).code == 0
    assert lp("install", r, "--yes", "--mirror", site.base).code == 0
    res = lp("cache", "list", "--json")
    assert res.code == 0
    doc = res.json()
    assert doc["root"] == str(home.cache)
    assert {e["cache"] for e in doc["entries"]} == {"artifacts", "layers"}
    art = [e for e in doc["entries"] if e["cache"] == "artifacts"]
    assert art[0]["size"] == len(data) and art[0]["name"] == "sha256:" + hashlib.sha256(data).hexdigest()
    assert doc["total"] == sum(e["size"] for e in doc["entries"]) == sum(c["size"] for c in doc["caches"].values())
    text = lp("cache", "list")
    assert text.code == 0 and "artifacts: 1 item(s)" in text.text and "total:" in text.text

    assert lp("cache", "verify").code == 0
    entry = Path(art[0]["path"])
    entry.chmod(0o644)
    entry.write_bytes(b"rot")
    res = lp("cache", "verify", "--json")
    assert res.code == 3
    assert [b["name"] for b in res.json()["bad"]] == [art[0]["name"]] and not entry.exists()
    assert lp("cache", "verify").code == 0

    res = lp("cache", "clean", "--json")
    assert res.code == 0 and res.json()["freed"] > 0
    assert lp("cache", "list", "--json").json()["entries"] == []
    assert (home.cache / "external" / RECIPE / "llama-server").is_file()  # installs are not a cache


# ------------------------------------------------------------------ case 05: partial downloads

class _SlowHandler(http.server.BaseHTTPRequestHandler):
    """Sends half of the body at once, then one byte a second (a download that lasts)."""

    body = b""

    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802
        data = self.server.body
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            if self.path.startswith("/good/"):
                self.wfile.write(data)
                return
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            for b in data[len(data) // 2:]:
                if self.server.stopping.wait(1):
                    return
                self.wfile.write(bytes([b]))
                self.wfile.flush()
        except OSError:
            pass


@pytest.fixture
def slow_server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowHandler)
    srv.body = tar_gz([("llama-server", b"#!/bin/sh\n", 0o755), ("big.bin", os.urandom(1 << 20), 0o644)])
    srv.stopping = threading.Event()
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield srv
    srv.stopping.set()
    srv.shutdown()
    srv.server_close()


def _install_process(r: Path, mirror: str, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "from lemonpack.cli import main; main()", "install", str(r),
                             "--yes", "--mirror", mirror], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _wait_partials(d: Path, n: int, known: set = frozenset()) -> set[Path]:
    """The ``n`` (or more) new temps in ``d`` once each is locked by its writer (which locks
    it right after creating it); 30 s is a hang guard."""
    from lemonpack.fetch.staging import is_stale
    from support.helpers import wait_for

    found: set[Path] = set()

    def ready() -> bool:
        nonlocal found
        found = (set(d.glob(".tmp-*")) if d.is_dir() else set()) - set(known)
        return len(found) >= n and all(p.exists() and not is_stale(p) for p in found)
    if not wait_for(ready, 30):
        raise AssertionError(f"no locked partial download appeared in {d}: {found}")
    return found


@pytest.mark.slow
def test_case05_killed_downloads_are_cleaned_live_ones_never(tmp_path, slow_server, lp, home, monkeypatch):
    host_facts = '{"os": "linux", "accelerators": ["cpu"]}'
    monkeypatch.setenv("LEMONPACK_HOST_FACTS", host_facts)
    r = recipe(tmp_path, hashlib.sha256(slow_server.body).hexdigest())
    base = f"http://127.0.0.1:{slow_server.server_address[1]}"
    env = {**os.environ, "LEMONPACK_CACHE_DIR": str(home.cache), "LEMONPACK_HOST_FACTS": host_facts}
    store = home.cache / "artifacts" / "sha256"

    def killed_download(known: set) -> Path:
        p = _install_process(r, f"{base}/slow", env)
        (new,) = _wait_partials(store, 1, known)
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        return new

    stale = killed_download(set())
    assert stale.exists()
    live = _install_process(r, f"{base}/slow", env)  # a concurrent download, still being written
    try:
        (writing,) = _wait_partials(store, 1, {stale})
        assert not stale.exists()  # the next fetch removed the killed one
        stale = killed_download({writing})  # its sweep left the live one alone
        assert writing.exists() and stale.exists()
        listed = {e["name"]: e["state"] for e in lp("cache", "list", "--json").json()["entries"]}
        assert listed == {writing.name: "partial-live", stale.name: "partial-stale"}
        res = lp("cache", "clean", "--partial", "--json")
        assert res.code == 0
        assert [Path(e["path"]) for e in res.json()["removed"]] == [stale]
        assert writing.exists() and not stale.exists() and live.poll() is None
        stale = killed_download({writing})
        res = lp("install", r, "--yes", "--mirror", f"{base}/good")
        assert res.code == 0, res
        assert not stale.exists() and writing.exists() and live.poll() is None
        assert lp("cache", "clean").code == 0 and writing.exists()  # not even a full clean
    finally:
        live.send_signal(signal.SIGKILL)
        live.wait(10)
    assert lp("cache", "clean", "--partial").code == 0
    assert list(store.glob(".tmp-*")) == []


@pytest.mark.parametrize("edit", ["rewrite-old-mtime", "rewrite-new-mtime", "in-place-old-mtime"])
def test_same_size_edit_with_the_old_mtime_is_still_caught(tmp_path, site, lp, home, edit):
    """Hits are trusted by the stat facts recorded when the bytes were hashed; an edit that
    keeps the size (the file rewritten, or one byte written in place on the same inode) and
    puts the mtime back, or moves it on as ``touch`` does, still changes the ctime, so the
    entry is re-hashed."""
    h = _serve(site, tar_gz([("llama-server", b"#!/bin/sh\necho good\n", 0o755)]))
    r = recipe(tmp_path, h)
    assert lp("build", r, "--out", tmp_path / "a", "--mirror", site.base).code == 0
    layers = home.cache / "layers"
    (rec,) = layers.glob("*.json")
    info = json.loads(rec.read_text())
    assert FileDigests(layers / "digests" / "blobs.json").known(layers / "blobs" / info["digest"][7:]) == info["digest"]
    assert FileDigests(home.cache / "artifacts" / "digests.json").known(
        home.cache / "artifacts" / "sha256" / h) == "sha256:" + h
    for victim in (layers / "blobs" / info["digest"][7:], home.cache / "artifacts" / "sha256" / h):
        st = victim.stat()
        victim.chmod(0o644)
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 0xFF
        if edit.startswith("in-place"):
            with open(victim, "r+b") as f:
                f.seek(len(data) // 2)
                f.write(data[len(data) // 2:len(data) // 2 + 1])
        else:
            victim.write_bytes(bytes(data))
        mtime = st.st_mtime_ns + 5_000_000_000 if edit.endswith("new-mtime") else st.st_mtime_ns
        os.utime(victim, ns=(st.st_atime_ns, mtime))
        victim.chmod(st.st_mode & 0o777)
        assert victim.stat().st_ino == st.st_ino and victim.stat().st_size == st.st_size
    res = lp("build", r, "--out", tmp_path / "b", "--mirror", site.base)
    assert res.code == 0, res
    verify_layout(tmp_path / "b")
    assert tags(tmp_path / "b") == tags(tmp_path / "a")
    assert hashlib.sha256((home.cache / "artifacts" / "sha256" / h).read_bytes()).hexdigest() == h
