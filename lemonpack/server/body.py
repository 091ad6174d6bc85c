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
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import AsyncIterator, Iterable

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
    """A request body that cannot be read as what the route takes (HTTP 400, or ``status``)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


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
    if not json_depth_ok(doc, max_depth):
        raise BadBody(f"request body nests JSON deeper than {max_depth} levels")
    return doc


async def read_bounded(request: web.Request, limit: int = MAX_JSON_BYTES) -> bytes:
    """The whole body of ``request``, at most ``limit`` bytes; :class:`BadBody` 413 beyond."""
    if request.content_length is not None and request.content_length > limit:
        raise BadBody(f"request body of {request.content_length} bytes is larger than {limit} bytes", 413)
    buf = bytearray()
    async for chunk in request.content.iter_chunked(READ_CHUNK):
        buf += chunk
        if len(buf) > limit:
            raise BadBody(f"request body is larger than {limit} bytes", 413)
    return bytes(buf)


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
            async for chunk in self._request.content.iter_chunked(READ_CHUNK):
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
    async for chunk in request.content.iter_chunked(READ_CHUNK):
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


__all__ = ["BadBody", "Body", "clip", "MAX_JSON_BYTES", "MAX_JSON_DEPTH", "json_depth_ok", "multipart_field", "parse_json",
           "read_bounded", "read_multipart_model", "shown"]
