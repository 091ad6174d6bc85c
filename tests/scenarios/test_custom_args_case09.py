"""Case 09 through the CLI: ``custom_args`` cannot override the llamacpp launch plan under
any spelling llama.cpp accepts; an unrelated option still reaches a ready engine."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.helpers import RunProcess  # noqa: E402

from lemonpack.cli import main  # noqa: E402

# Case 09's engine: a llama-server fork that accepts any flags and serves GET /health on --port.
FAKE_FORK = """#!{python}
import http.server, sys
args = sys.argv[1:]
print("argv:", args, flush=True)
port = int(args[args.index("--port") + 1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self): self.send_response(200); self.end_headers(); self.wfile.write(b"{{}}")
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""

RECIPE = {
    "recipe": "case-fork", "display_name": "llama.cpp fork, user-provided binary", "api_contract_version": "1",
    "variant_of": "llamacpp", "capabilities": ["chat_completion"],
    # the user's own binary: the normative schema needs a sha256 or the roll_forward opt-out
    "version_policy": "roll_forward",
    "health_probe": {"type": "http", "endpoint": "/health", "expected_status": 200, "timeout_seconds": 10,
                     "poll_interval_ms": 50},
    "platforms": {"linux": {"cpu": {"binary": "llama-server", "reserved_args": ["--port", "--host", "-m"]}}},
}


@pytest.fixture
def case(tmp_path, monkeypatch):
    env = {"LEMONPACK_CACHE_DIR": str(tmp_path / "cache"), "LEMONPACK_CONFIG_DIR": str(tmp_path / "config"),
           "LEMONPACK_HOST_FACTS": json.dumps({"os": "linux", "accelerators": ["cpu"]})}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    exe = tmp_path / "cache" / "external" / "case-fork" / "llama-server"
    exe.parent.mkdir(parents=True)
    exe.write_text(FAKE_FORK.format(python=sys.executable))
    os.chmod(exe, 0o755)
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps(RECIPE))
    model = tmp_path / "m.gguf"
    model.write_text("GGUF\n")
    return env, recipe, model


@pytest.mark.parametrize("custom, plan_flag", [
    ("--mmproj x", "--mmproj"), ("-mm x", "--mmproj"), ("--embedding", "--embeddings"),
    ("--rerank", "--reranking"), ("--no-jinja", "--jinja"), ("--ctx_size 8", "--ctx-size"), ("-c=8", "-c"),
    ("--model other.gguf", "--model"), ("-m=x", "-m"), ("-hf a/b", "-m"), ("--vision-gemma-4b-default", "--port"),
])
def test_case09_aliases_are_refused_naming_the_plan_flag(case, capsys, custom, plan_flag):
    env, recipe, model = case
    code = main(["run", str(recipe), "--model", str(model), "-o", f"custom_args={custom}", "--json", "-q"])
    out = capsys.readouterr().out
    assert code == 1
    doc = json.loads(out.strip().splitlines()[-1])
    given = custom.split()[0]
    assert f"custom_args element {given!r} overrides the reserved flag {plan_flag!r}" in doc["message"]
    assert '"ready"' not in out


def test_case09_unrelated_option_still_runs_to_ready(case):
    env, recipe, model = case
    run = RunProcess([str(recipe), "--model", str(model), "-o", "custom_args=-mg 0 --no-host", "--quiet"], env)
    assert run.wait_line("ready: "), "".join(run.stderr)
    run.proc.send_signal(signal.SIGINT)
    run.finish()
