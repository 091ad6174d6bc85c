"""Chunked transfer coding (RFC 9112 section 7.1) as the proxy meets it in engine answers.

- :class:`ChunkWalker` finds the end of a chunked body without copying it (each size line
  read, the chunk skipped): the relay (:mod:`lemonpack.server.upstream`) passes the body on
  with its framing and walks it after.
- :class:`Dechunker` decodes it, for an answer whose ``model`` member is rewritten
  (:mod:`lemonpack.server.rewrite`); :meth:`Dechunker.resume` takes over from a walker.
- :func:`halves`: what to look for so that a member the framing cut once is still found.
"""

from __future__ import annotations

import re

_SIZE = re.compile(rb"([0-9a-fA-F]{1,16})(?:;[^\r\n]*)?\r?\n")


class FramingError(ValueError):
    """A chunked body that breaks the framing (a bad or too long size line)."""


def halves(needle: bytes) -> tuple[bytes, bytes]:
    """Two pieces of ``needle`` of which the bytes hold one wherever the chunk framing cuts
    it once: its first and last ``(len + 1) // 2`` bytes (a cut leaves a prefix or a suffix
    at least that long)."""
    k = (len(needle) + 1) // 2
    return needle[:k], needle[-k:]


class ChunkWalker:
    """Finds the end of a chunked body (RFC 9112 section 7.1) without copying it: each size
    line is read and the chunk skipped; then trailer lines up to the empty line."""

    def __init__(self) -> None:
        self.skip = 0
        self.line = b""
        self.trailers = False
        self.done = False
        self.last = b""  # the last whole size line walked (CRLF included) and its frame's length
        self.step = 0

    def feed(self, data: bytes) -> int:
        """Walk ``data``; return how many of its bytes belong to the body. The common case
        (a size line without extensions, then the chunk) costs one ``find`` and one ``int``."""
        i, n = 0, len(data)
        find = data.find
        while i < n:
            skip = self.skip
            if skip:
                if skip >= n - i:
                    self.skip = skip - (n - i)
                    return n
                i += skip
                self.skip = 0
                continue
            if not self.line and not self.trailers:
                # whole frames (a size line without extensions, its data and CRLF) in one
                # tight loop; anything else (a last chunk, an extension, a cut line) below.
                # A size line the same as the frame before's (an engine's events are often
                # the same size) is one C-speed comparison, not a find and an int.
                last, step = self.last, self.step
                startswith = data.startswith
                while True:
                    if last and startswith(last, i):
                        i += step
                    else:
                        j = find(b"\n", i)
                        if j < 0:
                            break
                        try:
                            size = int(data[i:j], 16)
                        except ValueError:
                            break
                        if not size:
                            break
                        last, step = data[i:j + 1], j + 3 - i + size
                        i += step
                    if i >= n:
                        self.last, self.step = last, step
                        self.skip = i - n
                        return n
                self.last, self.step = last, step
                if i >= n:
                    return n
            j = find(b"\n", i)
            if j < 0:
                self.line += data[i:]
                if len(self.line) > 4096:
                    raise FramingError("a chunk-size line longer than 4 KiB")
                return n
            if self.line:
                line, self.line = self.line + data[i:j + 1], b""
            else:
                line = data[i:j + 1]
            i = j + 1
            if self.trailers:
                if line in (b"\r\n", b"\n"):
                    self.done = True
                    return i
                continue
            try:
                size = int(line, 16)
            except ValueError:
                try:
                    size = int(line.split(b";", 1)[0], 16)
                except ValueError:
                    raise FramingError(f"a bad chunk-size line {line[:40]!r}") from None
            if size:
                self.skip = size + 2
            else:
                self.trailers = True
        return n


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
        :class:`ChunkWalker`)."""
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


__all__ = ["ChunkWalker", "Dechunker", "FramingError", "halves"]
