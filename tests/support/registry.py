"""A real OCI registry for tests: Debian's ``docker-registry`` (CNCF distribution 2.8) on 127.0.0.1.

``LocalRegistry(workdir)`` writes a config (storage in ``workdir/storage``, address
``127.0.0.1:<free port>``, deletes enabled, logs quiet) and starts ``docker-registry serve`` as a
child process; ``host`` is ``"127.0.0.1:PORT"``. With ``users={"name": "password"}`` it requires
HTTP basic auth (distribution's ``htpasswd`` backend, bcrypt hashes written with the ``bcrypt``
package). With ``token=TokenServer(...)`` (tests/support/token_server.py, started) it requires
bearer tokens from that server (distribution's ``auth: token:`` with realm, service, issuer and
the server's certificate as ``rootcertbundle``). ``stop()`` kills it (SIGKILL when ``hard=True``, to simulate a crash mid-upload);
``start()`` starts it again on the same port and storage. Use it as a context manager or through
the ``registry`` / ``auth_registry`` / ``token_registry`` pytest fixtures (tests/conftest.py).

With ``tls=TlsFiles`` (tests/support/tls.py) it serves https with that certificate (``url`` is
``https://...``), trusted by clients through ``SSL_CERT_FILE``. A plain-http registry is declared
``insecure = true`` in the session's containers-registries.conf(5) (:func:`install_registries_conf`,
called by tests/conftest.py), as its users would say it, so lemonpack, podman and skopeo speak
plain http to it without a TLS attempt; ``declare=False`` leaves it out (the loopback fallback).

Distribution 2.8 has no referrers API (OCI 1.1): signatures use the tag fallback.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from support.helpers import serve_directory
from support.recipes import recipe_doc, write_recipe


REGISTRIES_CONF_ENV = "CONTAINERS_REGISTRIES_CONF"


def install_registries_conf() -> Path:
    """Point ``$CONTAINERS_REGISTRIES_CONF`` (containers-registries.conf(5), read by lemonpack,
    podman and skopeo) at a fresh file for this test session, as a user with a local plain-http
    registry does: every :class:`LocalRegistry` started adds ``[[registry]] location =
    "127.0.0.1:PORT" insecure = true`` to it, so nothing tries TLS on it first. The drop-ins of
    ``/etc/containers/registries.conf.d`` (podman's short-name aliases) are still read. Called
    once, from ``pytest_configure`` (tests/conftest.py)."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="lp-test-registries-")) / "registries.conf"
    path.write_text("# written by the lemonpack test suite: one [[registry]] per local plain-http registry\n")
    os.environ[REGISTRIES_CONF_ENV] = str(path)
    return path


def declare_insecure(host: str) -> None:
    """Add ``host`` as an ``insecure = true`` registry to the session's registries.conf
    (:func:`install_registries_conf`; nothing when it is not installed)."""
    conf = os.environ.get(REGISTRIES_CONF_ENV)
    if conf and Path(conf).name == "registries.conf" and "lp-test-registries-" in conf:
        with open(conf, "a", encoding="utf-8") as f:
            f.write(f'\n[[registry]]\nlocation = "{host}"\ninsecure = true\n')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def need_registry() -> str:
    """The path of ``docker-registry``; fails (never skips) naming the Debian package."""
    path = shutil.which("docker-registry")
    if not path:
        pytest.fail("docker-registry is not installed: apt-get install -y docker-registry (or run scripts/test.sh)")
    return path


class LocalRegistry:
    """A ``docker-registry serve`` child on 127.0.0.1 with its own storage and config (see module doc)."""

    def __init__(self, workdir: Path, *, users: dict[str, str] | None = None, token=None, tls=None,
                 declare: bool = True, access_log: bool = False):
        self.binary = need_registry()
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.storage = self.workdir / "storage"
        self.storage.mkdir(exist_ok=True)
        self.users = dict(users or {})
        self.token_server = token  # a started support.token_server.TokenServer, or None
        if token is not None:
            self.users = token.users
        self.port = _free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.tls = tls  # a support.tls.TlsFiles (server certificate and key, its CA), or None
        self.url = f"{'https' if tls else 'http'}://{self.host}"
        if declare and tls is None:
            declare_insecure(self.host)  # a plain-http registry, said as its users say it
        self.access_log = access_log  # distribution's access log (combined format) into the log file
        self.config = self.workdir / "config.yml"
        self.log = self.workdir / "registry.log"
        self.proc: subprocess.Popen | None = None
        self._write_config()

    def _write_config(self) -> None:
        lines = [
            "version: 0.1",
            "log:",
            "  level: warn",
            "  accesslog:",
            f"    disabled: {'false' if self.access_log else 'true'}",
            "storage:",
            "  filesystem:",
            f"    rootdirectory: {self.storage}",
            "  delete:",
            "    enabled: true",
            "  maintenance:",
            "    uploadpurging:",
            "      enabled: false",
            "http:",
            f"  addr: {self.host}",
            f"  secret: {secrets.token_hex(16)}",
        ]
        if self.tls is not None:
            lines += ["  tls:", f"    certificate: {self.tls.cert}", f"    key: {self.tls.key}"]
        if self.token_server is not None:
            ts = self.token_server
            lines += ["auth:", "  token:", f"    realm: {ts.realm}", f"    service: {ts.service}",
                      f"    issuer: {ts.issuer}", f"    rootcertbundle: {ts.cert_path}"]
        elif self.users:
            import bcrypt  # test extra

            htpasswd = self.workdir / "htpasswd"
            htpasswd.write_text("".join(
                f"{u}:{bcrypt.hashpw(p.encode(), bcrypt.gensalt(4)).decode()}\n" for u, p in self.users.items()))
            lines += ["auth:", "  htpasswd:", "    realm: lemonpack-test", f"    path: {htpasswd}"]
        self.config.write_text("\n".join(lines) + "\n")

    def start(self, timeout: float = 20.0) -> "LocalRegistry":
        """Start the registry (same port and storage as before) and wait until ``/v2/`` answers."""
        if self.proc is not None and self.proc.poll() is None:
            return self
        env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([self.binary, "serve", str(self.config)], stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"docker-registry exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                ctx = self.tls.context() if self.tls is not None else None
                urllib.request.urlopen(f"{self.url}/v2/", timeout=1, context=ctx).close()
                return self
            except urllib.error.HTTPError as e:  # 401 with auth: it is up
                if e.code == 401:
                    return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"docker-registry did not answer on {self.host}: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)

    def stop(self, *, hard: bool = False) -> None:
        """Stop the registry: SIGTERM (SIGKILL with ``hard``, or after 5 s); waits for the process."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGKILL if hard else signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def served_blob_bytes(self) -> int:
        """Blob bytes the registry says it sent so far: the sizes of its access log's ``GET
        .../blobs/sha256:...`` answers (200 or 206), the registry's own count (needs
        ``access_log=True``; combined log format: ``"METHOD URI PROTO" STATUS SIZE``)."""
        import re

        assert self.access_log, "start the registry with access_log=True"
        pattern = re.compile(r'"GET /v2/\S+/blobs/sha256:[0-9a-f]{64} HTTP/[0-9.]+" (?:200|206) (\d+) ')
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return sum(int(m.group(1)) for m in pattern.finditer(text))

    def __enter__(self) -> "LocalRegistry":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __str__(self) -> str:
        return self.host


@pytest.fixture
def registry(tmp_path_factory):
    """A running anonymous ``LocalRegistry``; ``str(registry)`` / ``registry.host`` is ``127.0.0.1:PORT``."""
    with LocalRegistry(tmp_path_factory.mktemp("registry")) as reg:
        yield reg


@pytest.fixture
def auth_registry(tmp_path_factory):
    """A running ``LocalRegistry`` requiring basic auth; user ``lemon`` with password in ``.users``."""
    with LocalRegistry(tmp_path_factory.mktemp("registry-auth"), users={"lemon": secrets.token_hex(12)}) as reg:
        yield reg


@pytest.fixture
def token_registry(tmp_path_factory):
    """A running ``LocalRegistry`` with distribution's bearer-token auth (``auth: token:``): its
    realm is a :class:`support.token_server.TokenServer` on 127.0.0.1 (``.token_server``) that
    checks user ``lemon``'s password (in ``.users``) and signs ES256 JWTs with x5c headers."""
    from support.token_server import TokenServer

    with TokenServer(tmp_path_factory.mktemp("token-server"), users={"lemon": secrets.token_hex(12)}) as ts:
        with LocalRegistry(tmp_path_factory.mktemp("registry-token"), token=ts) as reg:
            yield reg


def lemonpack(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run the real ``lemonpack`` CLI of this tree; returns the completed process."""
    full_env = dict(os.environ, **(env or {}))
    proc = subprocess.run([sys.executable, "-m", "lemonpack.cli", *args], capture_output=True, text=True,
                          env=full_env, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"lemonpack {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def layout_tags(layout: Path) -> dict[str, str]:
    """``{tag: digest}`` of a layout's index.json."""
    index = json.loads((layout / "index.json").read_text())
    return {m["annotations"]["org.opencontainers.image.ref.name"]: m["digest"] for m in index["manifests"]}


@pytest.fixture(scope="session")
def example_layout(tmp_path_factory) -> Path:
    """``lemonpack build --example`` output: an OCI layout with an image index, an image and a recipe artifact."""
    out = tmp_path_factory.mktemp("example") / "layout"
    lemonpack("build", "--example", "-o", str(out), "--no-progress")
    return out


# --- an engine layout to publish: `lemonpack build` of a variant_of recipe ---------------------

def engine_tar(version: str) -> bytes:
    """An engine artifact (a tar of an ``engine`` script printing ``version`` and a ``VERSION`` file)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in (("engine", f"#!/bin/sh\necho engine {version}\n".encode()), ("VERSION", version.encode())):
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = len(data), 0o755, 0
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def variant_layout(tmp: Path, recipe: str, version: str) -> Path:
    """A layout built by `lemonpack build` for a variant_of recipe whose artifact is ``engine_tar(version)``."""
    mirror = tmp / f"mirror-{version}"
    art = mirror / "example.invalid" / "eng" / f"engine-{version}.tar"
    art.parent.mkdir(parents=True)
    art.write_bytes(engine_tar(version))
    doc = recipe_doc(recipe, display_name="oci install test", variant_of="llamacpp", binary="engine",
                     source=f"https://example.invalid/eng/engine-{version}.tar",
                     sha256="sha256:" + hashlib.sha256(art.read_bytes()).hexdigest(), version_policy="pinned")
    recipe_file = write_recipe(tmp / f"{recipe}-{version}.json", doc)
    out = tmp / f"layout-{version}"
    with serve_directory(mirror) as base:
        r = subprocess.run([sys.executable, "-c", "from lemonpack.cli import main; main()", "build", str(recipe_file),
                            "--out", str(out), "--mirror", base, "--no-progress"],
                           env={**os.environ, "LEMONPACK_CACHE_DIR": str(tmp / "build-cache")},
                           capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out
