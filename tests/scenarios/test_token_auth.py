"""Bearer-token auth against the real registry: distribution configured with ``auth: token:``
(realm = tests/support/token_server.py, ES256 JWTs with x5c, its certificate as rootcertbundle).

publish (+ --sign), pull, pin, verify and install oci:// run through the CLI with credentials
from a docker config file ($REGISTRY_AUTH_FILE): they work with the right password and exit 4
with a wrong one, and neither the password nor a token is printed or logged. The client asks
the token service for the scopes the registry names (pull, then pull+push; a cross-repository
mount adds the source repository's pull), reuses tokens, renews them before they expire and
once more when a cached one is refused; an identity token (OAuth2 refresh token) works too."""

from __future__ import annotations

import base64
import json
import logging
import os
import secrets
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from lemonpack.errors import FetchError
from lemonpack.oci.reference import parse_registry_reference
from lemonpack.registry import RegistryClient
from lemonpack.registry.auth import Credentials
from lemonpack.registry.transfer import publish_layout, pull_layout
from lemonpack.signing import keys

from support.registry import layout_tags, lemonpack

pytestmark = pytest.mark.slow

SEED = Path(__file__).resolve().parents[1] / "fixtures" / "seed-examples" / "walkthrough_toolbox_llamacpp.json"


def auth_file(path: Path, host: str, user: str, password: str) -> Path:
    path.write_text(json.dumps({"auths": {host: {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}}}))
    return path


def no_secrets(texts, password: str) -> None:
    for text in texts:
        assert password not in text
        assert "eyJ" not in text  # no JWT (base64url of '{"') either


def test_the_fixture_registry_wants_tokens_from_our_token_server(token_registry):
    ts = token_registry.token_server
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://{token_registry.host}/v2/", timeout=10)
    assert e.value.code == 401
    assert e.value.headers["WWW-Authenticate"] == f'Bearer realm="{ts.realm}",service="{ts.service}"'
    forged = ts.issue("lemon", ["repository:x:pull"])
    head, claims, sig = forged.split(".")
    # a token signed by another key (the same header) is refused by distribution
    from support.token_server import TokenServer

    other = TokenServer(ts.workdir / "other", users={}, service=ts.service, issuer=ts.issuer)
    for token, status in ((forged, 200), (other.issue("lemon", ["repository:x:pull"]), 401),
                          (f"{head}.{claims}.{sig[:-4]}AAAA", 401)):
        req = urllib.request.Request(f"http://{token_registry.host}/v2/", headers={"Authorization": f"Bearer {token}"})
        try:
            got = urllib.request.urlopen(req, timeout=10).status
        except urllib.error.HTTPError as exc:
            got = exc.code
        assert got == status


