"""The include allowlist decided by the real preprocessor (issue 26, "What to build" 5; seed
002 sections 5 and 8, step 5; shared/cases 66): every way around a line-by-line reading is
refused with ``file:line`` of the directive and the includes that led there, and the allowed
forms are accepted, in ``lemonpack extensions check``, ``generate`` and ``build``. The same
table runs through the Nix package in tests/scenarios/test_nix_includes.py."""

from __future__ import annotations

import json
import subprocess

import pytest

from lemonpack.cli import main
from lemonpack.extensions.includes import IncludeCheck, tree_problems
from lemonpack.extensions.manifest import load_manifest
from lemonpack.extensions.pipeline import ExtensionError, run_pipeline
from support.extensions import manifest, write_extension
from support.include_cases import CASES, verdict_problems, write_cases

CPU = frozenset({"linux"})


def run(capsys, *args):
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    root = tmp_path_factory.mktemp("includes") / "exts"
    return root, write_cases(root)


def test_the_table_in_the_cli(tree, table, capsys, monkeypatch):
    monkeypatch.delenv("GUFO_EXTENSION_DIRS", raising=False)
    root, cases = table
    code, out, _ = run(capsys, "extensions", "check", "--json", "--tree", tree, "--extension-dir", root,
                       "--select", "all", "--feature", "linux")
    doc = json.loads(out)
    rejected = {r["manifest"]: r["reasons"] for r in doc["rejected"]}
    assert code == 1
    assert verdict_problems(cases, root, doc["selected"], rejected) == []
    # nothing else is rejected: no reason of a refused case is about anything but its includes
    assert set(rejected) == {str(root / n / "extension.json") for n, c in cases.items() if c.refused}
    assert not any("undefined-entry" in r for rs in rejected.values() for r in rs)


@pytest.mark.parametrize("case", [c for c in CASES if c.refused], ids=lambda c: c.name)
def test_generate_and_build_refuse_a_selected_bypass(tree, table, tmp_path, capsys, case):
    root, _ = table
    for command in ("generate", "build"):
        code, out, err = run(capsys, "extensions", command, "--json", "--tree", tree,
                             "--extension-dir", root / case.extension, "--select", case.extension, "--feature", "linux", "--out", tmp_path / command)
        assert code == 1 and not (tmp_path / command).exists()
        message = json.loads(out)["message"].replace(f"{root / case.extension}/", "")
        assert message.startswith(f"cannot select {case.extension}: extension {case.extension!r} was rejected: ")
        assert all(f in message for f in case.refused), message


def test_the_accepted_forms_compile(tree, table, tmp_path, capsys):
    root, cases = table
    accepted = [n for n, c in cases.items() if c.refused is None]
    code, out, err = run(capsys, "extensions", "build", "--json", "--tree", tree,
                         *[a for n in accepted for a in ("--extension-dir", root / n, "--select", n)], "--feature", "linux",
                         "--out", tmp_path / "out")
    assert code == 0, err
    registered = json.loads(subprocess.run([str(tmp_path / "out" / "bin" / "gufo-registry"), "--json"],
                                           capture_output=True, text=True, check=True).stdout)
    assert sorted({p["extension"] for p in registered}) == sorted(accepted)


def test_a_symlink_out_and_a_quoted_path_out_are_refused(tmp_path):
    (tmp_path / "outside.h").write_text("int outside;\n")
    d = write_extension(tmp_path / "exts" / "outq", manifest("outq"), extra_source='#include "../../outside.h"\n')
    with IncludeCheck() as check:
        (reason,) = check.include_problems(load_manifest(d))
    assert reason.startswith(f'{d / "extension.cpp"}:3: #include "../../outside.h" is not allowed')
    assert reason.endswith(f"(it resolves to {tmp_path / 'outside.h'})")
    (d / "link.h").symlink_to("../../outside.h")
    (reason,) = tree_problems(d)
    assert reason.startswith(f"{d / 'link.h'}: symlink target '../../outside.h'") and "must stay inside" in reason


def test_the_compiler_decides_with_the_builds_flags_and_cxx(tree, tmp_path):
    """``--cxx`` reaches the check; a compiler that does not exist is a reason, not a crash."""
    d = write_extension(tmp_path / "exts" / "plain", manifest("plain"))
    sel = run_pipeline(tree, extra_dirs=[tmp_path / "exts"], select="all", features=CPU, environ={},
                       cxx="no-such-compiler-26")
    ((m, reasons),) = sel.rejected
    assert m == d / "extension.json"
    assert list(reasons) == [f"{d / 'extension.json'}: cannot check the include allowlist: the C++ compiler "
                             "'no-such-compiler-26' is not on PATH (set CXX, or install g++)"]
    assert [e.name for e in run_pipeline(tree, extra_dirs=[tmp_path / "exts"], select="all", features=CPU,
                                         environ={}).extensions if not e.official] == ["plain"]


def test_official_extensions_are_not_preprocessed(tree, tmp_path):
    """The allowlist is for community extensions (seed 002 section 5: in-tree ones are held by CI)."""
    sel = run_pipeline(tree, select="lock", features=CPU, environ={}, cxx="no-such-compiler-26")
    assert sel.rejected == () and len(sel.extensions) == 8


def test_a_bypass_selected_by_name_says_why(tree, table):
    root, _ = table
    with pytest.raises(ExtensionError, match=r"extension.cpp:4: #include <sys/mman.h> is not allowed"):
        run_pipeline(tree, extra_dirs=[root / "inc_macro"], select=["inc_macro"], features=CPU, environ={})
