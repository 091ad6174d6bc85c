"""``bench/_support.record``: a bench rewrites only its own section of ``bench/RESULTS.md``."""

from __future__ import annotations

import datetime
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import _support  # noqa: E402

WHEN = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.timezone.utc)


def test_a_new_file_lists_every_bench_as_not_run_yet(tmp_path):
    path = tmp_path / "RESULTS.md"
    _support.record("lint", ["input  bytes", "a      12"], "`python3 bench/lint.py --scale 1`", path=path, when=WHEN)
    text = path.read_text()
    assert text.startswith(_support.RESULTS_HEAD)
    for s in _support.SECTIONS:
        assert text.count(f"<!-- bench:{s} start -->") == 1 and text.count(f"<!-- bench:{s} end -->") == 1
        if s != "lint":
            assert f"not run yet: run `python3 bench/{s}.py`" in text
    lint = text.split("<!-- bench:lint start -->")[1].split("<!-- bench:lint end -->")[0]
    assert "## lint" in lint and "2026-12-01 12:00 UTC" in lint and "cores" in lint and "load average" in lint
    assert "commit " in lint and "`python3 bench/lint.py --scale 1`" in lint
    assert "```\ninput  bytes\na      12\n```" in lint  # printed lines keep their alignment
    assert "not run yet" not in lint


def test_a_section_is_replaced_and_the_others_kept_byte_for_byte(tmp_path):
    path = tmp_path / "RESULTS.md"
    _support.record("kube", [("figure", "value"), ("command", "1.2 s")], "first", path=path, when=WHEN)
    _support.record("proxy", ["added p50 300 us"], "", path=path, when=WHEN)
    before = path.read_text()
    kube_before = before.split("<!-- bench:kube start -->")[1].split("<!-- bench:kube end -->")[0]
    assert "| figure | value |\n|---|---|\n| command | 1.2 s |" in kube_before
    _support.record("proxy", ["added p50 250 us"], "second", path=path, when=WHEN)
    after = path.read_text()
    assert "added p50 250 us" in after and "added p50 300 us" not in after and "second" in after
    assert after.count("<!-- bench:proxy start -->") == 1
    head, _, rest = before.partition("<!-- bench:proxy start -->")
    assert after.startswith(head)  # everything before the section, kube's figures too, unchanged
    assert after.split("<!-- bench:proxy end -->")[1] == rest.split("<!-- bench:proxy end -->")[1]


def test_an_unknown_or_missing_section_is_placed_in_order(tmp_path):
    text = "# r\n\n<!-- bench:lint start -->\nL\n<!-- bench:lint end -->\n"
    out = _support.replace_section(text, "kube", "K")
    assert out.index("bench:kube start") < out.index("bench:lint start") and "\nL\n" in out  # kube sorts before lint
    out = _support.replace_section(out, "zzz", "Z")
    assert out.rstrip().endswith("<!-- bench:zzz end -->")


def test_no_temporary_file_is_left_and_the_lock_sits_beside(tmp_path):
    path = tmp_path / "RESULTS.md"
    _support.record("lint", ["x"], path=path, when=WHEN)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".RESULTS.md.lock", "RESULTS.md"]


def test_a_bench_writes_its_section_where_the_environment_says(tmp_path):
    out = tmp_path / "R.md"
    code = ("import sys; sys.path.insert(0, 'bench'); import _support\n"
            "def main():\n    print('figure: 42 ms')\n"
            "sys.argv = ['x.py', '--size', '3']\n"
            "raise SystemExit(_support.run_recorded('lint', main))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "LEMONPACK_BENCH_RESULTS": str(out)})
    assert r.returncode == 0, r.stderr
    assert r.stdout == "figure: 42 ms\n"  # still printed
    section = out.read_text().split("<!-- bench:lint start -->")[1]
    assert "figure: 42 ms" in section and "`python3 bench/lint.py --size 3`" in section


def test_a_failed_run_records_nothing_and_a_missed_target_is_recorded(tmp_path, monkeypatch, capsys):
    out = tmp_path / "R.md"
    monkeypatch.setenv("LEMONPACK_BENCH_RESULTS", str(out))
    monkeypatch.setattr(sys, "argv", ["lint.py"])

    def crash():
        print("half a figure")
        raise RuntimeError("boom")
    try:
        _support.run_recorded("lint", crash)
    except RuntimeError:
        pass
    assert not out.exists() and "not updated" in capsys.readouterr().err
    assert _support.run_recorded("lint", lambda: (print("figure: 9 s, target missed"), 2)[1]) == 2
    section = out.read_text().split("<!-- bench:lint start -->")[1]
    assert "figure: 9 s, target missed" in section and "exit code 2" in section and "(its default sizes)" in section
