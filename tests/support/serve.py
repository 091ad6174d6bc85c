"""A real ``lemonpack serve`` application on 127.0.0.1 in a thread, over the fake engine: the
``live`` fixture (registered in tests/conftest.py) makes :class:`Live` servers and closes them
after the test. Recipes come from :func:`support.recipes.recipe_doc` (``fake_engine=[flags]``)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from support.helpers import free_port, wait_for
from support.recipes import write_recipe

from lemonpack.runtime.recipes.discovery import Discovery, SearchDir
from lemonpack.runtime.recipes.watch import DiscoveryWatcher
from lemonpack.runtime.models.registry import ModelRegistry
from lemonpack.server.app import Server, ServerConfig
from lemonpack.server.catalog import Catalog
from lemonpack.server.main import bind, serve


class Live:
    """A running server: ``url``, ``server`` (the Server), ``backends`` dir, ``registry``."""

    def __init__(self, tmp: Path, max_in_flight: int = 64, **config):
        self.backends = tmp / "backends"
        self.backends.mkdir(mode=0o755)
        self.model_file = tmp / "tiny.gguf"
        self.model_file.write_bytes(b"GGUF")
        self.registry = ModelRegistry(tmp / "user_models.json")
        self.max_in_flight = max_in_flight
        self.model_files = config.pop("model_files", True)  # Catalog: files by path (a loopback serve)
        self.config = config  # more ServerConfig fields (ttl, soft_idle, idle_check ...)

    def add(self, model: str, doc: dict) -> str:
        write_recipe(self.backends / f"{doc['recipe']}.json", doc)
        self.registry.add(model, doc["recipe"], {"main": str(self.model_file)})
        return model

    def start(self) -> "Live":
        watcher = DiscoveryWatcher(Discovery([SearchDir(self.backends, "user")]), interval=0.2)
        self.sock = bind("127.0.0.1", 0)
        self.port = self.sock.getsockname()[1]
        catalog = Catalog(self.registry, watcher, avoid_ports=frozenset({self.port}),
                          model_files=self.model_files).start()
        self.server = Server(catalog, config=ServerConfig(max_in_flight=self.max_in_flight, **self.config))
        self.stop = threading.Event()
        ready = threading.Event()
        self.thread = threading.Thread(target=serve, args=(self.server, self.sock, self.stop, ready.set),
                                       daemon=True)
        self.thread.start()
        assert ready.wait(10)
        self.url = f"http://127.0.0.1:{self.port}"
        return self

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)

    # for tests that move a fake ``clock`` (a ServerConfig field) instead of sleeping

    def in_flight(self) -> dict[str, int]:
        """The policy's requests busy or waiting, by model (read from the test's thread)."""
        while True:
            try:
                return self.server.policy.in_flight()
            except RuntimeError:  # the loop changed it while we read: read again
                continue

    def swept(self, timeout: float = 30) -> None:
        """Return once an idle sweep has run wholly after this call (a clock moved before it is
        seen): the sweep count must rise by 2, as the first one may have read the clock before."""
        n = self.server.driver.sweeps
        assert wait_for(lambda: self.server.driver.sweeps >= n + 2, timeout), "the idle sweep stopped running"

    def settled(self, timeout: float = 30) -> None:
        """Return once the policy has seen every request end: a client has its answer a moment
        before the server's handler ends the request, and a clock moved in between would count
        the idle time from after the move."""
        assert wait_for(lambda: not self.in_flight(), timeout), self.in_flight()


@pytest.fixture
def live(tmp_path):
    made = []

    def make(max_in_flight: int = 64, **config) -> Live:
        lv = Live(tmp_path, max_in_flight, **config)
        made.append(lv)
        return lv

    yield make
    for lv in made:
        if hasattr(lv, "thread"):
            lv.close()


@contextlib.contextmanager
def serve_cli(tmp_path, doc: dict, *options: str):
    """``lemonpack serve --port P *options`` in a subprocess with ``user.fake`` registered for
    the recipe ``doc``; yields (an httpx client on it, the stderr lines so far); SIGTERM at exit."""
    cfg = tmp_path / "config"
    backends = cfg / "backends"
    write_recipe(backends / f"{doc['recipe']}.json", doc)
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF")
    ModelRegistry(cfg / "user_models.json").add("user.fake", doc["recipe"], {"main": str(model)})
    port = free_port()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "LEMONPACK_CONFIG_DIR": str(cfg), "LEMONPACK_CACHE_DIR": str(tmp_path / "cache"),
           "LEMONPACK_BACKENDS_PATH": f"user:{backends}", "XDG_RUNTIME_DIR": str(tmp_path / "run")}
    proc = subprocess.Popen([sys.executable, "-m", "lemonpack.cli", "serve", "--port", str(port), *options],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env)
    lines: list[str] = []
    up = threading.Event()

    def read() -> None:
        for ln in proc.stderr:
            lines.append(ln)
            if "listening on" in ln:
                up.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert up.wait(60), "".join(lines)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False, timeout=30) as c:
            yield c, lines
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        reader.join(10)
