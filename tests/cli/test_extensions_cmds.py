"""lemonpack extensions list|check|generate (and scripts/locks.py extension-api) and diagnose --section extensions:
output and exit codes (0 ok, 1 invalid input, 2 usage)."""

from __future__ import annotations

import json
import subprocess
import sys

from lemonpack.cli import main
from support.extensions import REPO, manifest, write_extension


def run(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_list_and_diagnose(tree, capsys, monkeypatch):
    monkeypatch.delenv("GUFO_EXTENSION_DIRS", raising=False)
    code, out, _ = run(capsys, "extensions", "list", "--tree", str(tree), "--feature", "linux")
    assert code == 0 and "* qwen38_flash_next 1.0.0 official" in out
    code, out, _ = run(capsys, "diagnose", "--section", "extensions", "--tree", str(tree), "--feature", "linux")
    assert code == 0
    assert "    flash-next-q4 [text_generation] unavailable: target gufo_qwen38_flash_next_hip not built: needs hip" in out
    assert "  qwen 1.0.0 (official) " in out and "    qwen27-cpu [text_generation] available" in out
    code, out, _ = run(capsys, "diagnose", "--json", "--tree", str(tree), "--feature", "linux", "--feature", "hip")
    doc = json.loads(out)["extensions"]
    assert doc["features"] == ["hip", "linux"] and doc["selected"][0]["providers"][0]["available"] is True


def test_check_exit_codes(tree, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("GUFO_EXTENSION_DIRS", raising=False)
    assert run(capsys, "extensions", "check", "--tree", str(tree))[0] == 0
    write_extension(tmp_path / "c" / "gsq", manifest("gsq", keys=["gguf:qwen4exp"]))
    monkeypatch.setenv("GUFO_EXTENSION_DIRS", str(tmp_path / "c"))
    code, out, _ = run(capsys, "extensions", "check", "--tree", str(tree))
    assert code == 1 and "claims key 'gguf:qwen4exp'" in out
    code, out, _ = run(capsys, "extensions", "generate", "--tree", str(tree), "--out", str(tmp_path / "o"),
                       "--select", str(tmp_path / "c" / "gsq"), "--json")
    assert code == 1 and json.loads(out)["error"] == "extension" and not (tmp_path / "o").exists()


def test_generate_writes_the_three_files(tree, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("GUFO_EXTENSION_DIRS", raising=False)
    code, out, _ = run(capsys, "extensions", "generate", "--tree", str(tree), "--out", str(tmp_path / "o"),
                       "--feature", "linux", "--select", "qwen3_tts")
    assert code == 0
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == [
        "extensions.json", "gufo_ext_constants.hpp", "gufo_ext_registry.cpp"]
    doc = json.loads((tmp_path / "o" / "extensions.json").read_bytes())
    assert [e["name"] for e in doc["extensions"]] == ["qwen", "qwen3_tts"]


def test_usage_and_input_errors(tree, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("GUFO_EXTENSION_DIRS", raising=False)
    assert run(capsys, "extensions", "list", "--tree", str(tree), "--feature", "rocm")[0] == 2
    assert run(capsys, "diagnose", "--section", "gpu", "--tree", str(tree))[0] == 2
    code, _, err = run(capsys, "extensions", "list", "--tree", str(tmp_path))
    assert code == 1 and "api/minor" in err and "Traceback" not in err
    (tree / "api/changes/0001-initial-extension-api.md").write_text("edited\n")
    code, out, _ = run(capsys, "extensions", "check", "--tree", str(tree))
    assert code == 1 and "was edited after it was recorded" in out
    locks = subprocess.run([sys.executable, str(REPO / "scripts" / "locks.py"), "extension-api", "--tree", str(tree)],
                           capture_output=True, text=True)
    assert locks.returncode == 1 and "was edited after it was recorded" in locks.stderr, locks.stderr
    # maintainer commands are scripts of the clone, not commands of the installed package
    assert run(capsys, "extensions", "api-lock", "--tree", str(tree))[0] == 2
    assert run(capsys, "schema", "lock")[0] == 2


def test_generate_replaces_its_output_directory_as_a_whole(tree, tmp_path, capsys, monkeypatch):
    """A Nix build step or a reader sees the old output or the new one, never a mix; a
    directory holding anything else is refused, not emptied."""
    monkeypatch.delenv("GUFO_EXTENSION_DIRS", raising=False)
    out = tmp_path / "o"
    args = ["extensions", "generate", "--tree", str(tree), "--out", str(out), "--feature", "linux"]
    assert run(capsys, *args, "--select", "qwen")[0] == 0
    inode = out.stat().st_ino
    first = (out / "extensions.json").read_bytes()
    assert run(capsys, *args, "--select", "qwen3_tts")[0] == 0
    assert out.stat().st_ino != inode and (out / "extensions.json").read_bytes() != first  # a new directory
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging directory left
    (out / "notes.txt").write_text("mine\n")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    code, _, err = run(capsys, *args, "--select", "qwen")
    assert code == 1 and f"cannot write into {out}: it holds 'notes.txt', which generate did not write" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
