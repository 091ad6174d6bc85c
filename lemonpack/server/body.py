"""Request bodies of ``lemonpack serve``: find the model, bound what is parsed, stream the rest.

The proxy must know the model before it can pick an engine, and must not hold a body in
memory to learn it:

- **JSON** (``application/json``, or no/another type that parses as JSON, e.g. ``curl -d``):
  read up to :data:`MAX_JSON_BYTES` (over it: HTTP 413), parsed with :func:`parse_json`
  (nesting deeper than :data:`MAX_JSON_DEPTH`: HTTP 400 ``invalid_request_error``, never a
  ``RecursionError``), then forwarded from that buffer.
- **multipart** (``/audio/transcriptions`` uploads): read only until the ``model`` form field
  is complete (clients put form fields before files: httpx and the OpenAI SDK do, ``curl
  -F`` keeps the order given); the bytes read so far are kept in memory up to
  :data:`SPOOL_BYTES`, beyond that in an unlinked temporary file, and the body is forwarded
  as those bytes followed by the rest of the client's stream. Memory stays flat in the
  body's size.
- anything else with ``?model=``: streamed as it arrives.

The upstream request keeps the client's ``Content-Length`` when it sent one (the engine
sees the same framing), else it is sent chunked.

Bounds across requests (:class:`BodyLimits`, on the application as :data:`LIMITS`): every
read waits at most ``timeout`` seconds for the next bytes of a body (HTTP 408 otherwise,
nginx's ``client_body_timeout``), and the JSON bodies held in memory by all requests together
stay within a :class:`BodyBudget` (a body is counted from its ``Content-Length`` before it
is read, or as it arrives; past the budget: HTTP 503 ``server_busy`` with ``Retry-After``,
a body larger than the whole budget 413), released when its request ends.
"""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field

from aiohttp import web

from lemonpack.errors import LemonpackError

#: Largest JSON request body read to find the model (bytes); over it: HTTP 413.
MAX_JSON_BYTES = 64 << 20
#: Deepest JSON nesting accepted (arrays and objects); deeper: HTTP 400.
MAX_JSON_DEPTH = 128
#: Bytes of a multipart prefix kept in memory before it spills to a temporary file.
SPOOL_BYTES = 1 << 20
#: Longest model name (characters) quoted in an error or a log line.
NAME_SHOWN = 200

READ_CHUNK = 1 << 16


class BadBody(LemonpackError):
    """A request body that cannot be read as what the route takes (HTTP 400, or ``status``;
    ``kind`` is the OpenAI error type, ``headers`` extra answer headers)."""

    def __init__(self, message: str, status: int = 400, kind: str = "invalid_request_error",
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.headers = status, kind, headers


class BodyBudget:
    """Bytes of request bodies held in memory by every request together, at most ``limit``
    (None: no bound). :meth:`take` counts bytes or raises :class:`BadBody` (503
    ``server_busy``; 413 when ``n`` alone is over the limit), :meth:`give` returns them."""

    def __init__(self, limit: int | None) -> None:
        self.limit, self.held, self.refused = limit, 0, 0

    def take(self, n: int) -> None:
        if self.limit is None or n <= 0:
            self.held += max(n, 0)
            return
        if n > self.limit:
            self.refused += 1
            raise BadBody(f"request body of {n} bytes is larger than the server's body budget of "
                          f"{self.limit} bytes (serve --body-budget)", 413)
        if self.held + n > self.limit:
            self.refused += 1
            raise BadBody(f"the server holds {self.held} bytes of request bodies (budget {self.limit}, "
                          "serve --body-budget); retry later", 503, "server_busy", {"Retry-After": "1"})
        self.held += n

    def give(self, n: int) -> None:
        self.held = max(0, self.held - n)


@dataclass
class BodyLimits:
    """``timeout`` seconds a read waits for the next bytes of a body (None: forever), the
    shared :class:`BodyBudget` and ``held``: the bytes of it each request in flight holds, by
    ``id(request)`` (released by :func:`release_body` when its handler ends; a plain dict,
    not the request's own mapping, whose ``get``/``in``/``pop`` raise and catch a KeyError)."""

    timeout: float | None = None
    budget: BodyBudget = field(default_factory=lambda: BodyBudget(None))
    held: dict[int, int] = field(default_factory=dict)


#: Where a request's application keeps its :class:`BodyLimits` (none: no bounds).
LIMITS = web.AppKey("lemonpack_body_limits", BodyLimits)


def _limits(request: web.Request) -> BodyLimits | None:
    """The :class:`BodyLimits` of ``request``'s application (set on the root application:
    a plain look-up, not ``config_dict``'s chain built per call)."""
    try:
        return request.app.get(LIMITS)
    except (AttributeError, RuntimeError):  # a request without an application (tests)
        return None


async def _read(request: web.Request, limits: BodyLimits | None) -> bytes:
    """The next chunk of ``request``'s body (b"" at its end), within ``limits.timeout``
    (bytes already received are taken without a timer: a small body came with its head)."""
    content = request.content
    if limits is None or limits.timeout is None:
        return await content.read(READ_CHUNK)
    got = content.read_nowait(READ_CHUNK)
    if got or content.at_eof():
        return got
    try:
        async with asyncio.timeout(limits.timeout):
            return await content.read(READ_CHUNK)
    except TimeoutError:
        raise BadBody(f"no byte of the request body within {limits.timeout:g} s (serve --body-timeout)",
                      408) from None


def _hold(request: web.Request, limits: BodyLimits | None, n: int) -> None:
    if limits is None:
        return
    limits.budget.take(n)
    key = id(request)
    limits.held[key] = limits.held.get(key, 0) + n


def release_body(request: web.Request) -> None:
    """Give back the budget ``request``'s body held (its handler has ended)."""
    limits = _limits(request)
    if limits is not None:
        n = limits.held.pop(id(request), 0)
        if n:
            limits.budget.give(n)


def shown(name: object, limit: int = NAME_SHOWN) -> str:
    """``name`` for an error or a log line: ``repr``-escaped (no control character, no
    newline: one request, one log line) and cut to ``limit`` characters with the full length
    said (``'mmmm…' (10485760 chars)``)."""
    text = str(name)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text)} chars)"