def test_cli_publish_sign_pull_pin_verify_install_with_a_token_registry(token_registry, example_layout, tmp_path):
    (user, password), = token_registry.users.items()
    host = token_registry.host
    repo = f"tok-{secrets.token_hex(3)}/engines"
    pair = keys.generate_key_pair(b"k-pass")
    (tmp_path / "k.key").write_bytes(pair.private_pem)
    (tmp_path / "k.pub").write_bytes(pair.public_pem)
    env = {"REGISTRY_AUTH_FILE": str(auth_file(tmp_path / "auth.json", host, user, password)),
           "DOCKER_CONFIG": str(tmp_path / "no-docker"), "LEMONPACK_PASSWORD": "k-pass",
           "LEMONPACK_CACHE_DIR": str(tmp_path / "cache")}
    outputs = []

    def run(*args, ok=True):
        r = lemonpack(*args, env=env, check=ok)
        outputs.extend([r.stdout, r.stderr])
        return r

    done = json.loads(run("publish", str(example_layout), "--to", f"{host}/{repo}", "--sign", str(tmp_path / "k.key"),
                          "--json", "--no-progress").stdout)
    tags = layout_tags(example_layout)
    assert {p["tag"]: p["digest"] for p in done["pushed"]} == tags
    assert sorted(s["digest"] for s in done["signed"]) == sorted(tags.values())
    for tag, digest in tags.items():
        v = json.loads(run("verify", f"{host}/{repo}:{tag}", "--key", str(tmp_path / "k.pub"), "--json").stdout)
        assert v["digest"] == digest and len(v["verified"]) == 1
        out = tmp_path / f"pulled-{tag}"
        pulled = json.loads(run("pull", f"{host}/{repo}@{digest}", "--out", str(out), "--json").stdout)
        assert pulled["digest"] == digest and layout_tags(out) == {"latest": digest}

    image_tag = next(t for t in tags if "." in t)
    for tag in ("vulkan-radv", "rocm-10.0"):
        run("publish", f"{example_layout}:{image_tag}", "--to", f"{host}/{repo}/toolbox:{tag}", "--no-progress")
    recipe = tmp_path / "toolbox.json"
    recipe.write_text(SEED.read_text().replace("docker.io/kyuz0/amd-strix-halo-toolboxes", f"{host}/{repo}/toolbox"))
    pinned = json.loads(run("pin", str(recipe), "--json").stdout)["pinned"]
    assert {p["new"] for p in pinned} == {f"{host}/{repo}/toolbox:{t}@{tags[image_tag]}" for t in ("vulkan-radv", "rocm-10.0")}

    receipt = json.loads(run("install", f"oci://{host}/{repo}@{tags['hello-engine']}", "--yes",
                             "--key", str(tmp_path / "k.pub"), "--json").stdout)
    assert receipt["from"]["signature"] == {"verified": 1, "checked": 1}
    assert (tmp_path / "cache" / "external" / "hello-engine" / "hello-engine").is_file()

    # skopeo, with the same auth file, sees what we pushed
    raw = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false", "--authfile", env["REGISTRY_AUTH_FILE"],
                          f"docker://{host}/{repo}:hello-engine"], capture_output=True, check=True, timeout=60).stdout
    assert raw == (example_layout / "blobs" / "sha256" / tags["hello-engine"].split(":")[1]).read_bytes()

    # a wrong password: every command exits 4 naming the user and the file, never the secret
    auth_file(Path(env["REGISTRY_AUTH_FILE"]), host, user, "wrong-" + password)
    recipe.write_text(SEED.read_text().replace("docker.io/kyuz0/amd-strix-halo-toolboxes", f"{host}/{repo}/toolbox"))
    before = recipe.read_bytes()
    for args in (("publish", str(example_layout), "--to", f"{host}/{repo}-2", "--no-progress"),
                 ("pull", f"{host}/{repo}:hello-engine", "--out", str(tmp_path / "denied")),
                 ("pin", str(recipe)),
                 ("verify", f"{host}/{repo}:hello-engine", "--key", str(tmp_path / "k.pub")),
                 ("sign", f"{host}/{repo}:hello-engine", "--key", str(tmp_path / "k.key")),
                 ("install", f"oci://{host}/{repo}@{tags['hello-engine']}", "--yes")):
        r = run(*args, ok=False)
        assert r.returncode == 4, (args, r.stdout, r.stderr)
        assert "refused the credentials of lemon" in r.stderr and env["REGISTRY_AUTH_FILE"] in r.stderr
        assert "Traceback" not in r.stderr
    assert not (tmp_path / "denied").exists() and recipe.read_bytes() == before
    assert any(r.user == "lemon" and not r.granted for r in token_registry.token_server.requests)
    no_secrets(outputs, password)


def _scopes(request) -> list[str]:
    """A token request's scopes, each scope's actions sorted: distribution writes them in Go
    map order (``pull,push`` or ``push,pull``), which carries no meaning."""
    out = []
    for scope in request.scopes:
        head, _, actions = scope.rpartition(":")
        out.append(f"{head}:{','.join(sorted(actions.split(',')))}")
    return sorted(out)


def test_scopes_token_reuse_and_mounts(token_registry, example_layout):
    (user, password), = token_registry.users.items()
    ts = token_registry.token_server
    host = token_registry.host
    a, b = f"tok-{secrets.token_hex(3)}/a", f"tok-{secrets.token_hex(3)}/b"
    with RegistryClient(host, auth=Credentials(user, password, source="test")) as client:
        first = publish_layout(example_layout, parse_registry_reference(f"{host}/{a}"), client)
        assert first.blobs_uploaded == 3
        # one token to look (pull), one to push (pull+push) — not one per request
        assert [_scopes(r) for r in ts.requests] == [[f"repository:{a}:pull"], [f"repository:{a}:pull,push"]]
        assert client.token_requests == 2 and client.stats.requests > 10
        ts.requests.clear()
        again = publish_layout(example_layout, parse_registry_reference(f"{host}/{a}"), client)
        assert again.bytes_sent == 0 and ts.requests == []  # the push token serves the HEADs too
        mounted = publish_layout(example_layout, parse_registry_reference(f"{host}/{b}"), client, mount_from=[a])
        assert mounted.blobs_mounted == 3 and mounted.bytes_sent == 0
        asked = [_scopes(r) for r in ts.requests]
        assert sorted([f"repository:{a}:pull", f"repository:{b}:pull,push"]) in asked
        assert all(r.user == "lemon" and r.granted for r in ts.requests)


