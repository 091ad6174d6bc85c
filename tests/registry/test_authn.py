"""The registry client's layers on httpx: an upload whose connection drops after the registry
took a chunk asks the session where it stands (distribution-spec "pushing a blob in chunks")
and, the session gone, uploads again in a new one; the bodies the auth flow reads (a token answer, a refused answer) are bounded; a
credential helper is asked as Docker asks it (host on stdin) and a broken one is a one-line
error naming it and the file; requests to another host carry no credentials."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import stat
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lemonpack.errors import FetchError, LemonpackError
from lemonpack.registry import RegistryClient
from lemonpack.registry.auth import Credentials, FileKeychain, load_credentials
from lemonpack.registry.authn import MAX_AUTH_BODY
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


class _Challenger:
    """A registry that answers every request 401 with a Bearer challenge whose realm serves a
    token answer of ``token_size`` bytes, or a 401 body of ``body_size`` bytes."""

    def __init__(self, *, token_size: int = 100, body_size: int = 10):
        owner = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                if self.path.startswith("/token"):
                    body = b'{"token": "' + b"t" * token_size + b'"}'
                    self.send_response(200)
                else:
                    owner.authorizations.append(self.headers.get("Authorization"))
                    body = b"x" * body_size
                    self.send_response(401)
                    self.send_header("WWW-Authenticate",
                                     f'Bearer realm="http://{owner.host}/token",service="s",scope="repository:a/b:pull"')
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_HEAD = do_GET

        self.authorizations: list[str | None] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("what", ["token", "refused"])
def test_the_auth_flow_reads_bounded_bodies(what):
    big = MAX_AUTH_BODY + 10
    srv = _Challenger(token_size=big if what == "token" else 100, body_size=big if what == "refused" else 10)
    try:
        with RegistryClient(srv.host, retries=0) as client:
            with pytest.raises(FetchError, match=f"larger than {MAX_AUTH_BODY} bytes"):
                client.get_manifest("a/b", "v1")
    finally:
        srv.close()


def test_a_refused_fresh_token_is_asked_once_more_then_the_answer_stands():
    srv = _Challenger()
    try:
        with RegistryClient(srv.host, retries=0) as client:
            with pytest.raises(FetchError, match="HTTP 401 .*access denied anonymously"):
                client.get_manifest("a/b", "v1")
            # the first try without a token, then two tokens (the second after the first was refused)
            assert srv.authorizations[0] is None and len(srv.authorizations) == 3
            assert client.token_requests == 2
    finally:
        srv.close()


def _helper(bin_dir: Path, name: str, script: str) -> None:
    exe = bin_dir / f"docker-credential-{name}"
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)


def test_credential_helpers_are_asked_with_the_host_on_stdin(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen = tmp_path / "stdin"
    _helper(bin_dir, "good", f'cat > {seen}; echo \'{{"ServerURL": "x", "Username": "u", "Secret": "s3cret"}}\'\n')
    _helper(bin_dir, "token", 'cat >/dev/null; echo \'{"Username": "<token>", "Secret": "refresh"}\'\n')
    _helper(bin_dir, "none", 'cat >/dev/null; echo "credentials not found in native keychain"; exit 1\n')
    _helper(bin_dir, "broken", 'cat >/dev/null; echo "s3cret in the output"; exit 0\n')
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "nodocker"))
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"credHelpers": {"a.example": "good", "b.example": "token", "c.example": "none",
                                               "d.example": "broken", "e.example": "missing"}}))
    creds = FileKeychain(cfg).resolve("a.example")
    assert (creds.username, creds.password) == ("u", "s3cret") and "docker-credential-good" in creds.source
    assert seen.read_text() == "a.example" and "s3cret" not in repr(creds)
    tok = load_credentials("b.example", cfg)
    assert tok.identity_token == "refresh" and tok.password == ""
    assert load_credentials("c.example", cfg) is None
    with pytest.raises(LemonpackError) as e:
        load_credentials("d.example", cfg)
    assert str(cfg) in str(e.value) and "docker-credential-broken" in str(e.value) and "s3cret" not in str(e.value)
    with pytest.raises(LemonpackError, match="docker-credential-missing is not on PATH"):
        load_credentials("e.example", cfg)


def test_requests_to_another_host_carry_no_credentials():
    """A blob redirected to storage elsewhere: Basic credentials stay with the registry."""
    seen: dict[str, str | None] = {}

    class Storage(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):
            seen["storage"] = self.headers.get("Authorization")
            body = b"blob"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    storage = ThreadingHTTPServer(("127.0.0.1", 0), Storage)
    threading.Thread(target=storage.serve_forever, daemon=True).start()
    target = f"http://localhost:{storage.server_address[1]}/b"

    class Registry(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):
            auth = self.headers.get("Authorization")
            if auth is None:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="r"')
            else:
                seen["registry"] = auth
                self.send_response(307)
                self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()

    reg = ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    threading.Thread(target=reg.serve_forever, daemon=True).start()
    try:
        with RegistryClient(f"127.0.0.1:{reg.server_address[1]}", auth=Credentials("u", "p", source="t")) as client:
            got = bytearray()

            class Out:
                def write(self, b):
                    got.extend(b)

            digest = "sha256:" + hashlib.sha256(b"blob").hexdigest()
            assert client.read_blob("a/b", digest, Out()) == 4
        assert seen["registry"] == "Basic " + base64.b64encode(b"u:p").decode()
        assert seen["storage"] is None
    finally:
        for s in (storage, reg):
            s.shutdown()
            s.server_close()
