"""The one factory of lemonpack's HTTP clients, below every room: every outgoing request
lemonpack makes goes through an ``httpx`` client made here.

Who uses it: downloads and the catalogue's documents (:mod:`lemonpack.fetch.download`,
``catalogue update``/``build``), the registry transport (:mod:`lemonpack.registry.transport`:
its auth flow and retries wrap the client made here), the engines' health probes and watchdog
(:mod:`lemonpack.runtime.engines.probes`), and ``serve``'s endpoint probes and ``downsize_endpoint``
calls (:mod:`lemonpack.server.endpoints`, :mod:`lemonpack.server.driver`). The one path that
is not an httpx client is the proxy's streaming relay, :mod:`lemonpack.server.upstream`: it
passes a chunked answer on with its framing, which no httpx client can (h11 decodes the
framing), and the proxy bench measured the difference (``docs/architecture.md``, the server
room).

Every parameter a caller may want is explicit here, and two have no default on purpose,
because httpx's defaults are wrong for half of the callers: ``timeout`` (httpx's is 5 s for
everything, too short for a multi-GB download, too long for a probe) and ``trust_env`` (the
proxy policy: whether ``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY``/``NO_PROXY``,
``SSL_CERT_FILE``/``SSL_CERT_DIR`` and ``~/.netrc`` are honoured, httpx's "Environment
Variables" page). Requests to the user's internet (mirrors, registries, catalogue hosts) honour
them, like curl; requests to an engine on this machine or an endpoint the user named do not,
so a proxy set for the internet never sits between ``serve`` and its engines.

The rest follows httpx's own defaults unless a caller says otherwise: ``verify=True``
(certifi's bundle, or the environment's with ``trust_env``), no redirects followed (callers
that follow them check every hop themselves), 100 connections and 20 kept alive, and httpx's
``User-Agent`` (:data:`HTTPX_USER_AGENT`). Spec: httpx ``Client``/``AsyncClient``,
``Timeout``, ``Limits`` (https://www.python-httpx.org/advanced/).

Bounds on a transfer (:class:`TransferBounds`, :func:`bounded`): an overall deadline, a
minimum rate and a body size limit checked while the body is read, for callers that fetch from
hosts they do not trust (the catalogue's community sources): a per-read ``timeout`` alone never
trips on a server trickling one byte every few seconds.

The module imports httpx: a command that may not need the network (a cache hit, ``catalogue
search``) imports this module where it makes its client, not at its top.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

import httpx

HTTPX_USER_AGENT: Final = f"python-httpx/{httpx.__version__}"
"""httpx's own ``User-Agent``, the default: what every lemonpack request has sent so far."""

DEFAULT_MAX_CONNECTIONS: Final = 100
DEFAULT_MAX_KEEPALIVE: Final = 20


def _options(*, timeout: float | None, connect_timeout: float | None, trust_env: bool,
             verify: bool | ssl.SSLContext, follow_redirects: bool, headers: Mapping[str, str] | None,
             user_agent: str | None, auth: httpx.Auth | None, max_connections: int | None,
             max_keepalive: int | None) -> dict[str, Any]:
    if isinstance(timeout, bool) or (timeout is not None and timeout <= 0):
        raise ValueError(f"timeout must be a positive number of seconds or None, not {timeout!r}")
    merged = httpx.Headers({"User-Agent": user_agent} if user_agent is not None else {})
    merged.update(dict(headers or {}))
    return {
        "timeout": httpx.Timeout(timeout, connect=timeout if connect_timeout is None else connect_timeout),
        "trust_env": trust_env, "verify": verify, "follow_redirects": follow_redirects,
        "headers": merged, "auth": auth,
        "limits": httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_keepalive),
    }


def _drop_user_agent(c: httpx.Client | httpx.AsyncClient, user_agent: str | None,
                     headers: Mapping[str, str] | None) -> None:
    if user_agent is None and "user-agent" not in {k.lower() for k in headers or {}}:
        c.headers.pop("User-Agent", None)  # httpx adds its own when none is given


