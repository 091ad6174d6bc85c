"""Issue 29: every executable an artifact brings is checked against the CPU its image, Nix
package or install is for. Real ELF files (Debian's gcc and aarch64-linux-gnu-gcc), a real
mirror on 127.0.0.1, the CLI in-process; the per-CPU builds run under podman (arm64 through
qemu-user-static and binfmt_misc)."""

from __future__ import annotations

import json
import subprocess

import pytest


from support.buildkit import URL, blob_json, tags, tar_gz, variant_recipe
from support.cross import compile_c


def _engine_tar(tmp_path, arch: str) -> bytes:
    exe = compile_c(tmp_path / f"engine-{arch}", arch)
    return tar_gz([("llama-server", exe.read_bytes(), 0o755), ("README.txt", b"engine\n", 0o644)])


def test_x86_artifact_refused_for_arm64_build(tmp_path, home, site, lp):
    """`build --cpu-arch arm64` of a recipe whose artifact is x86-64 fails naming the file,
    what it is and the target, and writes nothing (no layout, no Nix package); the same
    build for amd64 passes. The layer the amd64 build cached is refused for arm64 too."""
    recipe = variant_recipe(tmp_path / "r.json", site, artifact=_engine_tar(tmp_path, "amd64"))
    out = tmp_path / "oci"
    r = lp("build", recipe, "--out", out, "--mirror", site.base, "--cpu-arch", "arm64")
    assert r.code == 1, r
    assert (f"{recipe}: platforms.linux.cpu.source: artifact {URL}" in r.text
            and "llama-server is an ELF 64-bit file for x86-64, but the target CPU is arm64" in r.text), r.text
    assert not out.exists()
    ok = lp("build", recipe, "--out", out, "--mirror", site.base, "--cpu-arch", "amd64", "--json")
    assert ok.code == 0, ok
    assert (out / "nix/llamacpp-variant/sources.json").is_file()
    again = lp("build", recipe, "--out", tmp_path / "oci2", "--mirror", site.base, "--cpu-arch", "arm64")
    assert again.code == 1 and "llama-server is an ELF 64-bit file for x86-64" in again.text, again
    assert not (tmp_path / "oci2").exists()


def test_scripts_pass_for_every_cpu(tmp_path, home, site, lp):
    recipe = variant_recipe(tmp_path / "r.json", site)  # a shell script engine
    r = lp("build", recipe, "--out", tmp_path / "oci", "--mirror", site.base, "--cpu-arch", "arm64", "--json")
    assert r.code == 0, r


def test_install_refuses_an_engine_for_another_cpu(tmp_path, home, site, lp, monkeypatch):
    """`install` on an arm64 host (host facts) of an x86-64 artifact fails naming the file and
    installs nothing; on an amd64 host it installs."""
    recipe = variant_recipe(tmp_path / "r.json", site, artifact=_engine_tar(tmp_path, "amd64"))
    monkeypatch.setenv("LEMONPACK_HOST_FACTS", json.dumps({"os": "linux", "cpu_arch": "arm64"}))
    r = lp("install", recipe, "--mirror", site.base, "--yes", "--json")
    assert r.code == 1, r
    assert "llama-server is an ELF 64-bit file for x86-64, but the target CPU is arm64" in r.text, r.text
    assert not (home.cache / "external" / "llamacpp-variant").exists()
    monkeypatch.setenv("LEMONPACK_HOST_FACTS", json.dumps({"os": "linux", "cpu_arch": "amd64"}))
    ok = lp("install", recipe, "--mirror", site.base, "--yes", "--json")
    assert ok.code == 0, ok
    assert (home.cache / "external" / "llamacpp-variant" / "llama-server").is_file()


def test_unpack_refuses_for_the_nix_package(tmp_path, lp):
    """What the Nix packages run (`lemonpack unpack --cpu-arch <the source's cpuArch>`):
    an arm64 engine unpacked for amd64 fails naming it and leaves nothing at --out."""
    art = tmp_path / "a.tar.gz"
    art.write_bytes(_engine_tar(tmp_path, "arm64"))
    r = lp("unpack", art, "--out", tmp_path / "x", "--cpu-arch", "amd64", "--label", "https://h/a.tar.gz")
    assert r.code == 1
    assert ("https://h/a.tar.gz: llama-server is an ELF 64-bit file for AArch64 (arm64), but the target CPU is "
            "amd64") in r.text, r.text
    assert not (tmp_path / "x").exists()
    assert lp("unpack", art, "--out", tmp_path / "y", "--cpu-arch", "arm64").code == 0
    bad = lp("unpack", art, "--out", tmp_path / "z", "--cpu-arch", "x86_64")
    assert bad.code == 2 and "not one of amd64" in bad.text


