"""`lemonpack publish --sign KEY` and the progress bar of `lemonpack pull`, against the real registry."""

from __future__ import annotations

import json
import os
import pty
import secrets
import subprocess
import sys

import pytest

from lemonpack.registry import RegistryClient
from lemonpack.signing import keys
from lemonpack.signing import simplesigning as ss
from support.registry import layout_tags, lemonpack

pytestmark = pytest.mark.slow


def test_publish_sign_signs_what_it_pushed(registry, example_layout, tmp_path):
    pair = keys.generate_key_pair(b"pw")
    (tmp_path / "k.key").write_bytes(pair.private_pem)
    (tmp_path / "k.pub").write_bytes(pair.public_pem)
    repo = f"sign-{secrets.token_hex(3)}/pub"
    tags = layout_tags(example_layout)
    env = {"LEMONPACK_PASSWORD": "pw"}
    r = lemonpack("publish", str(example_layout), "--to", f"{registry.host}/{repo}", "--sign",
                  str(tmp_path / "k.key"), "--no-progress", env=env)
    for digest in tags.values():
        assert f"signed {registry.host}/{repo}@{digest} -> {ss.signature_tag(digest)} (1 signature(s))" in r.stdout
    with RegistryClient(registry.host) as client:
        assert sorted(t for t in client.list_tags(repo) if t.endswith(".sig")) == \
            sorted(ss.signature_tag(d) for d in tags.values())
    for tag, digest in tags.items():
        v = json.loads(lemonpack("verify", f"{registry.host}/{repo}:{tag}", "--key", str(tmp_path / "k.pub"),
                                 "--json").stdout)
        assert v["digest"] == digest
        assert v["verified"][0]["docker_reference"] == f"{registry.host}/{repo}"
    # publishing (and signing) again adds a second signature, as `lemonpack sign` does
    again = json.loads(lemonpack("publish", f"{example_layout}:hello-engine", "--to", f"{registry.host}/{repo}",
                                 "--sign", str(tmp_path / "k.key"), "--json", env=env).stdout)
    assert again["bytes_sent"] == 0
    assert [(s["digest"], s["signatures"]) for s in again["signed"]] == [(tags["hello-engine"], 2)]


def test_publish_sign_with_a_wrong_key_password_pushes_nothing(registry, example_layout, tmp_path):
    (tmp_path / "k.key").write_bytes(keys.generate_key_pair(b"pw").private_pem)
    repo = f"sign-{secrets.token_hex(3)}/nothing"
    r = lemonpack("publish", str(example_layout), "--to", f"{registry.host}/{repo}", "--sign",
                  str(tmp_path / "k.key"), env={"LEMONPACK_PASSWORD": "not-pw"}, check=False)
    assert r.returncode != 0 and "Traceback" not in r.stderr and str(tmp_path / "k.key") in r.stderr
    with RegistryClient(registry.host) as client:
        assert client.list_tags(repo) == []


def _pull_on_a_terminal(*args: str) -> tuple[int, str, str]:
    """Run `lemonpack pull ARGS` with stderr on a pseudo-terminal; (exit code, stdout, stderr)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "lemonpack.cli", "pull", *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=slave, env=dict(os.environ, COLUMNS="120"))
    os.close(slave)
    err = b""
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        err += data
    os.close(master)
    out = proc.stdout.read().decode()
    proc.stdout.close()
    return proc.wait(60), out, err.decode(errors="replace")


def test_pull_shows_a_progress_bar_on_a_terminal_only(registry, example_layout, tmp_path):
    repo = f"prog-{secrets.token_hex(3)}/pull"
    lemonpack("publish", str(example_layout), "--to", f"{registry.host}/{repo}", "--no-progress")
    ref = f"{registry.host}/{repo}:hello-engine"
    label = f"pull {registry.host}/{repo}"
    code, out, err = _pull_on_a_terminal(ref, "--out", str(tmp_path / "tty"))
    assert code == 0, err
    assert label in err and "kB" in err  # rich's DownloadColumn
    code, out, err = _pull_on_a_terminal(ref, "--out", str(tmp_path / "tty-json"), "--json")
    assert code == 0 and label not in err and json.loads(out)["blobs"] > 1
    piped = lemonpack("pull", ref, "--out", str(tmp_path / "piped"))
    assert label not in piped.stderr and piped.stderr == ""
    forced = lemonpack("pull", ref, "--out", str(tmp_path / "forced"), "--progress")
    assert label in forced.stderr
    assert layout_tags(tmp_path / "tty") == layout_tags(tmp_path / "piped") == {"hello-engine": layout_tags(example_layout)["hello-engine"]}
