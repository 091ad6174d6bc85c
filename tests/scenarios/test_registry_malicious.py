"""A registry that lies (fake server on 127.0.0.1): every lie is refused, nothing is written."""

from __future__ import annotations

import hashlib
import http.server
import json
import secrets
import threading

import pytest

from lemonpack.oci.reference import parse_registry_reference

from lemonpack.registry import RegistryClient
from lemonpack.registry.transfer import publish_layout
from support.registry import lemonpack

GOOD_BLOB = b"layer bytes " * 100
GOOD = "sha256:" + hashlib.sha256(GOOD_BLOB).hexdigest()
EMPTY = b"{}"
EMPTY_D = "sha256:" + hashlib.sha256(EMPTY).hexdigest()


INDEX = "application/vnd.oci.image.index.v1+json"
#: An index chain deeper than Python's recursion limit: index 0 -> index 1 -> ... -> the manifest.
DEPTH = 1200


def _chain() -> tuple[dict[str, bytes], bytes]:
    """``({digest: document}, top document)`` of :data:`DEPTH` indexes over the manifest."""
    docs: dict[str, bytes] = {}
    child, child_type = _manifest(), "application/vnd.oci.image.manifest.v1+json"
    for _ in range(DEPTH):
        digest = "sha256:" + hashlib.sha256(child).hexdigest()
        docs[digest] = child
        child = json.dumps({"schemaVersion": 2, "mediaType": INDEX,
                            "manifests": [{"mediaType": child_type, "digest": digest, "size": len(child)}]}).encode()
        child_type = INDEX
    docs["sha256:" + hashlib.sha256(child).hexdigest()] = child
    return docs, child


def _manifest(size=len(GOOD_BLOB)):
    return json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "artifactType": "application/vnd.test",
                       "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": EMPTY_D, "size": 2},
                       "layers": [{"mediaType": "application/octet-stream", "digest": GOOD, "size": size}]}).encode()


class Liar(http.server.BaseHTTPRequestHandler):
    """Answers /v2/<repo>/manifests/<ref> and blobs according to ``server.mode``."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall each

    def log_message(self, *a):
        pass

    def _send(self, status, body=b"", headers=(), length=None):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self):  # noqa: N802
        self.do_GET()

    def do_GET(self):  # noqa: N802
        mode = self.server.mode
        manifest = _manifest()
        real = "sha256:" + hashlib.sha256(manifest).hexdigest()
        if "/manifests/" in self.path:
            if mode == "deep-index":
                docs, top = self.server.chain
                ref = self.path.rsplit("/", 1)[1]
                body = top if ref == "v1" else docs.get(ref)
                if body is None:
                    return self._send(404)
                kind = json.loads(body)["mediaType"]
                return self._send(200, body, [("Content-Type", kind),
                                              ("Docker-Content-Digest", "sha256:" + hashlib.sha256(body).hexdigest())])
            if mode == "manifest-digest":
                other = _manifest(size=1)  # another document than the one asked for
                return self._send(200, other, [("Content-Type", "application/vnd.oci.image.manifest.v1+json"),
                                               ("Docker-Content-Digest", real)])
            if mode == "endless-manifest":
                self.send_response(200)
                self.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
                self.end_headers()
                try:
                    while True:
                        self.wfile.write(b" " * 65536)
                except OSError:
                    return
            return self._send(200, manifest, [("Content-Type", "application/vnd.oci.image.manifest.v1+json"),
                                              ("Docker-Content-Digest", real)])
        if self.path.endswith(EMPTY_D):
            return self._send(200, EMPTY)
        if "/blobs/" in self.path:
            if mode == "blob-hash":
                return self._send(200, b"LAYER BYTES " * 100)
            if mode == "blob-size":
                return self._send(200, GOOD_BLOB + b"extra")
            if mode == "endless-blob":
                self.send_response(200)
                self.end_headers()
                try:
                    while True:
                        self.wfile.write(GOOD_BLOB)
                except OSError:
                    return
            return self._send(200, GOOD_BLOB)
        self._send(404)


@pytest.fixture
def liar():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Liar)
    srv.daemon_threads = True
    srv.mode = "honest"
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def test_honest_fake_registry_pulls(liar, tmp_path):
    host = f"127.0.0.1:{liar.server_address[1]}"
    lemonpack("pull", f"{host}/x/y:v1", "--out", str(tmp_path / "ok"))
    assert (tmp_path / "ok" / "blobs" / "sha256" / GOOD.split(":")[1]).read_bytes() == GOOD_BLOB


@pytest.mark.parametrize("mode,code,words", [
    ("manifest-digest", 3, "sha256 mismatch"),
    ("endless-manifest", 4, "larger than"),
    ("blob-hash", 3, "sha256 mismatch"),
    ("blob-size", 3, "size"),
    ("endless-blob", 3, "size"),
])
def test_lies_are_refused_and_nothing_is_written(liar, tmp_path, mode, code, words):
    liar.mode = mode
    host = f"127.0.0.1:{liar.server_address[1]}"
    manifest_digest = "sha256:" + hashlib.sha256(_manifest()).hexdigest()
    ref = f"{host}/x/y@{manifest_digest}" if mode == "manifest-digest" else f"{host}/x/y:v1"
    r = lemonpack("pull", ref, "--out", str(tmp_path / "out"), check=False)
    assert r.returncode == code, r.stderr
    assert words in r.stderr
    assert list(tmp_path.iterdir()) == []  # no layout, no temp directory, no partial blob


@pytest.mark.slow
def test_an_index_chain_deeper_than_the_recursion_limit_pulls_and_publishes(liar, registry, tmp_path):
    """Manifests are walked with a stack, not recursion: a 1,200-deep index chain pulls, and
    the pulled layout publishes (children first) to a real registry."""
    liar.mode, liar.chain = "deep-index", _chain()
    host = f"127.0.0.1:{liar.server_address[1]}"
    r = lemonpack("pull", f"{host}/x/y:v1", "--out", str(tmp_path / "deep"), check=False)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert (tmp_path / "deep" / "blobs" / "sha256" / GOOD.split(":")[1]).read_bytes() == GOOD_BLOB
    assert len(list((tmp_path / "deep" / "blobs" / "sha256").iterdir())) == DEPTH + 3  # indexes, manifest, 2 blobs
    repo = f"deep/chain-{secrets.token_hex(3)}"
    with RegistryClient(registry.host) as client:
        res = publish_layout(tmp_path / "deep", parse_registry_reference(f"{registry.host}/{repo}:v1"), client)
    assert res.manifests_sent == DEPTH + 2  # DEPTH indexes and the manifest, then the tag
    assert res.pushed[0].digest == "sha256:" + hashlib.sha256(liar.chain[1]).hexdigest()