def clip(name: object, limit: int = NAME_SHOWN) -> str:
    """``name`` for a log field: unquoted, control characters escaped (one log line), cut to
    ``limit`` characters with ``…(N chars)`` when longer; a plain name is unchanged."""
    text = str(name)
    cut = text[:limit]
    if not cut.isprintable():
        cut = repr(cut)[1:-1]
    return cut if len(text) <= limit else f"{cut}…({len(text)} chars)"


def json_depth_ok(doc: object, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when ``doc`` (parsed JSON) nests at most ``limit`` arrays/objects deep. Iterative
    (no recursion), stops at the first container past the limit."""
    stack = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        children: Iterable[object]
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return False
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return True


def parse_json(body: bytes, max_depth: int = MAX_JSON_DEPTH) -> object:
    """``json.loads(body)`` with a nesting bound. Raises :class:`BadBody` (400) for invalid
    JSON, invalid UTF-8, or nesting deeper than ``max_depth`` (including nesting so deep the
    parser itself gives up with ``RecursionError``)."""
    try:
        doc = json.loads(body)
    except RecursionError:
        raise BadBody(f"request body nests JSON deeper than {max_depth} levels") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise BadBody(f"request body is not valid JSON: {str(e)[:200]}") from None
    # each level of nesting opens with its own bracket: a body with at most max_depth of them
    # (two C-speed counts; brackets in strings only count too many) needs no walk
    if body.count(b"[") + body.count(b"{") > max_depth and not json_depth_ok(doc, max_depth):
        raise BadBody(f"request body nests JSON deeper than {max_depth} levels")
    return doc


async def read_bounded(request: web.Request, limit: int = MAX_JSON_BYTES) -> bytes:
    """The whole body of ``request``, at most ``limit`` bytes; :class:`BadBody` 413 beyond."""
    if request.content_length is not None and request.content_length > limit:
        raise BadBody(f"request body of {request.content_length} bytes is larger than {limit} bytes", 413)
    limits = _limits(request)
    known = request.content_length or 0
    _hold(request, limits, known)  # counted before a byte is read
    # one buffer, filled in place and returned as it is (a bytearray: no second copy of a
    # large body; json.loads and the relay take it as bytes)
    chunk = await _read(request, limits)
    if known and len(chunk) == known and request.content.at_eof():
        return chunk  # the whole body in one chunk (a small body comes with its head): no copy
    buf = bytearray(known)
    size = 0
    while chunk:
        end = size + len(chunk)
        if end > limit:
            raise BadBody(f"request body is larger than {limit} bytes", 413)
        if end > known:
            _hold(request, limits, end - known)
            known = end
        buf[size:end] = chunk
        size = end
        chunk = await _read(request, limits)
    if size < len(buf):
        del buf[size:]
    return buf  # type: ignore[return-value]  # bytes-like; see above


_NAME_RE = re.compile(rb'name="([^"]*)"')


def multipart_field(body: bytes, content_type: str, field: str) -> str | None:
    """The text value of form field ``field`` in a complete multipart ``body`` (None when
    absent)."""
    m = re.search(r'boundary="?([^";]+)"?', content_type)
    if not m:
        return None
    for part in body.split(b"--" + m.group(1).encode()):
        head, sep, value = part.partition(b"\r\n\r\n")
        if not sep:
            continue
        n = _NAME_RE.search(head)
        if n and n.group(1).decode(errors="replace") == field and b"filename=" not in head:
            return value[:-2].decode(errors="replace") if value.endswith(b"\r\n") else value.decode(errors="replace")
    return None


def _field_in(window: bytes, boundary: bytes, field: str) -> str | None:
    """The value of form field ``field`` when one whole part of it is inside ``window``."""
    delim = b"--" + boundary
    start = 0
    while True:
        i = window.find(delim, start)
        if i < 0:
            return None
        j = window.find(delim, i + len(delim))
        if j < 0:
            return None  # this part is not complete yet
        part = window[i + len(delim):j]
        head, sep, value = part.partition(b"\r\n\r\n")
        n = _NAME_RE.search(head)
        if sep and n and n.group(1).decode(errors="replace") == field and b"filename=" not in head:
            return value[:-2].decode(errors="replace") if value.endswith(b"\r\n") else value.decode(errors="replace")
        start = j


class Body:
    """A request body being forwarded: the bytes read to find the model (in memory or in a
    temporary file) then the rest of the client's stream. :meth:`chunks` yields it once;
    :attr:`replayable` says whether it can be sent again (nothing was taken from the stream)."""

    def __init__(self, request: web.Request | None, head: bytes = b"", spool=None, complete: bool = True,
                 length: int | None = None) -> None:
        self._request = request
        self.head = head
        self._spool = spool
        self.complete = complete  # the whole body is in head/spool
        self.length = length  # Content-Length the client sent (None: chunked or none)
        self.started = False

    @property
    def replayable(self) -> bool:
        return self.complete or not self.started

    @property
    def empty(self) -> bool:
        return self.complete and not self.head and self._spool is None

    def payload(self):
        """What the upstream client sends: None (no body), the bytes (a body read whole: one
        write with the headers), else :meth:`chunks`."""
        if self.empty:
            return None
        if self.complete and self._spool is None:
            self.started = True
            return self.head
        return self.chunks()

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body, chunk by chunk (the spool from its start, then the rest of the stream)."""
        self.started = True
        if self._spool is not None:
            self._spool.seek(0)
            while True:
                b = self._spool.read(READ_CHUNK)
                if not b:
                    break
                yield b
        if self.head:
            yield self.head
        if not self.complete and self._request is not None:
            limits = _limits(self._request)
            while chunk := await _read(self._request, limits):
                yield chunk

    def close(self) -> None:
        if self._spool is not None:
            self._spool.close()
            self._spool = None


async def read_multipart_model(request: web.Request, content_type: str) -> tuple[str | None, Body]:
    """Read ``request`` until its ``model`` form field is complete; ``(model or None, Body)``.
    Memory: at most :data:`SPOOL_BYTES` plus one window; the rest goes to an unlinked
    temporary file (only when the field comes after a large file part)."""
    m = re.search(r'boundary="?([^";]+)"?', content_type)
    length = request.content_length
    if not m:
        return None, Body(request, complete=False, length=length)
    boundary = m.group(1).encode()
    head = bytearray()
    spool = None
    tail = b""  # last bytes already spooled, kept to find a field split across the spill
    limits = _limits(request)
    while chunk := await _read(request, limits):
        head += chunk
        found = _field_in(tail + bytes(head), boundary, "model")
        if found is not None:
            return found, Body(request, bytes(head), spool, complete=False, length=length)
        if len(head) > SPOOL_BYTES:
            if spool is None:
                spool = tempfile.TemporaryFile(prefix="lemonpack-body-")
            spool.write(head)
            tail = bytes(head[-READ_CHUNK:])
            head = bytearray()
    return _field_in(tail + bytes(head), boundary, "model"), Body(request, bytes(head), spool, complete=True,
                                                                   length=length)


__all__ = ["BadBody", "Body", "BodyBudget", "BodyLimits", "LIMITS", "release_body", "clip", "MAX_JSON_BYTES", "MAX_JSON_DEPTH", "json_depth_ok", "multipart_field", "parse_json",
           "read_bounded", "read_multipart_model", "shown"]