def client(*, timeout: float | None, trust_env: bool, connect_timeout: float | None = None,
           verify: bool | ssl.SSLContext = True, follow_redirects: bool = False,
           headers: Mapping[str, str] | None = None, user_agent: str | None = HTTPX_USER_AGENT,
           auth: httpx.Auth | None = None, max_connections: int | None = DEFAULT_MAX_CONNECTIONS,
           max_keepalive: int | None = DEFAULT_MAX_KEEPALIVE) -> httpx.Client:
    """A new ``httpx.Client`` (the caller closes it, or uses it as a context manager).

    ``timeout``: seconds each read, write and wait for a pooled connection may take (None: no
    limit); ``connect_timeout``: seconds to connect (None: the same as ``timeout``); a request
    may pass its own ``timeout=`` to override both. ``trust_env``: the proxy policy (module
    docstring): True honours the environment's proxies, CA files and ``.netrc``; False ignores
    them. ``verify``: check certificates (True: the default bundle, an ``ssl.SSLContext``:
    that context; False: no check, for plain-http loopback clients where loading a CA bundle
    costs ~100 ms for nothing). ``follow_redirects``: httpx follows redirects by itself (off:
    callers that follow them check each hop). ``headers``: sent with every request (they win
    over ``user_agent``); ``user_agent``: the ``User-Agent`` header (None: none at all).
    ``auth``: an ``httpx.Auth`` whose flow runs inside every ``send`` (the registry's
    challenges). ``max_connections``/``max_keepalive``: pool bounds (None: unbounded).
    Raises ``ValueError`` for a timeout that is not positive (a caller's bug)."""
    c = httpx.Client(**_options(timeout=timeout, connect_timeout=connect_timeout, trust_env=trust_env,
                                verify=verify, follow_redirects=follow_redirects, headers=headers,
                                user_agent=user_agent, auth=auth, max_connections=max_connections,
                                max_keepalive=max_keepalive))
    _drop_user_agent(c, user_agent, headers)
    return c


def async_client(*, timeout: float | None, trust_env: bool, connect_timeout: float | None = None,
                 verify: bool | ssl.SSLContext = True, follow_redirects: bool = False,
                 headers: Mapping[str, str] | None = None, user_agent: str | None = HTTPX_USER_AGENT,
                 auth: httpx.Auth | None = None, max_connections: int | None = DEFAULT_MAX_CONNECTIONS,
                 max_keepalive: int | None = DEFAULT_MAX_KEEPALIVE) -> httpx.AsyncClient:
    """A new ``httpx.AsyncClient`` for code on an asyncio loop (``serve``); the caller closes
    it (``await c.aclose()``). The parameters are :func:`client`'s."""
    c = httpx.AsyncClient(**_options(timeout=timeout, connect_timeout=connect_timeout, trust_env=trust_env,
                                     verify=verify, follow_redirects=follow_redirects, headers=headers,
                                     user_agent=user_agent, auth=auth, max_connections=max_connections,
                                     max_keepalive=max_keepalive))
    _drop_user_agent(c, user_agent, headers)
    return c


@dataclass(frozen=True)
class TransferBounds:
    """Bounds on one request's transfer, measured from the moment the request is sent:
    ``deadline`` seconds until the whole body is read (None: none); ``min_rate`` bytes per
    second averaged over the transfer so far, checked once ``grace`` seconds have passed
    (None: none); ``max_body_bytes``: the body's size limit (a ``Content-Length`` above it
    fails before the body is read; otherwise reading stops at the first chunk that passes
    it). Checked as each chunk arrives: a read that gets nothing at all is bounded by the
    client's ``timeout``, so the worst case is ``deadline`` plus one ``timeout``. The
    ``deadline`` also holds while the status line and headers arrive (a server trickling
    them): at the deadline the connection the request opened is shut down and the request
    fails with :class:`TransferBoundError`."""

    deadline: float | None = None
    min_rate: float | None = None
    grace: float = 10.0
    max_body_bytes: int | None = None


class TransferBoundError(httpx.TransportError):
    """A transfer broke one of its :class:`TransferBounds` (an ``httpx.HTTPError``, so callers
    that turn httpx's errors into their own turn this one too); the message names the URL,
    the bound and what was measured."""


_START = "lemonpack.transfer_start"
_WATCHDOG = "lemonpack.transfer_watchdog"


class _Watchdog:
    """Shuts down the socket of one request's new connection once its deadline passes (a
    server trickling its status line and headers is read byte by byte, each read inside the
    client's timeout). ``expired``: it fired; :meth:`done` disarms it."""

    def __init__(self, deadline: float):
        self.deadline, self.expired, self._sock = deadline, False, None
        self._start = time.monotonic()
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def trace(self, event: str, info: dict) -> None:
        """httpcore's ``trace`` request extension: arms the timer on the connection's socket."""
        if not event.endswith("connect_tcp.complete"):
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is None:
            return
        with self._lock:
            self._sock = sock
            left = max(0.0, self.deadline - (time.monotonic() - self._start))
            self._timer = threading.Timer(left, self._fire)
            self._timer.daemon = True
            self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._sock is None:
                return
            self.expired = True
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def done(self) -> None:
        with self._lock:
            self._sock = None
            if self._timer is not None:
                self._timer.cancel()


