"""The model store (lemonpack/runtime/models/store.py): blobs hashed while written, bounded by
their descriptor, resumable, one writer per blob, no half file visible; views with each file's
name; list/verify/clean."""

from __future__ import annotations

import os
import threading
import time

import pytest

from lemonpack.canonical import canonical_json
from lemonpack.digest import Digest
from lemonpack.errors import IntegrityError, UnsafeContentError
from lemonpack.oci import mediatypes as mt
from lemonpack.runtime.models.artifact import ModelFacts, PackFile, write_modelpack
from lemonpack.runtime.models.store import ModelStore

DATA = os.urandom(1 << 20) + b"tail"
DIGEST = str(Digest.of_bytes(DATA))


def test_the_default_root_is_under_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(tmp_path / "c"))
    assert ModelStore().root == tmp_path / "c" / "models"


def test_a_blob_appears_only_once_verified(tmp_path):
    store = ModelStore(tmp_path)
    with store.writer(DIGEST, len(DATA)) as w:
        assert not w.complete and w.offset == 0
        w.write(DATA[:1000])
        assert not store.has(DIGEST) and not store.blob_path(DIGEST).exists()
        w.write(DATA[1000:])
        path = w.commit()
    assert path == store.blob_path(DIGEST) and path.read_bytes() == DATA and store.has(DIGEST, len(DATA))
    assert not os.access(path, os.W_OK) or os.geteuid() == 0  # read-only
    with store.writer(DIGEST, len(DATA)) as w:
        assert w.complete and w.commit() == path


def test_a_byte_past_the_descriptor_size_is_refused_and_nothing_kept(tmp_path):
    store = ModelStore(tmp_path)
    with pytest.raises(IntegrityError, match="size"):
        with store.writer(DIGEST, 10) as w:
            w.write(DATA[:11])
    assert not store.has(DIGEST) and not w.partial.exists()


def test_wrong_bytes_are_refused_and_the_partial_dropped(tmp_path):
    store = ModelStore(tmp_path)
    bad = bytearray(DATA)
    bad[5] ^= 1
    with pytest.raises(IntegrityError) as e:
        with store.writer(DIGEST, len(DATA)) as w:
            w.write(bytes(bad))
            w.commit()
    assert e.value.exit_code == 3
    assert not store.has(DIGEST) and not w.partial.exists()
    assert not (tmp_path / "blobs").exists() or not list((tmp_path / "blobs" / "sha256").iterdir())


def test_an_interrupted_write_resumes_where_it_stopped(tmp_path):
    store = ModelStore(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        with store.writer(DIGEST, len(DATA)) as w:
            w.write(DATA[:300_000])
            raise KeyboardInterrupt
    assert w.partial.stat().st_size == 300_000 and not store.has(DIGEST)
    with store.writer(DIGEST, len(DATA)) as w:
        assert w.offset == 300_000
        w.write(DATA[300_000:])
        w.commit()
    assert store.blob_path(DIGEST).read_bytes() == DATA


def test_a_corrupt_partial_is_caught_at_the_end_and_dropped(tmp_path):
    store = ModelStore(tmp_path)
    partial = tmp_path / "partial" / "sha256" / Digest.parse(DIGEST).hex
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"X" * 1000)
    with pytest.raises(IntegrityError):
        with store.writer(DIGEST, len(DATA)) as w:
            w.write(DATA[1000:])
            w.commit()
    assert not partial.exists() and not store.has(DIGEST)


def test_two_writers_of_one_blob_take_turns(tmp_path):
    store = ModelStore(tmp_path)
    order: list[str] = []
    second_saw: list[bool] = []

    def first():
        with store.writer(DIGEST, len(DATA)) as w:
            order.append("first in")
            time.sleep(0.3)
            w.write(DATA)
            w.commit()
            order.append("first out")

    def second():
        time.sleep(0.05)
        with store.writer(DIGEST, len(DATA)) as w:
            order.append("second in")
            second_saw.append(w.complete)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert order == ["first in", "first out", "second in"] and second_saw == [True]


def _stored_model(store: ModelStore, files: dict[str, bytes]) -> str:
    specs = []
    for name, data in files.items():
        d = str(Digest.of_bytes(data))
        store.put_bytes(d, data)
        specs.append(PackFile(name, d, len(data)))
    packed = write_modelpack(specs, ModelFacts(), created=0, name="m")
    store.put_bytes(packed.config_digest, packed.config)
    store.put_bytes(packed.digest, packed.manifest)
    return packed.digest


def test_a_view_names_every_file_and_split_ggufs_sit_side_by_side(tmp_path):
    store = ModelStore(tmp_path)
    files = {"m-00001-of-00002.gguf": b"a" * 10, "m-00002-of-00002.gguf": b"b" * 10, "mmproj-m.gguf": b"c"}
    digest = _stored_model(store, files)
    view = store.view(digest)
    assert view is not None and sorted(p.name for p in view.iterdir()) == sorted(files)
    for name, data in files.items():
        assert (view / name).read_bytes() == data
        assert (view / name).samefile(store.blob_path(str(Digest.of_bytes(data))))
        assert not (view / name).is_symlink()
    assert store.view(digest) == view
    assert not [p for p in view.parent.iterdir() if p.name.startswith(".")]


