"""Network failures a user meets first: a registry host that does not resolve and a port
nothing listens on fail at once (no five retries), exit 4, and the message keeps the cause
(host, port, reason) whole."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from support.helpers import closed_port
from support.registry import lemonpack


@pytest.mark.parametrize("command", ["publish", "pull", "verify"])
def test_an_unresolvable_host_fails_at_once_naming_host_port_and_reason(example_layout, tmp_path, command):
    host = "lemonpack-test.invalid"
    key = tmp_path / "k.pub"
    key.write_bytes(ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    args = {"publish": ["publish", str(example_layout), "--to", f"{host}/x"],
            "pull": ["pull", f"{host}/x:v1", "-o", str(tmp_path / "out")],
            "verify": ["verify", f"{host}/x:v1", "--key", str(key)]}[command]
    r = lemonpack(*args, check=False)
    assert r.returncode == 4, r.stderr
    # one lookup, no retry: "attempts" absent below (the retry waits are tested on a fake sleep)
    assert f"cannot connect to {host}:443: name resolution failed (" in r.stderr
    assert "attempts" not in r.stderr and "Traceback" not in r.stderr
    assert r.stderr.rstrip().endswith(")") and len(r.stderr.strip().splitlines()) == 1


def test_a_closed_port_is_tried_twice_at_most(example_layout):
    port = closed_port()
    r = lemonpack("publish", str(example_layout), "--to", f"127.0.0.1:{port}/x", check=False)
    assert r.returncode == 4, r.stderr
    assert f"cannot connect to 127.0.0.1:{port}: connection refused (nothing listening on port {port}) " \
           "(after 2 attempts)" in r.stderr


