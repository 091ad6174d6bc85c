"""The inference routes: capability-gated proxying of OpenAI-compatible requests to engines.

Routes follow RFC section 5 under both ``/v1/`` and ``/api/v1/`` (:data:`ROUTES`, from the
capability registry); each is gated on the capability the model's recipe declared (an
undeclared one is HTTP 400 ``unsupported_operation``, the engine is not touched);
``endpoints`` remaps a declared capability to the engine's path.

Proxy rules: the request body streams to the engine (:mod:`lemonpack.server.body`: a JSON body
is read, bounded, to find the model; a multipart body only up to its ``model`` field) with
the client's ``Content-Length`` when it sent one; hop-by-hop headers are stripped both ways;
the engine is asked for ``identity`` encoding; no read timeout on inference routes; the
response streams chunk by chunk (``X-Accel-Buffering: no`` on event streams), its top-level
``model`` rewritten to the name the client asked for (:mod:`lemonpack.server.rewrite`).
Each engine has its own upstream connection pool for its whole life (one model's traffic
never touches another's connections). A client that leaves, before or after the first byte,
cancels the handler (aiohttp's handler cancellation), which closes the upstream request at
once and frees its slot; an engine dying mid-stream ends the stream as an error (below). One access line per
request (:func:`lemonpack.server.logs.log_request`; status 499: the client left).

Endpoint models are relayed to the endpoint the pool picks
(:mod:`lemonpack.server.endpoints`): a connection that cannot be made takes the endpoint out
and the request goes once to another live endpoint (nothing reached the first engine); an
answer that started is never retried.

Truthful ends: an answer the engine does not finish (it exits, resets, sends a bad frame,
stays silent longer than ``--upstream-read-timeout``, or the server cuts it: a drain that
timed out, a forced unload, its endpoint marked down by the probe) is never ended as if
complete. Before its head was sent the client gets 502 (504 for the read timeout); after,
an event stream gets a last ``event: error`` line in the OpenAI error shape and the
connection is closed without the body's end, so clients raise. The access line and the
metrics then say ``status=502`` (the access line adds ``cut=true``).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import urllib.parse
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from lemonpack.contract.capabilities import CAPABILITIES
from lemonpack.runtime.serving.gateway import DOWN
from lemonpack.server.body import BadBody, Body, clip, parse_json, read_bounded, read_multipart_model, shown
from lemonpack.server.catalog import ServedModel
from lemonpack.server.driver import Driver
from lemonpack.server.endpoints import EndpointModels, RemoteEngine, Target
from lemonpack.server.logs import log_request
from lemonpack.server.metrics import Metrics
from lemonpack.server.responses import Rejected, error, sse_error
from lemonpack.server.framing import Dechunker
from lemonpack.server.rewrite import ModelRewriter
from lemonpack.server.upstream import Answer, ConnectFailed, Cut, Exchange, ReadTimeout, Upstream, UpstreamError

log = logging.getLogger("lemonpack.server")

HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
                        "trailer", "trailers", "transfer-encoding", "upgrade", "proxy-connection"})

# route (after the /v1 or /api/v1 prefix) -> (method, capability), from the registry (section 5)
ROUTES: dict[str, tuple[str, str]] = {}
for _cap in CAPABILITIES.values():
    for _r in _cap.routes:
        _method, _path = _r.split(" ", 1)
        if _method in ("GET", "POST") and _path.startswith("/v1/"):
            ROUTES[_path[3:]] = (_method, _cap.name)


def route_key(route: str) -> str:
    """The :data:`ROUTES` key of ``route`` (``/slots/7`` -> ``/slots/{id}``)."""
    return route if route in ROUTES else re.sub(r"^/slots/[^/]+$", "/slots/{id}", route)


_DROPS: dict[tuple[str, ...], frozenset[str]] = {}


def strip_headers(headers: CIMultiDictProxy[str] | CIMultiDict[str], drop: tuple[str, ...] = ()) -> CIMultiDict[str]:
    """``headers`` without hop-by-hop ones (RFC 9110 section 7.6.1, and those ``Connection``
    names) and without ``drop`` (lower-case names); repeated headers are kept."""
    gone = _DROPS.get(drop)
    if gone is None:
        gone = _DROPS[drop] = HOP_BY_HOP | frozenset(drop)
    conn = headers.get("Connection")
    if conn is not None:
        gone = gone | {t.strip().lower() for v in headers.getall("Connection") for t in v.split(",")}
    return CIMultiDict([(k, v) for k, v in headers.items() if k.lower() not in gone])


def model_field(doc: object) -> str | None:
    """The ``model`` of a request document; :class:`BadBody` when it is there but not a string."""
    if not isinstance(doc, dict) or "model" not in doc:
        return None
    value = doc["model"]
    if not isinstance(value, str):
        raise BadBody(f"field 'model' must be a string (the model's name), not {type(value).__name__}")
    return value


class RawResponse(web.StreamResponse):
    """A response whose body is written already framed (a chunked engine answer relayed as
    it arrived): aiohttp adds no framing of its own (its length check is off, as for
    websockets), the ``Transfer-Encoding: chunked`` header is the engine's."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self._length_check = False