def test_a_mount_refused_for_lack_of_access_falls_back_to_an_upload(token_registry, example_layout):
    (user, password), = token_registry.users.items()
    ts = token_registry.token_server
    host = token_registry.host
    a, b = f"tok-{secrets.token_hex(3)}/secret", f"tok-{secrets.token_hex(3)}/mine"
    with RegistryClient(host, auth=Credentials(user, password, source="test")) as client:
        publish_layout(example_layout, parse_registry_reference(f"{host}/{a}"), client)
    ts.denied.add(a)  # from now on nobody may pull from a
    try:
        with RegistryClient(host, auth=Credentials(user, password, source="test")) as client:
            pushed = publish_layout(example_layout, parse_registry_reference(f"{host}/{b}"), client, mount_from=[a])
            assert pushed.blobs_mounted == 0 and pushed.blobs_uploaded == 3
            tag, digest = next(iter(layout_tags(example_layout).items()))
            assert client.head_manifest(b, tag)[0] == digest  # the image is whole in b
    finally:
        ts.denied.discard(a)


def test_expired_tokens_are_renewed(token_registry, example_layout, tmp_path):
    # No waiting for real expiry: the client's clock is moved by putting its tokens' renewal
    # time in the past, and the registry's by a token born expired (token_server.py).
    (user, password), = token_registry.users.items()
    ts = token_registry.token_server
    ts.lifetime = 4
    host = token_registry.host
    repo = f"tok-{secrets.token_hex(3)}/expiry"
    with RegistryClient(host, auth=Credentials(user, password, source="test")) as client:
        before = time.monotonic()
        publish_layout(example_layout, parse_registry_reference(f"{host}/{repo}"), client)
        n = client.token_requests
        tokens = list(client.auth.tokens.values())
        assert tokens and all(t.expires <= time.monotonic() + 4 and t.renew_at >= before for t in tokens)  # expires_in
        # renewed before use once its time has come on the client's clock
        for token in tokens:
            token.renew_at = token.expires = time.monotonic() - 0.5
        pull_layout(parse_registry_reference(f"{host}/{repo}:hello-engine"), tmp_path / "p1", client)
        assert client.token_requests == n + 1
        # a token the client believes fresh and the registry refuses is replaced once
        ts.lifetime, ts.born_expired = 3600, 1
        for token in client.auth.tokens.values():
            token.renew_at = token.expires = time.monotonic() - 0.5
        pull_layout(parse_registry_reference(f"{host}/{repo}:hello-engine"), tmp_path / "p2", client)
        assert ts.born_expired == 0 and client.token_requests == n + 3  # renewed (born expired), refused, replaced
        assert layout_tags(tmp_path / "p2") == {"hello-engine": layout_tags(example_layout)["hello-engine"]}


def test_identity_token_uses_the_refresh_token_grant(token_registry, example_layout, tmp_path):
    (user, password), = token_registry.users.items()
    ts = token_registry.token_server
    form = urllib.parse.urlencode({"grant_type": "password", "username": user, "password": password,
                                   "service": ts.service, "client_id": "test", "access_type": "offline"}).encode()
    refresh = json.loads(urllib.request.urlopen(ts.realm, data=form, timeout=10).read())["refresh_token"]
    cfg = tmp_path / "auth.json"
    cfg.write_text(json.dumps({"auths": {token_registry.host: {"auth": base64.b64encode(b"<token>:").decode(),
                                                               "identitytoken": refresh}}}))
    repo = f"tok-{secrets.token_hex(3)}/idt"
    r = lemonpack("publish", str(example_layout), "--to", f"{token_registry.host}/{repo}", "--json", "--no-progress",
                  env={"REGISTRY_AUTH_FILE": str(cfg), "DOCKER_CONFIG": str(tmp_path / "none")})
    assert {p["tag"]: p["digest"] for p in json.loads(r.stdout)["pushed"]} == layout_tags(example_layout)
    grants = [x.grant for x in ts.requests if x.method == "POST"]
    assert "refresh_token" in grants and all(x.granted for x in ts.requests if x.grant == "refresh_token")
    no_secrets([r.stdout, r.stderr], refresh)


