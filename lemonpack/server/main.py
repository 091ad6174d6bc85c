"""Running the server: listen address parsing, the bound socket, the asyncio loop.

:func:`parse_listen` reads ``8000``, ``:8000`` or ``host:8000``; :func:`bind` binds the
listening socket up front (a taken port is refused before anything starts, and the engine
ports are chosen to avoid it); :func:`serve` runs until ``stop`` is set, then stops every
engine.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket

from aiohttp import web

from lemonpack.errors import UsageError  # a bad --host/--port or a taken port: exit 2


def parse_listen(port: str, host: str) -> tuple[str, int]:
    """``(host, port)`` from ``--port`` text (``8000``, ``:8000``, ``host:8000``, ``[::1]:8000``)
    and ``--host``; raises :class:`UsageError` for anything else or a port outside 1..65535."""
    text = port.strip()
    if ":" in text:
        h, _, p = text.rpartition(":")
        h = h.strip("[]")
        if h:
            host = h
    else:
        p = text
    if not p.isdigit() or not 1 <= int(p) <= 65535:
        raise UsageError(f"--port {port!r}: expected PORT, :PORT or HOST:PORT with PORT in 1..65535")
    return host, int(p)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``; :class:`UsageError` when taken or unbindable."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        s.listen(1024)
    except OSError as e:
        s.close()
        if e.errno == errno.EADDRINUSE:
            raise UsageError(f"port {port} on {host} is already in use by another process; "
                             f"choose another --port") from None
        raise UsageError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    s.setblocking(False)
    return s


async def _serve(server, sock: socket.socket, stop, on_ready=None) -> None:
    runner = web.AppRunner(server.app(), access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.SockSite(runner, sock)
    await site.start()
    if on_ready is not None:
        on_ready()
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, stop.wait)
    await runner.cleanup()


def serve(server, sock: socket.socket, stop, on_ready=None) -> None:
    """Serve ``server`` (a :class:`lemonpack.server.app.Server`) on ``sock`` until ``stop``
    (a ``threading.Event`` or a :class:`lemonpack.cli.stop_signals.StopSignals`: anything
    whose ``wait()`` blocks until it is set) is set; then close the site, stop every engine (``Runner.close``) and the watcher."""
    try:
        asyncio.run(_serve(server, sock, stop, on_ready))
    finally:
        server.runner.close()
        server.catalog.stop()


class ClientFaultFilter(logging.Filter):
    """On aiohttp's server logger: a malformed request (``BadHttpMessage``, any
    ``HttpProcessingError``) or a client that left (``ConnectionError``) is the client's fault
    and is answered (400) or moot: log it as one line without a traceback, its text clipped."""

    def filter(self, record: logging.LogRecord) -> bool:
        from aiohttp.http_exceptions import HttpProcessingError

        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, (HttpProcessingError, ConnectionError)):
            what = " ".join(str(getattr(exc, "message", None) or exc).split())[:300]
            record.msg, record.args = "%s: %s: %s", (record.getMessage(), type(exc).__name__, what)
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def configure_logging(json_logs: bool):
    """Send ``lemonpack.server`` records to stderr, one line each (JSON with ``json_logs``),
    instead of the CLI's warning handler; returns a function that undoes it (so serving
    twice in one process does not stack handlers)."""
    from lemonpack.server.app import JsonLogFormatter, TextLogFormatter

    h = logging.StreamHandler()
    h.setFormatter(JsonLogFormatter() if json_logs else TextLogFormatter())
    quiet = ClientFaultFilter()
    aio = logging.getLogger("aiohttp.server")
    aio.addFilter(quiet)
    lg = logging.getLogger("lemonpack.server")
    before = (lg.level, lg.propagate)
    lg.addHandler(h)
    lg.setLevel(logging.INFO)
    lg.propagate = False

    def undo() -> None:
        aio.removeFilter(quiet)
        lg.removeHandler(h)
        lg.setLevel(before[0])
        lg.propagate = before[1]
    return undo
