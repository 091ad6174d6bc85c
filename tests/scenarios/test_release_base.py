"""Release images that run: ``lemonpack release`` on a base compiles gufo and ships
``/opt/gufo/bin/gufo-registry`` as the image's Entrypoint; ``podman run IMAGE --json`` prints
the registry. The base is the suite's Debian base (:mod:`support.debian_base`)."""

from __future__ import annotations

import json
import secrets
import subprocess
from pathlib import Path

import pytest

from lemonpack.cli import main
from support.containers import podman_conf  # noqa: F401 (fixture)
from support.oci_base import make_base
from support.tools import need

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)


def _definition(directory: Path, name: str, base: str, architectures=("amd64",)) -> Path:
    doc = json.loads((REPO / "containers" / "gufo-cpu.json").read_text())
    doc.update({"name": name, "architectures": list(architectures), "base": base})
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.json").write_text(json.dumps(doc))
    return directory


def _release(out: Path, containers: Path, *extra: str) -> int:
    return main(["release", "--lock", str(REPO / "extensions.lock"), "--out", str(out), "--containers",
                 str(containers), "--no-progress", "--json", *extra])


@pytest.mark.slow
def test_release_on_a_base_runs_gufo_registry(tmp_path, cache, podman_conf, debian_layout, capsys):  # noqa: F811
    need("g++")
    containers = _definition(tmp_path / "containers", "gufo-run", debian_layout)
    assert _release(tmp_path / "a", containers) == 0
    assert _release(tmp_path / "b", containers) == 0
    a = json.loads((tmp_path / "a" / "release.json").read_text())
    b = json.loads((tmp_path / "b" / "release.json").read_text())
    assert a == b, "same inputs, same digests (the compiled gufo too)"
    layout = tmp_path / "a" / "gufo-run"
    res = subprocess.run([need("skopeo"), "inspect", "--config", f"oci:{layout}:gufo-run.amd64"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    config = json.loads(res.stdout)["config"]
    assert config["Entrypoint"] == ["/opt/gufo/bin/gufo-registry"]
    assert "GUFO_EXTENSIONS_JSON=/opt/gufo/generated/extensions.json" in config["Env"]
    name = f"localhost/images-gufo-{secrets.token_hex(4)}:run"
    env = podman_conf["env"]
    res = subprocess.run([need("skopeo"), "copy", "-q", f"oci:{layout}:gufo-run.amd64", f"containers-storage:{name}"],
                         capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    try:
        run = subprocess.run([need("podman"), "run", "--rm", "--network", "none", name, "--json"],
                             capture_output=True, text=True, env=env, timeout=120)
        assert run.returncode == 0, run.stderr
        registry = json.loads(run.stdout)
        assert [p["extension"] for p in registry] and \
            list(dict.fromkeys(p["extension"] for p in registry)) == a["images"][0]["extensions"]
        assert any(p["available"] for p in registry) and any(not p["available"] for p in registry)
    finally:
        subprocess.run(["podman", "rmi", "-f", name], capture_output=True, env=env)


def test_release_base_for_an_architecture_without_its_cross_compiler(tmp_path, cache, capsys, monkeypatch):
    """arm64 on a base needs the cross compiler: without it on PATH the release fails before
    anything is fetched, naming the Debian package, and writes nothing."""
    import shutil

    make_base(tmp_path / "base")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("g++", "ar"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    monkeypatch.setenv("PATH", str(bin_dir))
    containers = _definition(tmp_path / "containers", "gufo-two", "scratch", ("amd64", "arm64"))
    out = tmp_path / "out"
    assert _release(out, containers, "--base", f"oci:{tmp_path / 'base'}") == 1
    err = " ".join(" ".join(capsys.readouterr()).split())
    assert "gufo-two.json: architectures:" in err and "'aarch64-linux-gnu-g++' not found on PATH" in err \
        and "apt-get install g++-aarch64-linux-gnu" in err, err
    assert not out.exists()


@pytest.mark.slow
def test_shipped_gufo_cpu_on_a_two_architecture_base(tmp_path, cache, podman_conf, capsys):  # noqa: F811
    """Issue 29's proof: `lemonpack release` of the shipped gufo-cpu on a Debian base whose index
    has an amd64 and an arm64 manifest (the arm64 one bootstrapped by mmdebstrap through
    qemu-user-static): each image holds a gufo-registry of its own architecture (the arm64 one
    cross-compiled by aarch64-linux-gnu-g++), both print the providers under podman (arm64
    through qemu), and two runs give one index digest."""
    from lemonpack.exe_header import read_executable
    from support.cross import binfmt_aarch64
    from support.debian_base import debian_index

    need("g++")
    need("aarch64-linux-gnu-g++")
    binfmt_aarch64()
    need("mmdebstrap")
    need("umoci")
    base_dir, tag = debian_index(())
    base = f"oci:{base_dir}:{tag}"
    for out in ("a", "b"):
        assert main(["release", "--lock", str(REPO / "extensions.lock"), "--out", str(tmp_path / out), "--image",
                     "gufo-cpu", "--base", base, "--no-progress", "--json"]) == 0, capsys.readouterr()
    a = json.loads((tmp_path / "a" / "release.json").read_text())
    assert a == json.loads((tmp_path / "b" / "release.json").read_text()), "two runs, one index digest"
    (image,) = a["images"]
    assert list(image["manifests"]) == ["amd64", "arm64"]
    layout = tmp_path / "a" / "gufo-cpu"
    env = podman_conf["env"]
    for arch in ("amd64", "arm64"):
        unpacked = tmp_path / f"bundle-{arch}"
        res = subprocess.run([need("umoci"), "raw", "unpack", "--rootless", "--image", f"{layout}:gufo-cpu.{arch}",
                              str(unpacked)], capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert read_executable(unpacked / "opt/gufo/bin/gufo-registry").archs == {arch}
        name = f"localhost/images-gufo-{secrets.token_hex(4)}:{arch}"
        res = subprocess.run([need("skopeo"), "copy", "-q", f"oci:{layout}:gufo-cpu.{arch}",
                              f"containers-storage:{name}"], capture_output=True, text=True, env=env)
        assert res.returncode == 0, res.stderr
        try:
            run = subprocess.run([need("podman"), "run", "--rm", "--arch", arch, "--network", "none", name, "--json"],
                                 capture_output=True, text=True, env=env, timeout=600)
            assert run.returncode == 0, run.stderr
            registry = json.loads(run.stdout)
            assert list(dict.fromkeys(p["extension"] for p in registry)) == image["extensions"]
            assert any(p["available"] for p in registry)
        finally:
            subprocess.run(["podman", "rmi", "-f", name], capture_output=True, env=env)


def test_release_definition_base_must_be_pinned(tmp_path, cache, capsys):
    containers = _definition(tmp_path / "containers", "gufo-tag", "127.0.0.1:5000/debian:12")
    out = tmp_path / "out"
    assert _release(out, containers) == 1
    err = " ".join(capsys.readouterr())
    assert "gufo-tag.json" in err and "base" in err
    assert not out.exists()
