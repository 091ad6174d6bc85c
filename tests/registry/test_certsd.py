"""containers-certs.d(5) (lemonpack/registry/certsd.py): which directory a registry's TLS files
come from, what in it is read, and the refusals containers/image makes (a client certificate
without its key, a key without its certificate). The end-to-end proof, a TLS registry trusted
only through its certs.d CA, is in tests/scenarios/test_registry_tls.py."""

from __future__ import annotations

import ssl

import pytest

from lemonpack.errors import ConfigError
from lemonpack.registry.certsd import find_certs_dir, load_certs_dir, roots, tls_context
from support.tls import make_tls


def test_the_first_root_holding_the_host_wins_in_containers_images_order(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert roots()[0] == tmp_path / "home" / ".config" / "containers" / "certs.d"
    assert [str(r) for r in roots()[1:]] == ["/etc/containers/certs.d", "/etc/docker/certs.d"]
    user, system = tmp_path / "user", tmp_path / "system"
    (system / "reg.example:5000").mkdir(parents=True)
    assert find_certs_dir("reg.example:5000", (user, system)) == system / "reg.example:5000"
    (user / "reg.example:5000").mkdir(parents=True)
    assert find_certs_dir("reg.example:5000", (user, system)) == user / "reg.example:5000"
    assert find_certs_dir("reg.example", (user, system)) is None  # the port is part of the name
    assert tls_context("reg.example", (user, system)) is None  # no directory: httpx's own default


def test_cas_and_client_pairs_are_read_in_order_and_an_orphan_is_refused(tmp_path):
    d = tmp_path / "reg.example"
    d.mkdir()
    for name in ("b.crt", "a.crt", "client.cert", "client.key", "notes.txt"):
        (d / name).write_text("x")
    found = load_certs_dir(d)
    assert found.cas == (d / "a.crt", d / "b.crt") and found.pairs == ((d / "client.cert", d / "client.key"),)
    (d / "lonely.key").write_text("x")
    with pytest.raises(ConfigError, match=r"key .*lonely\.key has no client certificate .*lonely\.cert"):
        load_certs_dir(d)
    (d / "lonely.key").unlink()
    (d / "other.cert").write_text("x")
    with pytest.raises(ConfigError, match=r"client certificate .*other\.cert has no key .*other\.key"):
        load_certs_dir(d)


def test_the_context_trusts_the_directory_cas_and_carries_the_client_certificate(tmp_path, monkeypatch):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    tls = make_tls(tmp_path / "tls")
    d = tmp_path / "root" / "127.0.0.1:5000"
    d.mkdir(parents=True)
    (d / "ca.crt").write_bytes(tls.ca.read_bytes())
    (d / "client.cert").write_bytes(tls.cert.read_bytes())
    (d / "client.key").write_bytes(tls.key.read_bytes())
    ctx = tls_context("127.0.0.1:5000", (tmp_path / "root",))
    assert isinstance(ctx, ssl.SSLContext) and ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    subjects = [dict(x[0] for x in c["subject"]).get("commonName") for c in ctx.get_ca_certs()]
    assert "lemonpack test CA" in subjects and len(subjects) > 1  # the usual bundle is kept beside it
    (d / "ca.crt").write_text("not a certificate")
    with pytest.raises(ConfigError, match=r"CA file .*ca\.crt cannot be loaded"):
        tls_context("127.0.0.1:5000", (tmp_path / "root",))
