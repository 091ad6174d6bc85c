"""A tiny busybox image for container tests, built by ``lemonpack build`` and loaded into podman.

The image holds busybox and a CGI ``.../www/cgi-bin/health`` that answers 503 until a
``ready`` file exists, then 200. It is referenced by digest, named with a random suffix
(other suites use podman at the same time) and removed with :func:`remove_image`. podman
runs here only as root with a containers.conf asking for runc and modest ulimits:
:func:`containers_conf` writes one and the caller sets ``CONTAINERS_CONF``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.tools import CONTAINERS_CONF  # noqa: E402
from support.recipes import recipe_doc, write_recipe

BUSYBOX = Path("/bin/busybox")


def podman_usable() -> str | None:
    """Why podman cannot be used here (None: it can)."""
    if os.geteuid() != 0:
        return "podman works here only as root"
    for tool in ("podman", "runc"):
        if not shutil.which(tool):
            return f"{tool} not installed"
    if not BUSYBOX.is_file():
        return "busybox-static not installed"
    return None


def containers_conf(directory: Path) -> Path:
    """Write the containers.conf podman needs here; return its path."""
    path = directory / "containers.conf"
    path.write_text(CONTAINERS_CONF)
    return path


@dataclass(frozen=True)
class TestImage:
    """An image that serves the health CGI with busybox httpd.

    ``ref`` is ``name@sha256:...``; ``shell`` the argv prefix running a shell command in it
    (``/bin/sh -c`` for the imported rootfs; ``sh -c`` after the busybox Entrypoint of a
    ``lemonpack build`` image); ``bb`` the busybox path inside; ``www`` the document root;
    ``ready`` the file whose presence turns the CGI from 503 to 200; ``source`` how it was made.
    """

    ref: str
    shell: tuple[str, ...]
    bb: str
    www: str
    ready: str
    source: str
    tag: str = ""  # name:tag in podman's storage (what :func:`remove_image` removes)

    def serve_argv(self, name: str, port: int, delay: float = 1.0, runtime: str = "podman",
                   host: str = "127.0.0.1") -> tuple[str, ...]:
        """A seed-13.2-shaped ``podman run`` argv serving the CGI on ``host:port``; it answers
        503 for ``delay`` seconds."""
        return (runtime, "run", "--rm", "--name", name, "--network", "host", self.ref, *self.shell,
                self.command(port, delay, host))

    def command(self, port, delay: float = 1.0, host: str = "127.0.0.1") -> str:
        """The shell command (``port``/``host`` may be tokens such as ``{port}``)."""
        bb = self.bb
        return (f"({bb} sleep {delay}; {bb} touch {self.ready}) & "
                f"exec {bb} httpd -f -p {host}:{port} -h {self.www}")


def _health_cgi(bb: str, ready: str) -> bytes:
    return (f"#!{bb} sh\n"
            f"if [ -f {ready} ]; then\n"
            "  printf 'Status: 200 OK\\r\\nContent-Type: text/plain\\r\\n\\r\\nok\\n'\n"
            "else\n"
            "  printf 'Status: 503 Service Unavailable\\r\\nContent-Type: text/plain\\r\\n\\r\\nloading\\n'\n"
            "fi\n").encode()


def lemonpack_built_image(directory: Path, env: dict, recipe: str = "bb-artifact",
                          image_name: str = "localhost/lemonpack-test-built") -> TestImage:
    """An image built by ``lemonpack build`` from a variant_of recipe whose artifact is a tar of
    busybox (+ the CGI), served from a 127.0.0.1 HTTP server through ``--mirror``, then loaded
    with ``skopeo copy oci:DIR:TAG containers-storage:localhost/NAME:TAG``. The image's
    digest is the one ``lemonpack build`` wrote into the layout."""
    import hashlib
    import io
    import json
    import sys

    from support.helpers import serve_directory

    prefix = f"/opt/lemonpack/{recipe}"
    # The ready file goes to /dev/shm (a tmpfs podman mounts world-writable): `lemonpack build`
    # images run as a non-root user (65532), who cannot write below /opt/lemonpack.
    bb, ready = f"{prefix}/busybox", f"/dev/shm/{recipe}-ready"
    mirror_root = directory / "mirror"
    art = mirror_root / "example.invalid" / "bb" / "busybox.tar"
    art.parent.mkdir(parents=True, exist_ok=True)
    data = BUSYBOX.read_bytes()
    cgi = _health_cgi(bb, ready)
    with tarfile.open(art, "w", format=tarfile.PAX_FORMAT) as tf:
        for name, payload, kind in (("www", None, tarfile.DIRTYPE), ("www/cgi-bin", None, tarfile.DIRTYPE),
                                    ("busybox", data, tarfile.REGTYPE), ("www/cgi-bin/health", cgi, tarfile.REGTYPE)):
            ti = tarfile.TarInfo(name)
            ti.type, ti.mode, ti.mtime = kind, 0o755, 0
            ti.size = len(payload) if payload is not None else 0
            tf.addfile(ti, io.BytesIO(payload) if payload is not None else None)
    sha = hashlib.sha256(art.read_bytes()).hexdigest()
    recipe_file = write_recipe(directory / f"{recipe}.json", recipe_doc(
        recipe, display_name="busybox artifact", variant_of="llamacpp", binary="busybox",
        source="https://example.invalid/bb/busybox.tar", sha256=f"sha256:{sha}", version_policy="pinned"))
    layout = directory / "layout"
    with serve_directory(mirror_root) as base:
        r = subprocess.run([sys.executable, "-c", "from lemonpack.cli import main; main()", "build", str(recipe_file),
                            "--out", str(layout), "--mirror", base, "--no-progress", "--json"],
                           env={**env, "LEMONPACK_CACHE_DIR": str(directory / "cache")},
                           capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"lemonpack build failed ({r.returncode}): {r.stderr}{r.stdout}")
    result = json.loads(r.stdout)
    target = next(t for t in result["targets"] if t["kind"] == "image")
    tag = target["tag"]
    name = f"{image_name}-{os.urandom(4).hex()}:{tag.replace('.', '-')}"  # unique: other suites use podman too
    subprocess.run(["skopeo", "copy", f"oci:{layout}:{tag}", f"containers-storage:{name}"], env=env, check=True,
                   capture_output=True, timeout=300)
    return TestImage(f"{name.rsplit(':', 1)[0]}@{target['digest']}", ("sh", "-c"), bb, f"{prefix}/www", ready,
                     "lemonpack build", name)


def test_image(directory: Path, env: dict) -> TestImage:
    """The image for container tests, always built by ``lemonpack build`` (what users run);
    raises RuntimeError naming what is missing when it cannot be built (never a fallback to
    an image lemonpack did not build). Remove it with :func:`remove_image`."""
    if shutil.which("skopeo") is None:
        raise RuntimeError("skopeo is not installed (apt-get install skopeo): the container tests load the "
                           "image `lemonpack build` wrote with it")
    return lemonpack_built_image(directory, env)


def remove_image(image: TestImage, env: dict | None = None) -> None:
    """``podman rmi -f`` the image's tag, so the suite leaves nothing in podman's storage."""
    ref = image.tag or image.ref
    r = subprocess.run(["podman", "rmi", "-f", ref], env=env, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"podman rmi -f {ref} failed: {r.stderr.strip()}")


@pytest.fixture(scope="module")
def podman_conf(tmp_path_factory):
    """podman usable with the suite's containers.conf, for one test module: fails (never skips)
    when podman cannot run here; sets ``CONTAINERS_CONF`` in ``os.environ`` (the runtime and
    podman inherit it) and restores it afterwards. Yields ``{"dir": Path, "env": dict}``:
    a fresh directory and the environment to pass to subprocesses."""
    why = podman_usable()
    if why:
        pytest.fail(f"podman cannot run here: {why} (scripts/test.sh installs podman runc busybox-static)")
    d = tmp_path_factory.mktemp("podman")
    old = os.environ.get("CONTAINERS_CONF")
    os.environ["CONTAINERS_CONF"] = str(containers_conf(d))
    try:
        yield {"dir": d, "env": dict(os.environ)}
    finally:
        if old is None:
            os.environ.pop("CONTAINERS_CONF", None)
        else:
            os.environ["CONTAINERS_CONF"] = old


@pytest.fixture(scope="module")
def podman_env(podman_conf):
    """:func:`podman_conf` plus the suite's test image (:func:`test_image`, built by ``lemonpack
    build``), removed from podman's storage at the end. Yields ``{"dir", "env", "image"}``."""
    d = podman_conf["dir"]
    image = None
    try:
        image = test_image(d, dict(os.environ))
        assert image.source == "lemonpack build"
        yield {**podman_conf, "image": image}
    finally:
        if image is not None:
            remove_image(image)  # the suite leaves nothing in podman's storage


test_image.__test__ = False  # not a pytest test
TestImage.__test__ = False

