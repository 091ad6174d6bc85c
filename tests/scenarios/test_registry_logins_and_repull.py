"""Cases 53-57 of issue 25 as tests (the others: tests/scenarios/test_registry_tls.py for 53 and
55, tests/scenarios/test_registry_faults.py for 56): a ``skopeo login`` is found where
containers-auth.json(5) puts it (54), and a re-pull into a layout that holds every blob moves no
byte, while a blob that is not what its name says is downloaded again and a killed pull's
``OUT.tmp-*`` is swept (57)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from lemonpack.files import locked

from scenarios.test_registry_faults import LAYER, one_layer_layout


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lemonpack.cli", *args], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})


@pytest.mark.slow
@pytest.mark.parametrize("where", ["runtime", "config"])
def test_a_skopeo_login_is_found_where_containers_auth_json_puts_it(auth_registry, tmp_path, require_tool, where):
    require_tool("skopeo")
    (user, password), = auth_registry.users.items()
    home, run = tmp_path / "home", tmp_path / "run"
    home.mkdir()
    run.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if k not in ("REGISTRY_AUTH_FILE", "DOCKER_CONFIG")}
    env.update(HOME=str(home), XDG_RUNTIME_DIR=str(run), XDG_CONFIG_HOME=str(home / ".config"))
    login = subprocess.run(["skopeo", "login", "--tls-verify=false", "-u", user, "--password-stdin", auth_registry.host],
                           input=password, capture_output=True, text=True, env=env, timeout=120)
    assert login.returncode == 0, login.stderr
    written = run / "containers" / "auth.json"
    assert written.is_file()  # skopeo's default, the oracle of where a login goes
    if where == "config":  # podman's other place: $XDG_CONFIG_HOME/containers/auth.json
        target = home / ".config" / "containers" / "auth.json"
        target.parent.mkdir(parents=True)
        written.rename(target)
    digest, _ = one_layer_layout(tmp_path / "layout")
    r = subprocess.run([sys.executable, "-m", "lemonpack.cli", "publish", f"{tmp_path / 'layout'}:v1", "--to",
                        f"{auth_registry.host}/logins/app:v1", "--no-progress", "--json"],
                       capture_output=True, text=True, env=env, timeout=300, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["pushed"][0]["digest"] == digest and password not in r.stdout + r.stderr


@pytest.mark.slow
def test_a_namespaced_login_wins_over_the_hosts_for_its_repositories(auth_registry, tmp_path):
    # a variant of case 54: ``podman login HOST/ns`` beside a stale login for HOST (skopeo uses the
    # namespace's, containers-auth.json(5): the most specific key)
    import base64

    (user, password), = auth_registry.users.items()
    auth = tmp_path / "auth.json"
    entry = {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}
    stale = {"auth": base64.b64encode(f"{user}:not-{password}".encode()).decode()}
    auth.write_text(json.dumps({"auths": {f"{auth_registry.host}/ns": entry, auth_registry.host: stale}}))
    one_layer_layout(tmp_path / "layout")
    r = cli("publish", f"{tmp_path / 'layout'}:v1", "--to", f"{auth_registry.host}/ns/app:v1", "--no-progress",
            env={"REGISTRY_AUTH_FILE": str(auth)})
    assert r.returncode == 0, r.stderr
    r = cli("publish", f"{tmp_path / 'layout'}:v1", "--to", f"{auth_registry.host}/other/app:v1", "--no-progress",
            env={"REGISTRY_AUTH_FILE": str(auth)})
    assert r.returncode == 4 and "access denied as" in r.stderr and password not in r.stderr


@pytest.mark.slow
def test_a_repull_into_the_same_layout_moves_no_byte_and_a_bad_blob_is_fetched_again(registry, tmp_path):
    digest, layer = one_layer_layout(tmp_path / "layout", size=2 * LAYER)
    ref = f"{registry.host}/repull/app:v1"
    assert cli("publish", f"{tmp_path / 'layout'}:v1", "--to", ref, "--no-progress").returncode == 0
    out = tmp_path / "pulled"
    first = cli("pull", ref, "--out", str(out), "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["bytes"] >= 2 * LAYER

    # a killed pull left a staging directory; another run's live one is locked by it
    stale, live = tmp_path / "pulled.tmp-0123456789ab", tmp_path / "pulled.tmp-ba9876543210"
    (stale / "blobs" / "sha256").mkdir(parents=True)
    live.mkdir()
    with locked(live):
        again = cli("pull", ref, "--out", str(out), "--json")
        assert live.is_dir()
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    assert (doc["bytes"], doc["blobs_reused"], doc["digest"]) == (0, 2, digest)
    assert not stale.exists()

    import hashlib

    blob = out / "blobs" / "sha256" / hashlib.sha256(layer).hexdigest()
    blob.write_bytes(b"x" * len(layer))  # same size, other bytes: not reused
    fixed = cli("pull", ref, "--out", str(out), "--json")
    assert fixed.returncode == 0, fixed.stderr
    assert (json.loads(fixed.stdout)["bytes"], json.loads(fixed.stdout)["blobs_reused"]) == (2 * LAYER, 1)
    assert blob.read_bytes() == layer


@pytest.mark.slow
def test_pull_tries_the_registries_conf_mirror_first_then_the_registry(tmp_path):
    from support.registry import LocalRegistry

    digest, _ = one_layer_layout(tmp_path / "layout")
    with LocalRegistry(tmp_path / "primary") as primary, LocalRegistry(tmp_path / "mirror") as mirror:
        for reg in (primary, mirror):
            r = cli("publish", f"{tmp_path / 'layout'}:v1", "--to", f"{reg.host}/team/app:v1", "--no-progress")
            assert r.returncode == 0, r.stderr
        conf = tmp_path / "registries.conf"
        conf.write_text(f'[[registry]]\nlocation = "{primary.host}"\ninsecure = true\n'
                        f'[[registry.mirror]]\nlocation = "{mirror.host}"\ninsecure = true\n')
        env = {"CONTAINERS_REGISTRIES_CONF": str(conf)}
        primary.stop()  # only the mirror can answer
        via_mirror = cli("pull", f"{primary.host}/team/app:v1", "--out", str(tmp_path / "a"), "--json", env=env)
        assert via_mirror.returncode == 0, via_mirror.stderr
        assert json.loads(via_mirror.stdout)["digest"] == digest
        primary.start()
        mirror.stop()  # the mirror is gone: the registry itself, said on stderr
        direct = cli("pull", f"{primary.host}/team/app:v1", "--out", str(tmp_path / "b"), "--json", env=env)
        assert direct.returncode == 0, direct.stderr
        assert f"mirror {mirror.host}/team/app failed" in direct.stderr
        # a push never goes to the mirror
        pushed = cli("publish", f"{tmp_path / 'layout'}:v1", "--to", f"{primary.host}/team/other:v1", "--no-progress",
                     env=env)
        assert pushed.returncode == 0, pushed.stderr


@pytest.mark.slow
def test_a_killed_pulls_leftovers_go_with_cache_clean_partial(registry, tmp_path):
    import signal
    import time

    from support.registry_proxy import RegistryProxy

    one_layer_layout(tmp_path / "layout")
    assert cli("publish", f"{tmp_path / 'layout'}:v1", "--to", f"{registry.host}/killed/app:v1",
               "--no-progress").returncode == 0
    env = {"LEMONPACK_CACHE_DIR": str(tmp_path / "cache")}
    out = tmp_path / "dest" / "pulled"
    with RegistryProxy(registry, hold={"GET"}, hold_path="/blobs/") as proxy:
        p = subprocess.Popen([sys.executable, "-m", "lemonpack.cli", "pull", f"{proxy.host}/killed/app:v1", "--out",
                              str(out), "--no-progress"], env={**os.environ, **env}, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert proxy.held.wait(60), "the pull never reached a blob"
            p.send_signal(signal.SIGKILL)
            p.wait(30)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    left = list(out.parent.glob("pulled.tmp-*"))
    assert len(left) == 1 and not out.exists()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the kernel drops the dead process's lock
        r = cli("cache", "clean", "--partial", "--json", env=env)
        if not left[0].exists():
            break
        time.sleep(0.2)
    assert r.returncode == 0, r.stderr
    assert not left[0].exists() and not list((tmp_path / "cache" / "partial-pulls").glob("*"))


@pytest.mark.slow
def test_a_killed_publishs_work_directory_goes_with_the_next_publish(registry, tmp_path):
    import signal

    from support.registry_proxy import RegistryProxy

    one_layer_layout(tmp_path / "layout")
    work = tmp_path / "tmp"
    work.mkdir()
    env = {"LEMONPACK_CACHE_DIR": str(tmp_path / "cache"), "TMPDIR": str(work)}
    with RegistryProxy(registry, hold={"PATCH"}) as proxy:
        p = subprocess.Popen([sys.executable, "-m", "lemonpack.cli", "publish", f"{tmp_path / 'layout'}:v1", "--to",
                              f"{proxy.host}/killed/pub:v1", "--no-progress"], env={**os.environ, **env},
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert proxy.held.wait(60), "the publish never reached an upload"
            p.send_signal(signal.SIGKILL)
            p.wait(30)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    left = list(work.glob("lemonpack-publish-*"))
    assert len(left) == 1
    again = cli("publish", f"{tmp_path / 'layout'}:v1", "--to", f"{registry.host}/killed/pub:v1", "--no-progress",
                env=env)
    assert again.returncode == 0, again.stderr
    assert list(work.glob("lemonpack-publish-*")) == []  # the killed one's and its own


@pytest.mark.slow
def test_a_repull_hashes_no_blob_it_hashed_before_unless_it_changed_since(registry, tmp_path, monkeypatch):
    """The re-pull fast path: a blob this layout got from an earlier pull (hashed then) whose
    stat facts are unchanged is not read again; a ``touch`` (same bytes) makes it hashed again."""
    import lemonpack.registry.transfer as transfer
    from lemonpack.oci.reference import parse_registry_reference
    from lemonpack.registry import RegistryClient

    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(tmp_path / "cache"))
    digest, layer = one_layer_layout(tmp_path / "layout")
    ref = f"{registry.host}/fastpath/app:v1"
    assert cli("publish", f"{tmp_path / 'layout'}:v1", "--to", ref, "--no-progress").returncode == 0
    hashed: list[str] = []
    real = transfer.file_digest

    def counting(path):
        hashed.append(os.path.basename(path))
        return real(path)

    monkeypatch.setattr(transfer, "file_digest", counting)
    out = tmp_path / "pulled"

    def pull():
        with RegistryClient(registry.host, insecure=True) as client:
            return transfer.pull_layout(parse_registry_reference(ref), out, client)

    assert pull().bytes > 0 and hashed == []  # downloaded: hashed as it arrived, not read back
    again = pull()
    assert (again.bytes, again.reused, hashed) == (0, 2, [])  # nothing hashed, nothing moved
    import hashlib

    blob = out / "blobs" / "sha256" / hashlib.sha256(layer).hexdigest()
    os.utime(blob)  # same bytes, other facts: hashed again (and still reused)
    third = pull()
    assert (third.bytes, third.reused, hashed) == (0, 2, [blob.name])
    assert pull().reused == 2 and hashed == [blob.name]  # recorded again after that hash


@pytest.mark.slow
def test_pull_out_dir_colon_tag_names_the_layout_and_its_tag_as_skopeo_reads_it(registry, tmp_path, require_tool):
    # a variant of case 57: ``--out DIR:TAG`` (skopeo's oci:DIR:TAG) is the layout DIR with the tag
    # TAG, not a directory named "DIR:TAG"; skopeo reads the tag back
    require_tool("skopeo")
    digest, _ = one_layer_layout(tmp_path / "layout")
    ref = f"{registry.host}/outtag/app:v1"
    assert cli("publish", f"{tmp_path / 'layout'}:v1", "--to", ref, "--no-progress").returncode == 0
    r = cli("pull", ref, "--out", f"{tmp_path / 'pulled'}:stable", "--json")
    assert r.returncode == 0, r.stderr
    assert (json.loads(r.stdout)["out"], json.loads(r.stdout)["tag"]) == (str(tmp_path / "pulled"), "stable")
    assert not (tmp_path / "pulled:stable").exists()
    inspected = subprocess.run(["skopeo", "inspect", "--raw", f"oci:{tmp_path / 'pulled'}:stable"],
                               capture_output=True, timeout=120)
    assert inspected.returncode == 0, inspected.stderr
    import hashlib
    assert "sha256:" + hashlib.sha256(inspected.stdout).hexdigest() == digest
    clash = cli("pull", ref, "--out", f"{tmp_path / 'other'}:a", "--tag", "b")
    assert clash.returncode == 1 and "--tag" in clash.stderr and "Traceback" not in clash.stderr
    assert not (tmp_path / "other").exists()
    (tmp_path / "odd:name").mkdir()  # an existing directory with a colon stays a directory
    kept = cli("pull", ref, "--out", str(tmp_path / "odd:name"), "--json")
    assert kept.returncode == 0, kept.stderr
    assert json.loads(kept.stdout)["tag"] == "v1" and (tmp_path / "odd:name" / "oci-layout").is_file()
