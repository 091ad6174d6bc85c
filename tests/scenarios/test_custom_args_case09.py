"""Case 09 through the CLI: ``custom_args`` cannot override the llamacpp launch plan under
any spelling llama.cpp accepts; an unrelated option still reaches a ready engine."""

from __future__ import annotations

import json
import os
import signal
import sys

import pytest

from support.helpers import RunProcess
from support.recipes import http_probe, recipe_doc, write_recipe

from lemonpack.cli import main

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

#: The user's own binary: the normative schema needs a sha256 or the roll_forward opt-out.
RECIPE = recipe_doc("case-fork", display_name="llama.cpp fork, user-provided binary", variant_of="llamacpp",
                    version_policy="roll_forward", health_probe=http_probe(timeout=10, poll_ms=50),
                    binary="llama-server", block={"reserved_args": ["--port", "--host", "-m"]})


@pytest.fixture
def case(home):
    """``(recipe, model)``: the case's recipe file, its fork installed in the home's cache, a model."""
    home.host()
    exe = home.cache / "external" / "case-fork" / "llama-server"
    exe.parent.mkdir(parents=True)
    exe.write_text(FAKE_FORK.format(python=sys.executable))
    os.chmod(exe, 0o755)
    recipe = write_recipe(home.root / "recipe.json", RECIPE)
    return recipe, home.model("m.gguf", b"GGUF\n")


@pytest.mark.parametrize("custom, plan_flag", [
    ("--mmproj x", "--mmproj"), ("-mm x", "--mmproj"), ("--embedding", "--embeddings"),
    ("--rerank", "--reranking"), ("--no-jinja", "--jinja"), ("--ctx_size 8", "--ctx-size"), ("-c=8", "-c"),
    ("--model other.gguf", "--model"), ("-m=x", "-m"), ("-hf a/b", "-m"), ("--vision-gemma-4b-default", "--port"),
])
def test_case09_aliases_are_refused_naming_the_plan_flag(case, capsys, custom, plan_flag):
    recipe, model = case
    code = main(["run", str(recipe), "--model", str(model), "-o", f"custom_args={custom}", "--json", "-q"])
    out = capsys.readouterr().out
    assert code == 1
    doc = json.loads(out.strip().splitlines()[-1])
    given = custom.split()[0]
    assert f"custom_args element {given!r} overrides the reserved flag {plan_flag!r}" in doc["message"]
    assert '"ready"' not in out


def test_case09_unrelated_option_still_runs_to_ready(case):
    recipe, model = case
    run = RunProcess([str(recipe), "--model", str(model), "-o", "custom_args=-mg 0 --no-host", "--quiet"])
    assert run.wait_line("ready: "), "".join(run.stderr)
    run.proc.send_signal(signal.SIGINT)
    run.finish()
