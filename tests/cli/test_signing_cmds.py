"""``lemonpack keygen`` (lemonpack/cli/signing_cmds.py): cosign-format key files with private
modes, no overwrite without --force, no password source no files; a public key given to sign
refused as such before any password is asked for."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from lemonpack.signing import keys


def keygen(cwd: Path, *args: str, password: str | None = "pw") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "LEMONPACK_PASSWORD"}
    if password is not None:
        env["LEMONPACK_PASSWORD"] = password
    return subprocess.run([sys.executable, "-c", "from lemonpack.cli import main; main()", "keygen", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_keygen_writes_cosign_files_with_private_modes(tmp_path):
    r = keygen(tmp_path)
    assert r.returncode == 0, r.stderr
    key, pub = tmp_path / "cosign.key", tmp_path / "cosign.pub"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(pub.stat().st_mode) == 0o644
    private = keys.decode_private_key(key.read_bytes(), b"pw")
    assert keys.encode_public_key(private.public_key()) == pub.read_bytes()
    assert "pw" not in r.stdout + r.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp files left


def test_keygen_refuses_to_overwrite_without_force(tmp_path):
    assert keygen(tmp_path, "--out", "k").returncode == 0
    before = (tmp_path / "k.key").read_bytes()
    r = keygen(tmp_path, "--out", "k")
    assert r.returncode == 1 and "already exist" in r.stderr and "--force" in r.stderr
    assert (tmp_path / "k.key").read_bytes() == before
    r = keygen(tmp_path, "--out", "k", "--force", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"private_key": "k.key", "public_key": "k.pub"}
    assert (tmp_path / "k.key").read_bytes() != before


def test_keygen_without_password_source_fails_and_writes_nothing(tmp_path):
    r = keygen(tmp_path, password=None)
    assert r.returncode == 1 and "LEMONPACK_PASSWORD" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_sign_with_a_public_key_says_so_before_asking_for_a_password(tmp_path):
    """Found in the user trial: ``sign REF --key cosign.pub`` without a password source said
    "no password for cosign.pub" rather than that a public key cannot sign. Nothing is sent
    (port 9 on loopback: a request there would fail with exit 4, not 1)."""
    assert keygen(tmp_path).returncode == 0
    for args in (["sign", "127.0.0.1:9/x:v1", "--key", "cosign.pub"],
                 ["publish", str(tmp_path), "--to", "127.0.0.1:9/x:v1", "--sign", "cosign.pub"]):
        env = {k: v for k, v in os.environ.items() if k not in ("LEMONPACK_PASSWORD", "COSIGN_PASSWORD")}
        r = subprocess.run([sys.executable, "-c", "from lemonpack.cli import main; main()", *args], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert r.returncode == 1, (args, r.stderr)
        assert "cosign.pub: PEM block 'PUBLIC KEY' is not an encrypted cosign private key" in r.stderr
        assert "no password" not in r.stderr and "Traceback" not in r.stderr


def test_verify_a_layout_without_attestation_names_the_flag(tmp_path):
    """``verify oci:DIR:TAG`` reads attestations only: without --attestation it is a usage error
    naming the flag (it was "invalid image reference ... malformed domain 'oci:'")."""
    assert keygen(tmp_path).returncode == 0
    r = subprocess.run([sys.executable, "-c", "from lemonpack.cli import main; main()", "verify",
                        f"oci:{tmp_path}:hello-engine", "--key", "cosign.pub"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "add --attestation" in " ".join(r.stderr.split()) and "malformed domain" not in r.stderr
