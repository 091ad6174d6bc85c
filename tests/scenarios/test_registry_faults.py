"""Faults retried correctly (issue 25, "What to build" 4), each against the real docker-registry
behind the fault proxy (tests/support/registry_proxy.py): a 5xx or 429 on each method, a 416 on
an upload, a download dropped mid-blob, a stall, a blob behind a redirect. Every run ends with
the image pulled back and verified (digests and sizes checked by the client)."""

from __future__ import annotations

import hashlib
import json
import secrets
from pathlib import Path

import pytest

from lemonpack.oci.reference import parse_registry_reference
from lemonpack.registry import RegistryClient
from lemonpack.registry.transfer import publish_layout, pull_layout
from support.registry_proxy import RegistryProxy

LAYER = 300_000


def one_layer_layout(out: Path, size: int = LAYER) -> tuple[str, bytes]:
    """An image layout with one random layer of ``size`` bytes, tagged ``v1``: (manifest digest, layer)."""
    blobs = out / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(data: bytes, media_type: str) -> dict:
        d = hashlib.sha256(data).hexdigest()
        (blobs / d).write_bytes(data)
        return {"mediaType": media_type, "digest": f"sha256:{d}", "size": len(data)}

    layer_bytes = secrets.token_bytes(size)
    layer = put(layer_bytes, "application/vnd.oci.image.layer.v1.tar+gzip")
    config = put(json.dumps({"architecture": "amd64", "os": "linux",
                             "rootfs": {"type": "layers", "diff_ids": [layer["digest"]]}}).encode(),
                 "application/vnd.oci.image.config.v1+json")
    manifest = put(json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                               "config": config, "layers": [layer]}).encode(),
                   "application/vnd.oci.image.manifest.v1+json")
    manifest["annotations"] = {"org.opencontainers.image.ref.name": "v1"}
    (out / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    (out / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [manifest]}))
    return manifest["digest"], layer_bytes


def client(host: str, **kw) -> RegistryClient:
    return RegistryClient(host, backoff=0.01, **kw)


def pull_back(registry, repo: str, tmp_path: Path) -> Path:
    """Pull repo:v1 straight from the registry (no proxy): verified by the client."""
    out = tmp_path / "back"
    with client(registry.host) as c:
        pull_layout(parse_registry_reference(f"{registry.host}/{repo}:v1"), out, c)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("status", [500, 503, 429])
@pytest.mark.parametrize("method", ["HEAD", "POST", "PATCH", "PUT"])
def test_a_transient_answer_to_a_push_request_is_retried(registry, tmp_path, method, status):
    digest, layer = one_layer_layout(tmp_path / "layout")
    with RegistryProxy(registry, fail={method: {1: status}}) as proxy, client(proxy.host) as c:
        res = publish_layout(tmp_path / "layout", parse_registry_reference(f"{proxy.host}/faults/push:v1"), c)
    assert res.pushed[0].digest == digest
    faulted = [e for e in proxy.requests(method) if e["status"] == status]
    assert len(faulted) == 1, proxy.log  # the fault happened, and once
    if method == "PATCH":  # the retry sends the blob from its first byte (an empty session is Range 0-0)
        ranges = [p["content_range"] for p in proxy.requests("PATCH")]
        assert ranges[0] == ranges[1] and ranges[0].startswith("0-") and ranges[-1] == f"0-{LAYER - 1}", ranges
    back = pull_back(registry, "faults/push", tmp_path)
    assert layer in [p.read_bytes() for p in (back / "blobs" / "sha256").iterdir() if p.stat().st_size == LAYER]


@pytest.mark.slow
@pytest.mark.parametrize("status", [500, 503, 429])
def test_a_transient_answer_to_a_pull_request_is_retried(registry, tmp_path, status):
    digest, _layer = one_layer_layout(tmp_path / "layout")
    with client(registry.host) as c:
        publish_layout(tmp_path / "layout", parse_registry_reference(f"{registry.host}/faults/pull:v1"), c)
    for n in (1, 2, 3):  # the manifest GET, the config GET, the layer GET
        with RegistryProxy(registry, fail={"GET": {n: status}}) as proxy, client(proxy.host) as c:
            got = pull_layout(parse_registry_reference(f"{proxy.host}/faults/pull:v1"), tmp_path / f"out{n}", c)
        assert got.digest == digest and got.bytes > LAYER
        assert [e["status"] for e in proxy.requests("GET")].count(status) == 1


@pytest.mark.slow
def test_a_416_on_an_upload_starts_a_new_session(registry, tmp_path):
    digest, _layer = one_layer_layout(tmp_path / "layout")
    with RegistryProxy(registry, fail={"PATCH": {1: 416}}) as proxy, client(proxy.host) as c:
        res = publish_layout(tmp_path / "layout", parse_registry_reference(f"{proxy.host}/faults/range:v1"), c)
    assert res.pushed[0].digest == digest
    posts = [e for e in proxy.requests("POST") if "/blobs/uploads/" in e["path"]]
    assert len(posts) == 3, proxy.log  # the config's session, the layer's first and its new one
    pull_back(registry, "faults/range", tmp_path)


