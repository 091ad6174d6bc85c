"""lemonpack lint / host / schema through the real console script."""

import json
import os
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
EXAMPLES = FIXTURES / "lemonade-examples"


def run(*args, env=None):
    return subprocess.run([sys.executable, "-m", "lemonpack.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


def test_lint_ok_exit_zero():
    r = run("lint", str(EXAMPLES / "llamacpp_per_platform.json"), str(EXAMPLES / "llamacpp_vulkan_custom.json"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.count(": ok") == 2


def test_lint_reports_every_problem_one_per_line_no_traceback(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"recipe": "X", "display_name": "d", "api_contract_version": "1",
                               "capabilities": ["telepathy"], "surprise": 1,
                               "platforms": {"linux": {"cpu": {"command": "x", "args": ["{nope}"]}}}}))
    r = run("lint", str(bad), str(EXAMPLES / "dflash_rocm.json"))
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    lines = [line for line in r.stdout.splitlines() if line.strip()]
    assert f"{bad}: surprise: unknown field 'surprise' [unknown-field]" in lines
    assert any(line.startswith(f"{bad}: capabilities[0]: unknown capability") for line in lines)
    assert any(line.startswith(f"{bad}: platforms.linux.cpu.args[0]: unknown token") for line in lines)
    assert any("dflash_rocm.json: platforms.linux.rocm.args[18]" in line and "62 hex digits" in line
               for line in lines)


def test_lint_json(tmp_path):
    r = run("lint", "--json", str(EXAMPLES / "toolbox_arch_alias.json"))
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    [f] = doc["files"]
    assert doc["ok"] is False and f["problems"][0]["rule"] == "digest-pinning"
    assert f["problems"][0]["path"] == "platforms.linux.vulkan.args[17]"


def test_lint_missing_file_is_a_problem_not_a_traceback(tmp_path):
    r = run("lint", str(tmp_path / "nope.json"))
    assert r.returncode == 1 and "cannot read file" in r.stdout and "Traceback" not in r.stderr


def test_host_plain_and_injected():
    r = run("host", "--json", env={"LEMONPACK_HOST_FACTS": ""})
    facts = json.loads(r.stdout)
    assert facts["os"] == "linux" and facts["accelerators"] == ["cpu"]  # this machine: no GPU
    r = run("host", env={"LEMONPACK_HOST_FACTS": '{"os":"linux","accelerators":["rocm"],"rocm_arch":"gfx1151"}'})
    assert "rocm_arch: gfx1151" in r.stdout


def test_bad_host_facts_is_a_clear_error():
    r = run("host", env={"LEMONPACK_HOST_FACTS": "{nope"})
    assert r.returncode == 1 and "LEMONPACK_HOST_FACTS is not valid JSON" in r.stderr
    assert "Traceback" not in r.stderr


def test_schema_check():
    r = run("schema", "check", "--json")
    assert r.returncode == 0 and json.loads(r.stdout) == {"ok": True, "problems": []}


def test_usage_error_exit_2():
    r = run("build")  # a required option missing
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "Usage: lemonpack build" in r.stderr and "Missing option '--out'" in r.stderr
    r = run("frobnicate")  # no such command
    assert r.returncode == 2 and "Traceback" not in r.stderr and "No such command" in r.stderr
    r = run("lint")  # a required argument missing
    assert r.returncode == 2 and "Missing argument" in r.stderr
