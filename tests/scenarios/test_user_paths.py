"""Files the user names on the command line (recipes, keys, credentials, host facts,
trusted keys): a fifo or a directory there is refused at once, with one line naming the
file, never blocked on; key pairs that exist are named."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The real CLI with a hard timeout: a command blocking on a fifo fails the test."""
    return subprocess.run([sys.executable, "-m", "lemonpack.cli", *args], capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})), timeout=30, stdin=subprocess.DEVNULL)


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo.json"
    os.mkfifo(path)
    return str(path)


@pytest.mark.parametrize("argv, what", [
    (["pin", "{fifo}"], "recipe file"),
    (["pin", "--check", "{fifo}"], "recipe file"),
    (["verify", "{host}/userpaths/x:v1", "--key", "{fifo}"], "key file"),
    (["sign", "{host}/userpaths/x:v1", "--key", "{fifo}"], "key file"),
    (["pull", "{host}/userpaths/x:v1", "-o", "{tmp}/out", "--registry-config", "{fifo}"], "registry config"),
    (["publish", "{layout}", "--to", "{host}/userpaths/x:v1", "--registry-config", "{fifo}"], "registry config"),
    (["catalogue", "update", "--from", "{tmp}", "--key", "{fifo}"], "trusted key file"),
])
def test_a_fifo_given_as_a_file_is_refused_at_once(registry, example_layout, tmp_path, fifo, argv, what):
    args = [a.format(fifo=fifo, host=registry.host, tmp=tmp_path, layout=example_layout) for a in argv]
    start = time.monotonic()
    proc = run(*args, env={"LEMONPACK_PASSWORD": "pw"})
    assert time.monotonic() - start < 60, "hang guard"  # reading a fifo would block for ever
    assert proc.returncode == 1, proc.stderr
    assert f"cannot read {what} {fifo}: not a regular file (a fifo)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_directory_given_as_a_key_is_named(registry, tmp_path):
    proc = run("verify", f"{registry.host}/userpaths/x:v1", "--key", str(tmp_path))
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"error: cannot read key file {tmp_path}: is a directory, not a file"


def test_a_release_definition_that_is_a_fifo_is_a_problem_not_a_hang(fifo, tmp_path):
    from lemonpack.errors import ManifestError
    from lemonpack.release.definition import load_definition

    with pytest.raises(ManifestError) as e:
        load_definition(fifo, tmp_path)
    assert "not a regular file (a fifo)" in str(e.value)


def test_keygen_names_the_files_that_exist(tmp_path):
    (tmp_path / "k.pub").write_text("x")
    proc = run("keygen", "--out", str(tmp_path / "k"), env={"LEMONPACK_PASSWORD": "pw"})
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"error: {tmp_path / 'k.pub'} already exists; refusing to overwrite (use --force)"
    (tmp_path / "k.key").write_text("x")
    proc = run("keygen", "--out", str(tmp_path / "k"), env={"LEMONPACK_PASSWORD": "pw"})
    assert f"{tmp_path / 'k.key'} and {tmp_path / 'k.pub'} already exist;" in proc.stderr
