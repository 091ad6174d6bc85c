"""A real Debian 12 base image as an OCI image layout, for tests that run what lemonpack builds.

:func:`debian_base` returns ``(layout_dir, tag)``: ``oci:<layout_dir>:<tag>`` is a one-layer
linux/amd64 image of ``mmdebstrap --variant=essential`` (bookworm) with ``libgomp1``,
``libstdc++6``, ``libssl3`` (what the suite's ``llama-server`` needs besides libc) plus the
``extra`` packages asked for (e.g. ``["python3-minimal"]`` for the shipped Python example).

How: ``SOURCE_DATE_EPOCH=1700000000 mmdebstrap ... --format=tar`` (about 10 s and 143 MB from
Debian's mirror), then ``umoci`` (independent of lemonpack, and of podman's shared storage)
makes the layout: ``umoci init``, ``umoci new``, ``umoci raw add-layer``, ``umoci config``
(``Env`` PATH). Cached in ``$LEMONPACK_TEST_CACHE`` or ``~/.cache/lemonpack-test/`` under
``debian-base/<key>/`` where ``key`` hashes the mmdebstrap inputs (suite, variant, package
list, epoch, architecture), so reruns on CI (with the cache kept) cost nothing; a lock file
serialises concurrent test processes; a build lands by rename, so a half-made base is never
used. The session fixture :func:`debian_layout` gives ``oci:DIR:TAG`` of the base with
:data:`RUN_EXTRA` (what the runnable-image tests use). Run as a script to prepare a base:
``python debian_base.py [PACKAGE...]`` prints its ``oci:DIR:TAG``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Sequence

import pytest

from lemonpack.files import locked

SUITE = "bookworm"
VARIANT = "essential"
EPOCH = "1700000000"
PACKAGES = ("libgomp1", "libstdc++6", "libssl3")
TAG = "base"
#: What the suite's runnable-image tests need on top: Python for the shipped example engine.
RUN_EXTRA = ("python3-minimal", "libpython3.11-stdlib")
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _cache_root() -> Path:
    d = Path(os.environ.get("LEMONPACK_TEST_CACHE") or Path.home() / ".cache" / "lemonpack-test") / "debian-base"
    d.mkdir(parents=True, exist_ok=True)
    return d


def cache_key(extra: Sequence[str] = (), arch: str = "amd64") -> str:
    """Hex sha256 (16 chars) of every input of the base: suite, variant, packages, epoch, arch."""
    pkgs = sorted(set(PACKAGES) | set(extra))
    doc = json.dumps({"suite": SUITE, "variant": VARIANT, "packages": pkgs, "epoch": EPOCH, "arch": arch,
                      "layout": 1}, sort_keys=True)
    return hashlib.sha256(doc.encode()).hexdigest()[:16]


def _run(argv: list[str], env: dict | None = None) -> None:
    res = subprocess.run(argv, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({res.returncode}): {res.stderr[-2000:]}")


def debian_base(extra: Sequence[str] = (), arch: str = "amd64") -> tuple[Path, str]:
    """``(layout_dir, tag)`` of the Debian base with ``extra`` packages for the Debian/OCI
    architecture ``arch`` (``amd64``, ``arm64``; built once, cached). A foreign architecture is
    bootstrapped by ``mmdebstrap --architectures=ARCH``, which runs its maintainer scripts
    through qemu-user-static: binfmt_misc must run that architecture's binaries
    (:func:`support.cross.binfmt_aarch64` sets it up for arm64).

    Raises ``RuntimeError`` naming the failing command (mmdebstrap or umoci; both must be
    installed: ``apt-get install -y mmdebstrap umoci``)."""
    root = _cache_root()
    key = cache_key(extra, arch)
    final = root / key
    if (final / "oci-layout").is_file():
        return final, TAG
    with locked(root / f".{key}.lock"):
        if (final / "oci-layout").is_file():
            return final, TAG
        for tool in ("mmdebstrap", "umoci"):
            if shutil.which(tool) is None:
                raise RuntimeError(f"{tool} is not installed: apt-get install -y {tool}")
        work = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
        try:
            tar = work / "rootfs.tar"
            pkgs = ",".join(sorted(set(PACKAGES) | set(extra)))
            env = {**os.environ, "SOURCE_DATE_EPOCH": EPOCH}
            _run(["mmdebstrap", "--quiet", f"--variant={VARIANT}", f"--include={pkgs}", "--format=tar",
                  f"--architectures={arch}", SUITE, str(tar)], env)
            layout = work / "layout"
            _run(["umoci", "init", "--layout", str(layout)])
            _run(["umoci", "new", "--image", f"{layout}:{TAG}"])
            _run(["umoci", "raw", "add-layer", "--image", f"{layout}:{TAG}", str(tar)])
            _run(["umoci", "config", "--image", f"{layout}:{TAG}", "--config.env", PATH_ENV,
                  "--architecture", arch, "--os", "linux"])
            _run(["umoci", "gc", "--layout", str(layout)])
            tar.unlink()
            os.replace(layout, final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return final, TAG


@pytest.fixture(scope="session")
def debian_layout() -> str:
    """``oci:DIR:TAG`` of the Debian base with :data:`RUN_EXTRA` (libc, libstdc++, libgomp,
    libssl, Python): built once per machine, then taken from the cache. Fails (never skips)
    when mmdebstrap or umoci is missing. Registered for every folder in ``tests/conftest.py``."""
    from support.tools import need

    need("mmdebstrap")
    need("umoci")
    path, tag = debian_base(RUN_EXTRA)
    return f"oci:{path}:{tag}"


def debian_index(extra: Sequence[str] = (), archs: Sequence[str] = ("amd64", "arm64")) -> tuple[Path, str]:
    """``(layout_dir, tag)`` of one OCI layout whose tag is an image index with one manifest per
    architecture of ``archs`` (each the :func:`debian_base` of that architecture, its blobs
    copied byte for byte), as a multi-arch base on a registry is. Cached like the bases."""
    root = _cache_root()
    key = hashlib.sha256(json.dumps([cache_key(extra, a) for a in archs]).encode()).hexdigest()[:16]
    final = root / f"index-{key}"
    if (final / "oci-layout").is_file():
        return final, TAG
    parts = [(a, *debian_base(extra, a)) for a in archs]
    work = Path(tempfile.mkdtemp(prefix=f".index-{key}-", dir=root))
    try:
        (work / "blobs" / "sha256").mkdir(parents=True)
        entries = []
        for arch, layout, tag in parts:
            for blob in (layout / "blobs" / "sha256").iterdir():
                if not (work / "blobs" / "sha256" / blob.name).exists():
                    shutil.copyfile(blob, work / "blobs" / "sha256" / blob.name)
            desc = next(m for m in json.loads((layout / "index.json").read_text())["manifests"]
                        if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag)
            entries.append({"mediaType": desc["mediaType"], "digest": desc["digest"], "size": desc["size"],
                            "platform": {"architecture": arch, "os": "linux"}})
        index = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                            "manifests": entries}, sort_keys=True, separators=(",", ":")).encode()
        digest = hashlib.sha256(index).hexdigest()
        (work / "blobs" / "sha256" / digest).write_bytes(index)
        (work / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
        (work / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.index.v1+json", "digest": f"sha256:{digest}", "size": len(index),
            "annotations": {"org.opencontainers.image.ref.name": TAG}}]}))
        os.replace(work, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final, TAG


if __name__ == "__main__":
    path, tag = debian_base(sys.argv[1:])
    print(f"oci:{path}:{tag}")
