"""Case 46: the validator's memory and output are bounded by its input, and lemonpack is
stricter than the normative schema only where the policy list (docs/recipes-and-policy.md) says so.

Real ``lemonpack lint`` processes under an address-space limit (as the case runs them), the
inputs generated here with the case's shapes (a 524 KB and a 4 MiB array of wrong items, a
1 MB unknown token)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from support.recipes import PASSTHROUGH
from lemonpack.contract.loader import check_text
from lemonpack.schemacheck import MAX_PROBLEMS

README = Path(__file__).resolve().parents[2] / "docs" / "recipes-and-policy.md"  # the policy list


# Runs `lemonpack lint` and, at exit, writes the process's own peak RSS (VmHWM, KiB) to the file
# named by argv[1]: ``ru_maxrss`` (RUSAGE_CHILDREN, or wait4's) survives ``execve`` on Linux and
# would report the forking pytest's size, not the linter's.
LINT_WITH_PEAK = """
import atexit, sys
def _peak(path=sys.argv.pop(1)):
    with open('/proc/self/status') as f:
        hwm = next(line.split()[1] for line in f if line.startswith('VmHWM:'))
    with open(path, 'w') as f:
        f.write(hwm)
atexit.register(_peak)
from lemonpack.cli import main
main()
"""


def lint_process(path: Path, hashseed: str = "0") -> tuple[int, str, int]:
    """(exit code, output, peak RSS in KiB of the linter process itself) of ``lemonpack lint
    PATH`` under a 4 GiB address-space limit."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    env = dict(os.environ, PYTHONHASHSEED=hashseed)
    peak_file = path.with_name(path.name + ".peak")
    proc = subprocess.run([sys.executable, "-c", LINT_WITH_PEAK, str(peak_file), "lint", str(path)],
                          capture_output=True, text=True, timeout=60, preexec_fn=limit, env=env)
    peak = int(peak_file.read_text())
    peak_file.unlink()
    return proc.returncode, proc.stdout + proc.stderr, peak


def zeros(n: int) -> str:
    head = {"recipe": "my-engine", "display_name": "My engine", "api_contract_version": "1"}
    return json.dumps(head)[:-1] + ', "capabilities": [' + ",".join(["0"] * n) + "]}"


@pytest.mark.slow
@pytest.mark.parametrize("items", [262_000, 2_090_000], ids=["524KB", "4MiB"])
def test_many_schema_errors_bounded_memory_and_report(tmp_path, items):
    path = tmp_path / "zeros.json"
    path.write_text(zeros(items))
    assert path.stat().st_size < 4 * 1024 * 1024
    code, out, peak_kb = lint_process(path)
    lines = out.splitlines()
    assert code == 1 and "Traceback" not in out
    assert peak_kb < 600_000, f"peak RSS {peak_kb} kB"
    assert len(lines) == MAX_PROBLEMS + 1 and lines[-1].endswith("[more-problems]") and "at least" in lines[-1]
    assert all(len(line) < 1000 for line in lines)
    # the same report whatever the hash seed (the kept problems are the first in document order)
    assert lint_process(path, hashseed="12345")[1] == out
    assert "capabilities[1]: 0 repeats item" in lines[1]


def test_unknown_megabyte_token_is_quoted_by_a_prefix(tmp_path):
    doc = json.loads(json.dumps(PASSTHROUGH))
    doc["platforms"]["linux"]["cpu"]["args"] = ["--port", "{port}", "{" + "a" * 1_000_000 + "}"]
    path = tmp_path / "token.json"
    path.write_text(json.dumps(doc))
    code, out, _ = lint_process(path)
    assert code == 1 and "unknown token {aaa" in out and "[token]" in out
    assert all(len(line) < 1000 for line in out.splitlines())
    _, problems = check_text(json.dumps(dict(doc, display_name="x" * 100_000, recipe="y" * 50_000)), "t.json")
    assert problems and all(len(p.message) <= 400 and len(str(p)) < 1000 for p in problems)


def _block_with(**extra) -> dict:
    doc = json.loads(json.dumps(PASSTHROUGH))
    doc["platforms"]["linux"]["cpu"].update(extra)
    return doc


@pytest.mark.parametrize("doc", [
    dict(json.loads(json.dumps(PASSTHROUGH)), arch_aliases={"gfx1151": "amd/strix-halo"}),
    _block_with(arch={}),
    _block_with(arch={"gfx1151": {}}),
    _block_with(env={"X": "{env:MY-VAR:-0}"}),
], ids=["alias-value-path", "empty-arch-map", "empty-arch-override", "env-token-dash"])
def test_minor_strict_rules_the_normative_schema_does_not_have_are_accepted(doc):
    assert check_text(json.dumps(doc), "r.json")[1] == []


