"""Running the server: ``lemonpack serve`` is one call, :func:`run` of a :class:`ServeConfig`.

:func:`run` wires the parts: :func:`parse_listen` reads ``8000``, ``:8000`` or
``host:8000``; :func:`bind` binds the listening socket up front (a taken port is refused
before anything starts, and the engine ports are chosen to avoid it); the loopback rule
(model files by path are served only on a loopback address: :class:`Catalog`
``model_files``); the engines driver (leftovers of dead runtimes removed first), logging
(:mod:`lemonpack.server.logs`, engine output included); then :func:`serve` runs until a
stop signal, and every engine is stopped.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from lemonpack.errors import UsageError  # a bad --host/--port or a taken port: exit 2
from lemonpack.server.connections import Guard, GuardedSite, Limits, Once, quiet_exception_handler

log = logging.getLogger("lemonpack.server")


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


def handler_args(limits: Limits) -> dict[str, Any]:
    """aiohttp's ``RequestHandler`` arguments for ``limits``: ``keepalive_timeout`` (idle
    between requests), no access log of aiohttp's own (the proxy writes one line per request),
    aiohttp's bounds on the request head (``max_line_size``/``max_field_size`` 8190 bytes,
    ``max_headers`` 128: too long is 400)."""
    return {"keepalive_timeout": limits.keepalive_timeout, "access_log": None}


async def _serve(server: Any, sock: socket.socket, stop: Any, on_ready: Callable[[], None] | None = None) -> int:
    limits: Limits = getattr(server, "limits", None) or Limits()
    once = Once()
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(quiet_exception_handler(once))
    kwargs = handler_args(limits)
    runner = web.AppRunner(server.app(), handler_cancellation=True, shutdown_timeout=SHUTDOWN_GRACE, **kwargs)
    await runner.setup()
    site = GuardedSite(runner, sock, lambda srv: Guard(srv, limits, kwargs, once))
    server.site = site
    await site.start()
    if on_ready is not None:
        on_ready()
    await loop.run_in_executor(None, stop.wait)
    server.driver.events.shutting_down()
    await site.stop()  # no new connection; requests on open ones get 503 server_shutting_down
    cut = await server.drain(lambda: len(getattr(stop, "got", ())) >= 2)
    await runner.cleanup()
    return cut


#: Seconds the HTTP server waits, after the drain, for handlers still writing (a client that
#: does not read) before it closes their connections.
SHUTDOWN_GRACE = 2.0


def serve(server: Any, sock: socket.socket, stop: Any, on_ready: Callable[[], None] | None = None) -> int:
    """Serve ``server`` (a :class:`lemonpack.server.app.Server`) on ``sock`` until ``stop``
    (a ``threading.Event`` or a :class:`lemonpack.runtime.lifecycle.stop_signals.StopSignals`: anything
    whose ``wait()`` blocks until it is set) is set; then stop listening and drain
    (:meth:`lemonpack.server.app.Server.drain`: running requests finish within the drain
    timeout, a second signal of a ``StopSignals`` cuts them at once), stop every engine
    (``Runner.close``) and the watcher. Returns how many requests the shutdown cut."""
    try:
        return asyncio.run(_serve(server, sock, stop, on_ready))
    finally:
        server.runner.close()
        server.catalog.stop()


#: Bytes of JSON request bodies all requests may hold in memory together (``--body-budget``).
DEFAULT_BODY_BUDGET = "256MiB"


@dataclass(frozen=True)
class ServeConfig:
    """The options of ``lemonpack serve``: ``host``/``port`` as typed (``--port`` may be
    ``:PORT`` or ``HOST:PORT``), ``max_in_flight`` requests per model, ``json_logs``,
    ``ttl``/``soft_idle``/``load_timeout`` seconds (None: never), ``memory_budget`` as typed
    (``24GiB``; None: the host's available RAM minus 1 GiB), ``metrics_remote``,
    ``engine_output`` (show the engines' output lines on stderr), ``drain_timeout`` seconds
    running requests may take to finish when a model gives way or serve stops (None: no
    bound), ``upstream_read_timeout`` seconds an engine may stay silent mid-exchange (None:
    no bound), ``queue_timeout`` seconds a request that does not fit in memory waits for it
    (None: 503 at once) and ``queue_limit`` requests waiting so at most, ``status_remote``
    (the status page answers non-loopback clients); ``policy``/``registries_d`` (``--policy``,
    ``--registries.d``: the trust policy engine images are judged with; None: the default
    places); the connection and body bounds (:mod:`lemonpack.server.connections`,
    :mod:`lemonpack.server.body`): ``max_connections``,
    ``header_timeout``/``keepalive_timeout``/``body_timeout`` seconds, ``body_budget`` as
    typed (``256MiB``); ``offline``: fetch no ``oci://`` checkpoint (it must be in the model
    store already)."""

    host: str = "127.0.0.1"
    port: str = "8000"
    max_in_flight: int = 64
    json_logs: bool = False
    ttl: float | None = None
    soft_idle: float | None = None
    metrics_remote: bool = False
    load_timeout: float | None = None
    memory_budget: str | None = None
    engine_output: bool = True
    drain_timeout: float | None = 30.0
    upstream_read_timeout: float | None = None
    queue_timeout: float | None = None
    queue_limit: int = 64
    status_remote: bool = False
    policy: str | None = None
    registries_d: str | None = None
    max_connections: int = Limits.max_connections
    header_timeout: float = Limits.header_timeout
    keepalive_timeout: float = Limits.keepalive_timeout
    body_timeout: float = Limits.body_timeout
    body_budget: str = DEFAULT_BODY_BUDGET
    offline: bool = False


def run(config: ServeConfig, notice: Callable[[str], None], stop: Any = None) -> int:
    """Serve until a stop signal (SIGINT/SIGTERM; or ``stop``, anything whose ``wait()``
    blocks until set); ``notice`` prints a line for the user (listening, stopped). Returns
    the exit code: 0 when every request in flight finished, 1 when the shutdown cut some
    (the drain timeout passed, or a second SIGTERM/SIGINT came). Raises :class:`UsageError` (exit 2) for a bad ``--port``,
    ``--memory-budget`` or a taken port, :class:`~lemonpack.errors.TrustError` (exit 3) for a
    ``--policy``/``--registries.d`` that cannot be used, before anything starts."""
    from lemonpack.errors import LemonpackError
    from lemonpack.hosts import is_loopback
    from lemonpack.runtime.engines.handles import Engines
    from lemonpack.runtime.serving.budget import default_budget, parse_size
    from lemonpack.runtime.lifecycle.runner import Runner
    from lemonpack.runtime.lifecycle.stop_signals import StopSignals
    from lemonpack.server.app import Server, ServerConfig
    from lemonpack.server.catalog import Catalog
    from lemonpack.runtime.engines.proctable import raise_nofile
    from lemonpack.server.body import BodyBudget, BodyLimits
    from lemonpack.server.connections import FD_RESERVE, connection_cap
    from lemonpack.server.logs import configure_logging, engine_output
    from lemonpack.trust.check import Trust

    try:
        budget = parse_size(config.memory_budget) if config.memory_budget is not None else default_budget()
    except LemonpackError as e:
        raise UsageError(f"--memory-budget: {e}") from None
    try:
        body_budget = parse_size(config.body_budget)
    except LemonpackError as e:
        raise UsageError(f"--body-budget: {e}") from None
    host, port = parse_listen(config.port, config.host)
    trust = Trust.named(config.policy, config.registries_d)  # a bad file named: exit 3 before anything starts
    old_nofile, nofile = raise_nofile()  # before the socket: every descriptor counts
    sock = bind(host, port)
    undo_logging = configure_logging(config.json_logs, config.engine_output)
    limits = Limits(max_connections=config.max_connections, header_timeout=config.header_timeout,
                    keepalive_timeout=config.keepalive_timeout, body_timeout=config.body_timeout)
    cap = connection_cap(limits.max_connections, nofile)
    log.info("open files: soft limit %s%s; connection cap %d%s", nofile,
             f" (raised from {old_nofile})" if nofile != old_nofile else "", cap,
             f" (--max-connections {limits.max_connections} needs {2 * limits.max_connections + FD_RESERVE} "
             f"open files)" if cap < limits.max_connections else "")
    engines = Engines(subreaper=True, sentinel=True)
    try:
        engines.cleanup_leftovers()
        # a remote client must not point an engine at any file of this machine (nor learn which exist)
        catalog = Catalog(avoid_ports=frozenset({port}), model_files=is_loopback(host), offline=config.offline,
                          progress=True, trust=trust).start()
        server = Server(catalog, Runner(catalog.plan, engines, on_spawn=engine_output, trust=trust,
                                               judged_references=catalog.judged_references),
                        ServerConfig(max_in_flight=config.max_in_flight, ttl=config.ttl, soft_idle=config.soft_idle,
                                     load_timeout=config.load_timeout, memory_budget=budget,
                                     metrics_remote=config.metrics_remote, drain_timeout=config.drain_timeout,
                                     upstream_read_timeout=config.upstream_read_timeout,
                                     queue_timeout=config.queue_timeout, queue_limit=config.queue_limit,
                                     status_remote=config.status_remote),
                        body_limits=BodyLimits(timeout=config.body_timeout, budget=BodyBudget(body_budget)))
        server.limits = limits
        ready = lambda: notice(f"listening on http://{host}:{port} (OpenAI API under /v1 and /api/v1)")  # noqa: E731
        if stop is not None:
            cut = serve(server, sock, stop, on_ready=ready)
        else:
            with StopSignals() as signals:
                cut = serve(server, sock, signals, on_ready=ready)
    finally:
        engines.close()
        undo_logging()
    notice(f"stopped; {cut} request(s) in flight were cut" if cut else "stopped")
    return 1 if cut else 0


__all__ = ["ServeConfig", "run", "serve", "bind", "parse_listen"]
