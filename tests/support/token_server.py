"""A small Docker-registry token server for tests (distribution ``docs/spec/auth/token.md``,
``jwt.md`` and ``oauth.md``), on 127.0.0.1:<free port>, in a thread of the test process.

It owns an ECDSA P-256 key and a self-signed certificate for it (``cert_path``, PEM: the
``rootcertbundle`` of the registry's ``auth: token:`` config). ``GET /token?service=S&scope=...``
checks the ``Authorization: Basic`` credentials against ``users`` (401 when they are wrong;
no credentials give a token with no access, as the spec allows) and answers
``{"token", "access_token", "expires_in", "issued_at"}``; ``POST /token`` is the OAuth2 form
(``grant_type=password`` with ``username``/``password``, or ``grant_type=refresh_token`` with a
refresh token this server issued, ``access_type=offline`` asking for one). The JWT is ES256,
its header carrying the certificate in ``x5c`` (distribution 2.8 ``token.go``
``VerifySigningKey``: x5c chains are verified against the rootcertbundle); its claims are
``iss``, ``sub``, ``aud`` (= the service), ``exp``, ``nbf``, ``iat``, ``jti`` and ``access``:
every action asked for in every ``scope`` (``type:name:action,action``; several scopes per
parameter separated by spaces, or several parameters) for an authenticated user.

``lifetime``: ``expires_in`` in seconds. distribution accepts a token up to 60 s past its
``exp`` (``Leeway``), so ``exp`` is written as ``iat + lifetime - 60``: the registry then
refuses the token exactly ``lifetime`` seconds after it was issued, which lets tests see expiry.
``requests``: what was asked (``TokenRequest``), for assertions on scopes and reuse.
"""

from __future__ import annotations

import base64
import datetime
import json
import secrets
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

LEEWAY = 60  # distribution registry/auth/token/token.go


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class TokenRequest:
    """One request to the token endpoint: ``method``, ``user`` (``None`` = anonymous),
    ``scopes`` (as asked), ``granted`` (False when the credentials were refused), ``grant``
    (``basic``, ``password`` or ``refresh_token``)."""

    method: str
    user: str | None
    scopes: list[str]
    granted: bool
    grant: str = "basic"


@dataclass
class TokenServer:
    """See the module docstring. Start with ``start()`` or ``with TokenServer(...) as ts``."""

    workdir: Path
    users: dict[str, str]
    service: str = "lemonpack-test-registry"
    issuer: str = "lemonpack-test-token-issuer"
    lifetime: int = 300
    requests: list[TokenRequest] = field(default_factory=list)
    #: Repository names never granted to anyone (a source a user may not pull from).
    denied: set[str] = field(default_factory=set)
    #: The next this-many tokens are born expired: the registry refuses them at once, while
    #: their answer still says ``expires_in: lifetime`` (a client's fresh token, refused;
    #: no test has to wait for a real expiry).
    born_expired: int = 0

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lemonpack test token issuer")])
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(days=1))
                     .not_valid_after(now + datetime.timedelta(days=2))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.cert_path = self.workdir / "token-issuer.pem"
        self.cert_path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        self.refresh_tokens: dict[str, str] = {}  # refresh token -> user
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.realm = ""

    # -- tokens -----------------------------------------------------------------------
    def issue(self, user: str | None, scopes: list[str]) -> str:
        """A signed JWT granting ``user`` every action of ``scopes`` (none when anonymous)."""
        access = []
        if user is not None:
            for scope in scopes:
                kind, _, rest = scope.partition(":")
                name, _, actions = rest.rpartition(":")
                if kind and name and name not in self.denied:
                    access.append({"type": kind, "name": name, "actions": [a for a in actions.split(",") if a]})
        now = int(time.time())
        exp = now + self.lifetime - LEEWAY
        if self.born_expired > 0:
            self.born_expired -= 1
            exp = now - LEEWAY - 2  # past the registry's leeway already
        header = {"typ": "JWT", "alg": "ES256",
                  "x5c": [base64.b64encode(self.cert.public_bytes(serialization.Encoding.DER)).decode()]}
        claims = {"iss": self.issuer, "sub": user or "", "aud": self.service, "exp": exp,
                  "nbf": now - 1, "iat": now, "jti": secrets.token_hex(8), "access": access}
        signing_input = (_b64url(json.dumps(header, separators=(",", ":")).encode()) + "."
                         + _b64url(json.dumps(claims, separators=(",", ":")).encode()))
        r, s = decode_dss_signature(self.key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
        return signing_input + "." + _b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big"))

    def _answer(self, user: str | None, scopes: list[str], refresh: bool = False) -> dict:
        token = self.issue(user, scopes)
        body = {"token": token, "access_token": token, "expires_in": self.lifetime,
                "issued_at": datetime.datetime.now(datetime.timezone.utc).isoformat()}
        if refresh and user is not None:
            rt = secrets.token_urlsafe(24)
            self.refresh_tokens[rt] = user
            body["refresh_token"] = rt
        return body

    def _check(self, user: str, password: str) -> bool:
        known = self.users.get(user)
        return known is not None and secrets.compare_digest(known, password)

    # -- HTTP -------------------------------------------------------------------------
    def _handler(self):
        ts = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def _send(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            @staticmethod
            def _scopes(values: list[str]) -> list[str]:
                return [s for v in values for s in v.split(" ") if s]

            def do_GET(self) -> None:  # noqa: N802
                q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                scopes = self._scopes(q.get("scope", []))
                user = None
                auth = self.headers.get("Authorization", "")
                if auth.lower().startswith("basic "):
                    try:
                        name, _, password = base64.b64decode(auth[6:]).decode().partition(":")
                    except ValueError:
                        name, password = "", ""
                    if not ts._check(name, password):
                        ts.requests.append(TokenRequest("GET", name, scopes, False))
                        self._send(401, {"errors": [{"code": "UNAUTHORIZED", "message": "bad credentials"}]})
                        return
                    user = name
                ts.requests.append(TokenRequest("GET", user, scopes, True))
                self._send(200, ts._answer(user, scopes, refresh=q.get("offline_token") == ["true"]))

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                form = urllib.parse.parse_qs(self.rfile.read(length).decode())
                scopes = self._scopes(form.get("scope", []))
                grant = (form.get("grant_type") or [""])[0]
                user = None
                if grant == "password":
                    name, password = (form.get("username") or [""])[0], (form.get("password") or [""])[0]
                    user = name if ts._check(name, password) else None
                elif grant == "refresh_token":
                    user = ts.refresh_tokens.get((form.get("refresh_token") or [""])[0])
                ts.requests.append(TokenRequest("POST", user, scopes, user is not None, grant))
                if user is None:
                    self._send(401, {"error": "invalid_grant"})
                    return
                self._send(200, ts._answer(user, scopes, refresh=form.get("access_type") == ["offline"]))

        return Handler

    def start(self) -> "TokenServer":
        """Serve on 127.0.0.1:<free port>; ``realm`` is ``http://127.0.0.1:PORT/token``."""
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.realm = f"http://127.0.0.1:{self._server.server_address[1]}/token"
        self._thread = threading.Thread(target=self._server.serve_forever, name="token-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "TokenServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