def test_nix_package_passes_the_cpu_to_unpack(tmp_path, home, site, lp):
    recipe = variant_recipe(tmp_path / "r.json", site, artifact=_engine_tar(tmp_path, "amd64"))
    assert lp("build", recipe, "--out", tmp_path / "oci", "--mirror", site.base, "--cpu-arch", "amd64").code == 0
    nix = (tmp_path / "oci/nix/llamacpp-variant/default.nix").read_text()
    assert "--cpu-arch ${escapeShellArg src.cpuArch}" in nix
    src = json.loads((tmp_path / "oci/nix/llamacpp-variant/sources.json").read_text())["sources"]["linux-cpu"]
    assert (src["cpuArch"], src["system"]) == ("amd64", "x86_64-linux")
    cfg = blob_json(tmp_path / "oci", blob_json(tmp_path / "oci", tags(tmp_path / "oci")[
        "llamacpp-variant.linux-cpu"]["digest"])["config"]["digest"])
    assert cfg["architecture"] == "amd64"


# ---------------------------------------------------------------- per-CPU artifacts (point 2)

PER_CPU_URL = "https://engines.example.test/engine-{}.tar.gz"  # not example.invalid: release serves that itself


def per_cpu_recipe(tmp_path, site, cpus=("amd64", "arm64")):
    """A variant_of recipe whose linux/cpu block gives one artifact per CPU through the
    extensions key; its own source is the amd64 one (what a v1 reader without the key uses)."""
    from support.recipes import recipe_doc, write_recipe

    table = {}
    for cpu in cpus:
        url = PER_CPU_URL.format(cpu)
        table[cpu] = {"source": url, "sha256": "sha256:" + site.put(url, _engine_tar(tmp_path, cpu))}
    return write_recipe(tmp_path / "per-cpu.json", recipe_doc(
        "engine-per-cpu", display_name="engine per CPU", capabilities=["chat_completion"],
        variant_of="llamacpp", binary="llama-server",
        block={**table["amd64"], "reserved_args": ["--port"]},
        extensions={"dev.lemonpack.cpu-artifacts": {"linux/cpu": table}}))


def _config(layout, tag):
    manifest = blob_json(layout, tags(layout)[tag]["digest"])
    return manifest, blob_json(layout, manifest["config"]["digest"])


def test_per_cpu_recipe_builds_each_cpu_with_its_own_artifact(tmp_path, home, site, lp):
    recipe = per_cpu_recipe(tmp_path, site)
    for cpu in ("amd64", "arm64"):
        out = tmp_path / f"oci-{cpu}"
        r = lp("build", recipe, "--out", out, "--mirror", site.base, "--cpu-arch", cpu, "--json")
        assert r.code == 0, r
        target = r.json()["targets"][0]
        assert target["source"] == PER_CPU_URL.format(cpu), target
        manifest, config = _config(out, "engine-per-cpu.linux-cpu")
        assert config["architecture"] == cpu
        assert manifest["annotations"]["dev.lemonpack.source"] == PER_CPU_URL.format(cpu)
        src = json.loads((out / "nix/engine-per-cpu/sources.json").read_text())["sources"]["linux-cpu"]
        assert sorted(src["systems"]) == ["aarch64-linux", "x86_64-linux"]  # meta.platforms: what it offers
        assert src["cpuArch"] == cpu
        assert src["systems"]["aarch64-linux"]["url"] == PER_CPU_URL.format("arm64")
    r = lp("build", recipe, "--out", tmp_path / "oci-s390x", "--mirror", site.base, "--cpu-arch", "s390x")
    assert r.code == 1 and ('extensions["dev.lemonpack.cpu-artifacts"]["linux/cpu"] offers platforms.linux.cpu '
                            "for amd64, arm64, not for s390x") in r.text, r


def test_per_cpu_install_takes_the_hosts_artifact(tmp_path, home, site, lp, monkeypatch):
    recipe = per_cpu_recipe(tmp_path, site)
    monkeypatch.setenv("LEMONPACK_HOST_FACTS", json.dumps({"os": "linux", "cpu_arch": "arm64"}))
    r = lp("install", recipe, "--mirror", site.base, "--yes", "--json")
    assert r.code == 0, r
    assert r.json()["source"] == PER_CPU_URL.format("arm64")
    from lemonpack.exe_header import read_executable
    assert read_executable(home.cache / "external/engine-per-cpu/llama-server").archs == {"arm64"}


