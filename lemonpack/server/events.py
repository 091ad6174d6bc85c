"""Engine events: one log line each, and the same events on ``GET /v1/events`` (server-sent events).

What an operator must learn without reading ``/v1/models`` in a loop: an engine
``starting`` (its estimated ``memory``), ``ready``, or ``start_failed``, one that ``exited`` after ready (its exit code or
the signal that killed it: an OOM kill is ``signal=9``), one ``replaced`` because the watchdog saw
its health check fail (why), one ``evicted`` to free memory (``for`` the model that needed it),
one that ``gave_way`` to another (slot policy) or is ``reloading`` with new load options, one
``unloaded`` (``by``: the client's ``POST /v1/unload`` and its address, ``ttl``, the discovery
watcher, the shutdown), its engine ``stopped``, a request ``refused`` by admission (memory,
``--max-in-flight``) or ``queued`` for memory (``--queue-timeout``).

Every event is a dict ``{"id": N, "ts": unix seconds, "event": KIND, "model": NAME, "message":
TEXT, ...fields}``; :meth:`EngineEvents.emit` logs it on the ``lemonpack.server.events`` logger
(one line, the server's text or JSON format) and hands it to every ``/v1/events`` stream. The
stream (loopback clients only, like ``/metrics``) follows the HTML living standard's
server-sent events (section 9.2, "Server-sent events"): ``id: N``, ``event: engine`` and one
``data:`` line of JSON per event, a ``: ping`` comment every :data:`PING_SECONDS`; a client that
reconnects with ``Last-Event-ID`` first gets the events it missed that are still held (the
last :data:`KEPT` events). A stream that falls :data:`QUEUE` events behind is closed (its
client reconnects with ``Last-Event-ID``), so a stalled reader never holds memory.

Everything here runs on the event loop (the driver calls :meth:`EngineEvents.emit` there).
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import json
import logging
import time
from collections import deque
from typing import Any

from aiohttp import web

from lemonpack.hosts import is_loopback
from lemonpack.runtime.lifecycle.runner import WATCHDOG
from lemonpack.runtime.serving.policy import (
    Arrive, EngineExited, EngineFailed, EngineReady, EngineStopped, Finish, Phase, ServingPolicy, Shutdown, Tick, Unload,
)
from lemonpack.server.body import clip, shown
from lemonpack.server.responses import error

log = logging.getLogger("lemonpack.server.events")

#: Events kept for clients that reconnect with ``Last-Event-ID``.
KEPT = 256
#: Events a stream may fall behind before it is closed.
QUEUE = 1024
#: Seconds between ``: ping`` comments on an idle stream.
PING_SECONDS = 15.0

#: Who the current request is (``"POST /v1/unload from 127.0.0.1"``), set by the server's
#: middleware for the handler's task: what an ``unloaded`` event names as ``by``.
REQUEST_SOURCE: contextvars.ContextVar[str | None] = contextvars.ContextVar("lemonpack_request_source",
                                                                            default=None)

#: Events logged as warnings (something an operator must look at); the others are info.
WARNINGS = frozenset({"exited", "replaced", "start_failed", "refused"})
#: Rejections that are admission refusals (event ``refused``), and how often (seconds) one
#: is told per model and kind: a flood of refused requests is one line a second, not one each.
REFUSALS = frozenset({"insufficient_memory", "rate_limit_error"})
REFUSED_EVERY = 1.0


class EngineEvents:
    """The event hub: :meth:`emit` (log one line, keep it, send it to every stream),
    :meth:`stream` (the ``GET /v1/events`` handler), :meth:`close` (end every stream: the
    server is shutting down). ``recent()`` is the events kept, oldest first.

    The driver (:class:`lemonpack.server.driver.Driver`) feeds it: :meth:`observe` each event
    before the ``policy`` (a :class:`ServingPolicy`) handles it and :meth:`handled` after,
    :meth:`stopping` when the policy stops an engine (why: :meth:`ServingPolicy.gives_way_to`,
    the unload that asked and who sent it, the ``ttl`` seconds, a shutdown), :meth:`refused`
    when it rejects a request."""

    def __init__(self, policy: ServingPolicy | None = None, *, ttl: float | None = None) -> None:
        self.policy, self.ttl = policy, ttl
        self._ids = itertools.count(1)
        self._kept: deque[dict[str, Any]] = deque(maxlen=KEPT)
        self._streams: set[asyncio.Queue[dict[str, Any] | None]] = set()
        self.closed = False
        self.stopping_server = False  # set by shutting_down(): a stop from then on is the shutdown's
        self._current: object = None  # the event the policy is handling (why it stops an engine)
        self._unload_by: dict[str, str] = {}
        self._refused: dict[tuple[str, str], float] = {}
        self._requests: dict[Any, str] = {}  # request -> model, while it waits or runs

    # -- what the driver tells

    def observe(self, ev: object, *, remote: bool = False) -> None:
        """Before the policy handles ``ev``: tell what it means (``remote``: an endpoint
        model, whose probes' verdicts are not engine events)."""
        self._current = ev
        if isinstance(ev, Arrive):
            self._requests[ev.req] = ev.model
            return
        if isinstance(ev, Finish):
            self._requests.pop(ev.req, None)
            return
        model = getattr(ev, "model", None)
        if model is None or remote or self.policy is None:
            return
        if isinstance(ev, EngineExited):
            if self.policy.phase(model) is Phase.READY:  # not asked to stop
                self._exited(model, ev.reason)
        elif isinstance(ev, EngineReady):
            eng = ev.engine
            pid, after = getattr(eng, "pid", None), getattr(eng, "ready_after", None)
            took = f" after {after:.1f} s" if isinstance(after, (int, float)) else ""
            self.emit("ready", model, f"engine ready (pid {pid}){took}", pid=pid, url=getattr(eng, "url", None))
        elif isinstance(ev, EngineFailed):
            self.emit("start_failed", model, f"engine failed to start: {(ev.error.splitlines() or [''])[0]}",
                      reason=ev.error)
        elif isinstance(ev, EngineStopped):
            self._unload_by.pop(model, None)
            if self.policy.phase(model) is not Phase.STOPPED:
                self.emit("stopped", model, "engine stopped")
        elif isinstance(ev, Unload):
            self._unload_by[model] = REQUEST_SOURCE.get() or self._unload_by.get(model) or "the server"

    def shutting_down(self) -> None:
        """The server is stopping: every engine stopped from now on (not unloaded by a
        client first) is ``unloaded`` ``by`` ``shutdown``."""
        self.stopping_server = True

    def handled(self, ev: object) -> None:
        """The policy has handled ``ev``."""
        self._current = None

    def _exited(self, model: str, reason: str) -> None:
        eng = self.policy.engine(model) if self.policy is not None else None
        pid = getattr(eng, "pid", None)
        if reason.startswith(WATCHDOG):
            why = reason[len(WATCHDOG):]
            self.emit("replaced", model, f"engine (pid {pid}) replaced by the watchdog: {why}; the next request "
                      "starts a new one", pid=pid, reason=why)
            return
        rc = eng.poll() if eng is not None and hasattr(eng, "poll") else None
        sig = -rc if isinstance(rc, int) and rc < 0 else None
        self.emit("exited", model, f"engine (pid {pid}) {reason or 'exited'} after it was ready", pid=pid,
                  code=rc if sig is None else None, signal=sig, reason=reason or None)

    def stopping(self, model: str) -> None:
        """The policy stops ``model``'s engine (while handling the event :meth:`observe` saw)."""
        gave = self.policy.gives_way_to(model) if self.policy is not None else None
        if gave is not None and gave[0] == "evict":
            self.emit("evicted", model, f"evicted (idle) to free memory for {shown(gave[1])}", **{"for": gave[1]})
        elif gave is not None and gave[0] == "swap":
            self.emit("gave_way", model, f"gives way to {shown(gave[1])} (slot policy)", **{"for": gave[1]})
        elif gave is not None and gave[0] == "reload":
            self.emit("reloading", model, "restarting with new load options")
        elif model in self._unload_by:
            by = self._unload_by.pop(model)
            self.emit("unloaded", model, f"unloaded by {by}", by=by)
        elif self.stopping_server or isinstance(self._current, Shutdown):
            self.emit("unloaded", model, "unloaded: the server is shutting down", by="shutdown")
        elif isinstance(self._current, Tick) and self.ttl is not None:
            self.emit("unloaded", model, f"unloaded: idle for {self.ttl:g} s (--ttl)", by="ttl")
        else:
            self.emit("unloaded", model, "unloaded by the serving policy", by="policy")

    def refused(self, req: Any, status: int, kind: str, message: str) -> None:
        """The policy rejected request ``req`` with ``status`` and OpenAI error ``kind``: an
        admission refusal (:data:`REFUSALS`) is an event, at most one per model and kind per
        :data:`REFUSED_EVERY` seconds."""
        if kind not in REFUSALS:
            return
        model = self._requests.get(req, "")
        key, now = (model, kind), time.monotonic()
        if now - self._refused.get(key, -REFUSED_EVERY) < REFUSED_EVERY:
            return
        self._refused[key] = now
        if len(self._refused) > 1024:
            self._refused.pop(next(iter(self._refused)))
        self.emit("refused", model, f"request refused ({status} {kind}): {message}", status=status, kind=kind)

    def queued(self, model: str, waiting: int, timeout: float | None) -> None:
        """A request for ``model`` waits for memory (``--queue-timeout``; ``waiting`` requests
        do): an event, at most one per model per :data:`REFUSED_EVERY` seconds, as refusals."""
        key, now = (model, "queued"), time.monotonic()
        if now - self._refused.get(key, -REFUSED_EVERY) < REFUSED_EVERY:
            return
        self._refused[key] = now
        self.emit("queued", model, f"request waits up to {timeout:g}s for memory ({waiting} waiting)",
                  waiting=waiting)

    # -- the hub

    def emit(self, event: str, model: str, message: str, **fields: Any) -> dict[str, Any]:
        """Record engine event ``event`` of ``model`` (``message``: one line for a person;
        ``fields``: JSON values such as ``pid``, ``code``, ``signal``, ``reason``, ``by``,
        ``for``). Returns the event as sent."""
        name = clip(model, 200)
        doc: dict[str, Any] = {"id": next(self._ids), "ts": round(time.time(), 3), "event": event, "model": name,
                               "message": " ".join(message.split())[:2000]}
        doc.update({k: v for k, v in fields.items() if v is not None})
        level = logging.WARNING if event in WARNINGS else logging.INFO
        line = {k: " ".join(v.split())[:500] if isinstance(v, str) else v  # one event, one log line
                for k, v in doc.items() if k not in ("id", "ts", "message", "model")}
        log.log(level, "%s: %s", name, doc["message"], extra={"fields": {"model": name, **line}})
        self._kept.append(doc)
        for q in list(self._streams):
            if q.qsize() >= QUEUE:  # fallen behind: end it (the client reconnects with Last-Event-ID)
                self._streams.discard(q)
                q.put_nowait(None)
            else:
                q.put_nowait(doc)
        return doc

    def recent(self) -> list[dict[str, Any]]:
        """The events kept (at most :data:`KEPT`), oldest first."""
        return list(self._kept)

    def close(self) -> None:
        """End every stream (the server is shutting down); later streams end at once."""
        self.closed = True
        for q in list(self._streams):
            q.put_nowait(None)
        self._streams.clear()

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """``GET /v1/events``: the events as server-sent events (module docstring); 403
        ``permission_error`` for a client that is not on a loopback address."""
        if not is_loopback(request.remote):
            return error(403, "permission_error", "/v1/events answers loopback clients only")
        try:
            after = int(request.headers.get("Last-Event-ID", "") or -1)
        except ValueError:
            after = -1
        q: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        if after >= 0:
            for kept in self._kept:
                if kept["id"] > after:
                    q.put_nowait(kept)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
        await resp.prepare(request)
        await resp.write(b": lemonpack engine events\n\n")
        if self.closed:
            return resp
        self._streams.add(q)
        try:
            while True:
                try:
                    doc: dict[str, Any] | None = await asyncio.wait_for(q.get(), PING_SECONDS)
                except asyncio.TimeoutError:
                    await resp.write(b": ping\n\n")
                    continue
                if doc is None:
                    break
                await resp.write(b"id: %d\nevent: engine\ndata: %s\n\n" % (doc["id"], json.dumps(doc).encode()))
        finally:
            self._streams.discard(q)
        return resp


__all__ = ["EngineEvents", "REQUEST_SOURCE", "KEPT", "QUEUE", "PING_SECONDS", "REFUSALS", "REFUSED_EVERY"]
