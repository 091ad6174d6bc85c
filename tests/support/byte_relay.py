"""A counting TCP relay on 127.0.0.1 in front of a real server (a ``LocalRegistry``): every byte
a client sends and every byte the server answers goes through it and is counted, so a benchmark
can say how many bytes reached the registry on the wire, not only what the client says it sent.

``ByteRelay("127.0.0.1:PORT")`` listens on a free port (``host``); each accepted connection gets
its own connection to the server and two threads moving bytes with ``os.splice`` through a
pipe (zero-copy in the kernel, the GIL released: the relay costs little CPU next to the tools it
measures). ``up`` counts client-to-server bytes, ``down`` server-to-client, both including the
HTTP heads; :meth:`take` returns and resets them. Use it as a context manager; closing it stops
accepting and closes every connection.
"""

from __future__ import annotations

import os
import socket
import threading

_PIECE = 1 << 20


class ByteRelay:
    """See the module doc."""

    def __init__(self, upstream: str):
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.up = 0
        self.down = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.host = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._socks: list[socket.socket] = []
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True, name="byte-relay")

    def __enter__(self) -> "ByteRelay":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def take(self) -> tuple[int, int]:
        """``(up, down)`` bytes since the last call (or the start); the counters restart at 0."""
        with self._lock:
            got = (self.up, self.down)
            self.up = self.down = 0
        return got

    def close(self) -> None:
        """Stop accepting; close every connection."""
        self._closed = True
        self._listener.close()
        for s in list(self._socks):
            try:
                s.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            self._socks += [client, server]
            for src, dst, up in ((client, server, True), (server, client, False)):
                threading.Thread(target=self._pump, args=(src, dst, up), daemon=True, name="byte-relay-pump").start()

    def _pump(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        r, w = os.pipe()
        try:
            while True:
                n = os.splice(src.fileno(), w, _PIECE)
                if n == 0:
                    break
                left = n
                while left:
                    left -= os.splice(r, dst.fileno(), left)
                with self._lock:
                    if up:
                        self.up += n
                    else:
                        self.down += n
        except OSError:
            pass
        finally:
            os.close(r)
            os.close(w)
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