def test_per_cpu_artifact_that_lies_is_refused(tmp_path, home, site, lp):
    """The key says arm64, the file is x86-64: the header decides."""
    from support.recipes import recipe_doc, write_recipe

    url = PER_CPU_URL.format("liar")
    sha = "sha256:" + site.put(url, _engine_tar(tmp_path, "amd64"))
    recipe = write_recipe(tmp_path / "liar.json", recipe_doc(
        "liar", capabilities=["chat_completion"], variant_of="llamacpp", binary="llama-server",
        block={"source": url, "sha256": sha},
        extensions={"dev.lemonpack.cpu-artifacts": {"linux/cpu": {"arm64": {"source": url, "sha256": sha}}}}))
    r = lp("build", recipe, "--out", tmp_path / "oci", "--mirror", site.base, "--cpu-arch", "arm64")
    assert r.code == 1, r
    assert (f'{recipe}: extensions["dev.lemonpack.cpu-artifacts"]["linux/cpu"].arm64.source (used by '
            f'platforms.linux.cpu): artifact {url}' in r.text and "llama-server is an ELF 64-bit file for x86-64" in r.text), r.text


@pytest.mark.slow
def test_each_cpus_image_runs_under_podman(tmp_path, home, site, lp, podman_conf):
    """Both images of the per-CPU recipe run their engine under podman: amd64 natively, arm64
    through qemu-user-static (binfmt_misc set up by the test)."""
    import secrets
    import subprocess

    from support.cross import binfmt_aarch64
    from support.tools import need

    binfmt_aarch64()
    recipe = per_cpu_recipe(tmp_path, site)
    env = podman_conf["env"]
    for cpu in ("amd64", "arm64"):
        out = tmp_path / f"oci-{cpu}"
        assert lp("build", recipe, "--out", out, "--mirror", site.base, "--cpu-arch", cpu).code == 0
        name = f"localhost/cpu-arch-test-{secrets.token_hex(4)}:{cpu}"
        res = subprocess.run([need("skopeo"), "copy", "-q", f"oci:{out}:engine-per-cpu.linux-cpu",
                              f"containers-storage:{name}"], capture_output=True, text=True, env=env, timeout=300)
        assert res.returncode == 0, res.stderr
        try:
            ran = subprocess.run([need("podman"), "run", "--rm", "--arch", cpu, "--network", "none", name, "--version"],
                                 capture_output=True, text=True, env=env, timeout=300)
            assert ran.returncode == 0, ran.stderr
            assert ran.stdout.strip() == f"engine {cpu} 1.0"
        finally:
            subprocess.run([need("podman"), "rmi", "-f", name], capture_output=True, env=env)


# ---------------------------------------------------------------- release images

def _release_tree(tmp_path, recipe, archs=("amd64", "arm64")):
    """A copy of the repository's release inputs with one definition naming ``recipe``."""
    from scenarios.test_release import _copy_tree

    tree = _copy_tree(tmp_path / "tree", umask=0o022, mtime=0)
    (tree / "recipes").mkdir()
    (tree / "recipes" / recipe.name).write_bytes(recipe.read_bytes())
    for d in (tree / "containers").iterdir():
        d.unlink()
    (tree / "containers" / "engines.json").write_text(json.dumps({
        "schema": 1, "name": "engines", "architectures": list(archs), "features": ["linux"], "base": "scratch",
        "extensions": ["qwen"], "recipes": [{"file": f"recipes/{recipe.name}", "accelerator": "cpu"}]}))
    return tree


def _release(tree, out, site, lp):
    return lp("release", "--lock", tree / "extensions.lock", "--out", out, "--mirror", site.base, "--no-progress",
              "--json")


