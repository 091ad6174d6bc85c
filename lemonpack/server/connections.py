"""Client connections bounded: a cap, a header timeout, idle connections reused, one log line per fault.

A server that holds a file descriptor per connection runs out of them when clients open
connections and send nothing (a port scan, a stuck pool, slowloris). nginx's answers, taken
here (nginx docs, ``ngx_http_core_module``: ``client_header_timeout``, ``keepalive_timeout``,
``client_body_timeout``; ``ngx_core_module``: ``worker_connections``, whose exhaustion closes
*reusable* idle connections first, ``ngx_drain_connections``):

- **a cap** (:attr:`Limits.max_connections`, clamped to what the open-files limit leaves:
  :func:`connection_cap`): at the cap, a new connection first takes the place of the
  connection idle longest (one with no request in progress: a fresh one that sent no full
  request head, or a kept-alive one between requests), which is closed; when every connection
  is busy with a request, the new one is answered HTTP 503 in the OpenAI error shape and
  closed (:class:`Overflow`).
- **a header timeout** (:attr:`Limits.header_timeout`): a connection must send a complete
  request head within it of being accepted, and of its first byte after a previous request;
  otherwise it gets 408 (when it sent part of a head) and is closed.
- **an idle keep-alive timeout** (:attr:`Limits.keepalive_timeout`): aiohttp's own
  ``keepalive_timeout`` (``RequestHandler``): a connection idle that long between requests
  is closed.
- **one line per condition per interval** (:class:`Once`): the event loop's exception handler
  (:func:`quiet_exception_handler`) folds "out of file descriptors" (``EMFILE``/``ENFILE`` on
  ``accept``, asyncio retries after 1 s) into one line per :data:`LOG_EVERY` seconds with a
  count, never a traceback per accept; the cap and overflow are told the same way.

The handler is aiohttp's ``web.RequestHandler`` (the aiohttp server's protocol), subclassed:
:class:`GuardedHandler` reads two of its attributes (``_current_request``, ``_messages``,
``_request_count``) to know whether a request is in progress; ``tests/server/test_connections.py``
fails if aiohttp changes them.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import resource
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from aiohttp import web

log = logging.getLogger("lemonpack.server")

#: Seconds between two lines about the same condition (fd exhaustion, the cap reached).
LOG_EVERY = 10.0
#: File descriptors kept for everything but client connections (engine pipes and upstream
#: connections are counted per connection below; this is the listening socket, logs, the
#: watcher's scans, the event loop, the engines' own start-up).
FD_RESERVE = 64
#: Connections past the cap being answered 503 at once, at most (beyond: closed unanswered).
OVERFLOW_MAX = 64
#: Seconds a connection answered 503 past the cap is read (and dropped) before it is closed.
OVERFLOW_LINGER = 1.0


@dataclass(frozen=True)
class Limits:
    """Connection bounds of ``lemonpack serve``: ``max_connections`` open client
    connections (clamped by :func:`connection_cap`), ``header_timeout`` seconds to send a
    complete request head, ``keepalive_timeout`` seconds idle between requests, ``body_timeout``
    seconds between two reads of a request body (:mod:`lemonpack.server.body`)."""

    max_connections: int = 1024
    header_timeout: float = 10.0
    keepalive_timeout: float = 75.0
    body_timeout: float = 60.0


def connection_cap(wanted: int, nofile: int | None = None) -> int:
    """The connection cap for ``wanted`` under the soft open-files limit ``nofile`` (default:
    this process's): each connection may hold two descriptors (the client's, an upstream's),
    and :data:`FD_RESERVE` stay free, so ``accept`` never meets ``EMFILE`` from connections."""
    if nofile is None:
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if nofile == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, (nofile - FD_RESERVE) // 2))


class Once:
    """One log line per key per ``every`` seconds: :meth:`tell` logs the first occurrence at
    once and counts the rest, which the next line after the interval reports (``N more in the
    last S s``)."""

    def __init__(self, every: float = LOG_EVERY) -> None:
        self.every = every
        self._last: dict[str, float] = {}
        self._more: dict[str, int] = {}

    def tell(self, key: str, message: str, level: int = logging.WARNING) -> bool:
        """Log ``message`` under ``key`` unless one was logged less than ``every`` s ago
        (then count it); True when logged."""
        now = time.monotonic()
        if now - self._last.get(key, -self.every) < self.every:
            self._more[key] = self._more.get(key, 0) + 1
            return False
        more = self._more.pop(key, 0)
        self._last[key] = now
        suffix = f" ({more} more in the last {self.every:g} s)" if more else ""
        log.log(level, "%s%s", message, suffix, extra={"fields": {"condition": key}})
        return True


def _is_fd_exhaustion(exc: BaseException | None) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE)


def quiet_exception_handler(once: Once):
    """An event-loop exception handler (``loop.set_exception_handler``): descriptor
    exhaustion (``EMFILE``/``ENFILE``, e.g. asyncio's "socket.accept() out of system
    resource") is one line per :data:`LOG_EVERY` s, without a traceback; anything else goes
    to the loop's default handler."""
    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if _is_fd_exhaustion(exc):
            once.tell("fd-exhausted", f"out of file descriptors ({context.get('message', '')}: {exc}); "
                      "new connections wait until some close")
            return
        loop.default_exception_handler(context)
    return handler


class GuardedHandler(web.RequestHandler):
    """aiohttp's request handler, known to a :class:`Guard`: it reports when it opens and
    closes and is closed when it sends no complete request head within the header timeout."""

    def __init__(self, guard: Guard, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard = guard
        self.header_timer: asyncio.TimerHandle | None = None
        self.armed_at = 0  # requests parsed when the header timer was armed
        self.got_bytes = False

    @property
    def idle(self) -> bool:
        """No request in progress or parsed and waiting (a fresh connection, or between requests)."""
        return self._current_request is None and not self._messages

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.guard.opened(self)
        self._arm()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.guard.closed(self)
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.header_timer is None and self.idle:
            self._arm()  # the first bytes of a head after a previous request
        self.got_bytes = True
        self.guard.touched(self)
        super().data_received(data)

    def _arm(self) -> None:
        self.armed_at = self._request_count
        self.got_bytes = False
        self.header_timer = self._loop.call_later(self.guard.limits.header_timeout, self._header_timeout)

    def _header_timeout(self) -> None:
        self.header_timer = None
        if self._request_count != self.armed_at or not self.idle or self.transport is None:
            return  # a request head arrived in time
        if self.got_bytes:
            self.transport.write(_answer(408, "Request Timeout", "invalid_request_error",
                                         f"no complete request head within {self.guard.limits.header_timeout:g} s"))
        self.guard.timed_out += 1
        self.force_close()
        self.transport.close()


class Overflow(asyncio.Protocol):
    """A connection past the cap while every connection is busy: answered 503
    ``server_busy`` in the OpenAI error shape and closed."""

    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.guard.overflowing += 1
        t: Any = transport
        t.write(_answer(503, "Service Unavailable", "server_busy",
                        f"the server holds its limit of {self.guard.cap} connections, all busy; retry later",
                        retry_after=True))
        t.write_eof()  # the answer, then end of file; what the client sends is read and dropped
        # (closing with unread bytes would reset the connection and lose the answer), for a second
        self.timer = asyncio.get_running_loop().call_later(OVERFLOW_LINGER, t.abort)

    def data_received(self, data: bytes) -> None:
        pass

    def eof_received(self) -> bool:
        return False  # close once the client has closed its side too

    def connection_lost(self, exc: BaseException | None) -> None:
        self.guard.overflowing -= 1
        if self.timer is not None:
            self.timer.cancel()


def _answer(status: int, reason: str, kind: str, message: str, retry_after: bool = False) -> bytes:
    body = json.dumps({"error": {"message": message, "type": kind}}).encode()
    extra = b"Retry-After: 1\r\n" if retry_after else b""
    return (b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n%s\r\n"
            % (status, reason.encode(), len(body), extra)) + body


class Guard:
    """The protocol factory for ``loop.create_server``: a :class:`GuardedHandler` per
    connection while under :attr:`cap`, else the idle connection used longest ago is closed
    to make room, else an :class:`Overflow`. ``handler_kwargs`` are aiohttp's
    ``RequestHandler`` arguments (``keepalive_timeout``, ``max_line_size`` ...)."""

    def __init__(self, server: web.Server, limits: Limits, handler_kwargs: dict[str, Any],
                 once: Once | None = None, nofile: int | None = None) -> None:
        self.server, self.limits, self.kwargs = server, limits, handler_kwargs
        self.cap = connection_cap(limits.max_connections, nofile)
        self.once = once or Once()
        self.open: OrderedDict[GuardedHandler, None] = OrderedDict()  # least recently used first
        #: handlers made, not yet connected (weak: one whose connection failed before
        #: ``connection_made`` is forgotten with it)
        self.pending: weakref.WeakSet[GuardedHandler] = weakref.WeakSet()
        self.overflowing = 0
        self.reused = self.refused = self.timed_out = 0

    def __call__(self) -> asyncio.BaseProtocol:
        if len(self.open) + len(self.pending) >= self.cap and not self._make_room():
            self.refused += 1
            self.once.tell("connection-cap", f"connection cap {self.cap} reached with every connection busy: "
                           "answering 503 server_busy")
            if self.overflowing >= OVERFLOW_MAX:
                return _Closer()
            return Overflow(self)
        h = GuardedHandler(self, self.server, loop=asyncio.get_running_loop(), **self.kwargs)
        self.pending.add(h)
        return h

    def _make_room(self) -> bool:
        for h in self.open:
            if h.idle:
                self.reused += 1
                self.once.tell("connection-reuse", f"connection cap {self.cap} reached: closing the connections "
                               "idle longest to make room", logging.INFO)
                self.open.pop(h)
                h.force_close()
                if h.transport is not None:
                    h.transport.close()
                return True
        return False

    def opened(self, h: GuardedHandler) -> None:
        self.pending.discard(h)
        self.open[h] = None

    def touched(self, h: GuardedHandler) -> None:
        if h in self.open:
            self.open.move_to_end(h)

    def closed(self, h: GuardedHandler) -> None:
        self.open.pop(h, None)


class _Closer(asyncio.Protocol):
    """Past the cap and past :data:`OVERFLOW_MAX` answers: closed at once."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class GuardedSite(web.SockSite):
    """aiohttp's ``SockSite`` whose connections are made by a :class:`Guard`."""

    def __init__(self, runner: web.AppRunner, sock: Any, guard_of: Any, **kwargs: Any) -> None:
        super().__init__(runner, sock, **kwargs)
        self._guard_of = guard_of
        self.guard: Guard | None = None

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None
        self.guard = self._guard_of(server)
        self._server = await asyncio.get_running_loop().create_server(self.guard, sock=self._sock,
                                                                      backlog=self._backlog)


__all__ = ["Limits", "Guard", "GuardedHandler", "GuardedSite", "Once", "Overflow", "connection_cap",
           "quiet_exception_handler", "LOG_EVERY", "FD_RESERVE"]
