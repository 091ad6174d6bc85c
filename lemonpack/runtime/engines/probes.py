"""Health probes (RFC section 4.3) and the after-ready watchdog (section 9).

- ``http``: GET ``http://host:port{endpoint}``; only ``expected_status`` passes. Any other
  status (503 "Loading model" included) and connection errors keep waiting.
- ``tcp``: ``{port}`` accepts a TCP connection.
- ``process``: the child is still alive one ``poll_interval_ms`` after spawn.

:func:`wait_ready` polls at once, then every ``poll_interval_ms`` until ``timeout_seconds``;
between polls it waits on the child's exit, so a child that exits during the probe fails
the load at once with its exit code and last log lines (:class:`RuntimeFailure`), instead
of waiting out the timeout. A passing http/tcp probe only counts while the child is
still alive and, when the caller gives an ``owns_port`` check, while the listening socket
belongs to the child (another process answering on the same port is not the engine; see
:meth:`lemonpack.runtime.engines.handles.Engines.wait_ready`). Probes ignore proxy variables
(``trust_env=False``). Local engines speak plain http on loopback, so their client is made with
``verify=False``: loading the CA bundle would cost ~100 ms on every start for nothing. An
endpoint model's engine (``serve`` as a gateway) may be ``https``: :func:`check_once` takes the
``scheme`` and the caller's client verifies certificates.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Protocol

import httpx

from lemonpack import httpclient
from lemonpack.contract.model import HealthProbe
from lemonpack.errors import RuntimeFailure
from lemonpack.runtime.engines.logs import LogRing

LOG_TAIL = 20  # log lines quoted in a failure


class Watched(Protocol):
    """What a probe needs of a running child (see :class:`~lemonpack.runtime.engines.handles.EngineProcess`)."""

    def poll(self) -> int | None:
        """The exit code, or None while it runs."""

    def wait_exit(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True once the child has exited."""


def probe_host(host: str) -> str:
    """The address to probe an engine listening on ``host`` (wildcards map to loopback)."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


PROBE_TIMEOUT = 5.0
"""Seconds a probe request may take when its caller gives none (each probe passes its own)."""


def probe_client(verify: bool | ssl.SSLContext) -> httpx.Client:
    """A new client for health probes (the caller closes it): the environment's proxy
    variables ignored (``trust_env=False``: an engine on this machine, or an endpoint the user
    named, is never reached through a proxy), :data:`PROBE_TIMEOUT`; ``verify``: False for
    plain-http loopback engines (no CA bundle loaded), True or an ``ssl.SSLContext`` for an
    https endpoint. Made by :func:`lemonpack.httpclient.client`."""
    return httpclient.client(timeout=PROBE_TIMEOUT, trust_env=False, verify=verify)


def _url(host: str, port: int, endpoint: str, scheme: str = "http") -> str:
    h = probe_host(host)
    h = f"[{h}]" if ":" in h else h
    return f"{scheme}://{h}:{port}{endpoint if endpoint.startswith('/') else '/' + endpoint}"


def check_once(probe: HealthProbe, host: str, port: int, client: httpx.Client | None = None,
               timeout: float = 2.0, scheme: str = "http") -> tuple[bool, str]:
    """One probe attempt: ``(passed, what was seen)``; ``what`` is e.g. ``"HTTP 503"``,
    ``"connection refused"``. Never raises for network errors. ``process`` always passes.
    ``scheme``: ``https`` for a remote endpoint served over TLS (then ``client`` should
    verify certificates: the one made here does only for https)."""
    if probe.type == "http":
        own = client is None
        c = client or probe_client(verify=scheme == "https")
        try:
            r = c.get(_url(host, port, probe.endpoint, scheme), timeout=timeout)
            return r.status_code == probe.expected_status, f"HTTP {r.status_code}"
        except httpx.HTTPError as e:
            return False, _describe(e)
        finally:
            if own:
                c.close()
    if probe.type == "tcp":
        try:
            with socket.create_connection((probe_host(host), port), timeout=timeout):
                return True, "connected"
        except OSError as e:
            return False, e.strerror or type(e).__name__
    if probe.type == "process":
        return True, "alive"
    raise RuntimeFailure(f"unknown health probe type {probe.type!r}")


def _describe(e: Exception) -> str:
    if isinstance(e, httpx.ConnectError):
        text = str(e)
        if "CERTIFICATE" in text.upper() or "SSL" in text.upper():  # an https endpoint's TLS failed
            return "TLS: " + text[:200]
        return "connection refused"
    if isinstance(e, httpx.TimeoutException):
        return "timed out"
    return type(e).__name__


def describe_probe(probe: HealthProbe, host: str, port: int) -> str:
    """One line saying what :func:`wait_ready` waits for, e.g. ``http GET
    http://127.0.0.1:8080/health -> 200 (timeout 60s, every 500 ms)``."""
    every = f"every {probe.poll_interval_ms} ms"
    if probe.type == "http":
        return (f"http GET {_url(host, port, probe.endpoint)} -> {probe.expected_status} "
                f"(timeout {probe.timeout_seconds}s, {every})")
    if probe.type == "tcp":
        h = probe_host(host)
        return f"tcp connect to {f'[{h}]' if ':' in h else h}:{port} (timeout {probe.timeout_seconds}s, {every})"
    if probe.type == "process":
        return f"process still alive after {probe.poll_interval_ms} ms"
    return f"{probe.type} probe"