def test_release_gives_each_architecture_its_per_cpu_artifact(tmp_path, home, site, lp):
    """A per-CPU recipe in a two-architecture release: each image holds the engine built for
    its own CPU (per-architecture recipe layers and labels); the index annotation lists both."""
    import tarfile

    from lemonpack.exe_header import parse_header

    tree = _release_tree(tmp_path, per_cpu_recipe(tmp_path, site))
    r = _release(tree, tmp_path / "out", site, lp)
    assert r.code == 0, r
    (image,) = r.json()["images"]
    assert [x["source"] for x in image["recipes"]] == [PER_CPU_URL.format("amd64"), PER_CPU_URL.format("arm64")]
    layout = tmp_path / "out" / "engines"
    for cpu in ("amd64", "arm64"):
        manifest, config = _config(layout, f"engines.{cpu}")
        assert config["architecture"] == cpu
        assert config["config"]["Labels"]["dev.lemonpack.release.recipes"].count("engine-per-cpu@") == 1
        engine_layer = next(layer for layer in manifest["layers"]
                            if layer["annotations"]["org.opencontainers.image.title"] == "opt/lemonpack/engine-per-cpu")
        algo, hexd = engine_layer["digest"].split(":")
        with tarfile.open(layout / "blobs" / algo / hexd) as tf:
            data = tf.extractfile("opt/lemonpack/engine-per-cpu/llama-server").read()
        assert parse_header(data[:64]).archs == {cpu}
    index = blob_json(layout, tags(layout)["engines"]["digest"])
    assert index["annotations"]["dev.lemonpack.release.recipes"].count("engine-per-cpu@") == 2


def test_release_refuses_an_engine_for_one_of_its_architectures(tmp_path, home, site, lp):
    recipe = variant_recipe(tmp_path / "r.json", site, url=PER_CPU_URL.format("x86-only"),
                            artifact=_engine_tar(tmp_path, "amd64"))
    tree = _release_tree(tmp_path, recipe)
    r = _release(tree, tmp_path / "out", site, lp)
    assert r.code == 1, r
    assert ("engines.json: recipes[0]:" in r.text and "llama-server is an ELF 64-bit file for x86-64, but the target "
            "CPU is arm64" in r.text), r.text
    assert not (tmp_path / "out").exists()
    ok = _release(_release_tree(tmp_path / "one", recipe, ("amd64",)), tmp_path / "out", site, lp)
    assert ok.code == 0, ok


# ---------------------------------------------------------------- the Nix package

@pytest.mark.slow
def test_nix_package_build_refuses_an_engine_for_another_cpu(tmp_path, server, nix_installed):
    """A recipe package whose sources.json says amd64 over an arm64 engine (what a hand-edited
    or stale package would hold) fails to *build*: `lemonpack unpack --cpu-arch amd64` in the
    install phase names the file, what it is and the target. The same package over an amd64
    engine builds. Real nix with the offline nixpkgs stand-in and the flake's lemonpack."""
    import hashlib
    import os

    from lemonpack.fetch.mirror import mirror_path
    from lemonpack.nix import NixSource, write_package_nix, write_recipe_json, write_sources_json
    from support.nixflake import OFFLINE_NIXPKGS, SYSTEM, copy_flake, nix

    if SYSTEM != "x86_64-linux":
        pytest.skip("the package is for x86_64-linux; this machine builds another system")
    tree = copy_flake(tmp_path / "repo", with_repo_tree=True)

    def build(name: str, arch: str) -> subprocess.CompletedProcess:
        art = _engine_tar(tmp_path, arch)
        url = f"{server.base}/{name}-{os.urandom(4).hex()}.tar.gz"
        server.put(url.rsplit("/", 1)[1], art)
        pkg = tmp_path / f"pkg-{name}"
        write_sources_json(pkg, f"org.example.{name}", [NixSource(
            name="linux-cpu", url=url, mirror_path=mirror_path(url), sha256_hex=hashlib.sha256(art).hexdigest(),
            os="linux", accelerator="cpu", binary="llama-server", cpu_arch="amd64")])
        write_recipe_json(pkg, b'{"recipe": "org.example.%s"}\n' % name.encode())
        write_package_nix(pkg, f"org.example.{name}")
        return nix("build", "--impure", "-o", str(tmp_path / f"out-{name}"), "--expr",
                   f'let lp = (builtins.getFlake "path:{tree}").packages.{SYSTEM}; in '
                   f'(import {pkg} {{ pkgs = import {OFFLINE_NIXPKGS} {{ system = "{SYSTEM}"; }}; '
                   f'lemonpack = lp.lemonpack; }}).linux-cpu', timeout=1800)

    bad = build("arm-engine", "arm64")
    assert bad.returncode == 1
    assert "llama-server is an ELF 64-bit file for AArch64 (arm64), but the target CPU is amd64" in bad.stderr, \
        bad.stderr[-3000:]
    good = build("x86-engine", "amd64")
    assert good.returncode == 0, good.stderr[-3000:]
    ran = subprocess.run([str(tmp_path / "out-x86-engine/bin/llama-server"), "--version"], capture_output=True,
                         text=True, timeout=60)
    assert ran.stdout == "engine amd64 1.0\n"
