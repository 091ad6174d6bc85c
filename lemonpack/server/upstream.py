"""The upstream side of the proxy: a small HTTP/1.1 client that relays engine answers raw.

Why not aiohttp's client: it parses a chunked answer frame by frame (one Python call per
server-sent event) and the proxy then frames it again, which halved streaming throughput
(``bench/proxy.py``: 0.5x direct for a 5,000-event burst). Nor an httpx client from
:mod:`lemonpack.httpclient` (every other outgoing request's): h11 de-chunks the answer the
same way, and ``bench/proxy.py``'s "relay client alone" measures it at 1.25-1.65x the time of
this relay per 5,000-event stream and 2.7-3.9x per small request. Here a chunked answer is passed
to the client *as it arrived*, framing included; frames are only walked (size line, skip) to
find the end, after they were passed on (when the bytes end with an empty line, as the last
chunk does, or every MiB), and a sized answer is copied as it is read; a burst of small reads
is paced (:meth:`_Conn.pace`). Else the usual HTTP/1.1 (RFC 9112): request framing by length
or chunked, 1xx answers skipped, ``HEAD``/204/304 bodiless, a body delimited by the close.

:class:`Upstream` is one engine's pool of keep-alive connections, kept for the engine's
life; a connection goes back to the pool only after a whole exchange, else it is closed (a
client that leaves closes the engine's connection: the engine sees it at once). A pooled
connection the engine closed meanwhile is retried once on a fresh one when the body can be.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from multidict import CIMultiDict

from lemonpack.server.framing import ChunkWalker, FramingError, halves

READ = 1 << 16
WALK_EVERY = 1 << 20  # bytes of a chunked answer passed on before its frames are walked
HEAD_LIMIT = 1 << 16
CONNECT_TIMEOUT = 10.0


#: Burst pacing of a streamed answer (:meth:`_Conn.pace`): bytes and seconds.
PACE_BELOW, PACE_GAP = READ // 4, 0.001

#: A body read whole is written in slices of this many bytes, each drained before the next
#: (one write of a 60 MiB body would copy its unsent part into the transport's buffer).
WRITE_SLICE = 1 << 20


class UpstreamError(ConnectionError):
    """The engine did not answer (refused, reset, closed before an answer, malformed head)."""


class Cut(UpstreamError):
    """The exchange was ended on purpose (:meth:`Exchange.cut`): the
    server stopped waiting for this engine (a drain that timed out, a forced unload, an
    endpoint its probe marked down). Its text is the reason."""


class ReadTimeout(UpstreamError):
    """The engine sent nothing for ``read_timeout`` seconds (``serve --upstream-read-timeout``)."""


class ConnectFailed(UpstreamError):
    """No connection could be made: not one byte of the request reached the engine (safe to
    send elsewhere)."""


class Answer:
    """An engine's answer: ``status``, ``reason``, ``headers``; the body is read by
    :meth:`relay`. ``framing``: ``("length", n)``, ``("chunked", None)``, ``("close", None)``
    or ``("none", None)``."""

    def __init__(self, conn: "_Conn", status: int, reason: str, headers: CIMultiDict, framing: tuple) -> None:
        self._conn = conn
        self.status, self.reason, self.headers, self.framing = status, reason, headers, framing
        self.done = framing[0] == "none"
        self._walker = ChunkWalker()  # a chunked body passed on: its frames walked so far
        self._backlog: list[bytes] = []  # and those passed on, not walked yet

    @property
    def chunked(self) -> bool:
        return self.framing[0] == "chunked"

    @property
    def content_length(self) -> int | None:
        return self.framing[1] if self.framing[0] == "length" else (0 if self.framing[0] == "none" else None)

    async def relay(self, write: Callable[[bytes], Awaitable[None]], first: Callable[[], None] | None = None,
                    decode: Any = None, watch: tuple[bytes, Callable[[Any], Any]] | None = None) -> None:
        """Pass the body to ``write`` as it arrives (a chunked body with its framing, unless
        ``decode``, a :class:`lemonpack.server.framing.Dechunker`, is given: then its data,
        the one parse of the framing); ``first()`` before the first bytes. ``watch``:
        ``(needle, switch)`` for a chunked body passed with its framing: from the first read
        that may hold ``needle`` (in it, across two reads, or cut once by the chunk framing:
        its first or last half is there), the rest is de-chunked instead:
        ``switch(walker)`` gets the framing's state (a :class:`lemonpack.server.framing.ChunkWalker` at the start of
        that read) and returns ``(write, decoder)`` for the rest. Raises
        :class:`UpstreamError` when the engine ends it early."""
        conn = self._conn
        read = conn.read
        kind, n = self.framing
        if kind == "none":
            return
        if kind == "chunked" and decode is not None:
            await self._decoded(write, first, decode, b"")
            return
        if kind == "length":
            left = n
            while left > 0:
                data = await read(min(READ, left))
                if not data:
                    raise conn.ended(f"the engine closed its answer {left} bytes short")
                if first is not None:
                    first(); first = None
                left -= len(data)
                await write(data)
            self.done = True
            return
        if kind == "close":
            passed = 0
            while True:
                if passed:
                    await conn.pace(passed)
                data = await read(READ)
                if not data:
                    if conn.cut is not None:
                        raise conn.ended("")
                    self.done = True
                    self._conn.reusable = False
                    return
                if first is not None:
                    first(); first = None
                await write(data)
                passed = len(data)
        # Forward first, walk later: a chunked body always ends with an empty line (CRLF CRLF,
        # or LF LF from a lenient engine), so the frames read so far are walked only when the
        # bytes end like that or hold a last chunk ("0" CRLF CRLF, found at C speed), or when
        # WALK_EVERY bytes are waiting (memory stays bounded).
        # The walk is then off the client's critical path: it has the bytes already.
        walker = self._walker = ChunkWalker()
        backlog = self._backlog
        waiting = 0
        tail = b""
        head, end = halves(watch[0]) if watch is not None else (b"", b"")
        assert len(head) <= 8, "the seam between two reads holds 8 bytes of each"
        passed = 0
        while True:
            if passed:
                await conn.pace(passed)
            data = await read(READ)
            if not data:
                raise conn.ended("the engine closed its chunked answer before its end")
            if first is not None:
                first(); first = None
            seam = tail + data[:8]
            if watch is not None:
                if head in data or end in data or head in seam or end in seam:  # C-speed scans, none per chunk
                    if self.walk():
                        self._conn.reusable = False
                        raise UpstreamError("the engine sent bytes after the end of its chunked answer")
                    out, decoder = watch[1](walker)
                    await self._decoded(out, None, decoder, data)
                    return
            await write(data)
            backlog.append(data)
            waiting += len(data)
            passed = len(data)
            tail = data[-8:] if len(data) >= 8 else (tail + data)[-8:]  # (no copy of the whole read)
            if waiting < WALK_EVERY and not (tail.endswith(b"\r\n\r\n") or tail.endswith(b"\n\n")
                                             or b"0\r\n\r\n" in data or b"0\r\n\r\n" in seam):
                continue
            waiting = 0
            if self.walk():
                self.done = True
                return

    def walk(self) -> bool:
        """Walk the frames of a chunked body passed on but not walked yet; True when they hold
        its end. Raises :class:`UpstreamError` for bytes after that end or a bad frame."""
        walker, backlog = self._walker, self._backlog
        try:
            for k, part in enumerate(backlog):
                try:
                    used = walker.feed(part)
                except FramingError as e:
                    self._conn.reusable = False
                    raise UpstreamError(f"the engine sent {e}") from None
                if walker.done:
                    if used < len(part) or k < len(backlog) - 1:
                        # bytes after the end (already passed on): not an exchange we can reuse
                        self._conn.reusable = False
                        raise UpstreamError("the engine sent bytes after the end of its chunked answer")
                    break
        finally:
            backlog.clear()
        return walker.done

    def at_frame_boundary(self) -> bool:
        """Whether the chunked body passed on so far ends between two chunks (a chunk of
        the server's own can follow it); False when a frame is bad or incomplete."""
        try:
            self.walk()
        except UpstreamError:
            return False
        w = self._walker
        return not (w.skip or w.line or w.trailers or w.done)

    async def _decoded(self, write: Callable[[bytes], Awaitable[None]], first: Callable[[], None] | None,
                       decode: Any, data: bytes) -> None:
        """The rest of a chunked body de-chunked by ``decode`` (from ``data``, then reads)."""
        conn = self._conn
        got = 0
        while True:
            if not data:
                if got:
                    await conn.pace(got)
                data = await conn.read(READ)
                if not data:
                    raise conn.ended("the engine closed its chunked answer before its end")
            if first is not None:
                first(); first = None
            got = len(data)
            try:
                out = decode.feed(data)
            except ValueError as e:
                conn.reusable = False
                raise UpstreamError(f"the engine sent a bad chunked answer: {e}") from None
            data = b""
            if out:
                await write(out)
            if decode.done:
                if decode.extra:
                    conn.reusable = False
                    raise UpstreamError("the engine sent bytes after the end of its chunked answer")
                self.done = True
                return


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 read_timeout: float | None = None) -> None:
        self.reader, self.writer = reader, writer
        self.reusable = True
        self.cut: str | None = None  # why the exchange was ended on purpose
        self.read_timeout = read_timeout
        self.read = reader.read if read_timeout is None else self._read_timed
        self.paced_at = -1.0  # loop time of the last read pace() saw in this exchange (-1: none yet)

    async def pace(self, n: int) -> None:
        """After a streamed read of ``n`` bytes was passed on: when it was below :data:`PACE_BELOW`
        and within :data:`PACE_GAP` s of the one before (a burst faster than it can be passed a
        read at a time: 5,000 events took 800 reads in ``bench/gateway.py``, each waking this
        process and the client), stop reading the engine's socket for ``PACE_GAP`` s: the next
        read takes what came meanwhile in one piece. Events further apart (a model's tokens),
        the first read, a reader holding bytes or paused by its own flow control: no pause."""
        loop = asyncio.get_running_loop()
        last, self.paced_at = self.paced_at, loop.time()
        if n >= PACE_BELOW or last < 0 or self.paced_at - last >= PACE_GAP:
            return
        transport: Any = self.writer.transport
        if getattr(self.reader, "_buffer", b"") or getattr(self.reader, "_paused", True) or transport.is_closing():
            return  # bytes already here, or paused by the reader itself: its own resume stands
        transport.pause_reading()
        try:
            await asyncio.sleep(PACE_GAP)
        finally:
            if not transport.is_closing():
                transport.resume_reading()
        self.paced_at = loop.time()

    async def _read_timed(self, n: int) -> bytes:
        try:
            async with asyncio.timeout(self.read_timeout):
                return await self.reader.read(n)
        except TimeoutError:
            self.reusable = False
            raise ReadTimeout(f"the engine sent nothing for {self.read_timeout:g}s "
                              "(serve --upstream-read-timeout)") from None

    def ended(self, why: str) -> UpstreamError:
        """The error for an answer that ended early: :class:`Cut` when it was cut on purpose."""
        self.reusable = False
        return Cut(self.cut) if self.cut is not None else UpstreamError(why)

    def abort(self, reason: str) -> None:
        """End the exchange now (the engine's connection is reset); readers see :class:`Cut`."""
        if self.cut is None:
            self.cut = reason
        self.reusable = False
        self.writer.transport.abort()

    def close(self) -> None:
        self.writer.close()


