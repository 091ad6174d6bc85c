"""Registry auth as an ``httpx.Auth``: the answer to a registry's ``401`` challenge (after
go-containerregistry's ``authn`` and ``transport/bearer``; credentials come from a
:class:`lemonpack.registry.auth.Keychain`, the HTTP layer is :mod:`.transport`).

Schemes: anonymous, ``Basic`` (RFC 7617; once the registry asked for it, sent with every
request to it) and ``Bearer``, the distribution token flow (``docs/spec/auth/token.md``,
``oauth.md``): on ``WWW-Authenticate: Bearer realm=...,service=...,scope=...`` a token is asked
for the scopes of the challenge (``GET realm?service=S&scope=A&scope=B`` with the Basic
credentials, or anonymously; with an ``identitytoken``, ``POST realm`` with
``grant_type=refresh_token``), kept per set of scopes and used for the repository the challenge
came from (a push token ``repository:R:pull,push`` serves the pulls of R too; a
cross-repository mount asks ``repository:R:pull,push repository:FROM:pull``). A token is renewed
before it expires (``expires_in``, default 60 s; renewed when less than a quarter of its life,
at most 10 s, is left), and once more when the registry refuses a cached one. Requests to
another host (a blob redirected to storage) carry no credentials.

The token requests go through the same client: :meth:`RegistryAuth.auth_flow` yields them (the
httpx Auth flow: "yield a request, receive its response"), so their connection failures are
the transport's. Every body the flow reads (a token answer, a refused request's body, which
httpx reads before the retry) is bounded by :data:`MAX_AUTH_BODY`. Secrets never appear in a
message or a log line. Synchronous clients only (the flow reads token answers itself).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Generator, Iterator, cast

import httpx

from lemonpack.errors import FetchError, one_line
from lemonpack.registry.auth import Credentials, Keychain
from lemonpack.registry.transport import TRANSIENT_STATUSES, Transient, check_url

log = logging.getLogger(__name__)

#: Largest token-service answer, or body of a refused (401) answer, read.
MAX_AUTH_BODY = 1 << 20
_REPO_PATH_RE = re.compile(r"^/v2/(.+?)/(?:manifests|blobs|tags)/")
_PARAM_RE = re.compile(r'([A-Za-z_][\w-]*)\s*=\s*("(?:[^"\\]|\\.)*"|[^,\s]*)')


@dataclass
class Token:
    """A bearer token for ``scopes`` of ``(realm, service)``; ``expires`` is a
    ``time.monotonic()`` instant (renewal is due at ``renew_at``)."""

    value: str = field(repr=False)
    realm: str
    service: str
    scopes: tuple[str, ...]
    expires: float
    renew_at: float

    def due(self) -> bool:
        """True when it should be renewed before use."""
        return time.monotonic() >= self.renew_at


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """``WWW-Authenticate: Scheme k="v",k2=v2`` -> ``("scheme", {"k": "v", ...})`` (scheme in
    lower case; quoted values unescaped). RFC 9110 section 11.6.1 (one challenge)."""
    scheme, _, rest = header.strip().partition(" ")
    params = {}
    for key, value in _PARAM_RE.findall(rest):
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        params[key.lower()] = value
    return scheme.lower(), params


def normal_scopes(scopes) -> tuple[str, ...]:
    """Token scopes in one spelling (``repository:R:pull,push``: actions sorted, scopes sorted):
    distribution writes a challenge's actions in Go map order, so the same need must find the
    same cached token whichever order it came in."""
    out = []
    for scope in scopes:
        head, sep, actions = scope.rpartition(":")
        out.append(f"{head}{sep}{','.join(sorted(a for a in actions.split(',') if a))}" if sep else scope)
    return tuple(sorted(out))


class _Bounded(httpx.SyncByteStream):
    """A response stream that refuses to yield more than ``limit`` bytes."""

    def __init__(self, inner: httpx.SyncByteStream, limit: int, what: str):
        self.inner, self.limit, self.what = inner, limit, what

    def __iter__(self) -> Iterator[bytes]:
        got = 0
        for chunk in self.inner:
            got += len(chunk)
            if got > self.limit:
                raise FetchError(f"{self.what}: answer larger than {self.limit} bytes; refusing it")
            yield chunk

    def close(self) -> None:
        self.inner.close()


def _bound(resp: httpx.Response, what: str) -> httpx.Response:
    resp.stream = _Bounded(cast(httpx.SyncByteStream, resp.stream), MAX_AUTH_BODY, what)  # a sync client's stream
    return resp


class RegistryAuth(httpx.Auth):
    """Auth for one registry ``host`` (``host[:port]``, as references name it; its requests go to
    ``endpoint``, default ``host``, over ``scheme``), credentials from ``keychain`` looked up by
    ``host`` (once, now: a bad auth file fails here, naming the file).

    ``creds``: the host's credentials found (``None``: anonymous); a request for repository
    ``R`` (``/v2/R/...``) is made with :meth:`creds_for` ``R`` (an auth file's ``host/R``
    key wins over ``host``: containers-auth.json(5)). ``tokens``: the token cache,
    ``(realm, service, scopes) -> Token``. ``token_requests``: token-service requests made.
    Raises from the flow: :class:`FetchError` (credentials needed and none found, the token
    service refused or answered garbage), :class:`~lemonpack.registry.transport.Transient`
    (the token service answered 429/5xx).
    """

    requires_request_body = False
    requires_response_body = False

    def __init__(self, host: str, keychain: Keychain, *, scheme: str = "https", plain_http: bool = False,
                 endpoint: str | None = None):
        self.host, self.keychain, self.scheme, self.plain_http = host, keychain, scheme, plain_http
        self.endpoint = endpoint or host  # where the requests go (registry-1.docker.io for docker.io)
        self.creds: Credentials | None = keychain.resolve(host)
        self._repo_creds: dict[str, Credentials | None] = {"": self.creds}
        url = httpx.URL(f"{scheme}://{self.endpoint}/")
        self._origin = (url.host, url.port)
        self._basic = False  # the registry asked for Basic credentials
        self.tokens: dict[tuple[str, str, tuple[str, ...]], Token] = {}
        self._repo_tokens: dict[str, Token] = {}  # repository ("" for /v2/) -> token in use
        self.token_requests = 0
        self._lock = threading.Lock()

    def use_plain_http(self) -> None:
        """The registry is spoken to in plain http from now on (the transport's loopback
        fallback): relative token realms and the origin credentials go to follow."""
        self.scheme, self.plain_http = "http", True
        url = httpx.URL(f"http://{self.endpoint}/")
        self._origin = (url.host, url.port)

    def creds_for(self, repo: str) -> Credentials | None:
        """The credentials for repository ``repo`` (``""``: the host's, :attr:`creds`), looked
        up in the keychain once per repository."""
        if repo not in self._repo_creds:
            self._repo_creds[repo] = self.keychain.resolve(self.host, repo)
        return self._repo_creds[repo]

    def who(self, url: str | None = None) -> str:
        """Who the requests are made as (to ``url``'s repository when given), for an
        access-denied message (no secret)."""
        m = _REPO_PATH_RE.match(httpx.URL(url).path) if url else None
        creds = self.creds_for(m.group(1)) if m else self.creds
        return f"as {creds.username} (from {creds.source})" if creds else "anonymously"

    def _ours(self, request: httpx.Request) -> bool:
        return (request.url.host, request.url.port) == self._origin

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        """The httpx Auth flow: send ``request`` with what is known to work (Basic, or the
        repository's token, renewed first when due), then answer up to two ``401`` challenges
        (the second: a cached token the registry refused, replaced once)."""
        if not self._ours(request):
            yield request
            return
        m = _REPO_PATH_RE.match(request.url.path)
        repo = m.group(1) if m else ""
        authorization = yield from self._authorization(repo)
        if authorization:
            request.headers["Authorization"] = authorization
        response = yield request
        rounds = 0
        while response.status_code == 401 and rounds < 2:
            # httpx reads a refused answer's body before the next request: bounded
            _bound(response, f"{request.method} {request.url.copy_with(query=None)} (401)")
            authorization = yield from self._answer(response, request.headers.get("Authorization"), repo)
            if authorization is None:
                return
            rounds += 1
            request.headers["Authorization"] = authorization
            response = yield request

    def _authorization(self, repo: str) -> Generator[httpx.Request, httpx.Response, str | None]:
        creds = self.creds_for(repo)
        if self._basic and creds is not None:
            return "Basic " + creds.basic
        token = self._repo_tokens.get(repo)
        if token is None:
            return None
        if token.due():
            token = yield from self._token(token.realm, token.service, token.scopes, repo, fresh=True)
            self._repo_tokens[repo] = token
        return f"Bearer {token.value}"

    def _answer(self, response: httpx.Response, sent: str | None,
                repo: str) -> Generator[httpx.Request, httpx.Response, str | None]:
        """The Authorization to retry with after a 401, or ``None`` (the answer stands)."""
        scheme, params = parse_challenge(response.headers.get("WWW-Authenticate", ""))
        if scheme == "basic":
            creds = self.creds_for(repo)
            if creds is None or not creds.password:
                raise FetchError(f"registry {self.host} needs credentials and none were found for it "
                                 f"({self.keychain.describe()})")
            if sent is not None and sent.startswith("Basic "):
                return None  # the same credentials were just refused
            self._basic = True
            return "Basic " + creds.basic
        if scheme != "bearer":
            return None
        realm = params.get("realm")
        if not realm:
            raise FetchError(f"registry {self.host} asked for a bearer token without a realm")
        realm = realm if "://" in realm else f"{self.scheme}://{realm}"
        service = params.get("service", "")
        scopes = normal_scopes(params.get("scope", "").split())
        cached = self.tokens.get((realm, service, scopes))
        stale = cached is None or cached.due() or sent == f"Bearer {cached.value}"
        token = yield from self._token(realm, service, scopes, repo, fresh=stale)
        self._repo_tokens[repo] = token
        return f"Bearer {token.value}"

    def _token(self, realm: str, service: str, scopes: tuple[str, ...], repo: str, *,
               fresh: bool) -> Generator[httpx.Request, httpx.Response, Token]:
        """A token for ``scopes``: the cached one unless ``fresh``, else one from the token
        service (``GET`` with repository ``repo``'s Basic credentials, or anonymous; ``POST``
        with the refresh-token grant for an identity token, ``oauth.md``), asked through the flow."""
        key = (realm, service, scopes)
        cached = self.tokens.get(key)
        if not fresh and cached is not None and not cached.due():
            return cached
        check_url(realm, self.endpoint, self.plain_http)
        creds = self.creds_for(repo)
        who = f"{creds.username} (from {creds.source})" if creds is not None else "anonymous"
        with self._lock:
            self.token_requests += 1
        if creds is not None and creds.identity_token:
            form = {"grant_type": "refresh_token", "refresh_token": creds.identity_token,
                    "client_id": "lemonpack", "scope": " ".join(scopes)}
            if service:
                form["service"] = service
            request = httpx.Request("POST", realm, data=form)
        else:
            params = tuple(([("service", service)] if service else []) + [("scope", s) for s in scopes])
            headers = {"Authorization": "Basic " + creds.basic} if creds is not None and creds.password else {}
            request = httpx.Request("GET", realm, params=params, headers=headers)
        resp = yield request
        if resp.status_code in TRANSIENT_STATUSES:
            t = Transient(f"token service {realm}: HTTP {resp.status_code}")
            t.retry_after = resp.headers.get("Retry-After")
            raise t
        if resp.status_code in (401, 403):
            raise FetchError(f"registry {self.host}: the token service {one_line(realm)} refused the "
                             f"credentials of {who} (HTTP {resp.status_code}) for {' '.join(scopes) or 'access'}")
        if resp.status_code != 200:
            raise FetchError(f"registry {self.host}: token service {one_line(realm)} answered HTTP "
                             f"{resp.status_code}")
        body = _bound(resp, f"token service {realm}").read()
        try:
            doc = json.loads(body)
            value = doc.get("token") or doc.get("access_token")
            lifetime = float(doc.get("expires_in") or 60)
        except (ValueError, TypeError, AttributeError):
            raise FetchError(f"token service {realm}: the answer is not a token JSON object") from None
        if not isinstance(value, str) or not value:
            raise FetchError(f"token service {realm}: the answer holds no token")
        now = time.monotonic()
        token = Token(value, realm, service, scopes, now + lifetime, now + lifetime - min(10.0, lifetime / 4))
        self.tokens[key] = token
        log.debug("bearer token for %s %s from %s (%s, expires in %.0f s)", service, " ".join(scopes), realm,
                  who, lifetime)
        return token


__all__ = ["RegistryAuth", "Token", "parse_challenge", "normal_scopes", "MAX_AUTH_BODY"]
