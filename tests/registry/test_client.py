"""The registry client's operations (lemonpack/registry/client.py) against the real
docker-registry: an upload whose connection drops after the registry took a chunk asks the session
where it stands (distribution-spec "pushing a blob in chunks") and, the session gone, uploads
again in a new one."""

from __future__ import annotations

import hashlib
import secrets

import pytest

from lemonpack.registry import RegistryClient

from support.registry_proxy import RegistryProxy


@pytest.mark.slow
def test_a_dropped_patch_asks_the_session_then_uploads_again(registry, tmp_path):
    data = secrets.token_bytes(300_000)
    blob = tmp_path / "blob"
    blob.write_bytes(data)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    repo = f"reg-{secrets.token_hex(3)}/resume"
    with RegistryProxy(registry, cut={"PATCH": {2}}) as proxy:  # the registry keeps chunk 2, we hear nothing
        with RegistryClient(proxy.host, chunk_size=100_000, backoff=0.05) as client:
            assert client.push_blob(repo, blob, digest, len(data)) == digest
            sent = client.stats.bytes_sent
        log = [(e["method"], e["status"]) for e in proxy.log]
    # the session is asked where it stands (distribution 2.8 forgets a session whose ``_state``
    # is behind what it holds: 404), then a new session takes the whole blob
    assert log == [("POST", 202), ("PATCH", 202), ("PATCH", None), ("GET", 404),
                   ("POST", 202), ("PATCH", 202), ("PATCH", 202), ("PATCH", 202), ("PUT", 201)], log
    assert sent == 200_000 + len(data)
    with RegistryClient(registry.host) as client:
        out = tmp_path / "back"
        client.get_blob(repo, digest, out, size=len(data))
    assert out.read_bytes() == data


@pytest.mark.parametrize("header, offset", [
    ("0-0", 0),  # distribution's answer for an empty session: no byte received (and never offset 1)
    ("", 0), ("garbage", 0), ("0-150", 151), ("bytes=0-4095", 4096), ("5-9", 0),
])
def test_the_upload_offset_follows_the_range_rule(header, offset):
    from lemonpack.registry.client import upload_offset

    assert upload_offset(header) == offset


@pytest.mark.slow
@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_a_blob_body_is_read_from_the_socket_after_httpx_hands_over_its_first_piece(
        registry, tls_registry, tls_files, tls, tmp_path, monkeypatch):
    """A blob of several MiB is read through httpx for its first piece only (what h11 buffered
    past the head), then from the socket in reused buffers: every byte arrives once, in order,
    over plain http and TLS alike; the digest is checked over all of them."""
    from lemonpack import httpclient as transport
    from lemonpack.httpclient import BODY_READ, body

    monkeypatch.setattr(transport, "RAW_BODY_MIN", BODY_READ)  # the path of large bodies, on a few MiB
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_files.ca))
    reg = tls_registry if tls else registry
    data = secrets.token_bytes(3 * BODY_READ + 12345)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    repo = f"body-{secrets.token_hex(3)}/blob"
    with RegistryClient(reg.host) as client:
        client.push_blob(repo, data, digest, len(data))
        resp = client.transport.request("GET", f"{repo}/blobs/{digest}", stream=True, follow=True,
                                        headers={"Accept-Encoding": "identity"})
        kinds, got = [], bytearray()
        try:
            for piece in body(resp, 30.0):
                kinds.append(type(piece))
                got += piece
        finally:
            resp.close()
        assert bytes(got) == data
        assert kinds[0] is bytes and memoryview in kinds[1:], kinds  # the socket's pieces came in the buffer
        small = transport.RAW_BODY_MIN
        monkeypatch.setattr(transport, "RAW_BODY_MIN", len(data) + 1)  # a body below the bound: httpx's pieces
        resp = client.transport.request("GET", f"{repo}/blobs/{digest}", stream=True, follow=True,
                                        headers={"Accept-Encoding": "identity"})
        try:
            pieces = list(body(resp, 30.0))
        finally:
            resp.close()
        assert b"".join(pieces) == data and all(type(p) is bytes for p in pieces)
        monkeypatch.setattr(transport, "RAW_BODY_MIN", small)
        out = tmp_path / "blob"
        client.get_blob(repo, digest, out, size=len(data))  # the next request on a new connection
        assert out.read_bytes() == data
        assert client.stats.bytes_received == len(data)  # get_blob counted each byte once


@pytest.mark.slow
def test_a_body_cut_short_on_the_socket_path_resumes_and_verifies(registry, tmp_path, monkeypatch):
    """The proxy sends 2.5 MiB of a 4 MiB blob and closes: the socket path raises httpx's error
    after yielding what came, the download resumes with ``Range`` from there, and the blob is
    whole and verified."""
    from lemonpack import httpclient as transport

    monkeypatch.setattr(transport, "RAW_BODY_MIN", 1 << 20)
    data = secrets.token_bytes(4 << 20)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    repo = f"cut-{secrets.token_hex(3)}/blob"
    with RegistryClient(registry.host) as client:
        client.push_blob(repo, data, digest, len(data))
    with RegistryProxy(registry, drop_blob=(1, (5 << 20) // 2)) as proxy:
        with RegistryClient(proxy.host, backoff=0.01) as client:
            out = tmp_path / "blob"
            client.get_blob(repo, digest, out, size=len(data))
            received = client.stats.bytes_received
        gets = [e for e in proxy.log if e["method"] == "GET"]
    assert out.read_bytes() == data
    assert len(gets) == 2 and received == len(data)  # each byte received once