class Upstream:
    """Keep-alive connections to one engine at ``host:port`` (module docstring)."""

    def __init__(self, host: str, port: int, max_idle: int = 64, ssl=None, read_timeout: float | None = None) -> None:
        """``ssl``: an :class:`ssl.SSLContext` for an https endpoint (None: plain http);
        ``read_timeout``: seconds the engine may stay silent (waiting for the answer's head,
        or between two reads of its body) before the exchange fails with
        :class:`ReadTimeout` (None: no bound)."""
        self.host, self.port, self.ssl = host, port, ssl
        self.max_idle = max_idle
        self.read_timeout = read_timeout
        self._idle: list[_Conn] = []
        self.closed = False
        self._host_line = f"Host: {f'[{host}]' if ':' in host else host}:{port}\r\n"

    async def _connect(self) -> _Conn:
        try:
            r, w = await asyncio.wait_for(asyncio.open_connection(self.host, self.port, limit=HEAD_LIMIT,
                                                                  ssl=self.ssl), CONNECT_TIMEOUT)
        except (OSError, asyncio.TimeoutError) as e:
            raise ConnectFailed(f"cannot connect to {self.host}:{self.port}: {e}") from None
        return _Conn(r, w, self.read_timeout)

    async def request(self, method: str, target: str, headers: CIMultiDict, body: object,
                      length: int | None, replayable: Callable[[], bool],
                      exchange: "Exchange | None" = None) -> tuple[Answer, "_Lease"]:
        """Send one request; ``(answer head, lease)``. ``body``: None, bytes, or an async
        iterator of bytes (sent with ``Content-Length: length`` when given, else chunked);
        ``replayable()`` says whether it may be sent again on a fresh connection. The lease
        must be released (:meth:`_Lease.release`) when the exchange ends, however it ends.
        ``exchange``: an :class:`Exchange` through which the caller may cut it, from the
        first byte sent to the end of the answer."""
        while self._idle:
            conn = self._idle.pop()
            if conn.writer.is_closing() or conn.reader.at_eof():
                conn.close()
                continue
            try:
                if exchange is not None:
                    exchange.attach(conn)
                return await self._exchange(conn, method, target, headers, body, length)
            except (Cut, ReadTimeout):
                conn.close()
                raise
            except UpstreamError:
                conn.close()
                if not replayable():
                    raise
            except BaseException:
                conn.close()
                raise
        conn = await self._connect()
        try:
            if exchange is not None:
                exchange.attach(conn)
            return await self._exchange(conn, method, target, headers, body, length)
        except BaseException:
            conn.close()
            raise

    async def _exchange(self, conn: _Conn, method, target, headers, body, length) -> tuple[Answer, "_Lease"]:
        conn.paced_at = -1.0
        head = [f"{method} {target} HTTP/1.1\r\n{self._host_line}"]
        head += [f"{k}: {v}\r\n" for k, v in headers.items()]
        streaming = body is not None and not isinstance(body, (bytes, bytearray))
        if body is None:
            if method in ("POST", "PUT", "PATCH"):
                head.append("Content-Length: 0\r\n")
        elif not streaming:
            head.append(f"Content-Length: {len(body)}\r\n")
        elif length is not None:
            head.append(f"Content-Length: {length}\r\n")
        else:
            head.append("Transfer-Encoding: chunked\r\n")
        head.append("\r\n")
        w = conn.writer
        try:
            if streaming:
                w.write("".join(head).encode("latin-1"))
                async for chunk in body:
                    if not chunk:
                        continue
                    w.write(chunk if length is not None else b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    await w.drain()
                if length is None:
                    w.write(b"0\r\n\r\n")
            elif body and len(body) > WRITE_SLICE:  # a large body in slices: no copy of it is buffered
                w.write("".join(head).encode("latin-1"))
                view = memoryview(body)
                for i in range(0, len(body), WRITE_SLICE):
                    w.write(view[i:i + WRITE_SLICE])
                    await w.drain()
            else:
                w.write("".join(head).encode("latin-1") + (body or b""))
            await w.drain()
            while True:
                try:
                    if conn.read_timeout is None:
                        raw = await conn.reader.readuntil(b"\r\n\r\n")
                    else:
                        async with asyncio.timeout(conn.read_timeout):
                            raw = await conn.reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    raise conn.ended("the engine closed the connection without an answer") from None
                except TimeoutError:
                    raise ReadTimeout(f"the engine sent no answer for {conn.read_timeout:g}s "
                                      "(serve --upstream-read-timeout)") from None
                except asyncio.LimitOverrunError:
                    raise UpstreamError(f"the engine's answer head is larger than {HEAD_LIMIT} bytes") from None
                status, reason, hdrs = _parse_head(raw)
                if status >= 200 or status == 101:
                    break
        except UpstreamError:
            raise
        except ConnectionError as e:
            if conn.cut is not None:
                raise Cut(conn.cut) from None
            raise UpstreamError(str(e) or type(e).__name__) from None
        framing = _framing(method, status, hdrs)
        if any(t.strip().lower() == "close" for v in hdrs.getall("Connection", []) for t in v.split(",")):
            conn.reusable = False
        return Answer(conn, status, reason, hdrs, framing), _Lease(self, conn)

    def _give_back(self, conn: _Conn) -> None:
        if self.closed or len(self._idle) >= self.max_idle or conn.writer.is_closing():
            conn.close()
        else:
            self._idle.append(conn)

    def close(self) -> None:
        """Close every idle connection; connections in use close when released."""
        self.closed = True
        for c in self._idle:
            c.close()
        self._idle.clear()


class Exchange:
    """A handle on one request's exchange with the engine, for cutting it on purpose
    (:meth:`cut`: a drain that timed out, a forced unload, an endpoint marked down). A cut
    before a connection is attached applies as soon as one is."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._conn: _Conn | None = None

    def attach(self, conn: _Conn) -> None:
        self._conn = conn
        if self.reason is not None:
            conn.abort(self.reason)

    def cut(self, reason: str) -> None:
        """End the exchange now: the relay raises :class:`Cut` with ``reason``."""
        if self.reason is None:
            self.reason = reason
        if self._conn is not None:
            self._conn.abort(self.reason)


class _Lease:
    def __init__(self, pool: Upstream, conn: _Conn) -> None:
        self._pool = pool
        self._conn: _Conn | None = conn

    def release(self, answer: Answer) -> None:
        """Back to the pool after a whole exchange; otherwise the connection is closed."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if answer.done and conn.reusable:
            self._pool._give_back(conn)
        else:
            conn.close()


def _parse_head(raw: bytes) -> tuple[int, str, CIMultiDict]:
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise UpstreamError(f"the engine answered something that is not HTTP/1.x: {lines[0][:80]!r}")
    hdrs: CIMultiDict = CIMultiDict()
    for ln in lines[1:]:
        if not ln:
            continue
        k, sep, v = ln.partition(":")
        if not sep or not k or k != k.strip():
            raise UpstreamError(f"the engine sent a malformed header line {ln[:80]!r}")
        hdrs.add(k, v.strip())
    return int(parts[1]), parts[2] if len(parts) > 2 else "", hdrs


def _framing(method: str, status: int, hdrs: CIMultiDict) -> tuple:
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        return ("none", None)
    te = ",".join(hdrs.getall("Transfer-Encoding", [])).lower()
    if te:
        if te.replace(" ", "").split(",")[-1] != "chunked":
            return ("close", None)
        return ("chunked", None)
    cl = hdrs.getall("Content-Length", [])
    if cl:
        if len(set(cl)) != 1 or not cl[0].strip().isdigit():
            raise UpstreamError(f"the engine sent a bad Content-Length {cl!r}")
        n = int(cl[0])
        return ("length", n) if n else ("none", None)
    return ("close", None)


__all__ = ["Answer", "ConnectFailed", "Cut", "Exchange", "ReadTimeout", "Upstream", "UpstreamError"]