def test_no_view_while_a_blob_is_missing(tmp_path):
    store = ModelStore(tmp_path)
    digest = _stored_model(store, {"a.gguf": b"a"})
    os.chmod(store.blob_path(str(Digest.of_bytes(b"a"))), 0o644)
    store.blob_path(str(Digest.of_bytes(b"a"))).unlink()
    assert store.view(digest) is None
    assert not (tmp_path / "views" / "sha256").exists() or not list((tmp_path / "views" / "sha256").iterdir())


def test_a_tar_layer_is_extracted_into_the_view_and_links_are_refused(tmp_path):
    import io
    import tarfile

    def tar(members) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as t:
            for info, data in members:
                t.addfile(info, io.BytesIO(data) if data is not None else None)
        return buf.getvalue()

    good = tarfile.TarInfo("models/tiny.gguf")
    good.size = 4
    blob = tar([(good, b"GGUF")])
    store = ModelStore(tmp_path)
    d = str(Digest.of_bytes(blob))
    store.put_bytes(d, blob)
    config = b"{}"
    store.put_bytes(str(Digest.of_bytes(config)), config)
    manifest = canonical_json({"schemaVersion": 2, "mediaType": mt.MEDIA_TYPE_IMAGE_MANIFEST,
                               "config": {"mediaType": mt.MEDIA_TYPE_KITOPS_CONFIG,
                                          "digest": str(Digest.of_bytes(config)), "size": 2},
                               "layers": [{"mediaType": "application/vnd.kitops.modelkit.model.v1.tar",
                                           "digest": d, "size": len(blob)}]})
    md = str(Digest.of_bytes(manifest))
    store.put_bytes(md, manifest)
    view = store.view(md)
    assert view is not None and (view / "models" / "tiny.gguf").read_bytes() == b"GGUF"

    link = tarfile.TarInfo("x.gguf")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    evil = tar([(link, None)])
    ed = str(Digest.of_bytes(evil))
    store.put_bytes(ed, evil)
    manifest2 = manifest.replace(d.encode(), ed.encode()).replace(f'"size":{len(blob)}'.encode(),
                                                                  f'"size":{len(evil)}'.encode())
    md2 = str(Digest.of_bytes(manifest2))
    store.put_bytes(md2, manifest2)
    with pytest.raises(UnsafeContentError, match="not a regular file"):
        store.view(md2)
    assert not store.view_path(md2).exists()

    for target in ("../../outside", "a/../../../x"):
        link = tarfile.TarInfo("sub/x.gguf")
        link.type, link.linkname = tarfile.SYMTYPE, target
        escaping = tar([(link, None)])
        xd = str(Digest.of_bytes(escaping))
        store.put_bytes(xd, escaping)
        manifest3 = manifest.replace(d.encode(), xd.encode()).replace(f'"size":{len(blob)}'.encode(),
                                                                      f'"size":{len(escaping)}'.encode())
        md3 = str(Digest.of_bytes(manifest3))
        store.put_bytes(md3, manifest3)
        with pytest.raises(UnsafeContentError):
            store.view(md3)
        assert not store.view_path(md3).exists()


def test_list_verify_and_clean(tmp_path):
    store = ModelStore(tmp_path)
    digest = _stored_model(store, {"a.gguf": b"a" * 100})
    assert store.view(digest) is not None
    partial = tmp_path / "partial" / "sha256" / ("0" * 64)
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.write_bytes(b"half")
    states = {i.name: i.state for i in store.list()}
    assert states[digest] == "entry"
    assert states[f"view {digest}"] == "entry" and states["sha256:" + "0" * 64] == "partial-stale"
    assert all(i.problem is None for i in store.verify())
    blob = store.blob_path(str(Digest.of_bytes(b"a" * 100)))
    os.chmod(blob, 0o644)
    blob.write_bytes(b"b" * 100)
    bad = [i for i in store.verify() if i.problem]
    assert [i.name for i in bad] == [str(Digest.of_bytes(b"a" * 100))] and not blob.exists()
    assert not store.view_path(digest).exists()  # a view may point at a removed blob: views go too
    assert [i.state for i in store.clean(partial_only=True)] == ["partial-stale"]
    store.clean()
    assert store.list() == []


def test_a_partial_being_written_is_live_and_never_cleaned(tmp_path):
    store = ModelStore(tmp_path)
    with store.writer(DIGEST, len(DATA)) as w:
        w.write(DATA[:100])
        assert [i.state for i in store.list()] == ["partial-live"]
        assert store.clean() == [] and w.partial.exists()
        lock = tmp_path / "locks" / "sha256" / Digest.parse(DIGEST).hex
        assert lock.exists()  # the lock a writer holds is never removed: a second writer would lock another file
    assert [i.state for i in store.list()] == ["partial-stale"]
    assert [i.state for i in store.clean(partial_only=True)] == ["partial-stale"] and not w.partial.exists()


def test_references_are_recorded_by_concurrent_pulls(tmp_path):
    store = ModelStore(tmp_path)
    threads = [threading.Thread(target=store.record, args=(f"h/r:{i}", f"sha256:{i:064x}")) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.refs() == {f"h/r:{i}": f"sha256:{i:064x}" for i in range(8)}