@pytest.mark.slow
def test_a_download_dropped_mid_blob_resumes_from_the_bytes_received(registry, tmp_path):
    digest, layer = one_layer_layout(tmp_path / "layout")
    with client(registry.host) as c:
        publish_layout(tmp_path / "layout", parse_registry_reference(f"{registry.host}/faults/drop:v1"), c)
    cut = 123_457
    with RegistryProxy(registry, drop_blob=(2, cut)) as proxy, client(proxy.host) as c:
        got = pull_layout(parse_registry_reference(f"{proxy.host}/faults/drop:v1"), tmp_path / "out", c)
        received = c.stats.bytes_received
    assert got.digest == digest
    layer_gets = [e for e in proxy.requests("GET", "/blobs/") if e["status"] in ("dropped", 206, 200)]
    assert [e["status"] for e in layer_gets][-2:] == ["dropped", 206], proxy.log
    assert layer_gets[-1]["range"] == f"bytes={cut}-"
    manifest_and_config = received - LAYER
    assert 0 < manifest_and_config < 2000  # each layer byte received (and hashed) once
    blob = tmp_path / "out" / "blobs" / "sha256" / hashlib.sha256(layer).hexdigest()
    assert blob.read_bytes() == layer


@pytest.mark.slow
def test_a_stalled_request_times_out_and_is_retried(registry, tmp_path):
    digest, _layer = one_layer_layout(tmp_path / "layout")
    with RegistryProxy(registry, stall={"HEAD": 3.0}) as proxy, client(proxy.host, timeout=1.0) as c:
        res = publish_layout(tmp_path / "layout", parse_registry_reference(f"{proxy.host}/faults/stall:v1"), c)
    assert res.pushed[0].digest == digest
    heads = proxy.requests("HEAD")
    assert len(heads) >= 2 and heads[0]["path"] == heads[1]["path"]  # the stalled one asked again


@pytest.mark.slow
def test_a_blob_behind_a_redirect_is_followed_and_verified(registry, tmp_path):
    digest, layer = one_layer_layout(tmp_path / "layout")
    with client(registry.host) as c:
        publish_layout(tmp_path / "layout", parse_registry_reference(f"{registry.host}/faults/redirect:v1"), c)
    with RegistryProxy(registry, redirect_blobs=True) as proxy, client(proxy.host) as c:
        got = pull_layout(parse_registry_reference(f"{proxy.host}/faults/redirect:v1"), tmp_path / "out", c)
    assert got.digest == digest
    assert [e["status"] for e in proxy.requests("GET", "/blobs/")].count(307) == 2
    assert len([e for e in proxy.log if e["path"].startswith("/storage/")]) == 2
    assert (tmp_path / "out" / "blobs" / "sha256" / hashlib.sha256(layer).hexdigest()).read_bytes() == layer


@pytest.mark.slow
def test_a_blob_another_repository_holds_is_mounted_not_uploaded(registry, tmp_path, monkeypatch):
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(tmp_path / "cache"))
    digest, _layer = one_layer_layout(tmp_path / "layout")
    with client(registry.host) as c:
        first = publish_layout(tmp_path / "layout", parse_registry_reference(f"{registry.host}/team/one:v1"), c)
    assert first.blobs_uploaded == 2
    with RegistryProxy(registry) as proxy, client(proxy.host) as c:  # the proxy's host: nothing known there
        publish_layout(tmp_path / "layout", parse_registry_reference(f"{proxy.host}/team/two:v1"), c)
        assert proxy.requests("POST") and not any(e["mount"] for e in proxy.requests("POST"))
    with client(registry.host) as c:
        second = publish_layout(tmp_path / "layout", parse_registry_reference(f"{registry.host}/team/three:v1"), c)
    assert (second.blobs_mounted, second.blobs_uploaded, second.bytes_sent) == (2, 0, 0)
    assert second.pushed[0].digest == digest
    pull_back(registry, "team/three", tmp_path)


@pytest.mark.slow
def test_the_registrys_chunk_minimum_is_honoured(registry, tmp_path):
    one_layer_layout(tmp_path / "layout")
    for chunk_min, sizes in ((None, [100_000, 100_000, 100_000]), (250_000, [250_000, 50_000])):
        with RegistryProxy(registry, chunk_min=chunk_min) as proxy, client(proxy.host, chunk_size=100_000) as c:
            publish_layout(tmp_path / "layout", parse_registry_reference(f"{proxy.host}/faults/chunks-{chunk_min or 0}:v1"),
                           c, remember=False)
        ranges = [e["content_range"] for e in proxy.requests("PATCH")][1:]  # the config's own PATCH first
        assert [int(r.split("-")[1]) - int(r.split("-")[0]) + 1 for r in ranges] == sizes, ranges
