"""The example shipped with lemonpack: build, install and run it with no network.

``hello-engine.json`` is a ``variant_of: llamacpp`` recipe (RFC section 7) whose artifact,
``mirror/example.invalid/lemonpack/hello-engine-linux-cpu.tar.gz``, holds one executable:
``engine/hello-engine``, a Python 3 standard-library stand-in for ``llama-server`` (it takes
llama-server's launch flags and serves ``/health``, ``/v1/models`` and OpenAI-compatible
``/v1/chat/completions`` and ``/v1/completions``; SIGTERM or SIGINT stops it). ``mirror/``
is laid out as a lemonpack mirror (``<host>/<path>``, :mod:`lemonpack.fetch.mirror`):
:func:`serve_mirror` serves it on 127.0.0.1, so ``lemonpack build --example`` and
``lemonpack install --example`` run the real download, sha256 check and safe unpack
against it. ``models/hello-model.txt`` stands in for model weights (the engine only
checks that ``-m`` names a file): ``lemonpack run --example`` uses it unless ``--model``
is given.

The archive is deterministic (:func:`engine_archive`: one member, owner 0, mtime 0, mode
0755, gzip without name or time) and its sha256 is pinned in the recipe. After editing the
engine, ``python -m lemonpack.examples`` rewrites both; ``tests/scenarios/test_example_walkthrough.py``
fails while they are out of date.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import io
import tarfile
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path

EXAMPLES_DIR = Path(str(resources.files("lemonpack.examples")))
#: The example recipe (``recipe: hello-engine``).
EXAMPLE_RECIPE = EXAMPLES_DIR / "hello-engine.json"
#: The engine's source: the single member of the example artifact.
ENGINE_SOURCE = EXAMPLES_DIR / "engine" / "hello-engine"
#: The stand-in model file ``lemonpack run --example`` uses by default.
EXAMPLE_MODEL = EXAMPLES_DIR / "models" / "hello-model.txt"
#: Where the recipe's ``source`` (https://example.invalid/lemonpack/hello-engine-linux-cpu.tar.gz)
#: lies in the example mirror.
EXAMPLE_ARCHIVE = EXAMPLES_DIR / "mirror" / "example.invalid" / "lemonpack" / "hello-engine-linux-cpu.tar.gz"


def example_recipes() -> list[Path]:
    """The shipped example recipe files, sorted."""
    return sorted(EXAMPLES_DIR.glob("*.json"))


def engine_archive(source: Path = ENGINE_SOURCE) -> bytes:
    """The example artifact's bytes: a tar.gz holding ``source`` as ``hello-engine``
    (regular file, mode 0755, uid/gid 0, no owner names, mtime 0; ustar format; gzip
    level 9 with mtime 0 and no file name, RFC 1952). Same input, same bytes."""
    data = source.read_bytes()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        info = tarfile.TarInfo("hello-engine")
        info.size, info.mode, info.mtime = len(data), 0o755, 0
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        tf.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=9, mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002
        pass


@contextlib.contextmanager
def serve_mirror() -> Iterator[str]:
    """Serve the examples' mirror tree on an ephemeral 127.0.0.1 port; yields its base URL
    (``http://127.0.0.1:PORT``), stopped when the context exits."""
    handler = functools.partial(_Quiet, directory=str(EXAMPLES_DIR / "mirror"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
