"""The HTTP layer of the registry client: one ``httpx.Client`` per registry, the scheme, the
retry policy, bounds and timeouts, and what a failed connection means (after
go-containerregistry's ``transport``; the operations are in :mod:`.client`, auth in
:mod:`.authn`).

Scheme: TLS first everywhere, loopback hosts too (as Docker does); plain ``http`` only with
``insecure=True`` (``--insecure``, or ``insecure = true`` in containers-registries.conf(5)),
or when the TLS handshake with a loopback host (127.0.0.0/8, ::1, localhost,
:func:`lemonpack.hosts.is_loopback`) meets a plain-http server, which is then said on stderr.
A registry that sends us to plain http elsewhere (a ``Location``, a token realm) is refused.
A failed TLS handshake names the host, the port and the CA bundle used (:func:`ca_bundle`:
``$SSL_CERT_FILE``/``$SSL_CERT_DIR``, honoured through ``trust_env``, else certifi's).

Retries: a dropped connection, a timeout, HTTP 429/500/502/503/504 are retried ``retries``
times with exponential backoff (``backoff * 2**attempt`` seconds, ``Retry-After`` honoured up
to 30 s); a body is re-created for every attempt (a callable body is called once per attempt).
A host name that does not resolve is not retried (the message names the host, port and the
resolver's reason); a refused connection (nothing listening on the port) is tried twice in all,
then reported the same way. Redirects are followed only when asked (blob downloads), at most
10 hops, each ``Location`` checked like any URL. An error answer's body is read up to
:data:`lemonpack.registry.answers.MAX_ERROR_BODY` bytes and its distribution error codes are
shown (:mod:`.answers`); secrets never appear in a message (the ``Authorization`` header is
the auth's, never printed; a URL's query is left out of error messages).

Bodies: a blob's body is read by :func:`lemonpack.httpclient.body` (through httpx for its first
piece, then straight from the connection's socket into one reused buffer).

Spec: OCI distribution-spec v1.1 (``spec.md``: status codes, "error codes"); RFC 9110
section 10.2.3 (``Retry-After``); httpx ``Client``, ``Timeout`` and ``Auth`` (the auth flow
runs inside :meth:`httpx.Client.send`); the client is :func:`lemonpack.httpclient.client`'s.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import sys
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal, overload

import httpx

from lemonpack import httpclient
from lemonpack.errors import FetchError, one_line
from lemonpack.hosts import is_loopback
from lemonpack.registry.answers import RegistryAnswerError, error_body, error_codes, error_detail

log = logging.getLogger(__name__)

#: Statuses worth another try.
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
#: A refused connection is tried this many times in all (once again after a backoff: a
#: registry restarting), never the full retry policy: nothing listening rarely starts to.
REFUSED_ATTEMPTS = 2
#: Largest Retry-After honoured, seconds.
MAX_RETRY_AFTER = 30.0


class Transient(Exception):
    """A failure worth retrying (connection error, timeout, 429/5xx). ``attempts``: how many
    tries in all this kind of failure deserves (``None``: the transport's policy);
    ``retry_after``: the answer's ``Retry-After`` header, if any."""

    attempts: int | None = None
    retry_after: str | None = None


@dataclass
class TransferStats:
    """Counters of one client: ``bytes_sent`` (blob bytes in request bodies), ``bytes_received``
    (blob and manifest bytes read), ``blobs_uploaded``, ``blobs_skipped`` (already there),
    ``blobs_mounted`` (cross-repository mounts), ``requests`` (registry requests sent, auth
    rounds and token requests not counted)."""

    bytes_sent: int = 0
    bytes_received: int = 0
    blobs_uploaded: int = 0
    blobs_skipped: int = 0
    blobs_mounted: int = 0
    requests: int = 0


def short(exc: BaseException | str, limit: int = 300) -> str:
    """``exc`` as one line of at most about ``limit`` characters, cut at a word boundary
    (never mid-word) and marked with ``…`` when cut."""
    text = one_line(str(exc))
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return text[:cut if cut > limit // 2 else limit].rstrip() + " …"


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions under it (httpx -> httpcore -> the OSError): ``__cause__``,
    ``__context__``, or an exception given as the first argument."""
    chain: list[BaseException] = []
    x: BaseException | None = exc
    while x is not None and x not in chain and len(chain) < 20:
        chain.append(x)
        nxt = x.args[0] if x.args and isinstance(x.args[0], BaseException) else None
        x = nxt or x.__cause__ or x.__context__
    return chain


def _where(method: str, url: str) -> tuple[str, str, object]:
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or "?"
    try:
        port: object = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = "?"
    shown = parts._replace(query="").geturl()
    return f"{method} {shown}: cannot connect to {host}:{port}", host, port


def connection_failure(method: str, url: str, exc: BaseException) -> Exception:
    """What a failed connection means, as the exception to raise: :class:`FetchError` for a
    name that does not resolve or a TLS failure (not transient), :class:`Transient` with
    ``attempts`` :data:`REFUSED_ATTEMPTS` for a refused connection, a plain :class:`Transient`
    otherwise. The message names the host, the port and the innermost reason (httpx's and
    httpcore's wrappers dropped): ``GET https://h/v2/: cannot connect to h:443: name
    resolution failed (Name or service not known)``."""
    where, _host, port = _where(method, url)
    chain = _chain(exc)
    for e in chain:
        if isinstance(e, socket.gaierror):
            return FetchError(one_line(f"{where}: name resolution failed ({e.strerror or e})"))
    for e in chain:
        if isinstance(e, ssl.SSLError):
            where_tls = urllib.parse.urlsplit(url)._replace(query="").geturl()
            return FetchError(one_line(f"{method} {where_tls}: TLS with {_host}:{port} failed: "
                                       f"{short(getattr(e, 'verify_message', None) or e)} "
                                       f"(CA bundle: {ca_bundle(urllib.parse.urlsplit(url).netloc)}; a "
                                       "registry without TLS: --insecure, "
                                       "or insecure = true in registries.conf)"))
    for e in chain:
        if isinstance(e, ConnectionRefusedError):
            t = Transient(f"{where}: connection refused (nothing listening on port {port})")
            t.attempts = REFUSED_ATTEMPTS
            return t
    inner = chain[-1]
    text = inner.strerror if isinstance(inner, OSError) and inner.strerror else str(inner) or type(inner).__name__
    return Transient(f"{where}: {short(text)}")


def failure(method: str, url: str, exc: httpx.HTTPError) -> Exception:
    """The exception to raise for an httpx error of a request to ``url`` (its own request's
    URL when it has one: a token service's failure names the token service)."""
    try:
        url = str(exc.request.url)
    except RuntimeError:  # no request attached
        pass
    shown = urllib.parse.urlsplit(url)._replace(query="").geturl()
    if isinstance(exc, httpx.ConnectTimeout):
        return Transient(f"{method} {shown}: connect timed out ({type(exc).__name__})")
    if isinstance(exc, httpx.ConnectError):
        return connection_failure(method, url, exc)
    if isinstance(exc, (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)):
        return Transient(f"{method} {shown}: {type(exc).__name__}: {short(exc) or 'connection dropped'}")
    return FetchError(f"{method} {shown}: {type(exc).__name__}: {short(exc)}")


def ca_bundle(host: str | None = None) -> str:
    """The CA certificates a registry's TLS certificate is checked against, as a message names
    them: ``$SSL_CERT_FILE`` or ``$SSL_CERT_DIR`` when set (httpx honours them with
    ``trust_env``, which the registry transport sets), else certifi's bundle (httpx's default);
    plus, for ``host`` (``host[:port]``), its containers-certs.d(5) directory when it has one
    (:mod:`lemonpack.registry.certsd`), else where such a directory would go."""
    from lemonpack.registry.certsd import find_certs_dir, roots

    base = ""
    for var in ("SSL_CERT_FILE", "SSL_CERT_DIR"):
        if os.environ.get(var):
            base = f"${var}={os.environ[var]}"
            break
    if not base:
        import certifi

        base = f"{certifi.where()} (certifi; set SSL_CERT_FILE to trust another CA)"
    if not host:
        return base
    where = find_certs_dir(host)
    if where is not None:
        return f"{base}, and the CAs of {where}"
    return f"{base}; a CA for this registry alone goes in {roots()[0] / host}/ca.crt (containers-certs.d(5))"


def is_tls_failure(exc: BaseException) -> bool:
    """True when ``exc`` (an httpx error) is a failed TLS handshake."""
    return any(isinstance(e, ssl.SSLError) for e in _chain(exc))


def met_plain_http(exc: BaseException) -> bool:
    """True when a TLS handshake failed because the server does not speak TLS (its answer is
    no TLS record: OpenSSL's ``WRONG_VERSION_NUMBER``/``record layer failure``, or the
    connection closed at once), never for a certificate the client refused (a TLS server
    whose certificate is not trusted stays a TLS failure)."""
    chain = _chain(exc)
    if any(isinstance(e, ssl.SSLCertVerificationError) for e in chain):
        return False
    return any(isinstance(e, ssl.SSLError) and not isinstance(e, ssl.SSLCertVerificationError) for e in chain)


def check_url(url: str, host: str, plain_http: bool) -> str:
    """``url`` when it may be followed from registry ``host``: http(s) only, plain http only
    to the registry itself when it is spoken to over http, or to a loopback host. Raises
    :class:`FetchError` otherwise."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "http" and not (plain_http and parts.netloc == host) and not is_loopback(parts.hostname):
        raise FetchError(f"registry {host} sent us to plain http {parts.scheme}://{parts.netloc}; "
                         "refusing (use https, or --insecure for this registry)")
    if parts.scheme not in ("http", "https"):
        raise FetchError(f"registry {host} answered a non-http URL scheme {parts.scheme!r}")
    return url


# What a Go (net/http) or nginx TLS server answers (400) to a plain-http request on its TLS port
_TLS_PORT_ANSWERS = (b"Client sent an HTTP request to an HTTPS server", b"plain HTTP request was sent to HTTPS port")


def _speaks_tls(host: str, timeout: float = 3.0) -> bool:
    """Whether ``host`` (``host[:port]``, port 80 by default) completes a TLS handshake (the
    certificate not checked: only asked to explain a plain-http ``400``, never to trust it)."""
    parts = urllib.parse.urlsplit(f"//{host}")
    try:
        port = parts.port or 80
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        with socket.create_connection((parts.hostname or host, port), timeout=timeout) as raw:
            with ctx.wrap_socket(raw, server_hostname=parts.hostname):
                return True
    except (OSError, ValueError):
        return False


def plain_http_for(host: str, insecure: bool = False) -> bool:
    """True when ``host`` (``host[:port]``) is spoken to over plain http from the start: only
    when ``insecure`` (``--insecure``, or ``insecure = true`` in registries.conf). Every other
    registry, loopback ones too, is spoken to over TLS first (:func:`http_fallback_for`)."""
    return insecure


def http_fallback_for(host: str, insecure: bool = False) -> bool:
    """True when an https attempt to ``host`` that meets a plain-http server may go on in plain
    http (said on stderr): a loopback host (:func:`lemonpack.hosts.is_loopback`) not already
    spoken to in plain http, as Docker does for loopback registries."""
    return not insecure and is_loopback(urllib.parse.urlsplit(f"//{host}").hostname)


def _stderr_notice(text: str) -> None:
    sys.stderr.write(f"lemonpack: {text}\n")
    sys.stderr.flush()


class Transport:
    """The HTTP side of one registry (``host`` = ``host[:port]``).

    ``auth``: an :class:`httpx.Auth` (:class:`lemonpack.registry.authn.RegistryAuth`) answering
    the registry's challenges; it may have a ``who()`` naming the identity for an access-denied
    message. ``retries``/``backoff``: the transient-failure policy. ``timeout``: seconds per
    read/write (connect: at most 30 s). ``stats``: counters shared with the client. ``sleep``:
    the wait between attempts (default :func:`time.sleep`).
    """

    def __init__(self, host: str, *, insecure: bool = False, auth: httpx.Auth | None = None,
                 retries: int = 4, backoff: float = 0.5, timeout: float = 60.0,
                 stats: TransferStats | None = None, sleep: Callable[[float], None] = time.sleep,
                 notice: Callable[[str], None] = _stderr_notice):
        self.host = host
        self.plain_http = plain_http_for(host, insecure)
        self.http_fallback = http_fallback_for(host, insecure)
        self.notice = notice  # one line on stderr (the plain-http fallback on loopback)
        self.scheme = "http" if self.plain_http else "https"
        self.base = f"{self.scheme}://{host}"
        self.retries, self.backoff, self.timeout = retries, backoff, timeout
        self.sleep = sleep  # the wait between attempts (seconds); tests pass a fake that records it
        self.stats = stats if stats is not None else TransferStats()
        self.auth = auth
        # the user's proxies and CA files honoured (trust_env), redirects followed by request();
        # a registry spoken to in plain http from the start needs no CA bundle (loading one costs
        # ~0.1 s and ~1 MiB): an https URL it sends us to (blob storage) gets a verifying client
        # of its own, made when first needed (:meth:`client_for`)
        self.client = self._new_client(verify=not self.plain_http)
        self._tls_client: httpx.Client | None = None if self.plain_http else self.client

    def _new_client(self, verify: bool) -> httpx.Client:
        checks: bool | ssl.SSLContext = verify
        if verify:  # the registry's containers-certs.d(5) CAs and client certificate, when it has them
            from lemonpack.registry.certsd import tls_context

            checks = tls_context(self.host) or True
        return httpclient.client(timeout=self.timeout, connect_timeout=min(30.0, self.timeout), trust_env=True,
                                 auth=self.auth, follow_redirects=False, verify=checks)

    def client_for(self, url: str) -> httpx.Client:
        """The client a request to ``url`` goes through: one that checks certificates for every
        https URL, the plain-http registry's own (no CA bundle loaded) for http."""
        if not url.startswith("https://"):
            return self.client
        if self._tls_client is None:
            self._tls_client = self._new_client(verify=True)
        return self._tls_client

    def close(self) -> None:
        """Close the connections."""
        self.client.close()
        if self._tls_client is not None and self._tls_client is not self.client:
            self._tls_client.close()

    def url(self, path: str) -> str:
        """``<scheme>://<host>/v2/<path>``."""
        return f"{self.base}/v2/{path}"

    def check_url(self, url: str) -> str:
        """:func:`check_url` for this registry."""
        return check_url(url, self.host, self.plain_http)

    def send(self, method: str, url: str, headers: dict[str, str], body, stream: bool) -> httpx.Response:
        """One request (the auth flow answers challenges inside it); httpx errors become
        :class:`FetchError` or :class:`Transient`. ``body``: bytes, an iterable of bytes, or a
        callable returning one (called now). ``stream``: leave the body unread."""
        self.check_url(url)
        data = body() if callable(body) else body
        self.stats.requests += 1
        client = self.client_for(url)
        request = client.build_request(method, url, headers=headers, content=data)
        try:
            return client.send(request, stream=stream)
        except httpx.HTTPError as exc:
            if self.http_fallback and met_plain_http(exc) and url.startswith(f"https://{self.host}/"):
                answer = self._try_plain_http(method, url, headers, body, stream)
                if answer is not None:
                    return answer
            raise failure(method, url, exc) from None

    def _try_plain_http(self, method: str, url: str, headers: dict[str, str], body,
                        stream: bool) -> httpx.Response | None:
        """After a TLS handshake with a loopback registry failed: the same request in plain
        http. When it gets an HTTP answer the registry is spoken to in plain http from now on
        (said on stderr); ``None`` (TLS failure stands) when it gets none."""
        self.http_fallback = False
        plain = "http://" + url[len("https://"):]
        data = body() if callable(body) else body
        request = self.client.build_request(method, plain, headers=headers, content=data)
        try:
            resp = self.client.send(request, stream=stream)
        except httpx.HTTPError:
            return None
        self.plain_http, self.scheme, self.base = True, "http", f"http://{self.host}"
        switch = getattr(self.auth, "use_plain_http", None)
        if switch is not None:
            switch()
        self.notice(f"registry {self.host} answered TLS in plain http; speaking plain http to it "
                    f"(a loopback host; say --insecure or insecure = true for {self.host} in "
                    "registries.conf to skip the TLS attempt)")
        return resp

    @overload
    def request(self, method: str, path_or_url: str, *, headers: dict[str, str] | None = None,
                body: Any = None, stream: bool = False, ok: Iterable[int] = (200,), retry: bool = True,
                missing_ok: Literal[False] = False, follow: bool = False) -> httpx.Response: ...

    @overload
    def request(self, method: str, path_or_url: str, *, headers: dict[str, str] | None = None,
                body: Any = None, stream: bool = False, ok: Iterable[int] = (200,), retry: bool = True,
                missing_ok: bool, follow: bool = False) -> httpx.Response | None: ...

    def request(self, method: str, path_or_url: str, *, headers: dict[str, str] | None = None,
                body: Any = None, stream: bool = False, ok: Iterable[int] = (200,), retry: bool = True,
                missing_ok: bool = False, follow: bool = False) -> httpx.Response | None:
        """Send one request (transient failures retried unless ``retry`` is false; redirects
        followed with ``follow``); returns the response (status in ``ok``; the caller closes
        it), or ``None`` on 404 with ``missing_ok``. Raises :class:`FetchError` (any other
        status, with the registry's error codes; retries spent) or :class:`Transient` (with
        ``retry=False``)."""
        url = path_or_url if "://" in path_or_url else self.url(path_or_url)
        ok = tuple(ok)
        attempts = self.retries + 1 if retry else 1
        last: Exception | None = None
        for attempt in range(attempts):
            if attempt:
                self.sleep(self.delay(attempt, last))
            try:
                if self.plain_http and url.startswith(f"https://{self.host}/"):
                    url = "http://" + url[len("https://"):]  # switched after the first request's TLS attempt
                resp = self.send(method, url, headers or {}, body, stream)
                if self.plain_http and url.startswith(f"https://{self.host}/"):
                    url = "http://" + url[len("https://"):]
                hops = 0
                while follow and resp.status_code in (301, 302, 303, 307, 308) and hops < 10:
                    location = resp.headers.get("Location")
                    resp.close()
                    if not location:
                        raise FetchError(f"{method} {url}: redirect without a Location")
                    url = urllib.parse.urljoin(url, location)
                    resp = self.send(method, url, headers or {}, body, stream)
                    hops += 1
                if resp.status_code in TRANSIENT_STATUSES:
                    last = Transient(f"{method} {url}: HTTP {resp.status_code}")
                    last.retry_after = resp.headers.get("Retry-After")
                    resp.close()
                    if not retry:
                        raise last
                    continue
                if resp.status_code in ok:
                    return resp
                if resp.status_code == 404 and missing_ok:
                    resp.close()
                    return None
                raise self.refusal(method, url, resp)
            except Transient as exc:
                if not retry:
                    raise
                last = exc
                if exc.attempts is not None and attempt + 1 >= min(exc.attempts, attempts):
                    attempts = attempt + 1
                    break
        raise FetchError(f"{last} (after {attempts} attempt{'s' if attempts > 1 else ''})")

    def delay(self, attempt: int, last: Exception | None) -> float:
        """Seconds to wait before try ``attempt`` (1-based): ``backoff * 2**(attempt-1)``, or the
        ``Retry-After`` of the last answer when longer (at most :data:`MAX_RETRY_AFTER`)."""
        delay = self.backoff * (2 ** (attempt - 1))
        after = getattr(last, "retry_after", None)
        if after and str(after).isdigit():
            delay = max(delay, min(MAX_RETRY_AFTER, float(after)))
        return delay

    def refusal(self, method: str, url: str, resp: httpx.Response) -> RegistryAnswerError:
        """The error of a refused request: :meth:`http_error`'s line, with the status and the
        registry's error codes as attributes. Closes ``resp``."""
        body = error_body(resp)
        return RegistryAnswerError(self.http_error(method, url, resp, body), resp.status_code, error_codes(body))

    def http_error(self, method: str, url: str, resp: httpx.Response, body: bytes | None = None) -> str:
        """One line for a refused request: method, URL without its query, status, reason, who
        we were (401/403), the registry's error codes (from ``body``, read from ``resp`` when
        None). Closes ``resp``."""
        body = error_body(resp) if body is None else body
        detail = error_detail(body)
        where = urllib.parse.urlsplit(url)._replace(query="").geturl()
        msg = f"{method} {where}: HTTP {resp.status_code} {resp.reason_phrase or ''}".rstrip()
        if resp.status_code in (401, 403):
            who = getattr(self.auth, "who", None)
            msg += f" — access denied {who(url) if who else 'anonymously'}"
        elif resp.status_code == 400 and where.startswith("http://") and (
                any(a in body for a in _TLS_PORT_ANSWERS) or _speaks_tls(self.host)):
            msg += (f" — {self.host} speaks TLS, not plain http: drop --insecure (and insecure = true in "
                    "registries.conf) and give its CA with SSL_CERT_FILE")
            detail = ""
        return one_line(msg + (f" ({detail[:500]})" if detail else ""))


__all__ = ["Transport", "TransferStats", "Transient", "check_url", "connection_failure", "failure", "short",
           "plain_http_for", "http_fallback_for", "ca_bundle", "is_tls_failure", "met_plain_http", "REFUSED_ATTEMPTS", "TRANSIENT_STATUSES"]
