"""Recipes shipped with lemonpack, built by ``lemonpack build --example`` with no network.

``hello-engine.json`` is a ``variant_of: llamacpp`` recipe whose artifact (a tiny
tar.gz holding an executable script) lives in ``mirror/`` laid out as a lemonpack mirror
(``<host>/<path>``). :func:`serve_mirror` serves that tree on 127.0.0.1 so the real
pipeline (download, sha256 check, unpack, layers, Nix) runs against it.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path

EXAMPLES_DIR = Path(str(resources.files("lemonpack.examples")))


def example_recipes() -> list[Path]:
    """The shipped example recipe files, sorted."""
    return sorted(EXAMPLES_DIR.glob("*.json"))


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002
        pass


@contextlib.contextmanager
def serve_mirror() -> Iterator[str]:
    """Serve the examples' mirror tree on an ephemeral 127.0.0.1 port; yields its base URL."""
    handler = functools.partial(_Quiet, directory=str(EXAMPLES_DIR / "mirror"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