def test_arch_key_with_a_space_is_refused_and_the_policy_list_says_why():
    doc = _block_with(arch={"gfx 1151": {"args": ["--port", "{port}", "--fa"]}})
    problems = check_text(json.dumps(doc), "r.json")[1]
    assert [(p.rule, p.path) for p in problems] == [("invalid-key", 'platforms.linux.cpu.arch["gfx 1151"]')]
    policy = README.read_text(encoding="utf-8")
    assert "a key with a space or another character no GPU arch has never matches a detected arch" in \
        " ".join(policy.split())


# ---------------------------------------------------------------- the bound holds for every kind of problem

def _unpinned(n: int) -> str:
    """shared/cases 72: one ``podman pull`` of ``n`` tag-only images (a policy problem each)."""
    return json.dumps(_block_with(command="podman", args=["pull", *[f"img{i}:1" for i in range(n)]]))


KINDS = {
    # kind: (text with 1,000 problems of it, the rule of each)
    "policy": (_unpinned(1000), "digest-pinning"),
    "duplicate-key": (json.dumps(PASSTHROUGH)[:-1] + ', "extensions": {"x": {' + ",".join(['"a": 1'] * 1001) + "}}}",
                      "duplicate-key"),
    "lone-surrogate": (json.dumps(PASSTHROUGH)[:-1] + ', "extensions": {"x": [' + ",".join(['"\\ud800"'] * 1000) + "]}}",
                       "invalid-unicode"),
    "semantic": (json.dumps(_block_with(args=["{nope}"] * 1000)), "token"),
    "schema": (json.dumps(dict(PASSTHROUGH, capabilities=["chat_completion"] * 1001)), "duplicate-item"),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_report_bound_holds_for_every_kind_of_problem(tmp_path, capsys, kind):
    """200 problems, then one [more-problems] line counting the rest, in text and --json."""
    from lemonpack.cli import main

    text, rule = KINDS[kind]
    path = tmp_path / f"{kind}.json"
    path.write_text(text)
    assert main(["lint", str(path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == MAX_PROBLEMS + 1 and lines[-1].endswith("[more-problems]"), lines[-3:]
    assert sum(f"[{rule}]" in line for line in lines) == MAX_PROBLEMS
    assert f"and {1000 - MAX_PROBLEMS} more problems" in lines[-1]
    assert main(["lint", "--json", str(path)]) == 1
    (report,) = json.loads(capsys.readouterr().out)["files"]
    assert len(report["problems"]) == MAX_PROBLEMS + 1 and report["problems"][-1]["rule"] == "more-problems"


def test_the_parts_of_a_report_are_counted_together(tmp_path):
    """Problems of several kinds share one bound: the first 200 in report order (parser,
    schema, semantic rules, policy), and one count of all the others."""
    from lemonpack.builder.checks import lint_problems

    doc = _block_with(command="podman", args=["pull", *[f"img{i}:1" for i in range(150)]],
                      env={f"V{i}": "{nope}" for i in range(150)})
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(doc)[:-1] + ', "extensions": {"x": {' + ",".join(['"a": 1'] * 101) + "}}}")
    problems = lint_problems(path)
    assert [p.rule for p in problems[:100]] == ["duplicate-key"] * 100
    assert [p.rule for p in problems[100:200]] == ["token"] * 100
    assert problems[-1].message == "and 200 more problems: fix these and run lint again"  # 50 tokens, 150 images


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["policy", "duplicate-key", "lone-surrogate", "semantic"])
def test_at_the_4_mib_cap_every_kind_is_bounded_in_lines_and_memory(tmp_path, kind):
    """shared/cases 72 at the cap: 466k-690k lines and up to 878 MB before; now 201 lines and a
    bounded process (bench/lint.py measures the checking's own peak: under 100 MiB)."""
    import sys as _sys

    _sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from lint import inputs

    name = {"policy": "unpinned-images", "duplicate-key": "duplicate-keys", "lone-surrogate": "lone-surrogates",
            "semantic": "bad-tokens"}[kind]
    path = tmp_path / f"{name}.json"
    path.write_text(inputs(4 * 1024 * 1024)[name])
    code, out, peak_kb = lint_process(path)
    lines = out.splitlines()
    assert code == 1 and "Traceback" not in out
    assert len(lines) == MAX_PROBLEMS + 1 and lines[-1].endswith("[more-problems]")
    assert peak_kb < 300_000, f"peak RSS {peak_kb} kB"  # the interpreter, the libraries and a 4 MiB document