class _EndpointFailed(Exception):
    def __init__(self, why: str, unsent: bool) -> None:
        super().__init__(why)
        self.why, self.unsent = why, unsent


class _EngineGone(Exception):
    def __init__(self, why: str = "the engine exited") -> None:
        super().__init__(why)
        self.why = why


async def _exits(eng: Any, within: float = 0.5) -> bool:
    """Whether engine ``eng`` exits within ``within`` seconds (it closed its answer: a
    SIGKILLed process closes its sockets a moment before it can be reaped)."""
    for _ in range(int(within / 0.02)):
        if eng.poll() is not None:
            return True
        await asyncio.sleep(0.02)
    return eng.poll() is not None


def _gone(request: web.Request) -> bool:
    t = request.transport
    return t is None or t.is_closing()


class Proxy:
    """The inference routes' handler (:meth:`handle`) and the engines' connection pools."""

    def __init__(self, driver: Driver, endpoints: EndpointModels, metrics: Metrics) -> None:
        self.driver, self.endpoints, self.metrics = driver, endpoints, metrics
        self._pools: dict[int, tuple[Any, Upstream]] = {}  # the proxy's upstream connections, by engine
        self._by_url: dict[str, set[Exchange]] = {}  # exchanges in flight on each endpoint URL
        driver.on_engine_stopped.append(self.drop_pools)
        endpoints.on_down.append(self.cut_endpoint)

    def cut_endpoint(self, url: str, reason: str) -> int:
        """End every request in flight on endpoint ``url`` (its probe marked it down); they
        end as errors (:meth:`_answer`). Returns how many were cut."""
        cut = list(self._by_url.get(url, ()))
        for ex in cut:
            ex.cut(f"endpoint {url} is down: {reason}")
        if cut:
            log.warning("endpoint %s is down: cutting %d request(s) in flight", url, len(cut))
        return len(cut)

    def drop_pools(self) -> None:
        """Close the connection pools of engines that have exited."""
        for k, (eng, pool) in list(self._pools.items()):
            if eng.poll() is not None:
                pool.close()
                del self._pools[k]

    def close(self) -> None:
        for _eng, pool in list(self._pools.values()):
            pool.close()
        self._pools.clear()

    def _upstream(self, eng: Any) -> Upstream:
        """The connection pool of engine ``eng``: one per engine, kept for its life (one
        model's traffic never touches another's connections); one per endpoint URL for an
        endpoint model (dropped when the endpoint goes down)."""
        if isinstance(eng, Target):
            return self.endpoints.upstream(eng.url)
        got = self._pools.get(id(eng))
        if got is not None and got[0] is eng:
            return got[1]
        self.drop_pools()
        u = urllib.parse.urlsplit(eng.url)
        pool = Upstream(u.hostname or "127.0.0.1", u.port or 80, read_timeout=self.driver.config.upstream_read_timeout)
        self._pools[id(eng)] = (eng, pool)
        return pool

    async def _read_body(self, request: web.Request) -> tuple[str | None, Body]:
        """The model a request names and its :class:`Body` (:mod:`lemonpack.server.body`):
        a JSON body is read (bounded) and parsed (depth-bounded); a multipart body is read
        only up to its ``model`` field; another body with ``?model=`` is not read at all.
        Raises :class:`BadBody` (also for a ``model`` that is not a string)."""
        ctype = request.headers.get("Content-Type", "")
        length = request.content_length
        if ctype.startswith("multipart/"):
            name, body = await read_multipart_model(request, ctype)
            return name or request.query.get("model"), body
        if request.query.get("model") and ctype and "json" not in ctype:
            return request.query["model"], Body(request, complete=False, length=length)
        raw = await read_bounded(request)
        body = Body(None, raw, complete=True, length=len(raw))
        if raw:
            try:
                doc = parse_json(raw)
            except BadBody:
                if not ctype or "json" in ctype:  # said to be JSON (or said nothing): say it is not
                    raise
                doc = None  # `curl -d` sends JSON as a form: read if it parses, else only ?model=
            model = model_field(doc)
            if model is not None:
                return model, body
        return request.query.get("model"), body

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Forward one inference request to the model's engine (module docstring)."""
        t0 = time.monotonic()
        info: dict[str, Any] = {"model": None, "route": request.path, "status": 0, "bytes": 0, "ttfb_ms": None}
        try:
            resp = await self._proxy(request, info, t0)
            info["status"] = info["status"] or resp.status  # 499 when the client left mid-stream
            if isinstance(resp, web.Response) and resp.body is not None:  # an answer of ours (relayed ones stream)
                info["bytes"] = len(resp.body)  # type: ignore[arg-type]  # web.Response.body: bytes here
            return resp
        except asyncio.CancelledError:
            info["status"] = 499  # the client left: aiohttp cancelled the handler
            raise
        except ConnectionError:
            info["status"] = 499  # the client left while we wrote: nothing to answer, no traceback
            return web.Response(status=499)
        finally:
            info["total_ms"] = round((time.monotonic() - t0) * 1000, 2)
            known = info.pop("known", None)  # the served model's name (a model file's: its real path)
            if known is not None:
                info["model"] = known
            if info["model"] is not None:
                info["model"] = clip(info["model"])
            log_request(info)
            # labels stay bounded whatever clients send: a model name only once it resolved to a
            # served model, a route as the router's pattern (``/v1/slots/{id}``), never the path
            label = info["model"] if known is not None else ("<unknown>" if info["model"] else "")
            resource = request.match_info.route.resource
            self.metrics.request(label, resource.canonical if resource is not None else "<other>", info["status"],
                                 info["total_ms"] / 1000, None if info["ttfb_ms"] is None else info["ttfb_ms"] / 1000)

    async def _proxy(self, request: web.Request, info: dict[str, Any], t0: float) -> web.StreamResponse:
        route = request.path.removeprefix("/api").removeprefix("/v1")
        cap = ROUTES[route_key(route)][1]
        try:
            model, body = await self._read_body(request)
        except BadBody as e:
            return error(e.status, e.kind, str(e), headers=e.headers)
        try:
            info["model"] = model
            if not model:
                return error(400, "invalid_request_error", "no model given (JSON body, form field or ?model=)")
            served = await self.driver.served_or_error(model)
            if isinstance(served, web.Response):
                return served
            info["known"] = served.name
            if cap not in served.capabilities:
                return error(400, "unsupported_operation",
                             f"model {shown(model)} (recipe {served.recipe_id!r}) does not declare the {cap!r} "
                             f"capability needed by {request.method} {request.path}")
            return await self._forward(request, served, route, body, info, t0)
        finally:
            body.close()

    async def _forward(self, request: web.Request, served: ServedModel, route: str, body: Body,
                       info: dict[str, Any], t0: float) -> web.StreamResponse:
        try:
            req, eng = await self.driver.acquire(served.name, await self.driver.info(served))
        except Rejected as e:
            return e.response()
        ex = self.driver.exchange(req)
        if isinstance(eng, RemoteEngine):
            try:
                return await self._forward_remote(request, served, route, body, info, t0, ex)
            finally:
                self.driver.release(req)
        try:
            if eng.poll() is not None:  # exited, and the policy has not heard yet
                raise _EngineGone()
            return await self._relay(request, served, eng, route, body, info, t0, ex)
        except _EngineGone as e:
            if info.get("retried") or not body.replayable:
                return error(502, "upstream_error", f"{served.name}: engine at {eng.url} did not answer: {e.why}")
            info["retried"] = True  # the engine died just before: the next attempt restarts it
        finally:
            self.driver.release(req)
        await self.driver.engine_left(served.name, eng)
        return await self._forward(request, served, route, body, info, t0)

    async def _forward_remote(self, request: web.Request, served: ServedModel, route: str, body: Body,
                              info: dict[str, Any], t0: float, ex: Exchange) -> web.StreamResponse:
        """Relay to the endpoint the :class:`EndpointPool` picks; a connection that cannot be
        made takes that endpoint out and the request goes once to another live endpoint
        (nothing reached the first); an answer that started is never retried."""
        pool = self.endpoints.pool
        tried: list[str] = []
        while True:
            url = pool.pick(served.name, exclude=tried)
            if url is None:
                return error(503, "model_unavailable",
                             f"model {shown(served.name)} is down: {pool.reason(served.name)}",
                             headers={"Retry-After": "1"})
            info["endpoint"] = url
            try:
                return await self._relay(request, served, Target(url), route, body, info, t0, ex)
            except _EndpointFailed as e:
                self.endpoints.connect_failed(served.name, url, e.why)
                tried.append(url)
                if not (body.replayable and pool.retry(served.name, tried, e.unsent)):
                    if e.unsent and pool.state(served.name) == DOWN:  # it was the last one
                        return error(503, "model_unavailable", f"model {shown(served.name)} is down: "
                                     f"{pool.reason(served.name)}", headers={"Retry-After": "1"})
                    return error(502, "upstream_error", f"{served.name}: endpoint {url} did not answer: {e.why}")
            finally:
                pool.done(served.name, url)

    async def _relay(self, request: web.Request, served: ServedModel, eng: Any, route: str, body: Body,
                     info: dict[str, Any], t0: float, ex: Exchange) -> web.StreamResponse:
        """Send the request to ``eng`` and stream its answer back (:mod:`.upstream`: a chunked
        answer passes with its framing, unparsed, unless its ``model`` is rewritten). A client
        that leaves cancels this handler (aiohttp's handler cancellation), whatever the phase:
        the upstream connection is then closed at once, and the engine sees it."""
        assert served.recipe is not None
        remap = served.recipe.endpoints.get(ROUTES[route_key(route)][1]) if served.recipe.endpoints else None
        path = remap if remap else "/v1" + route
        target = path + (("?" + request.query_string) if request.query_string else "")
        headers = strip_headers(request.headers, drop=("host", "content-length", "accept-encoding"))
        headers["Accept-Encoding"] = "identity"
        pool = self._upstream(eng)
        remote = isinstance(eng, Target)
        if remote:
            self._by_url.setdefault(eng.url, set()).add(ex)
        try:
            return await self._exchange(request, served, eng, pool, target, headers, body, info, t0, ex)
        finally:
            if remote:
                left = self._by_url.get(eng.url)
                if left is not None:
                    left.discard(ex)
                    if not left:
                        del self._by_url[eng.url]

    async def _exchange(self, request: web.Request, served: ServedModel, eng: Any, pool: Upstream, target: str,
                        headers: CIMultiDict[str], body: Body, info: dict[str, Any], t0: float,
                        ex: Exchange) -> web.StreamResponse:
        try:
            up, lease = await pool.request(request.method, target, headers, body.payload(), body.length,
                                           lambda: body.replayable, exchange=ex)
        except (Cut, ReadTimeout) as e:  # ended on purpose, or silent too long: never retried
            info["cut"] = True
            log.warning("%s: request cut before the engine answered: %s", served.name, e,
                        extra={"fields": {"model": clip(served.name)}})
            status = 504 if isinstance(e, ReadTimeout) else 502
            return error(status, "upstream_error", f"{served.name}: {e}")
        except UpstreamError as e:
            if isinstance(eng, Target):  # an endpoint: out until its probe passes
                raise _EndpointFailed(str(e), isinstance(e, ConnectFailed)) from None
            if eng.poll() is None:
                for _ in range(25):  # a refused/reset connection: is the engine exiting? (<= 0.5 s)
                    await asyncio.sleep(0.02)
                    if eng.poll() is not None:
                        break
            if eng.poll() is None:
                return error(502, "upstream_error", f"{served.name}: engine at {eng.url} did not answer: {e}")
            raise _EngineGone(str(e)) from None
        try:
            return await self._answer(request, served, up, info, t0, None if isinstance(eng, Target) else eng)
        finally:
            lease.release(up)

    async def _answer(self, request: web.Request, served: ServedModel, up: Answer, info: dict[str, Any],
                      t0: float, eng: Any = None) -> web.StreamResponse:
        """Stream the engine's answer ``up`` to the client. ``eng``: the local engine (None for
        an endpoint): an event stream delimited by the close of the connection that ends
        without ``data: [DONE]`` while its engine exits was cut, not finished."""
        ctype = up.headers.get("Content-Type", "")
        rewriter = ModelRewriter(str(info["model"]), ctype)
        http11 = request.version >= aiohttp.HttpVersion11
        # a chunked event stream passes with its framing until a "model" member may be in it
        # (then the rest is de-chunked, rewritten and framed here): see Answer.relay's watch
        lazy = up.chunked and rewriter.sse and http11
        dechunk = Dechunker() if up.chunked and rewriter.active and not lazy else None
        raw = up.chunked and dechunk is None and http11
        out = RawResponse(status=up.status, reason=up.reason) if raw else \
            web.StreamResponse(status=up.status, reason=up.reason)
        out.headers.extend(strip_headers(up.headers, drop=("content-length",)))
        if raw:
            out.headers["Transfer-Encoding"] = "chunked"
        # a JSON answer is read whole, rewritten, then sent with its length (unless too large)
        sized = [rewriter.json]
        if ctype.startswith("text/event-stream"):
            out.headers["X-Accel-Buffering"] = "no"
            out.headers["Cache-Control"] = "no-cache"
        elif up.content_length is not None and not rewriter.json:
            out.content_length = up.content_length
        if not sized[0]:
            await out.prepare(request)

        def first() -> None:
            info["ttfb_ms"] = round((time.monotonic() - t0) * 1000, 2)

        async def send(data: bytes) -> None:
            if data:
                info["bytes"] += len(data)
                await out.write(data)

        closing = up.framing[0] == "close" and eng is not None and ctype.startswith("text/event-stream")
        tail = [b""]

        async def write(data: bytes) -> None:
            if closing:
                tail[0] = (tail[0] + data)[-32:]
            if rewriter.active and not lazy:
                data = rewriter.feed(data)
            if sized[0] and rewriter.passing:  # too large to rewrite: streamed unchanged from here
                sized[0] = False
                if up.content_length is not None:
                    out.content_length = up.content_length
                await out.prepare(request)
            if not sized[0]:
                await send(data)

        framed = [False]  # the rest of a lazily relayed stream is framed here

        async def write_framed(data: bytes) -> None:
            data = rewriter.feed(data)
            if data:
                await send(b"%x\r\n%s\r\n" % (len(data), data))

        def switch(walker: Any) -> tuple[Any, Dechunker]:
            framed[0] = True
            return write_framed, Dechunker.resume(walker.skip, walker.line, walker.trailers)

        try:
            # de-chunked there (one parse of the framing) when it must be
            direct = not closing and not sized[0] and (lazy or not rewriter.active)  # nothing to look at
            await up.relay(send if direct else write, first, dechunk, (b'"model"', switch) if lazy else None)
        except (UpstreamError, ValueError) as e:
            if _gone(request):
                info["status"] = 499
                return out
            why = str(e) if isinstance(e, Cut) else f"the engine's answer ended early: {e}"
            log.warning("%s: answer cut: %s", served.name, why, extra={"fields": {"model": clip(served.name)}})
            if sized[0]:  # nothing sent yet: a plain error answer
                return error(504 if isinstance(e, ReadTimeout) else 502, "upstream_error", f"{served.name}: {why}")
            return await self._cut(request, out, info, ctype, raw and not (framed[0] or up.at_frame_boundary()),
                                   f"{served.name}: {why}")
        if _gone(request):
            info["status"] = 499
            return out
        if closing and b"[DONE]" not in tail[0] and await _exits(eng):
            why = f"{served.name}: the engine exited during its answer (code {eng.poll()})"
            log.warning("%s: answer cut: %s", served.name, why, extra={"fields": {"model": clip(served.name)}})
            return await self._cut(request, out, info, ctype, False, why)  # close-delimited: no framing
        if framed[0]:  # the end of a stream framed here
            rest = rewriter.end()
            await send((b"%x\r\n%s\r\n" % (len(rest), rest) if rest else b"") + b"0\r\n\r\n")
            await out.write_eof()
            return out
        rest = rewriter.end() if rewriter.active and not lazy else b""
        if sized[0]:  # read whole: its head waits for the body, both leave in one write
            out.content_length = len(rest)
            out._send_headers_immediately = False  # web.Response's own setting (an aiohttp without it: 2 writes)
            await out.prepare(request)
            info["bytes"] += len(rest)
            await out.write_eof(rest)
            return out
        await send(rest)
        await out.write_eof()
        return out

    async def _cut(self, request: web.Request, out: web.StreamResponse, info: dict[str, Any], ctype: str,
                   mid_frame: bool, message: str) -> web.StreamResponse:
        """End an answer whose head was sent as an error the client cannot miss: an event
        stream gets a last ``event: error`` (:func:`sse_error`; in a chunk of its own when
        the engine's framing is relayed, unless it stopped inside a frame: ``mid_frame``),
        then the connection is closed without the body's end (no last chunk, or fewer bytes
        than its length), so an HTTP client raises. Logged and counted as status 502 with
        ``cut=true``."""
        info["status"], info["cut"] = 502, True
        if ctype.startswith("text/event-stream") and not mid_frame:
            data = sse_error(message)
            if isinstance(out, RawResponse):
                data = b"%x\r\n%s\r\n" % (len(data), data)
            try:
                info["bytes"] += len(data)
                await out.write(data)
            except ConnectionError:
                pass
        out.force_close()
        t = request.transport
        if t is not None:
            t.close()  # what was written is flushed, then FIN: aiohttp's end of body cannot be sent
        return out


__all__ = ["Proxy", "ROUTES", "HOP_BY_HOP", "route_key", "strip_headers", "model_field"]
