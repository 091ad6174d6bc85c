"""``lemonpack release`` end to end on the repository's lock, extensions and definitions:
byte-identical output from two copies of the tree (different directories, umask, input
mtimes, run times), SOURCE_DATE_EPOCH, the generated files byte-equal to
``lemonpack extensions generate``, failures that leave the output as it was, and skopeo and
umoci (the oracles) reading every image."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from lemonpack.cli import main
from support.tools import need

REPO = Path(__file__).resolve().parents[2]
#: What a release reads from the repository (copied to make a second, differently made tree).
TREE_PARTS = ("extensions.lock", "containers", "catalogue", "api", "include", "lemonpack/examples/hello-engine.json")


def _copy_tree(dest: Path, *, umask: int, mtime: int) -> Path:
    old = os.umask(umask)
    try:
        for part in TREE_PARTS:
            src, dst = REPO / part, dest / part
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copyfile(src, dst)
    finally:
        os.umask(old)
    for p in [dest, *dest.rglob("*")]:
        os.utime(p, (mtime, mtime))
    return dest


def _release(tree: Path, out: Path, *extra: str) -> tuple[int, dict]:
    code = main(["release", "--lock", str(tree / "extensions.lock"), "--out", str(out), "--json", "--no-progress",
                 *extra])
    return code, (json.loads((out / "release.json").read_bytes()) if code == 0 else {})


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    monkeypatch.delenv("LEMONPACK_MIRROR", raising=False)
    monkeypatch.delenv("GUFO_EXTENSION_DIRS", raising=False)
    return tmp_path / "cache"


@pytest.fixture
def released(tmp_path, cache):
    """The repository released into tmp_path/rel (epoch 0)."""
    code, record = _release(REPO, tmp_path / "rel")
    assert code == 0
    return tmp_path / "rel", record


def test_two_trees_two_times_same_bytes(tmp_path, cache, capsys, monkeypatch):
    a = _copy_tree(tmp_path / "a" / "checkout", umask=0o022, mtime=1_000_000_000)
    b = _copy_tree(tmp_path / "elsewhere" / "b", umask=0o077, mtime=1_750_000_000)
    code_a, rec_a = _release(a, tmp_path / "out-a")
    assert code_a == 0
    capsys.readouterr()
    shutil.rmtree(cache)  # the second run fetches again
    time.sleep(1.1)  # another second on the clock
    monkeypatch.setenv("GUFO_EXTENSION_DIRS", str(tmp_path))  # the caller's environment plays no part
    old = os.umask(0o077)
    try:
        code_b, rec_b = _release(b, tmp_path / "deeper" / "out-b")
    finally:
        os.umask(old)
    assert code_b == 0
    assert rec_a == rec_b
    assert {i["name"] for i in rec_a["images"]} >= {"gufo-cpu", "gufo-rocm"}
    assert _files(tmp_path / "out-a") == _files(tmp_path / "deeper" / "out-b")
    printed = json.loads(capsys.readouterr().out)
    assert printed["out"] == str(tmp_path / "deeper" / "out-b")
    assert [i["index"] for i in printed["images"]] == [i["index"] for i in rec_b["images"]]


def test_release_contents(released):
    out, record = released
    cpu = next(i for i in record["images"] if i["name"] == "gufo-cpu")
    rocm = next(i for i in record["images"] if i["name"] == "gufo-rocm")
    lock = json.loads((REPO / "extensions.lock").read_bytes())["extensions"]
    assert cpu["extensions"] == lock and rocm["extensions"] == lock
    assert cpu["features"] == ["linux"] and rocm["features"] == ["hip", "linux"]
    assert list(cpu["manifests"]) == ["amd64", "arm64"]
    assert record["lock"] == "sha256:" + hashlib.sha256((REPO / "extensions.lock").read_bytes()).hexdigest()
    assert cpu["recipes"][0]["recipe"] == "hello-engine"
    assert cpu["recipes"][0]["sha256"] == json.loads(
        (REPO / "lemonpack/examples/hello-engine.json").read_text())["sha256"]
    assert record["epoch"] == 0


def _layer_files(layout: Path, manifest_digest: str) -> dict[str, tuple[tarfile.TarInfo, bytes | None]]:
    blobs = layout / "blobs" / "sha256"
    manifest = json.loads((blobs / manifest_digest.split(":")[1]).read_bytes())
    out = {}
    for layer in manifest["layers"]:
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress((blobs / layer["digest"][7:]).read_bytes()))) as tar:
            for m in tar.getmembers():
                out[m.name] = (m, tar.extractfile(m).read() if m.isfile() else None)
    return out


def _generated_by_cli(tmp_path: Path, features: list[str]) -> dict[str, bytes]:
    """What ``lemonpack extensions generate`` writes for the lock and ``features``."""
    dest = tmp_path / ("gen-" + "-".join(features))
    args = ["extensions", "generate", "--tree", str(REPO), "--lock", str(REPO / "extensions.lock"),
            "--out", str(dest)]
    for f in features:
        args += ["--feature", f]
    assert main(args) == 0
    return {p.name: p.read_bytes() for p in dest.iterdir() if p.is_file()}


def test_generated_files_equal_extensions_generate(released, tmp_path):
    out, record = released
    for image in record["images"]:
        want = _generated_by_cli(tmp_path, image["features"])
        assert set(want) == {"extensions.json", "gufo_ext_registry.cpp", "gufo_ext_constants.hpp"}
        for digest in image["manifests"].values():
            files = _layer_files(out / image["name"], digest)
            for name, data in want.items():
                assert files[f"opt/gufo/generated/{name}"][1] == data, (image["name"], name)
            assert files["opt/gufo/extensions.lock"][1] == (REPO / "extensions.lock").read_bytes()
            for ext in image["extensions"]:
                src = REPO / "catalogue" / "extensions" / ext
                for f in src.rglob("*"):
                    if f.is_file():
                        member = f"opt/gufo/extensions/{ext}/{f.relative_to(src).as_posix()}"
                        assert files[member][1] == f.read_bytes(), member
    rocm = json.loads(_layer_files(out / "gufo-rocm", record["images"][1]["manifests"]["amd64"])
                      ["opt/gufo/generated/extensions.json"][1])
    assert rocm["features"] == ["hip", "linux"]


def test_source_date_epoch(tmp_path, cache, monkeypatch, released):
    out0, rec0 = released
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    code, rec1 = _release(REPO, tmp_path / "rel-2023")
    assert code == 0 and rec1["epoch"] == 1700000000
    for i0, i1 in zip(rec0["images"], rec1["images"]):
        assert i0["index"] != i1["index"]
        layout = tmp_path / "rel-2023" / i1["name"]
        for arch, digest in i1["manifests"].items():
            blobs = layout / "blobs" / "sha256"
            manifest = json.loads((blobs / digest[7:]).read_bytes())
            config = json.loads((blobs / manifest["config"]["digest"][7:]).read_bytes())
            assert config["created"] == "2023-11-14T22:13:20Z" and config["architecture"] == arch
            assert manifest["annotations"]["org.opencontainers.image.created"] == "2023-11-14T22:13:20Z"
            assert {m.mtime for m, _ in _layer_files(layout, digest).values()} == {1700000000}
    # and again: the same epoch, the same digests
    code, again = _release(REPO, tmp_path / "rel-2023-again")
    assert again == rec1
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    assert main(["release", "--lock", str(REPO / "extensions.lock"), "--out", str(tmp_path / "x")]) == 1
    assert not (tmp_path / "x").exists()


def test_bad_artifact_hash_leaves_previous_release(tmp_path, cache, capsys):
    tree = _copy_tree(tmp_path / "tree", umask=0o022, mtime=0)
    code, before = _release(tree, tmp_path / "out")
    assert code == 0
    snapshot = _files(tmp_path / "out")
    recipe = tree / "lemonpack/examples/hello-engine.json"
    doc = json.loads(recipe.read_text())
    doc["sha256"] = "sha256:" + "0" * 64
    recipe.write_text(json.dumps(doc))
    shutil.rmtree(cache)
    code = main(["release", "--lock", str(tree / "extensions.lock"), "--out", str(tmp_path / "out"), "--json"])
    assert code == 3
    err = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert err["error"] == "integrity" and err["expected"] == "sha256:" + "0" * 64
    assert _files(tmp_path / "out") == snapshot
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "out", "tree"]  # no temporary left


def test_unknown_extension_in_definition(tmp_path, cache, capsys):
    tree = _copy_tree(tmp_path / "tree", umask=0o022, mtime=0)
    d = tree / "containers" / "gufo-cpu.json"
    doc = json.loads(d.read_text())
    doc["extensions"] = ["qwen", "no_such_model"]
    d.write_text(json.dumps(doc))
    code = main(["release", "--lock", str(tree / "extensions.lock"), "--out", str(tmp_path / "out")])
    assert code == 1
    err = capsys.readouterr().err
    assert "gufo-cpu.json: extensions[1]" in err and "no_such_model" in err
    assert not (tmp_path / "out").exists()


def test_unsafe_file_in_extension_dir_exit_5(tmp_path, cache, capsys):
    tree = _copy_tree(tmp_path / "tree", umask=0o022, mtime=0)
    os.mkfifo(tree / "catalogue" / "extensions" / "qwen" / "pipe")
    code = main(["release", "--lock", str(tree / "extensions.lock"), "--out", str(tmp_path / "out")])
    assert code == 5
    err = capsys.readouterr().err
    assert "extension qwen" in err and "'pipe'" in err and "fifo" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "tree"]


def test_only_one_image(tmp_path, cache):
    code, record = _release(REPO, tmp_path / "out", "--image", "gufo-rocm")
    assert code == 0 and [i["name"] for i in record["images"]] == ["gufo-rocm"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["gufo-rocm", "release.json"]
    # an earlier release is replaced as a whole, nothing left beside it
    code, again = _release(REPO, tmp_path / "out")
    assert code == 0 and {i["name"] for i in again["images"]} >= {"gufo-cpu", "gufo-rocm"}
    assert again["images"][[i["name"] for i in again["images"]].index("gufo-rocm")] == record["images"][0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "out"]


def _run(*argv: str) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{argv}: {done.stderr}"
    return done


@pytest.mark.slow
def test_skopeo_reads_every_image(released):
    need("skopeo")
    out, record = released
    for image in record["images"]:
        layout = out / image["name"]
        raw = _run("skopeo", "inspect", "--raw", f"oci:{layout}:{image['name']}").stdout.encode()
        assert "sha256:" + hashlib.sha256(raw).hexdigest() == image["index"]
        assert [m["platform"]["architecture"] for m in json.loads(raw)["manifests"]] == list(image["manifests"])
        for arch, digest in image["manifests"].items():
            info = json.loads(_run("skopeo", "inspect", f"oci:{layout}:{image['name']}.{arch}").stdout)
            assert info["Digest"] == digest and info["Architecture"] == arch and info["Os"] == "linux"
            assert info["Labels"]["dev.lemonpack.release.image"] == image["name"]
            assert info["Created"].startswith("1970-01-01T00:00:00")
        # the index resolves per platform, as a client pulling it does: each arch finds its image
        for arch, digest in image["manifests"].items():
            info = json.loads(_run("skopeo", "--override-arch", arch, "inspect",
                                   f"oci:{layout}:{image['name']}").stdout)
            assert info["Digest"] == image["index"] and info["Architecture"] == arch
            single = json.loads(_run("skopeo", "inspect", f"oci:{layout}:{image['name']}.{arch}").stdout)
            assert info["Layers"] == single["Layers"]


@pytest.mark.slow
def test_umoci_unpacks_every_image(released, tmp_path):
    need("umoci")
    out, record = released
    for image in record["images"]:
        layout = out / image["name"]
        for arch in image["manifests"]:
            ref = f"{layout}:{image['name']}.{arch}"
            assert "history" in json.loads(_run("umoci", "stat", "--json", "--image", ref).stdout)
            bundle = tmp_path / f"bundle-{image['name']}-{arch}"
            _run("umoci", "unpack", "--rootless", "--image", ref, str(bundle))
            root = bundle / "rootfs"
            for f in ("extensions.json", "gufo_ext_registry.cpp", "gufo_ext_constants.hpp"):
                assert (root / "opt/gufo/generated" / f).is_file()
            assert (root / "opt/gufo/extensions.lock").read_bytes() == (REPO / "extensions.lock").read_bytes()
            for ext in image["extensions"]:
                assert (root / "opt/gufo/extensions" / ext / "extension.json").read_bytes() == \
                    (REPO / "catalogue/extensions" / ext / "extension.json").read_bytes()
            for r in image["recipes"]:
                assert (root / "etc/lemonpack/recipes" / f"{r['recipe']}.json").is_file()
            engine = root / "opt/lemonpack/hello-engine/hello-engine"
            if image["recipes"]:
                assert engine.is_file() and os.access(engine, os.X_OK)
            assert (root / "opt/gufo/generated/extensions.json").stat().st_mtime == 0


def test_bad_lock_names_file_and_field(tmp_path, cache, capsys):
    tree = _copy_tree(tmp_path / "tree", umask=0o022, mtime=0)
    (tree / "extensions.lock").write_text('{"schema": 1, "extensions": ["qwen", "Qwen"]}')
    code = main(["release", "--lock", str(tree / "extensions.lock"), "--out", str(tmp_path / "out")])
    assert code == 1
    assert f"{tree / 'extensions.lock'}: extensions[1]" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
