"""The registry client's transport (lemonpack/registry/transport.py): its retry policy is not spent
on a refused connection or a host that does not resolve, and its short messages never cut a
word."""

from __future__ import annotations

import pytest

from lemonpack.errors import FetchError
from lemonpack.registry import RegistryClient
from lemonpack.registry.transport import short as _short

from support.helpers import FakeClock, closed_port


def test_the_client_does_not_spend_its_retry_policy_on_refused_or_unresolvable():
    for host, waits in ((f"127.0.0.1:{closed_port()}", [0.2]), ("lemonpack-test.invalid", [])):
        client = RegistryClient(host, retries=6, backoff=0.2)
        clock = FakeClock()
        client.transport.sleep = clock.sleep
        with pytest.raises(FetchError):
            client.head_manifest("x/y", "v1")
        assert clock.slept == waits  # refused: one more try after one backoff; unresolvable: none
        assert client.stats.requests <= 2
        client.close()


def test_short_never_cuts_a_word():
    text = " ".join(f"word{i:03d}" for i in range(100))
    out = _short(text)
    assert out.endswith(" …") and len(out) <= 302
    assert all(w in text.split() for w in out[:-2].split())
    assert _short("short message") == "short message"


def test_a_plain_http_registry_loads_no_ca_bundle_but_an_https_url_it_sends_to_is_verified():
    from lemonpack.registry.transport import Transport

    plain = Transport("127.0.0.1:1", insecure=True)
    tls = Transport("registry.example:5000")
    try:
        assert plain.client_for("http://127.0.0.1:1/v2/") is plain.client
        unused = plain.client._transport._pool._ssl_context  # httpx makes one, never used for http
        assert unused.cert_store_stats()["x509_ca"] == 0  # no CA bundle loaded for plain http
        storage = plain.client_for("https://storage.example/blob")  # a redirect to blob storage
        assert storage is not plain.client and storage is plain.client_for("https://other.example/")
        ctx = storage._transport._pool._ssl_context
        assert ctx.verify_mode.name == "CERT_REQUIRED" and ctx.check_hostname
        assert ctx.cert_store_stats()["x509_ca"] > 0
        assert tls.client_for("https://registry.example:5000/v2/") is tls.client
        assert tls.client._transport._pool._ssl_context.verify_mode.name == "CERT_REQUIRED"
    finally:
        plain.close()
        tls.close()
