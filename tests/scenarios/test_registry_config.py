"""Every command that talks to a registry takes ``--registry-config`` (one shared option):
sign, verify and install oci:// against a real registry that requires basic auth; without
credentials the error lists only the sources that applied to that run."""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import sys

import pytest

from lemonpack.oci.reference import parse_registry_reference

from lemonpack.registry import RegistryClient
from lemonpack.registry.auth import Credentials
from lemonpack.registry.transfer import publish_layout
from support.registry import variant_layout

COMMANDS = [["publish"], ["pull"], ["pin"], ["sign"], ["verify"], ["install"], ["catalogue", "build"]]


def cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lemonpack.cli", *args], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL, env=env)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_registry_command_offers_registry_config(command):
    r = cli(*command, "--help", env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0
    assert "--registry-config FILE" in r.stdout and "Auth file to read first" in r.stdout


def test_sign_verify_install_with_registry_config(auth_registry, tmp_path):
    (user, password), = auth_registry.users.items()
    recipe = f"regcfg-{secrets.token_hex(3)}"
    layout = variant_layout(tmp_path, recipe, "1")
    creds = Credentials(user, password, source="test")
    with RegistryClient(auth_registry.host, auth=creds) as client:
        res = publish_layout(layout, parse_registry_reference(f"{auth_registry.host}/regcfg/{recipe}:v1"), client, tag=recipe)
    ref = f"{auth_registry.host}/regcfg/{recipe}@{res.pushed[0].digest}"
    cfg = tmp_path / "auth.json"
    cfg.write_text(json.dumps({"auths": {auth_registry.host: {
        "auth": base64.b64encode(f"{user}:{password}".encode()).decode()}}}))
    env = {k: v for k, v in os.environ.items() if k not in ("REGISTRY_AUTH_FILE", "DOCKER_CONFIG")}
    env.update(HOME=str(tmp_path / "home"), LEMONPACK_PASSWORD="pw", LEMONPACK_CACHE_DIR=str(tmp_path / "cache"),
               XDG_RUNTIME_DIR=str(tmp_path / "run"), XDG_CONFIG_HOME=str(tmp_path / "home" / ".config"))
    h = tmp_path / "home"
    # every place looked in, in containers-auth.json(5)'s order, then Docker's
    places = (f"{tmp_path}/run/containers/auth.json (absent), {h}/.config/containers/auth.json (absent), "
              f"{h}/.docker/config.json (absent), {h}/.dockercfg (absent)")
    assert cli("keygen", "--out", str(tmp_path / "k"), env=env).returncode == 0

    # without credentials: exit 4, the sources of this run only, and the option to give one
    denied = cli("sign", ref, "--key", str(tmp_path / "k.key"), env=env)
    assert denied.returncode == 4, denied.stderr
    assert (f"needs credentials and none were found for it (looked in: {places}; "
            "give an auth file with --registry-config FILE)") in denied.stderr
    assert "REGISTRY_AUTH_FILE" not in denied.stderr

    ok = cli("sign", ref, "--key", str(tmp_path / "k.key"), "--registry-config", str(cfg), env=env)
    assert ok.returncode == 0, ok.stderr
    ok = cli("verify", ref, "--key", str(tmp_path / "k.pub"), "--registry-config", str(cfg), "--json", env=env)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["digest"] == res.pushed[0].digest
    ok = cli("install", f"oci://{ref}", "--key", str(tmp_path / "k.pub"), "--registry-config", str(cfg),
             "--yes", "--json", env=env)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["recipe"] == recipe
    assert password not in ok.stdout + ok.stderr

    # a config that does not name the host: it is listed as looked in, no hint to give one
    other = tmp_path / "other.json"
    other.write_text('{"auths": {}}')
    denied = cli("verify", ref, "--key", str(tmp_path / "k.pub"), "--registry-config", str(other),
                 env={**env, "REGISTRY_AUTH_FILE": str(tmp_path / "nope.json")})
    assert denied.returncode == 4
    assert (f"(looked in: --registry-config {other}, $REGISTRY_AUTH_FILE {tmp_path}/nope.json (absent), "
            f"{places})") in denied.stderr
