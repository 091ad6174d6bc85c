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

A chunked answer is de-framed first (:class:`lemonpack.server.framing.Dechunker`): the
rewritten body is framed again by the server.
"""

from __future__ import annotations

import json
import re

MAX_JSON_ANSWER = 8 << 20
MAX_LINE = 1 << 20
# the first "model" string member of each data: line (a JSON string holds no unescaped quote)
_MODEL = re.compile(rb'^(data:[^\n]*?)("model"[ \t]*:[ \t]*"(?:[^"\\\n]|\\.)*")', re.M)


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
        self._member_made: bytes | None = None  # made when first needed (most answers never need it)
        self._literal: bytes | None = None  # the engine's own member, as it writes it (learnt)
        self._buf = b""
        self._passing = False  # gave up rewriting (too large): pass the rest unchanged

    @property
    def _member(self) -> bytes:
        """The member written instead: ``"model":`` and the name as a JSON string."""
        if self._member_made is None:
            self._member_made = b'"model":' + json.dumps(self._name).encode()
        return self._member_made

    @property
    def _template(self) -> bytes:
        """:attr:`_member` as a ``re.sub`` template after the line's first group (backslashes doubled)."""
        return b"\\1" + self._member.replace(b"\\", b"\\\\")

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
            if b'"model"' not in out:  # no top-level member to rewrite (a cheap scan, no parse)
                return out
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


__all__ = ["ModelRewriter"]
