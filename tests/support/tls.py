"""TLS for test servers: a throw-away CA and a server certificate it signs, made with the real
``openssl`` CLI, and a ``docker-registry`` serving TLS with them.

``make_tls(dir, names=("127.0.0.1", "localhost"))`` writes ``ca.crt``/``ca.key`` and
``server.crt``/``server.key`` (subjectAltName: every name, IPs as ``IP:``), returning
:class:`TlsFiles`. The CA is trusted the way users trust one, through ``SSL_CERT_FILE`` (httpx
honours it with ``trust_env``, which the registry transport sets; skopeo and curl read it too):
``files.env()``. Fixtures: ``tls_files`` (a CA and a certificate for 127.0.0.1/localhost) and
``tls_registry`` (a :class:`support.registry.LocalRegistry` serving https with them; not
declared insecure).
"""

from __future__ import annotations

import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.tools import need


@dataclass(frozen=True)
class TlsFiles:
    """A CA (``ca``, ``ca_key``) and a server certificate it signed (``cert``, ``key``)."""

    ca: Path
    ca_key: Path
    cert: Path
    key: Path

    def env(self) -> dict[str, str]:
        """``{"SSL_CERT_FILE": ca}``: the environment that trusts this CA."""
        return {"SSL_CERT_FILE": str(self.ca)}

    def context(self) -> ssl.SSLContext:
        """A client context trusting only this CA."""
        return ssl.create_default_context(cafile=str(self.ca))


def make_tls(directory: Path, names: tuple[str, ...] = ("127.0.0.1", "localhost")) -> TlsFiles:
    """A CA and a server certificate for ``names`` under ``directory`` (see the module doc)."""
    need("openssl")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    ca, ca_key, cert, key, csr = (d / n for n in ("ca.crt", "ca.key", "server.crt", "server.key", "server.csr"))

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca), "-days", "2",
        "-subj", "/CN=lemonpack test CA")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={names[0]}")
    san = ",".join(f"IP:{n}" if n.replace(".", "").isdigit() or ":" in n else f"DNS:{n}" for n in names)
    ext = d / "san.ext"
    ext.write_text(f"subjectAltName={san}\n")
    run("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial", "-out", str(cert),
        "-days", "2", "-extfile", str(ext))
    return TlsFiles(ca, ca_key, cert, key)


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory) -> TlsFiles:
    """A CA and a server certificate for 127.0.0.1 and localhost."""
    return make_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def tls_registry(tmp_path_factory, tls_files):
    """A running ``LocalRegistry`` serving https with :func:`tls_files`' certificate (``.tls``);
    it is not declared insecure: clients trust it through ``SSL_CERT_FILE``."""
    from support.registry import LocalRegistry

    with LocalRegistry(tmp_path_factory.mktemp("registry-tls"), tls=tls_files) as reg:
        yield reg
