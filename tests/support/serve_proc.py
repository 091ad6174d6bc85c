"""``lemonpack serve`` as a real subprocess over the fake engine, for the fault tests: its pid,
its stderr lines as they come, an httpx client, and a ``preexec_fn`` (a test lowers its
``ulimit -n`` there)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import httpx

from lemonpack.runtime.models.registry import ModelRegistry
from support.recipes import write_recipe


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Proc:
    """A running serve: ``proc``, ``port``, ``url``, ``client`` and its stderr ``lines``."""

    proc: subprocess.Popen
    port: int
    client: httpx.Client
    lines: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return "".join(self.lines)


@contextlib.contextmanager
def serve_proc(tmp_path, doc: dict, *options: str, models: tuple[str, ...] = ("user.fake",),
               preexec: Callable[[], None] | None = None, size: int = 4) -> Iterator[Proc]:
    """``lemonpack serve --port P *options`` with ``models`` registered for recipe ``doc``
    (each a model file of ``size`` bytes); SIGTERM at the end (then SIGKILL after 60 s)."""
    cfg = tmp_path / "config"
    backends = cfg / "backends"
    write_recipe(backends / f"{doc['recipe']}.json", doc)
    reg = ModelRegistry(cfg / "user_models.json")
    for name in models:
        f = tmp_path / f"{name}.gguf"
        with open(f, "wb") as fh:
            fh.truncate(size)
        reg.add(name, doc["recipe"], {"main": str(f)})
    port = free_port()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "LEMONPACK_CONFIG_DIR": str(cfg), "LEMONPACK_CACHE_DIR": str(tmp_path / "cache"),
           "LEMONPACK_BACKENDS_PATH": f"user:{backends}", "XDG_RUNTIME_DIR": str(tmp_path / "run"),
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "lemonpack.cli", "serve", "--port", str(port), *options],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env, preexec_fn=preexec)
    lines: list[str] = []
    up = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for ln in proc.stderr:
            lines.append(ln)
            if "listening on" in ln:
                up.set()
        up.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert up.wait(60) and proc.poll() is None, "".join(lines)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False, timeout=30) as c:
            yield Proc(proc, port, c, lines)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(10)