class _BoundedStream(httpx.SyncByteStream):
    def __init__(self, inner: Any, request: httpx.Request, bounds: TransferBounds, start: float):
        self._inner, self._request, self._bounds, self._start = inner, request, bounds, start
        self._dog: _Watchdog | None = request.extensions.get(_WATCHDOG)

    def _fail(self, why: str) -> TransferBoundError:
        return TransferBoundError(f"{self._request.url}: {why}", request=self._request)

    def __iter__(self) -> Iterator[bytes]:
        b, dog = self._bounds, self._dog
        try:
            yield from self._chunks()
        except httpx.TransportError as exc:  # the deadline's watchdog shut the connection down
            if dog is not None and dog.expired and not isinstance(exc, TransferBoundError):
                raise self._fail(f"not complete after {b.deadline:g} s (deadline)") from None
            raise
        if dog is not None:
            dog.done()
            if dog.expired:  # the end of a body cut by the watchdog is no end
                raise self._fail(f"not complete after {b.deadline:g} s (deadline)")

    def _chunks(self) -> Iterator[bytes]:
        b, n = self._bounds, 0
        for chunk in self._inner:
            n += len(chunk)
            if b.max_body_bytes is not None and n > b.max_body_bytes:
                raise self._fail(f"the body is larger than {b.max_body_bytes} bytes (stopped reading at {n})")
            elapsed = time.monotonic() - self._start
            if b.deadline is not None and elapsed > b.deadline:
                raise self._fail(f"not complete after {b.deadline:g} s (deadline; {n} bytes read)")
            if b.min_rate is not None and elapsed > b.grace and n < b.min_rate * elapsed:
                raise self._fail(f"{n} bytes in {elapsed:.1f} s, below the minimum rate of {b.min_rate:g} bytes/s")
            yield chunk

    def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if close is not None:
            close()


@contextmanager
def bounded(c: httpx.Client, bounds: TransferBounds) -> Iterator[httpx.Client]:
    """``c`` with ``bounds`` applied to every response it receives inside the ``with`` block
    (request and response event hooks, removed on exit; one thread at a time). Reading a body
    that breaks a bound raises :class:`TransferBoundError`; a ``Content-Length`` above
    ``max_body_bytes`` raises it from ``send``."""
    watchdogs: list[_Watchdog] = []

    def on_request(request: httpx.Request) -> None:
        request.extensions[_START] = time.monotonic()
        if bounds.deadline is not None and "trace" not in request.extensions:
            dog = _Watchdog(bounds.deadline)
            request.extensions["trace"] = dog.trace
            request.extensions[_WATCHDOG] = dog
            watchdogs.append(dog)

    def on_response(response: httpx.Response) -> None:
        request = response.request
        length = response.headers.get("Content-Length", "")
        if bounds.max_body_bytes is not None and length.isdigit() and int(length) > bounds.max_body_bytes:
            raise TransferBoundError(f"{request.url}: the body is {length} bytes, larger than "
                                     f"{bounds.max_body_bytes} bytes", request=request)
        start = request.extensions.get(_START, time.monotonic())
        response.stream = _BoundedStream(response.stream, request, bounds, start)

    send = c.send

    def bounded_send(request: httpx.Request, **kwargs: Any) -> httpx.Response:
        try:
            return send(request, **kwargs)
        except httpx.TransportError as exc:
            if any(d.expired for d in watchdogs) and not isinstance(exc, TransferBoundError):
                raise TransferBoundError(f"{request.url}: no complete answer after {bounds.deadline:g} s "
                                         "(deadline)", request=request) from None
            raise

    hooks = c.event_hooks
    hooks["request"].append(on_request)
    hooks["response"].append(on_response)
    c.event_hooks = hooks
    c.send = bounded_send  # type: ignore[method-assign]
    try:
        yield c
    finally:
        del c.send  # the class's own again
        for dog in watchdogs:
            dog.done()
        hooks = c.event_hooks
        hooks["request"] = [h for h in hooks["request"] if h is not on_request]
        hooks["response"] = [h for h in hooks["response"] if h is not on_response]
        c.event_hooks = hooks


#: Bytes read from the socket at once when a blob body is read past httpx (:func:`body`): one
#: buffer, reused for every read, so each byte is copied once from the kernel, hashed once and
#: written once, with one Python step per MiB (httpcore reads 64 KiB at a time and h11 copies each
#: piece twice on its way: measured here, 1 GiB pulls from the local registry, 0.55-0.75 s of CPU
#: after the imports against 1.0-1.2 s through httpx with a hashing thread, load 4-5).
BODY_READ = 1 << 20
#: Bodies shorter than this (past their first piece) go through httpx, which keeps the connection
#: for the next request: the socket path closes it, and a new connection to a distant registry
#: (TCP and TLS handshakes: a few round trips) costs more than the CPU saved on a small body
#: (about 0.4 ms per MiB here). A slow link moving 32 MiB takes seconds, beside which the
#: reconnect is small; a fast one, where the CPU matters, reconnects in well under a millisecond.
RAW_BODY_MIN = 32 << 20


