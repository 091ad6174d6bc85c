"""A verifying client for the OCI distribution API (v2), on oras' HTTP layer.

Every request goes through the ``requests`` session of an ``oras.provider.Registry``
(oras-py 0.2.x). oras' higher calls are not used, and this is why:

- ``upload_manifest`` takes a ``dict`` and sends ``json=manifest`` (re-serialised: the pushed
  digest would not be the local one); ``get_manifest`` returns ``response.json()`` (the bytes,
  hence the digest, are lost);
- ``put_upload`` reads the whole blob into memory, ``download_blob`` checks no digest, and
  ``do_request`` retries every exception 5 times with sleeps of 3 to 83 seconds, replaying a
  consumed body, and answers a ``Basic`` challenge by asking a token realm that is not a URL;
- ``TokenAuth.request_token`` returns the bare token (its ``expires_in`` is lost, so an expired
  token is only found out by a refused request, possibly mid-upload), sends several scopes as
  one space-joined ``scope`` parameter (the spec repeats the parameter), keeps one token for
  every repository, and has no OAuth2 refresh-token grant for Docker's ``identitytoken``.

So this module keeps oras' session and does the rest itself, byte for byte:
manifests are sent and received as bytes; every digest the registry answers
(``Docker-Content-Digest``, a manifest body, a blob body) is checked against ours; a body is
never read past its expected size (blobs) or 4 MiB (manifests, distribution's own limit);
downloads go to a temp file renamed into place only once verified.

Transport: ``https``, or plain ``http`` for a loopback host (127.0.0.0/8, ::1, localhost) or
with ``insecure=True``. Auth: anonymous, ``Basic`` (RFC 7617) and ``Bearer`` (the distribution
token flow: ``WWW-Authenticate: Bearer realm=...,service=...,scope=...``), credentials from
:mod:`lemonpack.registry.auth`. Secrets never appear in a message or a log line.

Bearer tokens (distribution ``docs/spec/auth/token.md``, ``oauth.md``): a token is asked for
the scopes of the challenge (``GET realm?service=S&scope=A&scope=B`` with the Basic credentials;
with an ``identitytoken``, ``POST realm`` with ``grant_type=refresh_token``), kept per set of
scopes and used for the repository the challenge came from (a push token
``repository:R:pull,push`` serves the pulls of R too; a cross-repository mount asks
``repository:R:pull,push repository:FROM:pull``). A token is renewed before it expires
(``expires_in``, default 60 s; renewed when less than a quarter of its life, at most 10 s, is
left), and once more when the registry refuses a cached one.

Retries: a dropped connection, a timeout, HTTP 429/500/502/503/504 are retried ``retries``
times with exponential backoff (``backoff * 2**attempt`` seconds, ``Retry-After`` honoured up
to 30 s); a body is re-created for every attempt. A blob upload that fails half way resumes
from the offset the registry reports for the session (``GET`` on the upload URL, ``Range``),
or starts a new session when the old one is gone. A host name that does not resolve is not
retried (the message names the host, port and resolver's reason); a refused connection (nothing
listening on the port) is retried once, then reported the same way.

Spec: OCI distribution-spec v1.1 (``spec.md``: pulling, pushing blobs monolithically and in
chunks, cross-repository mounting, pushing manifests, listing tags); Docker registry token
authentication (distribution ``docs/spec/auth/token.md``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import secrets
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from lemonpack.files import commit
from lemonpack.digest import is_sha256_digest
from lemonpack.errors import FetchError, IntegrityError, LemonpackError, StorageError, one_line
from lemonpack.hosts import is_loopback
from lemonpack.oci.canonical import MEDIA_TYPE_IMAGE_INDEX, MEDIA_TYPE_IMAGE_MANIFEST
from lemonpack.registry.auth import Credentials, load_credentials
from lemonpack.registry.answers import error_body, error_detail
from lemonpack.registry.download import HashingSink
from lemonpack.registry.upload import BlobHasher, FileSlice

log = logging.getLogger(__name__)

#: Media types asked for when reading a manifest (OCI and Docker v2 schema 2).
MANIFEST_MEDIA_TYPES = (
    MEDIA_TYPE_IMAGE_MANIFEST, MEDIA_TYPE_IMAGE_INDEX,
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
#: Largest manifest read (distribution's own limit for a manifest PUT is 4 MiB).
MAX_MANIFEST_BYTES = 4 << 20
#: Bytes per read when downloading blobs (large: Python's per-piece cost stays small next to
#: the hashing and writing done outside the GIL).
READ_CHUNK = 4 << 20
#: Blob files are uploaded in PATCH chunks of at most this size (distribution-spec "pushing a
#: blob in chunks"), then committed by an empty closing PUT once their hash is checked; blobs
#: given as bytes (hashed before sending) up to this size go in a single PUT.
DEFAULT_CHUNK_SIZE = 64 << 20

_REPO_PATH_RE = re.compile(r"^/v2/(.+?)/(?:manifests|blobs|tags)/")
#: Largest token-service answer read.
MAX_TOKEN_RESPONSE = 1 << 20
_TRANSIENT = {429, 500, 502, 503, 504}


class _Transient(Exception):
    """A failure worth retrying (connection error, timeout, 429/5xx). ``attempts``: how many
    tries in all this kind of failure deserves (``None``: the client's policy)."""

    attempts: int | None = None


#: A refused connection is tried this many times in all (once again after a backoff: a
#: registry restarting), never the full retry policy: nothing listening rarely starts to.
REFUSED_ATTEMPTS = 2


def _connection_failure(method: str, url: str, exc: BaseException) -> Exception:
    """What a requests connection error means, as the exception to raise: :class:`FetchError`
    for a name that does not resolve (not transient), :class:`_Transient` with ``attempts``
    :data:`REFUSED_ATTEMPTS` for a refused connection, a plain :class:`_Transient` otherwise.
    The message names the host, the port and the innermost reason (urllib3's pool wrappers
    dropped): ``GET https://h/v2/: cannot connect to h:443: name resolution failed (Name or
    service not known)``."""
    import socket

    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or "?"
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = "?"
    chain: list[BaseException] = []
    x: BaseException | None = exc
    while x is not None and x not in chain and len(chain) < 20:
        chain.append(x)
        reason = getattr(x, "reason", None)
        nxt = reason if isinstance(reason, BaseException) else None
        if nxt is None and x.args and isinstance(x.args[0], BaseException):
            nxt = x.args[0]
        x = nxt or x.__cause__ or x.__context__
    where = f"{method} {url}: cannot connect to {host}:{port}"
    for e in chain:
        if isinstance(e, socket.gaierror):
            return FetchError(one_line(f"{where}: name resolution failed ({e.strerror or e})"))
    for e in chain:
        if isinstance(e, ConnectionRefusedError):
            t = _Transient(f"{where}: connection refused (nothing listening on port {port})")
            t.attempts = REFUSED_ATTEMPTS
            return t
    inner = chain[-1]
    text = inner.strerror if isinstance(inner, OSError) and inner.strerror else str(inner)
    return _Transient(f"{where}: {_short(text)}")


@dataclass
class _Token:
    """A bearer token for ``scopes`` of ``(realm, service)``; ``expires`` is a
    ``time.monotonic()`` instant (renewal is due at ``renew_at``)."""

    value: str = field(repr=False)
    realm: str
    service: str
    scopes: tuple[str, ...]
    expires: float
    renew_at: float

    def due(self) -> bool:
        return time.monotonic() >= self.renew_at


@dataclass
class TransferStats:
    """Counters of one client: ``bytes_sent`` (blob bytes in request bodies), ``bytes_received``
    (blob and manifest bytes read), ``blobs_uploaded``, ``blobs_skipped`` (already there),
    ``blobs_mounted`` (cross-repository mounts), ``requests``."""

    bytes_sent: int = 0
    bytes_received: int = 0
    blobs_uploaded: int = 0
    blobs_skipped: int = 0
    blobs_mounted: int = 0
    requests: int = 0


@dataclass(frozen=True)
class MountAnswer:
    """The answer to a cross-repository mount: ``mounted`` (true: nothing to upload), else the
    upload ``session`` URL the registry opened instead (202 + ``Location``), or ``None``.
    Its truth value is ``mounted``."""

    mounted: bool
    session: str | None = None

    def __bool__(self) -> bool:
        return self.mounted


def _check_digest(digest: str) -> str:
    if not isinstance(digest, str) or not is_sha256_digest(digest):
        raise LemonpackError(f"not a sha256 digest: {digest!r} (expected sha256:<64 lowercase hex>)")
    return digest


class RegistryClient:
    """One registry (``host`` = ``host[:port]``), verified both ways (see the module docstring).

    ``insecure``: allow plain http to a non-loopback host. ``auth``: :class:`Credentials`, or
    ``None`` to look them up for ``host`` in ``registry_config`` / ``$REGISTRY_AUTH_FILE`` /
    ``~/.docker/config.json`` (anonymous when none names the host). ``retries``/``backoff``:
    transient-failure policy. ``chunk_size``: PATCH size for large blobs. ``timeout``: seconds
    per connect/read. ``stats``: :class:`TransferStats` of this client.

    Raises, from every call: :class:`FetchError` (exit 4: network, HTTP status, auth refused),
    :class:`IntegrityError` (exit 3: a digest or size the registry answered is not ours),
    :class:`StorageError` (the local disk failed).
    """

    def __init__(self, host: str, *, insecure: bool = False, auth: Credentials | None = None,
                 registry_config: str | os.PathLike[str] | None = None, retries: int = 4,
                 backoff: float = 0.5, chunk_size: int = DEFAULT_CHUNK_SIZE, timeout: float = 60.0):
        import oras.provider

        self.host = host
        hostname = urllib.parse.urlsplit(f"//{host}").hostname
        self.plain_http = insecure or is_loopback(hostname)
        self.scheme = "http" if self.plain_http else "https"
        self.base = f"{self.scheme}://{host}"
        self.registry_config = registry_config
        self.creds = auth if auth is not None else load_credentials(host, registry_config)
        self.retries, self.backoff, self.chunk_size, self.timeout = retries, backoff, chunk_size, timeout
        self.stats = TransferStats()
        self._oras = oras.provider.Registry(hostname=host, insecure=self.plain_http, auth_backend="token")
        self.session = self._oras.session
        self._basic = False  # the registry asked for Basic credentials
        self._tokens: dict[tuple[str, str, tuple[str, ...]], _Token] = {}  # (realm, service, scopes)
        self._repo_tokens: dict[str, _Token] = {}  # repository ("" for /v2/) -> token in use
        #: Token-service requests made (tokens fetched or renewed), for tests and stats.
        self.token_requests = 0

    # -- HTTP core ---------------------------------------------------------------------
    def close(self) -> None:
        """Close the HTTP session."""
        self.session.close()

    def __enter__(self) -> "RegistryClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _url(self, path: str) -> str:
        return f"{self.base}/v2/{path}"

    def _check_url(self, url: str) -> str:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme == "http" and not (self.plain_http and parts.netloc == self.host) \
                and not is_loopback(parts.hostname):
            raise FetchError(f"registry {self.host} sent us to plain http {parts.scheme}://{parts.netloc}; "
                             "refusing (use https, or --insecure for this registry)")
        if parts.scheme not in ("http", "https"):
            raise FetchError(f"registry {self.host} answered a non-http URL scheme {parts.scheme!r}")
        return url

    def _send(self, method: str, url: str, headers: dict[str, str], body, stream: bool):
        import requests

        self._check_url(url)
        hdrs = dict(headers)
        authorization = self._authorization_for(url)
        if authorization:
            hdrs["Authorization"] = authorization
        data = body() if callable(body) else body
        self.stats.requests += 1
        try:
            return self.session.request(method, url, headers=hdrs, data=data, stream=stream,
                                        allow_redirects=False, timeout=(min(30.0, self.timeout), self.timeout))
        except requests.exceptions.SSLError as exc:
            raise FetchError(f"{method} {url}: TLS failed: {exc}") from None
        except requests.exceptions.ConnectTimeout as exc:
            raise _Transient(f"{method} {url}: connect timed out ({type(exc).__name__})") from None
        except requests.exceptions.ConnectionError as exc:
            raise _connection_failure(method, url, exc) from None
        except (requests.exceptions.Timeout, requests.exceptions.ChunkedEncodingError) as exc:
            raise _Transient(f"{method} {url}: {type(exc).__name__}: {_short(exc)}") from None
        except requests.exceptions.RequestException as exc:
            raise FetchError(f"{method} {url}: {type(exc).__name__}: {_short(exc)}") from None

    def _request(self, method: str, path_or_url: str, *, headers: dict[str, str] | None = None,
                 body=None, stream: bool = False, ok: Iterable[int] = (200,), retry: bool = True,
                 missing_ok: bool = False, follow: bool = False):
        """Send one request (auth challenges answered, transient failures retried); returns the
        response (status in ``ok``), or ``None`` on 404 with ``missing_ok``. Raises FetchError."""
        url = path_or_url if "://" in path_or_url else self._url(path_or_url)
        ok = tuple(ok)
        attempts = self.retries + 1 if retry else 1
        last: Exception | None = None
        for attempt in range(attempts):
            if attempt:
                time.sleep(self._delay(attempt, last))
            try:
                resp = self._send(method, url, headers or {}, body, stream)
                rounds = 0  # a cached token may be refused (expired early); then one fresh try
                while resp.status_code == 401 and rounds < 2 and self._authorize(resp):
                    rounds += 1
                    resp.close()
                    resp = self._send(method, url, headers or {}, body, stream)
                hops = 0
                while follow and resp.status_code in (301, 302, 303, 307, 308) and hops < 10:
                    location = resp.headers.get("Location")
                    resp.close()
                    if not location:
                        raise FetchError(f"{method} {url}: redirect without a Location")
                    url = urllib.parse.urljoin(url, location)
                    resp = self._send(method, url, headers or {}, body, stream)
                    hops += 1
                if resp.status_code in _TRANSIENT:
                    last = _Transient(f"{method} {url}: HTTP {resp.status_code}")
                    last.retry_after = resp.headers.get("Retry-After")  # type: ignore[attr-defined]
                    resp.close()
                    continue
                if resp.status_code in ok:
                    return resp
                if resp.status_code == 404 and missing_ok:
                    resp.close()
                    return None
                raise FetchError(self._http_error(method, url, resp))
            except _Transient as exc:
                last = exc
                if exc.attempts is not None and attempt + 1 >= min(exc.attempts, attempts):
                    attempts = attempt + 1
                    break
        raise FetchError(f"{last} (after {attempts} attempt{'s' if attempts > 1 else ''})")

    def _delay(self, attempt: int, last: Exception | None) -> float:
        delay = self.backoff * (2 ** (attempt - 1))
        after = getattr(last, "retry_after", None)
        if after and str(after).isdigit():
            delay = max(delay, min(30.0, float(after)))
        return delay

    def _http_error(self, method: str, url: str, resp) -> str:
        detail = error_detail(error_body(resp))
        where = urllib.parse.urlsplit(url)._replace(query="").geturl()
        msg = f"{method} {where}: HTTP {resp.status_code} {resp.reason or ''}".rstrip()
        if resp.status_code in (401, 403):
            who = f"as {self.creds.username} (from {self.creds.source})" if self.creds else "anonymously"
            msg += f" — access denied {who}"
        return one_line(msg + (f" ({detail[:500]})" if detail else ""))

    def _authorization_for(self, url: str) -> str | None:
        """The ``Authorization`` value for a request to ``url``: none for another host; Basic
        once the registry asked for it; else the bearer token of the URL's repository (renewed
        first when it is due)."""
        parts = urllib.parse.urlsplit(url)
        if parts.netloc != self.host:
            return None
        if self._basic and self.creds is not None:
            return "Basic " + self.creds.basic
        m = _REPO_PATH_RE.match(parts.path)
        repo = m.group(1) if m else ""
        token = self._repo_tokens.get(repo)
        if token is None:
            return None
        if token.due():
            token = self._token(token.realm, token.service, token.scopes, fresh=True)
            self._repo_tokens[repo] = token
        return f"Bearer {token.value}"

    def _authorize(self, resp) -> bool:
        """Answer a 401 challenge; True when there is a new Authorization to retry with."""
        from oras.auth.utils import parse_auth_header

        challenge = resp.headers.get("WWW-Authenticate", "")
        scheme = challenge.split(" ", 1)[0].lower()
        sent = resp.request.headers.get("Authorization") if resp.request is not None else None
        if scheme == "basic":
            if self.creds is None or not self.creds.password:
                from lemonpack.registry.auth import describe_sources

                where = describe_sources(self.registry_config)
                hint = "" if self.registry_config is not None else "; give an auth file with --registry-config FILE"
                raise FetchError(f"registry {self.host} needs credentials and none were found for it "
                                 f"(looked in: {where}{hint})")
            if sent is not None and sent.startswith("Basic "):
                return False  # the same credentials were just refused
            self._basic = True
            return True
        if scheme != "bearer":
            return False
        h = parse_auth_header(challenge)
        if not h.realm:
            raise FetchError(f"registry {self.host} asked for a bearer token without a realm")
        realm = h.realm if "://" in h.realm else f"{self.scheme}://{h.realm}"
        scopes = _normal_scopes((h.scope or "").split())
        cached = self._tokens.get((realm, h.service or "", scopes))
        stale = cached is None or cached.due() or sent == f"Bearer {cached.value}"
        token = self._token(realm, h.service or "", scopes, fresh=stale)
        path = urllib.parse.urlsplit(resp.url or "").path
        m = _REPO_PATH_RE.match(path)
        self._repo_tokens[m.group(1) if m else ""] = token
        return True

    def _token(self, realm: str, service: str, scopes: tuple[str, ...], *, fresh: bool) -> _Token:
        """A token for ``scopes``: the cached one unless ``fresh``, else one from the token
        service (``GET`` with Basic credentials, or anonymous; ``POST`` with the refresh-token
        grant for an identity token). Raises FetchError when the service refuses."""
        import json

        import requests

        key = (realm, service, scopes)
        if not fresh and key in self._tokens and not self._tokens[key].due():
            return self._tokens[key]
        self._check_url(realm)
        params = ([("service", service)] if service else []) + [("scope", s) for s in scopes]
        creds = self.creds
        who = f"{creds.username} (from {creds.source})" if creds is not None else "anonymous"
        self.token_requests += 1
        try:
            if creds is not None and creds.identity_token:
                form = {"grant_type": "refresh_token", "refresh_token": creds.identity_token,
                        "client_id": "lemonpack", "scope": " ".join(scopes)}
                if service:
                    form["service"] = service
                resp = self.session.post(realm, data=form, stream=True, allow_redirects=False,
                                         timeout=(min(30.0, self.timeout), self.timeout))
            else:
                headers = {"Authorization": "Basic " + creds.basic} if creds is not None and creds.password else {}
                resp = self.session.get(realm, params=params, headers=headers, stream=True, allow_redirects=False,
                                        timeout=(min(30.0, self.timeout), self.timeout))
        except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
            raise _Transient(f"token service {realm}: {type(exc).__name__}: {_short(exc)}") from None
        except requests.exceptions.RequestException as exc:
            raise FetchError(f"token service {realm}: {type(exc).__name__}: {_short(exc)}") from None
        try:
            if resp.status_code in _TRANSIENT:
                raise _Transient(f"token service {realm}: HTTP {resp.status_code}")
            if resp.status_code in (401, 403):
                raise FetchError(f"registry {self.host}: the token service {one_line(realm)} refused the "
                                 f"credentials of {who} (HTTP {resp.status_code}) for {' '.join(scopes) or 'access'}")
            if resp.status_code != 200:
                raise FetchError(f"registry {self.host}: token service {one_line(realm)} answered HTTP "
                                 f"{resp.status_code}")
            body = bytearray()
            for chunk in resp.iter_content(64 << 10):
                body += chunk
                if len(body) > MAX_TOKEN_RESPONSE:
                    raise FetchError(f"token service {realm}: answer larger than {MAX_TOKEN_RESPONSE} bytes")
        finally:
            resp.close()
        try:
            doc = json.loads(body)
            value = doc.get("token") or doc.get("access_token")
            lifetime = float(doc.get("expires_in") or 60)
        except (ValueError, TypeError, AttributeError):
            raise FetchError(f"token service {realm}: the answer is not a token JSON object") from None
        if not isinstance(value, str) or not value:
            raise FetchError(f"token service {realm}: the answer holds no token")
        now = time.monotonic()
        token = _Token(value, realm, service, scopes, now + lifetime, now + lifetime - min(10.0, lifetime / 4))
        self._tokens[key] = token
        log.debug("bearer token for %s %s from %s (%s, expires in %.0f s)", service, " ".join(scopes), realm,
                  who, lifetime)
        return token

    # -- manifests ---------------------------------------------------------------------
    def head_manifest(self, repo: str, ref: str) -> tuple[str, str, int] | None:
        """``HEAD /v2/<repo>/manifests/<ref>``: ``(digest, media_type, size)`` or ``None`` (404).

        ``digest`` is the ``Docker-Content-Digest`` header; when ``ref`` is a digest it must be
        that digest, else :class:`IntegrityError`. The header is not guaranteed
        (distribution-spec "checking if content exists": registries and caches may leave it
        out): without it a digest ``ref`` is its own answer, and for a tag the manifest is
        fetched and hashed (:meth:`get_manifest`), as containerd and skopeo do.
        """
        resp = self._request("HEAD", f"{repo}/manifests/{ref}", missing_ok=True,
                             headers={"Accept": ", ".join(MANIFEST_MEDIA_TYPES)})
        if resp is None:
            return None
        resp.close()
        media_type = resp.headers.get("Content-Type", "").split(";")[0].strip()
        size = int(resp.headers.get("Content-Length") or -1)
        digest = resp.headers.get("Docker-Content-Digest", "")
        if not is_sha256_digest(digest):
            if is_sha256_digest(ref):
                return ref, media_type, size
            fetched = self.get_manifest(repo, ref, missing_ok=True)
            if fetched is None:
                return None
            data, media_type, digest = fetched
            return digest, media_type, len(data)
        if ref.startswith("sha256:") and digest != ref:
            raise IntegrityError(f"{self.host}/{repo}@{ref} (HEAD)", ref, digest)
        return digest, media_type, size

    def get_manifest(self, repo: str, ref: str, *, missing_ok: bool = False) -> tuple[bytes, str, str] | None:
        """``GET /v2/<repo>/manifests/<ref>``: ``(bytes, media_type, digest)``, verified.

        The body is read up to :data:`MAX_MANIFEST_BYTES` (more is refused); ``digest`` is its
        sha256, which must equal ``ref`` when ``ref`` is a digest, and the
        ``Docker-Content-Digest`` header when one is sent (:class:`IntegrityError` otherwise).
        ``media_type`` is the body's ``mediaType`` (else the Content-Type). A missing manifest
        (404) is FetchError, or ``None`` with ``missing_ok``.
        """
        resp = self._request("GET", f"{repo}/manifests/{ref}", stream=True, missing_ok=missing_ok,
                             headers={"Accept": ", ".join(MANIFEST_MEDIA_TYPES)})
        if resp is None:
            return None
        try:
            data = self._read_limited(resp, MAX_MANIFEST_BYTES, f"manifest {repo}:{ref}")
        finally:
            resp.close()
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        what = f"manifest {self.host}/{repo}@{ref}" if ref.startswith("sha256:") else f"manifest {self.host}/{repo}:{ref}"
        if ref.startswith("sha256:") and digest != ref:
            raise IntegrityError(what, ref, digest)
        header = resp.headers.get("Docker-Content-Digest")
        if header and header != digest:
            raise IntegrityError(what + " (Docker-Content-Digest vs body)", header, digest)
        media_type = resp.headers.get("Content-Type", "").split(";")[0].strip()
        try:
            import json

            doc = json.loads(data)
            if isinstance(doc, dict) and isinstance(doc.get("mediaType"), str):
                media_type = doc["mediaType"]
        except ValueError:
            raise FetchError(f"{what}: not JSON") from None
        return data, media_type, digest

    def put_manifest(self, repo: str, ref: str, data: bytes, media_type: str) -> str:
        """``PUT /v2/<repo>/manifests/<ref>`` with ``data`` exactly; returns its digest.

        ``ref``: a tag, or the manifest's own digest. The registry's ``Docker-Content-Digest``
        must be the sha256 of ``data`` (:class:`IntegrityError`). Spec: "pushing manifests".
        """
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if ref.startswith("sha256:") and ref != digest:
            raise IntegrityError(f"manifest to push as {repo}@{ref}", ref, digest)
        resp = self._request("PUT", f"{repo}/manifests/{ref}", body=data, ok=(201, 200),
                             headers={"Content-Type": media_type})
        resp.close()
        answered = resp.headers.get("Docker-Content-Digest")
        if answered and answered != digest:
            raise IntegrityError(f"manifest {self.host}/{repo}:{ref} (registry's answer)", digest, answered)
        return digest

    # -- blobs -------------------------------------------------------------------------
    def has_blob(self, repo: str, digest: str, size: int | None = None) -> bool:
        """``HEAD /v2/<repo>/blobs/<digest>``: True when present (and of ``size`` when given)."""
        resp = self._request("HEAD", f"{repo}/blobs/{_check_digest(digest)}", missing_ok=True, follow=True)
        if resp is None:
            return False
        resp.close()
        answered = resp.headers.get("Docker-Content-Digest")
        if answered and answered != digest:
            raise IntegrityError(f"blob {self.host}/{repo}@{digest} (HEAD)", digest, answered)
        if size is not None and resp.headers.get("Content-Length", "").isdigit():
            return int(resp.headers["Content-Length"]) == size
        return True

    def mount_blob(self, repo: str, digest: str, from_repo: str) -> "MountAnswer":
        """Cross-repository mount (``POST .../blobs/uploads/?mount=<digest>&from=<repo>``).

        Returns a :class:`MountAnswer`, true when the registry mounted the blob (201). When it
        did not and opened an upload session instead (202 + ``Location``), the answer holds that
        session: distribution-spec "mounting a blob from another repository" lets the client
        upload through it, and :meth:`push_blob` takes it as ``session`` (no second ``POST``;
        :meth:`cancel_upload` it when unused). A refused request (no access to ``from_repo``)
        is a false answer without a session: a mount is only a shortcut, the caller uploads.
        """
        q = urllib.parse.urlencode({"mount": _check_digest(digest), "from": from_repo})
        try:
            resp = self._request("POST", f"{repo}/blobs/uploads/?{q}", ok=(201, 202),
                                 headers={"Content-Length": "0"})
        except FetchError as e:  # e.g. no pull access to ``from_repo``: a mount is only a shortcut
            log.info("mount of %s from %s into %s refused (%s); uploading instead", digest, from_repo, repo, e)
            return MountAnswer(False)
        resp.close()
        if resp.status_code == 201:
            answered = resp.headers.get("Docker-Content-Digest")
            if answered and answered != digest:
                raise IntegrityError(f"blob {self.host}/{repo} mounted from {from_repo}", digest, answered)
            self.stats.blobs_mounted += 1
            return MountAnswer(True)
        location = resp.headers.get("Location")
        if not location:
            return MountAnswer(False)
        return MountAnswer(False, self._check_url(urllib.parse.urljoin(self._url(""), location)))

    def cancel_upload(self, session: str) -> None:
        """``DELETE`` an upload session that will not be used (best effort: a registry that
        refuses or forgets it purges the session itself)."""
        try:
            self._request("DELETE", session, ok=(204, 200, 202, 404), retry=False).close()
        except (FetchError, _Transient):
            pass

    def push_blob(self, repo: str, source: str | os.PathLike[str] | bytes, digest: str, size: int,
                  *, on_bytes: Callable[[int], None] | None = None, session: str | None = None) -> str:
        """Upload a blob (a file path or bytes) to ``repo``; returns ``digest``.

        A file is streamed from disk (flat memory) in ``PATCH`` chunks of up to ``chunk_size``
        bytes, hashed as it goes (:class:`~lemonpack.registry.upload.BlobHasher`); the closing
        ``PUT ?digest=`` that commits the blob is sent only when the bytes sent hash to
        ``digest``, else :class:`IntegrityError` naming the file (the session is cancelled and
        the registry stores nothing, whether or not it re-hashes). Bytes are hashed first and
        sent with one ``PUT`` up to ``chunk_size``. The answered ``Docker-Content-Digest`` must
        be ours. ``session``: an upload session the registry already opened (a 202 mount
        answer) to use instead of a new ``POST``. A transient failure mid-upload resumes where
        the registry's session says it stands, or restarts the upload. ``on_bytes(n)`` is
        called as bytes go out (progress bars).
        """
        _check_digest(digest)
        on_bytes = on_bytes or (lambda n: None)
        hasher = None
        if isinstance(source, (bytes, bytearray)):
            data = bytes(source)
            actual = "sha256:" + hashlib.sha256(data).hexdigest()
            if actual != digest or len(data) != size:
                raise IntegrityError(f"blob to push to {repo}", digest, actual)
            path = None
        else:
            path = Path(source)
            if path.stat().st_size != size:
                raise LemonpackError(f"{path}: size {path.stat().st_size} is not the descriptor's {size}")
            hasher = BlobHasher(path, size)
        offset = 0
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self._delay(attempt, last))
                session, offset = self._resume_point(session)
            try:
                if session is None:
                    session, offset = self._start_upload(repo), 0
                session = self._upload_from(session, offset, path, data if path is None else None, size,
                                            digest, on_bytes, hasher)
                self.stats.blobs_uploaded += 1
                return digest
            except _Transient as exc:
                last = exc
                if exc.attempts is not None and attempt + 1 >= exc.attempts:
                    raise FetchError(f"uploading {digest} to {self.host}/{repo} failed: {exc} "
                                     f"(after {attempt + 1} attempts)") from None
            except FetchError as exc:
                if "HTTP 404" not in str(exc) and "HTTP 416" not in str(exc):
                    raise
                last, session = exc, None  # the session is gone: start again
        raise FetchError(f"uploading {digest} to {self.host}/{repo} failed: {last} "
                         f"(after {self.retries + 1} attempts)")

    def _start_upload(self, repo: str) -> str:
        resp = self._request("POST", f"{repo}/blobs/uploads/", ok=(202,), headers={"Content-Length": "0"})
        resp.close()
        location = resp.headers.get("Location")
        if not location:
            raise FetchError(f"registry {self.host} opened an upload for {repo} without a Location")
        return self._check_url(urllib.parse.urljoin(self._url(""), location))

    def _resume_point(self, session: str | None) -> tuple[str | None, int]:
        """Where an interrupted upload session stands: ``(session, next offset)``, or
        ``(None, 0)`` when it cannot be resumed (gone, unreachable, unknown)."""
        if session is None:
            return None, 0
        try:
            resp = self._request("GET", session, ok=(204, 200), retry=False)
        except (FetchError, _Transient):
            return None, 0
        resp.close()
        m = re.fullmatch(r"(?:bytes=)?0-(\d+)", resp.headers.get("Range", ""))
        location = resp.headers.get("Location")
        if location:
            session = self._check_url(urllib.parse.urljoin(session, location))
        return session, (int(m.group(1)) + 1 if m else 0)

    def _upload_from(self, session: str, offset: int, path: Path | None, data: bytes | None, size: int,
                     digest: str, on_bytes: Callable[[int], None], hasher: BlobHasher | None) -> str:
        def sent(n: int) -> None:
            self.stats.bytes_sent += n
            on_bytes(n)

        def body(start: int, length: int):
            if data is not None:
                def chunk():
                    sent(length)
                    return data[start:start + length]
                return chunk
            return lambda: FileSlice(path, start, length, sent, hasher)

        octet = {"Content-Type": "application/octet-stream"}
        if data is not None and offset == 0 and size <= self.chunk_size:
            final = body(0, size)
        else:
            while offset < size:
                length = min(self.chunk_size, size - offset)
                headers = dict(octet, **{"Content-Range": f"{offset}-{offset + length - 1}",
                                         "Content-Length": str(length)})
                resp = self._request("PATCH", session, body=body(offset, length), headers=headers,
                                     ok=(202, 204), retry=False)
                resp.close()
                location = resp.headers.get("Location")
                if location:
                    session = self._check_url(urllib.parse.urljoin(session, location))
                offset += length
            final = b""
        if hasher is not None:
            actual = hasher.digest()
            if actual != digest:
                self.cancel_upload(session)
                raise IntegrityError(f"{path} (read while uploading it to {self.host}; the upload was not "
                                     "committed: the layout blob is corrupt)", digest, actual)
        sep = "&" if urllib.parse.urlsplit(session).query else "?"
        url = f"{session}{sep}{urllib.parse.urlencode({'digest': digest})}"
        length = size if final != b"" else 0
        resp = self._request("PUT", url, body=final, ok=(201,), retry=False,
                             headers=dict(octet, **{"Content-Length": str(length)}))
        resp.close()
        answered = resp.headers.get("Docker-Content-Digest")
        if answered and answered != digest:
            raise IntegrityError(f"blob uploaded to {self.host} (registry's answer)", digest, answered)
        return session

    def get_blob(self, repo: str, digest: str, dest_path: str | os.PathLike[str], *,
                 size: int | None = None, on_bytes: Callable[[int], None] | None = None) -> Path:
        """Download a blob into ``dest_path`` atomically (temp file in the same directory,
        renamed once verified); returns the path.

        At most ``size`` bytes are read when it is given (a longer or shorter body is refused);
        the sha256 must be ``digest`` (:class:`IntegrityError`). Nothing is left at
        ``dest_path`` or beside it on failure.
        """
        dest = Path(dest_path)
        tmp = dest.parent / f".{dest.name}.part-{secrets.token_hex(4)}"
        try:
            with open(tmp, "wb") as f:
                self.read_blob(repo, digest, f, size=size, on_bytes=on_bytes)
            commit(tmp, dest, durable=False)  # a layout blob: verified by digest when read
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return dest

    def read_blob(self, repo: str, digest: str, out, *, size: int | None = None,
                  on_bytes: Callable[[int], None] | None = None) -> int:
        """Stream a blob into the binary file object ``out``, verifying size and digest as in
        :meth:`get_blob` (the caller discards ``out`` on error); returns the size."""
        _check_digest(digest)
        resp = self._request("GET", f"{repo}/blobs/{digest}", stream=True, follow=True,
                             headers={"Accept-Encoding": "identity"})
        got = 0
        what = f"blob {self.host}/{repo}@{digest}"
        sink = HashingSink(out)  # hashes and writes while the next bytes are read
        try:
            declared = resp.headers.get("Content-Length")
            if size is not None and declared and declared.isdigit() and int(declared) != size:
                raise IntegrityError(what + " (size)", f"{size} bytes", f"{declared} bytes")
            limit = size if size is not None else None
            for chunk in resp.iter_content(READ_CHUNK):
                got += len(chunk)
                if limit is not None and got > limit:
                    raise IntegrityError(what + " (size)", f"{limit} bytes", f"more than {limit} bytes")
                sink.write(chunk)
                self.stats.bytes_received += len(chunk)
                if on_bytes:
                    on_bytes(len(chunk))
            actual = sink.finish()
        except OSError as exc:
            import requests

            if isinstance(exc, requests.exceptions.RequestException):
                raise FetchError(f"GET {what}: {type(exc).__name__}: {_short(exc)}") from None
            raise StorageError(f"writing {what}: {exc.strerror or exc}") from None
        finally:
            sink.close()
            resp.close()
        if size is not None and got != size:
            raise IntegrityError(what + " (size)", f"{size} bytes", f"{got} bytes")
        if actual != digest:
            raise IntegrityError(what, digest, actual)
        return got

    def _read_limited(self, resp, limit: int, what: str) -> bytes:
        buf = bytearray()
        for chunk in resp.iter_content(64 << 10):
            buf += chunk
            if len(buf) > limit:
                raise FetchError(f"{self.host}: {what} is larger than {limit} bytes; refusing it")
        self.stats.bytes_received += len(buf)
        return bytes(buf)

    # -- tags --------------------------------------------------------------------------
    def list_tags(self, repo: str) -> list[str]:
        """``GET /v2/<repo>/tags/list``, following ``Link`` pagination; ``[]`` for an unknown repo."""
        import json

        url: str | None = f"{repo}/tags/list?n=1000"
        tags: list[str] = []
        for _ in range(1000):
            if url is None:
                break
            resp = self._request("GET", url, stream=True, missing_ok=True)
            if resp is None:
                return tags
            try:
                body = self._read_limited(resp, MAX_MANIFEST_BYTES, f"tag list of {repo}")
            finally:
                resp.close()
            try:
                tags += [t for t in (json.loads(body).get("tags") or []) if isinstance(t, str)]
            except (ValueError, AttributeError):
                raise FetchError(f"{self.host}: tag list of {repo} is not JSON") from None
            m = re.search(r"<([^>]+)>\s*;\s*rel=\"?next\"?", resp.headers.get("Link", ""))
            url = urllib.parse.urljoin(self._url(""), m.group(1)) if m else None
        return tags


def _normal_scopes(scopes) -> tuple[str, ...]:
    """Token scopes in one spelling (``repository:R:pull,push``: actions sorted, scopes sorted):
    distribution writes a challenge's actions in Go map order, so the same need must find the
    same cached token whichever order it came in."""
    out = []
    for scope in scopes:
        head, sep, actions = scope.rpartition(":")
        out.append(f"{head}{sep}{','.join(sorted(a for a in actions.split(',') if a))}" if sep else scope)
    return tuple(sorted(out))


def _short(exc: BaseException | str, limit: int = 300) -> str:
    """``exc`` as one line of at most about ``limit`` characters, cut at a word boundary
    (never mid-word) and marked with ``…`` when cut."""
    text = one_line(str(exc))
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return text[:cut if cut > limit // 2 else limit].rstrip() + " …"


__all__ = ["RegistryClient", "TransferStats", "MountAnswer", "MANIFEST_MEDIA_TYPES", "MAX_MANIFEST_BYTES"]
