"""A real ``lemonpack serve`` application on 127.0.0.1 in a thread, over the fake engine."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.helpers import FAKE_ENGINE, wait_for, write_descriptor  # noqa: E402

from lemonpack.runtime.discovery import Discovery, SearchDir
from lemonpack.runtime.discoverywatch import DiscoveryWatcher
from lemonpack.runtime.models import ModelRegistry
from lemonpack.server.app import Server, ServerConfig
from lemonpack.server.catalog import Catalog
from lemonpack.server.main import bind, serve


def fake_doc(recipe: str = "fake-engine", *flags: str, capabilities=("chat_completion",), endpoints=None,
             timeout: int = 20) -> dict:
    """A passthrough recipe running the fake engine with ``flags``."""
    doc = {
        "recipe": recipe, "display_name": f"Fake {recipe}", "api_contract_version": "1",
        "capabilities": list(capabilities),
        "health_probe": {"type": "http", "endpoint": "/health", "expected_status": 200,
                         "timeout_seconds": timeout, "poll_interval_ms": 20},
        "platforms": {"linux": {"cpu": {
            "command": sys.executable,
            "args": [str(FAKE_ENGINE), "--host", "{host}", "--port", "{port}", "--model", "{model_name}", *flags],
        }}},
    }
    if endpoints:
        doc["endpoints"] = endpoints
    return doc


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
        write_descriptor(self.backends, f"{doc['recipe']}.json", doc)
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
