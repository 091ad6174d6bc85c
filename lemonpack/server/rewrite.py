"""The ``model`` field of engine answers, rewritten to the name the client asked for.

An engine reports the model it runs as it knows it (llama-server: the model file's path);
a client asked for a registered name (``user.qwen``) and expects that name back, as from
OpenAI or Lemonade. :class:`ModelRewriter` rewrites the top-level ``model`` string:

- a JSON answer (``application/json``) is read whole (it is one document; at most
  :data:`MAX_JSON_ANSWER` bytes, a larger one passes unchanged), parsed and written again;
- an event stream (``text/event-stream``) is rewritten line by line as it arrives, never
  buffered whole: in each ``data: {...}`` line the first ``"model": "..."`` member is
  replaced (a JSON string cannot hold an unescaped quote, so the member cannot be text
  inside another string); a line longer than :data:`MAX_LINE` passes unchanged.

A chunked answer is de-framed first (:class:`Dechunker`, RFC 9112 section 7.1): the
rewritten body is framed again by the server.
"""

from __future__ import annotations

import json
import re

MAX_JSON_ANSWER = 8 << 20
MAX_LINE = 1 << 20
_SIZE = re.compile(rb"([0-9a-fA-F]{1,16})(?:;[^\r\n]*)?\r?\n")
# the first "model" string member of each data: line (a JSON string holds no unescaped quote)
_MODEL = re.compile(rb'^(data:[^\n]*?)("model"[ \t]*:[ \t]*"(?:[^"\\\n]|\\.)*")', re.M)


class Dechunker:
    """Incremental decoder of a chunked body: :meth:`feed` framed bytes, get the data.
    ``done`` once the body ended (the last chunk, its trailer lines and the empty line);
    ``extra``: bytes fed after that end (the relay then does not reuse the connection)."""

    def __init__(self) -> None:
        self._buf = b""
        self._left = 0  # data bytes of the current chunk still to come
        self._crlf = False  # the line end after a chunk's data is due
        self._trailers = False  # after the last chunk: trailer lines up to the empty one
        self.done = False
        self.extra = 0

    @classmethod
    def resume(cls, skip: int, line: bytes = b"", trailers: bool = False) -> "Dechunker":
        """A decoder taking over a chunked body part of which was already walked: ``skip``
        bytes of the current chunk still to come (its data, then its CRLF), ``line`` a part
        of a size or trailer line read, ``trailers`` after the last chunk (the state of
        :class:`lemonpack.server.upstream._ChunkWalker`)."""
        d = cls()
        d._buf, d._trailers = line, trailers
        if skip > 2:
            d._left = skip - 2
        elif skip:
            d._crlf = True  # only (part of) the line end after the data is left
        return d

    def feed(self, data: bytes) -> bytes:
        """The data bytes in ``data`` (framing removed); raises ValueError on a bad size line."""
        buf = self._buf + data if self._buf else data
        pos, n, out = 0, len(buf), []
        while pos < n and not self.done:
            if not self._left and not self._crlf:  # fast path: whole chunks with their CRLF
                m = _SIZE.match(buf, pos)
                if m is not None:
                    size = int(m.group(1), 16)
                    start = m.end()
                    end = start + size
                    if size and end + 2 <= n and buf[end:end + 2] == b"\r\n":
                        out.append(buf[start:end])
                        pos = end + 2
                        continue
            if self._left:
                take = min(self._left, n - pos)
                out.append(buf[pos:pos + take])
                pos += take
                self._left -= take
                self._crlf = not self._left
                continue
            nl = buf.find(b"\n", pos)
            if nl < 0:
                if n - pos > 4096:
                    raise ValueError("chunk size line too long")
                break
            line = buf[pos:nl].strip()
            pos = nl + 1
            if self._trailers:  # trailers (if any) are not data
                if not line:
                    self.done, self.extra = True, n - pos
                    break
                continue
            if self._crlf:
                self._crlf = False
                if not line:
                    continue
            if not line:
                continue
            size = int(line.split(b";", 1)[0], 16)
            if size == 0:
                self._trailers = True
                continue
            self._left = size
        self._buf = b"" if self.done else buf[pos:]
        return b"".join(out)


class ModelRewriter:
    """Rewrites the ``model`` member of an answer of type ``content_type`` to ``model``.
    :meth:`feed` returns what can be sent now, :meth:`end` the rest. ``active`` is False for
    answers that are neither JSON nor an event stream (nothing is changed)."""

    def __init__(self, model: str, content_type: str) -> None:
        ctype = content_type.split(";", 1)[0].strip().lower()
        self.sse = ctype == "text/event-stream"
        self.json = ctype == "application/json" or (ctype.startswith("application/") and ctype.endswith("+json"))
        self.active = self.sse or self.json
        self._name = model
        member = b'"model":' + json.dumps(model).encode()
        self._member = member
        self._template = b"\\1" + member.replace(b"\\", b"\\\\")  # a re.sub template: backslashes doubled
        self._literal: bytes | None = None  # the engine's own member, as it writes it (learnt)
        self._buf = b""
        self._passing = False  # gave up rewriting (too large): pass the rest unchanged

    @property
    def passing(self) -> bool:
        """True once a JSON answer proved too large to rewrite: the rest passes unchanged."""
        return self._passing

    def feed(self, data: bytes) -> bytes:
        if not self.active or self._passing:
            return data
        self._buf += data
        if self.json:
            if len(self._buf) > MAX_JSON_ANSWER:
                self._passing, out, self._buf = True, self._buf, b""
                return out
            return b""
        end = self._buf.rfind(b"\n")
        if end < 0:
            if len(self._buf) > MAX_LINE:
                out, self._buf = self._buf, b""
                return out
            return b""
        done, self._buf = self._buf[:end + 1], self._buf[end + 1:]
        return self._lines(done)

    def end(self) -> bytes:
        out, self._buf = self._buf, b""
        if not self.active or self._passing or not out:
            return out
        if self.json:
            try:
                doc = json.loads(out)
            except ValueError:
                return out
            if isinstance(doc, dict) and isinstance(doc.get("model"), str) and doc["model"] != self._name:
                doc["model"] = self._name
                return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()
            return out
        return self._lines(out)

    def _lines(self, block: bytes) -> bytes:
        """``block`` (whole lines) with each ``data:`` line's first ``model`` member rewritten.
        An engine writes the same member in every event (``"model":"/m/x.gguf"``): once seen,
        it is replaced as bytes (no regular expression per line); a ``model`` member any other
        way still goes through the expression."""
        if b'"model"' not in block:
            return block
        if self._literal is not None:
            out = block.replace(self._literal, self._member)
            if out.count(b'"model"') == out.count(self._member):
                return out
            block = out
        else:
            m = _MODEL.search(block)
            if m is not None and m.group(2) != self._member:
                self._literal = m.group(2)
        return _MODEL.sub(self._template, block)


__all__ = ["Dechunker", "ModelRewriter"]
