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


def _login(path: Path, key: str, user: str, password: str) -> None:
    import base64

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"auths": {key: {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}}}))


@pytest.fixture
def user_dirs(tmp_path, monkeypatch):
    """A HOME, XDG_RUNTIME_DIR and XDG_CONFIG_HOME of our own, no auth file set."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    for var in ("REGISTRY_AUTH_FILE", "DOCKER_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    return home


def test_credentials_in_containers_auth_json_order_then_docker(user_dirs, tmp_path, monkeypatch):
    # containers-auth.json(5): $REGISTRY_AUTH_FILE, ${XDG_RUNTIME_DIR}/containers/auth.json,
    # $XDG_CONFIG_HOME/containers/auth.json, then ~/.docker/config.json and ~/.dockercfg
    places = [tmp_path / "env-auth.json", tmp_path / "run" / "containers" / "auth.json",
              user_dirs / ".config" / "containers" / "auth.json", user_dirs / ".docker" / "config.json"]
    for n, p in enumerate(places):
        _login(p, "r.example", f"user{n}", "pw")
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(places[0]))
    legacy = user_dirs / ".dockercfg"
    legacy.write_text(json.dumps({"r.example": {"auth": "dXNlcjQ6cHc="}}))  # user4:pw, the legacy layout
    seen = []
    for n, p in enumerate(places):
        creds = load_credentials("r.example")
        seen.append(creds.username)
        assert creds.source == str(p)
        p.unlink()
        if n == 0:
            monkeypatch.delenv("REGISTRY_AUTH_FILE")
    seen.append(load_credentials("r.example").username)
    assert seen == ["user0", "user1", "user2", "user3", "user4"]
    legacy.unlink()
    assert load_credentials("r.example") is None


def test_looked_in_names_every_place_checked(user_dirs, tmp_path):
    cfg = user_dirs / ".docker" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps({"credsStore": "absentstore"}))
    chain = FileKeychain()
    with pytest.raises(LemonpackError, match="docker-credential-absentstore is not on PATH"):
        chain.resolve("r.example")
    text = chain.describe()
    for place in (tmp_path / "run" / "containers" / "auth.json", user_dirs / ".config" / "containers" / "auth.json",
                  user_dirs / ".dockercfg"):
        assert f"{place} (absent)" in text
    assert str(cfg) in text and f"{cfg} (absent)" not in text
    assert "credential helper docker-credential-absentstore" in text


@pytest.mark.parametrize("key", ["https://index.docker.io/v1/", "docker.io", "index.docker.io",
                                 "registry-1.docker.io"])
def test_docker_hub_logins_are_found_for_docker_io(user_dirs, key):
    _login(user_dirs / ".docker" / "config.json", key, "hubuser", "hubpw")
    for host in ("docker.io", "index.docker.io"):
        creds = load_credentials(host)
        assert (creds.username, creds.password) == ("hubuser", "hubpw")
    assert load_credentials("quay.io") is None


def test_creds_store_is_asked_for_docker_hub_by_its_login_key(user_dirs, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen = tmp_path / "stdin"
    _helper(bin_dir, "store", f'cat > {seen}; echo \'{{"Username": "hub", "Secret": "tok"}}\'\n')
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    cfg = user_dirs / ".docker" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps({"auths": {"https://index.docker.io/v1/": {}}, "credsStore": "store"}))
    creds = load_credentials("docker.io")
    assert (creds.username, creds.password) == ("hub", "tok")
    assert seen.read_text() == "https://index.docker.io/v1/"  # on stdin, never on a command line


def test_a_namespaced_login_is_used_for_its_repositories_only(user_dirs):
    # variants of case 54: ``podman login host/ns`` writes a key ``host/ns``; containers-auth.json(5):
    # the most specific key wins, a namespace's credentials are not sent for another one
    import base64

    def auth(user: str) -> dict:
        return {"auth": base64.b64encode(f"{user}:pw".encode()).decode()}

    path = user_dirs / ".config" / "containers" / "auth.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"auths": {"r.example:5000/team": auth("team"), "r.example:5000": auth("host"),
                                          "r.example:5000/team/deep/": auth("deep"),
                                          "https://q.example/v1/": auth("schemed")}}))
    who = {repo: load_credentials("r.example:5000", repository=repo).username
           for repo in ("team/x", "team/deep/y", "teams/x", "other/x")}
    assert who == {"team/x": "team", "team/deep/y": "deep", "teams/x": "host", "other/x": "host"}
    assert load_credentials("r.example:5000").username == "host"
    assert load_credentials("q.example", repository="any/x").username == "schemed"  # a scheme: the host
    path.write_text(json.dumps({"auths": {"r.example:5000/a": auth("a"), "r.example:5000/b": auth("b")}}))
    assert load_credentials("r.example:5000", repository="b/x").username == "b"
    assert load_credentials("r.example:5000", repository="c/x") is None
    assert load_credentials("r.example:5000").username == "a"  # no repository: the host's first login
    hub = user_dirs / ".docker" / "config.json"
    hub.parent.mkdir()
    hub.write_text(json.dumps({"auths": {"docker.io/kyuz0": auth("ns"), "https://index.docker.io/v1/": auth("hub"),
                                         "Index.Docker.io/other": auth("other")}}))
    who = {repo: load_credentials("docker.io", repository=repo).username
           for repo in ("kyuz0/x", "library/busybox", "other/y", None)}
    assert who == {"kyuz0/x": "ns", "library/busybox": "hub", "other/y": "other", None: "hub"}