def failure(what: str, logs: LogRing | None) -> RuntimeFailure:
    """A :class:`RuntimeFailure` with ``what`` and the last :data:`LOG_TAIL` log lines."""
    tail = logs.tail(LOG_TAIL) if logs else []
    if tail:
        what += "\nlast log lines:\n  " + "\n  ".join(tail)
    return RuntimeFailure(what)


def wait_ready(probe: HealthProbe, host: str, port: int, child: Watched, *, name: str = "engine",
               logs: LogRing | None = None, cancelled: threading.Event | None = None,
               seen: list[str] | None = None, owns_port: Callable[[], bool | None] | None = None,
               clock: Callable[[], float] = time.monotonic) -> float:
    """Block until ``probe`` passes; return the seconds it took. ``seen`` (when given)
    receives every observation in order, consecutive repeats folded (``"HTTP 503"``...).

    A passing http/tcp attempt counts only if the child is still alive and ``owns_port()``
    (when given) does not return False: False means another process holds the port, so
    the answer did not come from the child; the attempt is recorded as ``"answered by
    another process"`` and polling goes on (the child usually exits soon with "address
    already in use", which fails the load with its exit code). None means "cannot tell".

    Raises :class:`RuntimeFailure` when the child exits first (exit code + log tail), when
    ``timeout_seconds`` pass (last observation, and an earlier answer from another process
    if there was one, + log tail) or when ``cancelled`` is set.

    ``clock`` (seconds, monotonic) measures the timeout and the returned duration; the waits
    between polls are ``child.wait_exit``. Tests pass a fake clock that ``wait_exit`` advances.
    """
    t0 = clock()
    deadline = t0 + probe.timeout_seconds
    interval = max(probe.poll_interval_ms, 1) / 1000.0
    last: str | None = None
    foreign: str | None = None  # the last answer that came from another process

    def exited() -> None:
        rc = child.poll()
        if rc is not None:
            when = ("before its health probe answered" if last is None
                    else f"during its health probe (last seen: {last})")
            raise failure(f"{name} exited with code {rc} {when}", logs)

    if probe.type == "process":
        if child.wait_exit(interval):
            exited()
        return clock() - t0
    with probe_client(verify=False) as client:
        while True:
            exited()
            if cancelled is not None and cancelled.is_set():
                raise RuntimeFailure(f"{name}: start cancelled")
            remaining = deadline - clock()
            ok, last = check_once(probe, host, port, client, timeout=max(0.05, min(remaining, 5.0)))
            if ok:
                exited()  # passed, but only if the child is the one answering
                if owns_port is not None and owns_port() is False:
                    ok, last = False, f"{last} from another process holding port {port}"
                    foreign = last
            if seen is not None and (not seen or seen[-1] != last):
                seen.append(last)
            if ok:
                return clock() - t0
            remaining = deadline - clock()
            if remaining <= 0:
                detail = last or "no answer"
                if foreign and foreign != last:  # the telling answer, even when the last poll timed out
                    detail += f"; before that: {foreign}"
                raise failure(f"{name} not ready after {probe.timeout_seconds}s "
                              f"({probe.type} probe of port {port}: {detail})", logs)
            child.wait_exit(min(interval, remaining))


class Watchdog:
    """After an http probe passed, keep checking it (RFC section 9).

    Every ``interval`` seconds (default: ``max(poll_interval_ms, 1 s)``) it probes once;
    after ``failures`` consecutive failed checks it calls ``on_crash(reason)`` once and
    stops. :meth:`stop` ends it without a report. Other probe types have no watchdog (the
    child's exit is reported by the process driver).
    """

    def __init__(self, probe: HealthProbe, host: str, port: int, on_crash: Callable[[str], None], *,
                 interval: float | None = None, failures: int = 3, name: str = "engine") -> None:
        self.probe, self.host, self.port, self.on_crash = probe, host, port, on_crash
        self.interval = interval if interval is not None else max(probe.poll_interval_ms / 1000.0, 1.0)
        self.failures = failures
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watchdog-{name}", daemon=True)

    def start(self) -> "Watchdog":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for the watchdog's thread to end (after :meth:`stop`
        or a report); True once it has: no probe runs and no report comes after that."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        bad = 0
        with probe_client(verify=False) as client:
            while not self._stop.wait(self.interval):
                ok, seen = check_once(self.probe, self.host, self.port, client, timeout=max(self.interval, 1.0))
                bad = 0 if ok else bad + 1
                if bad >= self.failures and not self._stop.is_set():
                    self._stop.set()
                    self.on_crash(f"health check failed {bad} times in a row ({seen})")
                    return


__all__ = ["LOG_TAIL", "PROBE_TIMEOUT", "Watchdog", "Watched", "check_once", "describe_probe", "failure",
           "probe_client", "probe_host", "wait_ready"]