def test_nothing_secret_in_log_records(token_registry, example_layout, tmp_path, caplog):
    (user, password), = token_registry.users.items()
    host = token_registry.host
    repo = f"tok-{secrets.token_hex(3)}/logs"
    caplog.set_level(logging.DEBUG)
    with RegistryClient(host, auth=Credentials(user, password, source="test")) as client:
        publish_layout(example_layout, parse_registry_reference(f"{host}/{repo}"), client)
        pull_layout(parse_registry_reference(f"{host}/{repo}:hello-engine"), tmp_path / "p", client)
    with RegistryClient(host, auth=Credentials(user, "wrong", source="test")) as client:
        with pytest.raises(FetchError) as e:
            client.list_tags(repo)
    assert e.value.exit_code == 4 and "wrong" not in str(e.value)
    records = [r.getMessage() for r in caplog.records]
    assert any("bearer token for" in m for m in records)  # the log did run at DEBUG
    no_secrets(records + [repr(client.creds)], password)
    assert all("wrong" not in m for m in records)


def test_anonymous_client_is_denied_with_exit_4(token_registry, tmp_path):
    r = lemonpack("pull", f"{token_registry.host}/nobody/here:v1", "--out", str(tmp_path / "x"), check=False,
                  env={"REGISTRY_AUTH_FILE": str(tmp_path / "missing.json"), "DOCKER_CONFIG": str(tmp_path / "none")})
    assert r.returncode == 4 and "access denied anonymously" in r.stderr, r.stderr
    assert not (tmp_path / "x").exists()
    assert os.listdir(tmp_path) == []




def test_pull_and_models_pull_judge_and_fetch_through_one_client(token_registry, tmp_path):
    """The trust check (a tag resolved, its signatures read) and the pull share one registry
    client per command: one token for the repository's pull scope, not one per client."""
    from lemonpack.signing.remote import sign_image
    from support.gguf_files import llama
    from support.trust import key_data, new_key, push_image, write_policy, write_registries_d

    (user, password), = token_registry.users.items()
    ts = token_registry.token_server
    host = token_registry.host
    image, model = f"tok-{secrets.token_hex(3)}/judged", f"tok-{secrets.token_hex(3)}/model"
    key = new_key()
    env = {"REGISTRY_AUTH_FILE": str(auth_file(tmp_path / "auth.json", host, user, password)),
           "DOCKER_CONFIG": str(tmp_path / "no-docker"), "LEMONPACK_CACHE_DIR": str(tmp_path / "cache")}
    assert lemonpack("models", "push", str(llama(tmp_path / "tiny.gguf")), "--to", f"{host}/{model}:v1",
                     env=env).returncode == 0
    with RegistryClient(host, auth=Credentials(user, password, source="test")) as client:
        push_image(client, image, "v1", b"a judged layer")
        for repo in (image, model):
            sign_image(f"{host}/{repo}:v1", key, client=client)
    policy = write_policy(tmp_path / "policy.json", {"default": [{"type": "reject"}], "transports": {"docker": {
        host: [{"type": "sigstoreSigned", "keyData": key_data(key), "signedIdentity": {"type": "matchRepository"}}]}}})
    registries_d = write_registries_d(tmp_path / "rd", {"docker": {host: {"use-sigstore-attachments": True}}})
    trust = ("--policy", str(policy), "--registries.d", str(registries_d))
    for repo, command in ((image, ("pull", f"{host}/{image}:v1", "--out", str(tmp_path / "out"))),
                          (model, ("models", "pull", f"{host}/{model}:v1"))):
        ts.requests.clear()
        done = lemonpack(*command, *trust, "--json", env=env)
        assert done.returncode == 0, done.stderr
        asked = [_scopes(r) for r in ts.requests]
        assert asked == [[f"repository:{repo}:pull"]], (command, asked)  # the check's token served the pull
