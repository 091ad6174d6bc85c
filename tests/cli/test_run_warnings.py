"""``lemonpack run`` warns when section 9's selection lands on a block for an
accelerator the host lacks: on stderr, and as ``warnings`` in the ``--json`` ready line."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.helpers import RunProcess, fake_recipe  # noqa: E402


@pytest.fixture
def env(tmp_path):
    return {"LEMONPACK_CACHE_DIR": str(tmp_path / "cache"), "LEMONPACK_CONFIG_DIR": str(tmp_path / "config"),
            "LEMONPACK_HOST_FACTS": json.dumps({"os": "linux", "accelerators": ["cpu"]})}


def _recipe(tmp_path: Path, blocks: tuple[str, ...], default: str | None = None) -> Path:
    p = fake_recipe(tmp_path / "fake.json")
    doc = json.loads(p.read_text())
    block = doc["platforms"]["linux"]["cpu"]
    doc["platforms"]["linux"] = {b: block for b in blocks}
    if default:
        doc["default_accelerator"] = default
    p.write_text(json.dumps(doc))
    return p


def _ready(run: RunProcess) -> dict:
    line = run.wait_line("{")
    assert line, "".join(run.stderr)
    run.proc.send_signal(signal.SIGINT)
    run.finish()
    return json.loads(line)


@pytest.mark.parametrize("blocks, default, args, why", [
    (("rocm",), None, [], "no block of the recipe (rocm) is for an accelerator this host has"),
    (("cpu", "rocm"), "rocm", [], "it is the recipe's default_accelerator"),
    (("cpu", "rocm"), None, ["--device", "rocm"], "it was requested (--device rocm)"),
    (("cpu", "rocm"), None, ["-o", "device=rocm"], "it was requested (the device option rocm)"),
])
def test_run_warns_naming_the_block_and_why(tmp_path, env, blocks, default, args, why):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    run = RunProcess([str(_recipe(tmp_path, blocks, default)), "-m", str(model), "--json", "-q", *args], env)
    ready = _ready(run)
    expected = f"using block platforms.linux.rocm although this host has no rocm (host accelerators: cpu): {why}"
    assert ready["event"] == "ready" and ready["warnings"] == [expected]
    assert f"warning: {expected}" in "".join(run.stderr)


def test_run_on_a_host_with_the_accelerator_does_not_warn(tmp_path, env):
    env = {**env, "LEMONPACK_HOST_FACTS": json.dumps({"os": "linux", "accelerators": ["rocm"]})}
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    run = RunProcess([str(_recipe(tmp_path, ("cpu", "rocm"))), "-m", str(model), "--json", "-q"], env)
    assert _ready(run)["warnings"] == []
    assert "warning" not in "".join(run.stderr)
