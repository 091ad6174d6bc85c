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
