"""TLS first everywhere (issue 25, "What to build" 3), and Docker Hub as docker resolves it
("What to build" 1), against real docker-registry processes serving TLS with a throw-away CA
(tests/support/tls.py) trusted through ``SSL_CERT_FILE``, the variable httpx honours with
``trust_env`` (lemonpack/httpclient.py)."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys

import pytest

from lemonpack.errors import FetchError
from lemonpack.oci.reference import parse_registry_reference
from lemonpack.registry import RegistryClient
from lemonpack.registry.transfer import publish_layout, pull_layout
from lemonpack.registry.transport import Transport
from support.registry import LocalRegistry
from support.tls import make_tls
from scenarios.test_registry_faults import one_layer_layout

NOTICE = "answered TLS in plain http"


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lemonpack.cli", *args], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})


def test_tls_is_tried_first_for_every_host_plain_http_only_when_told():
    assert Transport("registry.example").base == "https://registry.example"
    assert Transport("127.0.0.1:5000").base == "https://127.0.0.1:5000"  # loopback too
    assert Transport("127.0.0.1:5000").http_fallback and not Transport("registry.example").http_fallback
    told = Transport("registry.example", insecure=True)
    assert told.base == "http://registry.example" and not told.http_fallback


@pytest.mark.slow
def test_publish_and_pull_over_tls_on_loopback_trusting_the_ca_of_ssl_cert_file(tls_registry, tmp_path):
    digest, _layer = one_layer_layout(tmp_path / "layout")
    env = tls_registry.tls.env()
    pushed = cli("publish", f"{tmp_path / 'layout'}:v1", "--to", f"{tls_registry.host}/tls/app:v1", "--no-progress",
                 "--json", env=env)
    assert pushed.returncode == 0, pushed.stderr
    assert json.loads(pushed.stdout)["pushed"][0]["digest"] == digest and NOTICE not in pushed.stderr
    pulled = cli("pull", f"{tls_registry.host}/tls/app:v1", "--out", str(tmp_path / "back"), "--json", env=env)
    assert pulled.returncode == 0, pulled.stderr
    assert json.loads(pulled.stdout)["digest"] == digest
    # skopeo, the oracle, reads the image lemonpack pushed over the same TLS
    inspect = subprocess.run(["skopeo", "inspect", "--raw", f"docker://{tls_registry.host}/tls/app:v1"],
                             capture_output=True, env={**os.environ, **env}, timeout=120)
    assert inspect.returncode == 0, inspect.stderr
    assert "sha256:" + __import__("hashlib").sha256(inspect.stdout).hexdigest() == digest


@pytest.mark.slow
def test_a_tls_failure_names_the_host_and_the_ca_bundle(tls_registry, tmp_path):
    one_layer_layout(tmp_path / "layout")
    other_ca = make_tls(tmp_path / "other").ca
    for env, bundle in (({"SSL_CERT_FILE": ""}, "certifi"), ({"SSL_CERT_FILE": str(other_ca)}, str(other_ca))):
        r = cli("publish", f"{tmp_path / 'layout'}:v1", "--to", f"{tls_registry.host}/tls/app:v1", "--no-progress",
                env=env)
        assert r.returncode == 4, r.stderr
        assert f"TLS with 127.0.0.1:{tls_registry.port} failed" in r.stderr and "CA bundle" in r.stderr, r.stderr
        assert bundle in r.stderr and NOTICE not in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_a_registry_ca_in_its_containers_certs_d_directory_is_trusted_as_podman_trusts_it(tls_registry, tmp_path):
    # a variant of case 55: the CA of a private registry put where podman and skopeo read it,
    # $HOME/.config/containers/certs.d/HOST:PORT/ca.crt, with no SSL_CERT_FILE
    digest, _ = one_layer_layout(tmp_path / "layout")
    home = tmp_path / "home"
    env = {"HOME": str(home), "SSL_CERT_FILE": ""}
    certs = home / ".config" / "containers" / "certs.d" / tls_registry.host
    refused = cli("publish", f"{tmp_path / 'layout'}:v1", "--to", f"{tls_registry.host}/certsd/app:v1",
                  "--no-progress", env=env)
    assert refused.returncode == 4 and f"goes in {certs}/ca.crt" in refused.stderr, refused.stderr
    certs.mkdir(parents=True)
    (certs / "ca.crt").write_bytes(tls_registry.tls.ca.read_bytes())
    pushed = cli("publish", f"{tmp_path / 'layout'}:v1", "--to", f"{tls_registry.host}/certsd/app:v1",
                 "--no-progress", "--json", env=env)
    assert pushed.returncode == 0, pushed.stderr
    pulled = cli("pull", f"{tls_registry.host}/certsd/app:v1", "--out", str(tmp_path / "back"), "--json", env=env)
    assert pulled.returncode == 0, pulled.stderr
    assert json.loads(pulled.stdout)["digest"] == digest and NOTICE not in pulled.stderr
    # skopeo, the oracle, trusts the same directory (--cert-dir: its rootless default is
    # $HOME/.config/containers/certs.d only when run rootless, so it is named here)
    inspect = subprocess.run(["skopeo", "inspect", "--raw", "--cert-dir", str(certs),
                              f"docker://{tls_registry.host}/certsd/app:v1"],
                             capture_output=True, env={**os.environ, **env}, timeout=120)
    assert inspect.returncode == 0, inspect.stderr
    (certs / "client.key").write_text("x")  # a key without its certificate: refused, naming the file
    broken = cli("pull", f"{tls_registry.host}/certsd/app:v1", "--out", str(tmp_path / "again"), env=env)
    assert broken.returncode != 0 and f"{certs / 'client.key'} has no client certificate" in broken.stderr
    assert "Traceback" not in broken.stderr and not (tmp_path / "again").exists()


@pytest.mark.slow
def test_insecure_to_a_tls_registry_says_it_speaks_tls_not_an_opaque_400(tls_registry, tmp_path):
    # a variant of case 55: --insecure (plain http) to a TLS port answers a bodiless 400 to HEAD
    one_layer_layout(tmp_path / "layout")
    r = cli("publish", f"{tmp_path / 'layout'}:v1", "--to", f"{tls_registry.host}/tls/app:v1", "--no-progress",
            "--insecure")
    assert r.returncode == 4, r.stderr
    assert f"{tls_registry.host} speaks TLS, not plain http: drop --insecure" in r.stderr, r.stderr


@pytest.mark.slow
def test_a_plain_http_loopback_registry_after_the_tls_attempt_is_said_on_stderr(tmp_path):
    one_layer_layout(tmp_path / "layout")
    empty = tmp_path / "registries.conf"
    empty.write_text("")
    with LocalRegistry(tmp_path / "reg", declare=False) as reg:
        src, to = f"{tmp_path / 'layout'}:v1", f"{reg.host}/plain/app:v1"
        r = cli("publish", src, "--to", to, "--no-progress", env={"CONTAINERS_REGISTRIES_CONF": str(empty)})
        assert r.returncode == 0, r.stderr
        assert f"registry {reg.host} {NOTICE}" in r.stderr
        told = cli("publish", src, "--to", to, "--no-progress", "--insecure",
                   env={"CONTAINERS_REGISTRIES_CONF": str(empty)})
        assert told.returncode == 0 and NOTICE not in told.stderr, told.stderr
        named = cli("publish", src, "--to", to, "--no-progress", "--insecure", reg.host,
                    env={"CONTAINERS_REGISTRIES_CONF": str(empty)})  # --insecure REGISTRY: that one only
        assert named.returncode == 0 and NOTICE not in named.stderr, named.stderr
        other = cli("publish", src, "--to", to, "--no-progress", "--insecure=127.0.0.1:1",
                    env={"CONTAINERS_REGISTRIES_CONF": str(empty)})
        assert other.returncode == 0 and f"registry {reg.host} {NOTICE}" in other.stderr, other.stderr
        conf = tmp_path / "insecure.conf"
        conf.write_text(f'[[registry]]\nlocation = "{reg.host}"\ninsecure = true\n')
        said = cli("publish", src, "--to", to, "--no-progress", env={"CONTAINERS_REGISTRIES_CONF": str(conf)})
        assert said.returncode == 0 and NOTICE not in said.stderr, said.stderr


@pytest.mark.slow
def test_docker_hub_names_go_to_registry_1_with_library_and_the_docker_login_key(tmp_path, monkeypatch):
    """A local TLS registry answers for registry-1.docker.io (a test resolver: connections to
    registry-1.docker.io:443 reach it; the certificate is checked against that name) and asks
    for the credentials `docker login` stored under https://index.docker.io/v1/."""
    tls = make_tls(tmp_path / "tls", names=("registry-1.docker.io", "127.0.0.1"))
    home = tmp_path / "home"
    (home / ".docker").mkdir(parents=True)
    (home / ".docker" / "config.json").write_text(json.dumps({"auths": {"https://index.docker.io/v1/": {
        "auth": base64.b64encode(b"hubuser:hub-pw").decode()}}}))
    for var in ("REGISTRY_AUTH_FILE", "DOCKER_CONFIG", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SSL_CERT_FILE", str(tls.ca))
    digest, layer = one_layer_layout(tmp_path / "layout")
    with LocalRegistry(tmp_path / "hub", users={"hubuser": "hub-pw"}, tls=tls) as hub:
        real = socket.create_connection
        contacted = []

        def resolver(address, *args, **kwargs):
            contacted.append(address)
            if address[0] == "registry-1.docker.io" and address[1] == 443:
                return real(("127.0.0.1", hub.port), *args, **kwargs)
            raise OSError(f"the test resolver knows only registry-1.docker.io, not {address}")

        monkeypatch.setattr(socket, "create_connection", resolver)
        ref = parse_registry_reference("docker.io/busybox:v1")
        with RegistryClient(ref.host) as c:
            assert c.creds is not None and c.creds.username == "hubuser"
            res = publish_layout(tmp_path / "layout", ref, c)
        assert res.pushed[0].digest == digest
        assert (hub.storage / "docker" / "registry" / "v2" / "repositories" / "library" / "busybox").is_dir()
        back = parse_registry_reference("index.docker.io/library/busybox:v1")
        with RegistryClient(back.host) as c:
            got = pull_layout(back, tmp_path / "back", c)
        assert got.digest == digest
        from lemonpack.registry.pin import _Resolver  # what `lemonpack pin` asks for a recipe's image

        resolver_ = _Resolver(False, None)
        try:
            assert resolver_.resolve("docker.io/busybox:v1", "recipe.json", "container.image") == \
                f"docker.io/busybox:v1@{digest}"  # the user's spelling kept, pinned to what Hub serves
        finally:
            resolver_.close()
        assert set(contacted) == {("registry-1.docker.io", 443)}
        # without the login: the registry wants credentials, and the message lists where we looked
        (home / ".docker" / "config.json").write_text("{}")
        with RegistryClient("docker.io") as c, pytest.raises(FetchError) as e:
            c.get_manifest("library/busybox", "v1")
        assert "registry docker.io needs credentials" in str(e.value) and str(home / ".docker" / "config.json") in str(e.value)
    assert layer == (tmp_path / "back" / "blobs" / "sha256" / __import__("hashlib").sha256(layer).hexdigest()).read_bytes()
