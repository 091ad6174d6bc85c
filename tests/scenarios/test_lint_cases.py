"""Case 11 (hostile or unusual recipes): every file of the case, with the answer its README
gives, through ``lemonpack lint`` in process (text and ``--json``).

The files are copies of ``cases/11-lint-crashes-and-leniency/*.json`` in
``tests/fixtures/lint-cases/``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from lemonpack.cli import main

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "lint-cases"

# file stem, exit code, (rule, JSON path) that must be among the problems (None: ok expected)
TABLE = [
    ("crash-null-document", 1, ("document-type", "")),
    ("crash-api-version-superscript-digit", 1, ("schema-pattern", "api_contract_version")),
    ("crash-lone-surrogate-in-value", 1, ("invalid-unicode", "display_name")),
    ("crash-deep-nesting-1000-parse", 1, ("json-syntax", "")),
    ("hang-uniqueitems-quadratic-5k", 1, ("unknown-capability", "capabilities[0]")),  # then "and N more"
    ("bug-lenient-recipe-trailing-newline", 1, ("recipe-id", "recipe")),
    ("bug-lenient-binary-not-bare-name", 1, ("binary-name", "platforms.linux.cpu.binary")),
    ("bug-lenient-builtin-collision-vllm", 1, ("builtin-collision", "recipe")),
    ("bug-lenient-probe-timeout-above-600", 1, ("schema-maximum", "health_probe.timeout_seconds")),
    ("bug-lenient-requested-ports-float", 1, ("requested-ports", "requested_ports")),
    ("bug-strict-health-probe-type-required", 0, None),
    ("bug-strict-arch-override-stop-args-delta", 0, None),
    ("quality-duplicate-key-has-no-path", 1, ("duplicate-key", "platforms.linux.cpu.env.A")),
    ("quality-newline-in-key-breaks-line-format", 1, ("unknown-field", '["x\\nforged.json: ok"]')),
    ("quality-policy-problem-hidden-by-contract-problem", 1, ("digest-pinning", "platforms.linux.cpu.args[1]")),
]


def lint(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["lint", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(("stem", "want_exit", "want"), TABLE)
def test_case_11_file(capsys, stem, want_exit, want):
    path = str(CASES / f"{stem}.json")
    start = time.monotonic()
    code, out, err = lint(capsys, path)
    assert time.monotonic() - start < 60, "hang guard"  # only a hang fails it; bench/lint.py measures speed
    assert "Traceback" not in out + err
    assert code == want_exit, out
    lines = out.splitlines()
    if want is None:
        assert lines == [f"{path}: ok"]
    code_json, out_json, _ = lint(capsys, "--json", path)
    assert code_json == want_exit
    doc = json.loads(out_json)
    [entry] = doc["files"]
    problems = entry["problems"]
    # one problem per text line, whatever the names and values hold
    assert len(lines) == max(1, len(problems))
    if want is not None:
        rule, where = want
        assert (rule, where) in [(p["rule"], p["path"]) for p in problems]
        assert all(line.startswith(f"{path}: ") and line.endswith("]") for line in lines)


def test_every_case_file_is_in_the_table():
    stems = {p.stem for p in CASES.glob("*.json")}
    listed = {row.values[0] if hasattr(row, "values") else row[0] for row in TABLE}
    assert stems == listed


def test_null_document_message(capsys):
    code, out, _ = lint(capsys, str(CASES / "crash-null-document.json"))
    assert code == 1 and "the document must be a JSON object" in out


def test_superscript_digit_is_not_a_contract_major(capsys):
    """'²' passes str.isdigit(); the contract's pattern is ASCII digits (ECMA-262 [0-9])."""
    code, out, _ = lint(capsys, str(CASES / "crash-api-version-superscript-digit.json"))
    assert code == 1 and "api_contract_version: '²' does not match" in out


def test_newline_in_key_is_escaped_on_one_line(capsys):
    path = str(CASES / "quality-newline-in-key-breaks-line-format.json")
    code, out, _ = lint(capsys, path)
    assert out == f'{path}: ["x\\nforged.json: ok"]: unknown field \'x\\nforged.json: ok\' [unknown-field]\n'


def test_one_bad_file_does_not_stop_the_others(capsys, tmp_path):
    (tmp_path / "dir.json").mkdir()
    bad_bytes = tmp_path / "bytes.json"
    bad_bytes.write_bytes(b'{"recipe": "\xff"}')
    good = Path(__file__).resolve().parents[1] / "fixtures" / "lemonade-examples" / "llamacpp_per_platform.json"
    files = [str(CASES / "crash-deep-nesting-1000-parse.json"), str(tmp_path / "dir.json"), str(bad_bytes),
             str(CASES / "crash-lone-surrogate-in-value.json"), str(tmp_path / "missing.json"), str(good)]
    code, out, err = lint(capsys, *files)
    assert code == 1 and "Traceback" not in out + err
    lines = out.splitlines()
    for f in files[:-1]:
        assert any(line.startswith(f"{f}: ") and not line.endswith(": ok") for line in lines), f
    assert f"{good}: ok" in lines
    code, out, _ = lint(capsys, "--json", *files)
    doc = json.loads(out)
    assert code == 1 and [e["file"] for e in doc["files"]] == files
    assert [e["ok"] for e in doc["files"]] == [False] * 5 + [True]
    rules = [e["problems"][0]["rule"] for e in doc["files"][:5]]
    assert rules == ["json-syntax", "unreadable", "encoding", "invalid-unicode", "unreadable"]


def test_large_unhashable_unique_list_is_linear(capsys, tmp_path):
    """uniqueItems over 20,000 arrays: seconds at most (jsonschema's own took minutes); every
    schema error is found (the validator, unbounded), the report is bounded (lint)."""
    from lemonpack.contract.loader import _validator
    from lemonpack.schemacheck import MAX_PROBLEMS

    doc = json.loads((CASES / "bug-strict-health-probe-type-required.json").read_text())
    doc["capabilities"] = [[i] for i in range(20_000)] + [[7]]
    start = time.monotonic()
    errors = list(_validator().iter_errors(doc))
    assert time.monotonic() - start < 60, "hang guard"  # only quadratic behaviour (minutes) fails it
    assert any(e.validator == "uniqueItems" for e in errors) and len(errors) >= 20_002
    p = tmp_path / "big.json"
    p.write_text(json.dumps(doc))
    code, out, _ = lint(capsys, "--json", str(p))
    problems = json.loads(out)["files"][0]["problems"]
    assert code == 1 and len(problems) == MAX_PROBLEMS + 1 and problems[-1]["rule"] == "more-problems"
