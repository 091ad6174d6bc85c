"""``lemonpack unpack ARCHIVE --out DIR [--binary PATH]``: install's extraction rules as a
command (what the Nix recipe packages run), on real tar files."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest


def _tar(path: Path, members: dict[str, bytes], mode: int = 0o755) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tf.addfile(info, io.BytesIO(data))
    return path


def _unpack(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lemonpack.cli", "unpack", *map(str, args)], capture_output=True,
                          text=True, timeout=60)


def test_unpacks_and_checks_the_binary(tmp_path):
    art = _tar(tmp_path / "a.tar.gz", {"bin/engine": b"#!/bin/sh\n", "lib/x.so": b"\x7fELF"})
    out = _unpack(art, "--out", tmp_path / "o", "--binary", "bin/engine", "--label", "https://h/a.tar.gz")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "o/bin/engine").read_bytes() == b"#!/bin/sh\n"
    assert (tmp_path / "o/lib/x.so").is_file()


def test_missing_or_non_executable_binary_leaves_nothing(tmp_path):
    art = _tar(tmp_path / "a.tar.gz", {"bin/engine": b"x"}, mode=0o644)
    for binary in ("bin/engine", "bin/nope"):
        out = _unpack(art, "--out", tmp_path / "o", "--binary", binary, "--label", "https://h/a.tar.gz")
        assert out.returncode == 5
        assert f"https://h/a.tar.gz: the recipe's binary '{binary}' is not an executable regular file" in out.stderr
        assert not (tmp_path / "o").exists()
    out = _unpack(art, "--out", tmp_path / "o", "--binary", "../x")
    assert out.returncode == 2 and not (tmp_path / "o").exists()


def test_unsafe_member_is_refused_naming_it(tmp_path):
    art = _tar(tmp_path / "a.tar.gz", {"ok": b"1", "../escape": b"2"})
    out = _unpack(art, "--out", tmp_path / "o", "--label", "https://h/a.tar.gz")
    assert out.returncode == 5
    assert "https://h/a.tar.gz: unsafe member '../escape'" in out.stderr
    assert not (tmp_path / "o").exists() and not (tmp_path / "escape").exists()


def test_an_out_below_a_regular_file_is_said_to_be_not_a_directory_by_every_command(tmp_path):
    # ``--out afile/sub`` with ``afile`` a file: the mkdir's "File exists" named no culprit
    (tmp_path / "afile").write_text("x")
    art = _tar(tmp_path / "a.tar.gz", {"ok": b"1"})
    root = Path(__file__).resolve().parents[2]
    for args in (("build", "--example", "--out", "afile/sub", "--no-progress"), ("unpack", art, "--out", "afile/sub"),
                 ("extensions", "generate", "--out", "afile/sub"), ("kube", "generate", "x", "--out", "afile/k.yaml"),
                 ("catalogue", "build", "--source", root, "--out", "afile/sub")):
        r = subprocess.run([sys.executable, "-m", "lemonpack.cli", *map(str, args)], capture_output=True, text=True,
                           timeout=120, cwd=tmp_path)
        assert r.returncode == 1, (args, r.stderr)
        assert "afile is not a directory" in r.stderr and "File exists" not in r.stderr, (args, r.stderr)
    assert (tmp_path / "afile").read_text() == "x"


def test_an_empty_out_or_path_is_a_usage_error_not_the_current_directory(tmp_path):
    (tmp_path / "keep").write_text("x")  # '' read as '.' would try to replace this directory
    for args, name in ((("build", "--example", "--out", ""), "--out"), (("unpack", "/etc/hostname", "--out", ""), "--out"),
                       (("kube", "generate", "x", "--out", ""), "--out"), (("pull", "a.b/c:d", "--out", ""), "--out"),
                       (("unpack", "", "--out", "o"), "ARCHIVE")):
        r = subprocess.run([sys.executable, "-m", "lemonpack.cli", *args], capture_output=True, text=True,
                           timeout=60, cwd=tmp_path)
        assert r.returncode == 2, (args, r.stderr)
        assert f"{name} is empty" in r.stderr, (args, r.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep"]


def test_only_the_path_parameters_refuse_an_empty_value_not_every_str_one():
    """``kube generate --out`` is a ``str`` option: its check must not reach the other ``str``
    parameters, which share click's one ``STRING`` type (an empty ``--namespace`` or a search
    for ``''`` is not a path)."""
    import typer
    from typer._click.types import STRING

    from lemonpack.cli._app import refuse_empty_paths

    app = typer.Typer()

    @app.command()
    def one(out: str = typer.Option(..., "--out"), name: str = typer.Option("x", "--name")) -> None:
        print(f"out={out!r} name={name!r}")

    @app.command()
    def two(query: str = typer.Argument("")) -> None:
        print(f"query={query!r}")

    command = refuse_empty_paths(typer.main.get_command(app))
    with pytest.raises(SystemExit) as refused:
        command.main(["one", "--out", ""], standalone_mode=True)
    assert refused.value.code == 2
    with pytest.raises(SystemExit) as kept:
        command.main(["one", "--out", "o", "--name", ""], standalone_mode=True)
    assert kept.value.code == 0
    with pytest.raises(SystemExit) as searched:
        command.main(["two", ""], standalone_mode=True)
    assert searched.value.code == 0
    assert STRING.convert("", None, None) == ""  # the shared type itself is untouched


def test_a_file_that_is_not_an_archive_is_copied_keeping_its_mode_and_said_so(tmp_path):
    doc = tmp_path / "notes.md"
    doc.write_text("# notes\n")
    doc.chmod(0o644)
    out = _unpack(doc, "--out", tmp_path / "u")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "u/notes.md").read_text() == "# notes\n"
    assert (tmp_path / "u/notes.md").stat().st_mode & 0o777 == 0o644  # not made executable
    assert out.stderr.strip().splitlines() == [f"lemonpack: {doc} is not an archive; copied as a file to "
                                               f"{tmp_path / 'u' / 'notes.md'}"]
    tool = tmp_path / "tool"
    tool.write_bytes(b"#!/bin/sh\n")
    tool.chmod(0o755)
    assert _unpack(tool, "--out", tmp_path / "v").returncode == 0
    assert (tmp_path / "v/tool").stat().st_mode & 0o777 == 0o755  # executable as it was
    tool.chmod(0o444)  # a download (a Nix store path) names its binary: made executable, as install does
    assert _unpack(tool, "--out", tmp_path / "w", "--name", "engine", "--binary", "engine").returncode == 0
    assert (tmp_path / "w/engine").stat().st_mode & 0o777 == 0o755