def _raw_socket(resp: httpx.Response) -> socket.socket | None:
    """The socket an HTTP/1.x answer's body arrives on, when its bytes can be read from it
    directly: httpcore's ``network_stream`` response extension (``get_extra_info("socket")``),
    a plain socket or an :class:`ssl.SSLSocket` speaking to the server itself. ``None`` for
    HTTP/2 (frames, not the body), TLS inside a proxy's TLS (the socket carries the outer
    layer: httpcore's stream then reports an :class:`ssl.SSLObject` of its own), or anything
    unknown."""
    if resp.http_version not in ("HTTP/1.1", "HTTP/1.0"):
        return None
    stream = resp.extensions.get("network_stream")
    get = getattr(stream, "get_extra_info", None)
    if get is None:
        return None
    sock, tls = get("socket"), get("ssl_object")
    if not isinstance(sock, socket.socket) or isinstance(tls, ssl.SSLObject):
        return None
    if (tls is None) != (not isinstance(sock, ssl.SSLSocket)):
        return None
    return sock


def body(resp: httpx.Response, timeout: float | None, *, raw: bool = False) -> Iterator[bytes | memoryview]:
    """The body of the streamed answer ``resp`` (asked with ``Accept-Encoding: identity``), in
    pieces: each one is valid only until the next is asked for (a buffer reused), so it must be
    consumed (hashed, written) at once.

    A body of known length (``Content-Length``, no ``Content-Encoding``, not chunked; at least
    :data:`RAW_BODY_MIN` bytes past its first piece) on an
    HTTP/1.x connection (:func:`_raw_socket`) is read through httpx for its first piece only,
    which drains everything h11 holds past the head (h11's ``ContentLengthReader`` hands over
    all it buffered at once), then straight from the socket, :data:`BODY_READ` bytes at a
    time into one buffer (``recv_into``: no new bytes object per read, no copy through h11).
    The connection is then closed by ``resp.close()`` instead of going back to the pool
    (httpcore sees the body unfinished). Any other answer goes through ``iter_bytes`` (which
    decodes a ``Content-Encoding`` the server applied anyway). Socket errors are raised as
    httpx's (``ReadTimeout``, ``ReadError``, ``RemoteProtocolError`` for a body cut short), so
    the caller's resume logic treats both paths alike; a piece is yielded before the next
    read, so what arrived before a failure counts.

    ``raw``: the bytes as served, a ``Content-Encoding`` never decoded (a download hashed as the
    server stored it, as curl and Nix's fetcher see it): such a body takes the socket path too,
    and any other goes through ``iter_raw``."""
    length = resp.headers.get("Content-Length", "")
    plain = (raw or resp.headers.get("Content-Encoding", "identity").strip().lower() in ("", "identity")) and \
        "chunked" not in resp.headers.get("Transfer-Encoding", "").lower()
    sock = _raw_socket(resp) if plain and length.isdigit() else None
    if sock is None:
        yield from (resp.iter_raw() if raw else resp.iter_bytes())
        return
    pieces = resp.iter_raw()
    first = next(pieces, b"")
    left = int(length) - len(first)
    if first:
        yield first
    if left < RAW_BODY_MIN:
        yield from pieces  # small (the connection stays pooled), or done, or past its length: httpx says so
        return
    view = memoryview(bytearray(min(BODY_READ, left)))
    try:
        sock.settimeout(timeout)
        while left > 0:
            n = sock.recv_into(view, min(len(view), left))
            if n == 0:
                raise httpx.RemoteProtocolError(f"the server closed the connection with {left} bytes of the body "
                                                "still to come")
            left -= n
            yield view[:n]
    except TimeoutError as exc:
        raise httpx.ReadTimeout(f"no byte of the body for {timeout} s") from exc
    except OSError as exc:
        raise httpx.ReadError(exc.strerror or str(exc) or type(exc).__name__) from exc


__all__ = ["BODY_READ", "DEFAULT_MAX_CONNECTIONS", "RAW_BODY_MIN", "DEFAULT_MAX_KEEPALIVE", "HTTPX_USER_AGENT", "TransferBoundError",
           "TransferBounds", "async_client", "body", "bounded", "client"]
