"""COMMAND_INDEX (which module registers each top-level command) matches what the modules
really register, and a command runs when only its own module was imported (a fresh process)."""

from __future__ import annotations

import subprocess
import sys

from lemonpack import cli


def _registered() -> dict[str, str]:
    app = cli.load_commands()  # every module
    out: dict[str, str] = {}
    for c in app.registered_commands:
        out[c.name or c.callback.__name__.replace("_", "-")] = c.callback.__module__.rsplit(".", 1)[-1]
    for g in app.registered_groups:
        inner = g.typer_instance
        callbacks = [c.callback for c in inner.registered_commands] + [
            gg.typer_instance.registered_callback.callback for gg in inner.registered_groups
            if gg.typer_instance.registered_callback]
        modules = {f.__module__.rsplit(".", 1)[-1] for f in callbacks}
        assert len(modules) == 1, (g.name, modules)
        out[g.name] = modules.pop()
    return out


def test_the_index_names_the_module_of_every_command():
    assert _registered() == cli.COMMAND_INDEX
    assert set(cli.COMMAND_INDEX.values()) == set(cli.COMMAND_MODULES)


def test_a_command_imports_only_its_module():
    code = ("import sys; from lemonpack.cli import main\n"
            "rc = main(['catalogue', '--help'])\n"
            "loaded = sorted(m.rsplit('.', 1)[-1] for m in sys.modules if m.startswith('lemonpack.cli.') and m.endswith('_cmds'))\n"
            "print(loaded)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "['catalogue_cmds']"
    assert "search" in r.stdout


def test_a_write_the_disk_refuses_is_one_line_never_a_traceback(tmp_path):
    """``extensions generate --out`` a file, and into /proc: exit 1, one line naming the path."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    f = tmp_path / "a-file"
    f.write_text("x")
    for out in (f, Path("/proc/lemonpack-nope")):
        r = subprocess.run([sys.executable, "-m", "lemonpack.cli", "extensions", "generate", "--tree", str(repo),
                            "--out", str(out)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 1, r.stderr
        assert "Traceback" not in r.stderr and str(out) in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr

