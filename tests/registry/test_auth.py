"""Keychains (lemonpack/registry/auth.py): a credential helper is asked as Docker asks it (the host
on stdin), an identity token is kept as one, a broken helper is a one-line error naming it and
the file."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from lemonpack.errors import LemonpackError
from lemonpack.registry.auth import FileKeychain, load_credentials


def _helper(bin_dir: Path, name: str, script: str) -> None:
    exe = bin_dir / f"docker-credential-{name}"
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)


def test_credential_helpers_are_asked_with_the_host_on_stdin(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen = tmp_path / "stdin"
    _helper(bin_dir, "good", f'cat > {seen}; echo \'{{"ServerURL": "x", "Username": "u", "Secret": "s3cret"}}\'\n')
    _helper(bin_dir, "token", 'cat >/dev/null; echo \'{"Username": "<token>", "Secret": "refresh"}\'\n')
    _helper(bin_dir, "none", 'cat >/dev/null; echo "credentials not found in native keychain"; exit 1\n')
    _helper(bin_dir, "broken", 'cat >/dev/null; echo "s3cret in the output"; exit 0\n')
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "nodocker"))
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"credHelpers": {"a.example": "good", "b.example": "token", "c.example": "none",
                                               "d.example": "broken", "e.example": "missing"}}))
    creds = FileKeychain(cfg).resolve("a.example")
    assert (creds.username, creds.password) == ("u", "s3cret") and "docker-credential-good" in creds.source
    assert seen.read_text() == "a.example" and "s3cret" not in repr(creds)
    tok = load_credentials("b.example", cfg)
    assert tok.identity_token == "refresh" and tok.password == ""
    assert load_credentials("c.example", cfg) is None
    with pytest.raises(LemonpackError) as e:
        load_credentials("d.example", cfg)
    assert str(cfg) in str(e.value) and "docker-credential-broken" in str(e.value) and "s3cret" not in str(e.value)
    with pytest.raises(LemonpackError, match="docker-credential-missing is not on PATH"):
        load_credentials("e.example", cfg)
