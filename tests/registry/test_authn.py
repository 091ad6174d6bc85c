"""The Basic/Bearer challenges as an ``httpx.Auth`` (lemonpack/registry/authn.py): the bodies the
auth flow reads (a token answer, a refused answer) are bounded, a refused fresh token is asked
once more, requests to another host carry no credentials."""

from __future__ import annotations

import base64
import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lemonpack.errors import FetchError
from lemonpack.registry import RegistryClient
from lemonpack.registry.auth import Credentials
from lemonpack.registry.authn import MAX_AUTH_BODY


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


def test_the_same_scopes_in_another_order_are_one_token_key():
    from lemonpack.registry.authn import normal_scopes as _normal_scopes

    assert _normal_scopes(["repository:x/y:push,pull", "repository:a:pull"]) == \
        _normal_scopes(["repository:a:pull", "repository:x/y:pull,push"]) == \
        ("repository:a:pull", "repository:x/y:pull,push")
    assert _normal_scopes(["registry:catalog:*"]) == ("registry:catalog:*",)
