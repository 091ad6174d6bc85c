"""The trust policy enforced end to end, on the digest that is then used: a signed and an unsigned
engine image in the local registry (signed with lemonpack's own cosign-format signing), and a
policy (``$HOME/.config/containers/policy.json``, found as podman finds it) that requires the key
for that repository.

- ``lemonpack run`` refuses the unsigned image with one line (reference, policy file, scope,
  reason), exit 3, before any process starts: the container CLI it would run is a program that
  records every call, and neither its record nor the process table shows it;
- ``lemonpack serve`` answers a request for the model of the unsigned image with an OpenAI-shaped
  403 naming the scope and starts nothing, and serves the signed one (launched by its digest);
- ``lemonpack pull`` of a tag that is moved to an unsigned image right after the check (the
  registry proxy holds the pull until the test has moved it) writes the image that was judged.

The container CLI is a stand-in named ``podman`` (the command line reader reads it as podman's):
what is under test is which image lemonpack judges and hands on, not podman's pull.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from lemonpack.registry import RegistryClient
from lemonpack.runtime.lifecycle.foreground import prepare_run
from lemonpack.signing.keys import encode_public_key
from lemonpack.signing.remote import sign_image
from support.recipes import FAKE_ENGINE, http_probe, recipe_doc, write_recipe
from support.registry_proxy import RegistryProxy
from support.trust import new_key, push_image, write_registries_d

pytestmark = pytest.mark.slow

FAKE_PODMAN = """#!{python}
import json, os, sys
with open({log!r}, "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
args = sys.argv[1:]
image = next(i for i, a in enumerate(args) if "@sha256:" in a)
os.execv(sys.executable, [sys.executable, {engine!r}, *args[image + 1:]])
"""


class World:
    """Images, key, policy under a private HOME, and the recording container CLI."""

    def __init__(self, tmp: Path, registry) -> None:
        self.host, self.tmp = registry.host, tmp
        self.key = new_key()
        with RegistryClient(self.host) as c:
            self.signed = push_image(c, "ns/engines/llama", "v1", b"signed engine")
            sign_image(f"{self.host}/ns/engines/llama@{self.signed}", self.key, client=c)
            self.unsigned = push_image(c, "ns/engines/llama", "v2", b"unsigned engine")
        self.home = tmp / "home"
        conf = self.home / ".config" / "containers"
        conf.mkdir(parents=True)
        (tmp / "cosign.pub").write_bytes(encode_public_key(self.key.public_key()))
        self.policy = conf / "policy.json"
        self.policy.write_text(json.dumps({"default": [{"type": "insecureAcceptAnything"}], "transports": {
            "docker": {f"{self.host}/ns/engines": [{"type": "sigstoreSigned", "keyPath": str(tmp / "cosign.pub"),
                                                    "signedIdentity": {"type": "matchRepository"}}]}}}))
        write_registries_d(conf / "registries.d", {"docker": {self.host: {"use-sigstore-attachments": True}}})
        self.log = tmp / "podman-calls.jsonl"
        self.podman = tmp / "bin" / "podman"
        self.podman.parent.mkdir()
        self.podman.write_text(FAKE_PODMAN.format(python=sys.executable, log=str(self.log), engine=str(FAKE_ENGINE)))
        self.podman.chmod(0o755)

    def image(self, digest: str) -> str:
        return f"{self.host}/ns/engines/llama@{digest}"

    def recipe(self, name: str, digest: str) -> dict:
        return recipe_doc(name, command=str(self.podman),
                          args=["run", "--rm", self.image(digest), "--host", "{host}", "--port", "{port}",
                                "--model", "{model_name}"], health_probe=http_probe())

    def calls(self) -> list[list[str]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []


@pytest.fixture
def world(tmp_path, registry, home, monkeypatch):
    home.host()
    w = World(tmp_path, registry)
    monkeypatch.setenv("HOME", str(w.home))
    return w


def running_with(text: str) -> list[int]:
    """The pids of the process table (``/proc``) whose command line holds ``text``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def test_run_refuses_the_unsigned_image_before_any_process_starts(world, tmp_path):
    recipe = write_recipe(tmp_path / "bad.json", world.recipe("bad-engine", world.unsigned))
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF")
    seen: list[int] = []
    proc = subprocess.Popen([sys.executable, "-m", "lemonpack.cli", "run", str(recipe), "--model", str(model)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ),
                            stdin=subprocess.DEVNULL)

    def watch() -> None:  # the process table while `run` decides: nothing may run the container CLI
        while proc.poll() is None:
            seen.extend(running_with(str(world.podman)))

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    out, err = proc.communicate(timeout=120)
    t.join(5)
    assert proc.returncode == 3, err
    line = err.strip().splitlines()[-1]
    assert world.image(world.unsigned) in line and str(world.policy) in line
    assert f'scope transports.docker["{world.host}/ns/engines"]' in line and "no signature exists" in line
    assert world.calls() == [] and seen == [] and running_with(str(world.podman)) == []


def test_run_launches_the_signed_image_by_its_digest(world, tmp_path):
    recipe = write_recipe(tmp_path / "good.json", world.recipe("good-engine", world.signed))
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF")
    fg = prepare_run(str(recipe), str(model))
    assert world.image(world.signed) in fg.plan.argv


def test_serve_refuses_the_unsigned_model_with_403_and_serves_the_signed(world, live):
    srv = live()
    srv.add("user.good", world.recipe("good-engine", world.signed))
    srv.add("user.bad", world.recipe("bad-engine", world.unsigned))
    srv.start()
    body = {"model": "user.bad", "messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(f"{srv.url}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 403, r.text
    err = r.json()["error"]
    assert err["code"] == "trust_policy_rejected" and err["type"] == "permission_error"
    assert f'scope transports.docker["{world.host}/ns/engines"]' in err["message"]
    assert world.image(world.unsigned) in err["message"] and "no signature exists" in err["message"]
    r = httpx.post(f"{srv.url}/v1/load", json={"model_name": "user.bad"}, timeout=60)
    assert r.status_code == 403, r.text
    assert world.calls() == []
    r = httpx.post(f"{srv.url}/v1/chat/completions", json={**body, "model": "user.good"}, timeout=60)
    assert r.status_code == 200, r.text
    calls = world.calls()
    assert len(calls) == 1 and world.image(world.signed) in calls[0]


def test_pull_writes_the_image_judged_when_the_tag_moves_after_the_check(world, registry, tmp_path):
    with RegistryClient(registry.host) as c:
        signed = push_image(c, "ns/engines/moving", "latest", b"signed, then moved away from")
        with RegistryProxy(registry, hold={"GET"}, hold_path="/manifests/sha256:") as proxy:
            # signed as the proxy's host names it: that is the registry the pull talks to
            sign_image(f"{proxy.host}/ns/engines/moving@{signed}", world.key, client=c)
            policy = json.loads(world.policy.read_text())
            policy["transports"]["docker"] = {f"{proxy.host}/ns/engines": policy["transports"]["docker"].popitem()[1]}
            pfile = write_policy_file(tmp_path / "policy.json", policy)
            rd = write_registries_d(tmp_path / "rd", {"docker": {proxy.host: {"use-sigstore-attachments": True}}})
            out = tmp_path / "layout"
            proc = subprocess.Popen([sys.executable, "-m", "lemonpack.cli", "pull", f"{proxy.host}/ns/engines/moving",
                                     "--out", str(out), "--policy", str(pfile), "--registries.d", str(rd), "--json"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
            if not proxy.held.wait(20):
                proc.kill()
                pytest.fail(f"the pull never asked for a manifest by digest: {proc.communicate()} {proxy.log}")
            moved = push_image(c, "ns/engines/moving", "latest", b"unsigned, moved in after the check")
            assert c.get_manifest("ns/engines/moving", "latest")[2] == moved != signed
            proxy.release.set()
            stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert json.loads(stdout)["digest"] == signed
    index = json.loads((out / "index.json").read_text())
    assert [m["digest"] for m in index["manifests"]] == [signed]


def write_policy_file(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


def test_kube_generate_writes_nothing_for_a_rejected_image(world, kube_env, capsys, tmp_path):
    from lemonpack.cli import main
    from support.kube import GPU_FORK

    kube_env.descriptor(GPU_FORK)
    kube_env.register("user.qwen", "llamacpp-gpu", "qwen.gguf")
    out = tmp_path / "engines.yaml"
    args = ["kube", "generate", "user.qwen", "--accelerator", "cuda:sm_89", "--out", str(out)]
    assert main([*args, "--image", f"llamacpp-gpu={world.image(world.unsigned)}"]) == 3
    err = capsys.readouterr().err
    assert "kube generate: model user.qwen" in err and f'scope transports.docker["{world.host}/ns/engines"]' in err
    assert not out.exists()
    assert main([*args, "--image", f"llamacpp-gpu={world.image(world.signed)}"]) == 0
    assert world.image(world.signed) in out.read_text()


def test_install_oci_refuses_an_unsigned_artifact_and_installs_nothing(world, registry, tmp_path, monkeypatch):
    from lemonpack.oci.reference import parse_registry_reference
    from lemonpack.registry.transfer import publish_layout
    from support.registry import variant_layout

    cache = tmp_path / "cache"
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(cache))
    layout = variant_layout(tmp_path, "trust-inst", "1")
    with RegistryClient(registry.host) as c:
        res = publish_layout(layout, parse_registry_reference(f"{registry.host}/ns/engines/inst:v1"), c, tag="trust-inst")
    ref = f"oci://{registry.host}/ns/engines/inst@{res.pushed[0].digest}"
    r = subprocess.run([sys.executable, "-m", "lemonpack.cli", "install", ref, "--yes"], capture_output=True,
                       text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert r.returncode == 3, r.stderr
    assert "install: " in r.stderr and "no signature exists" in r.stderr and str(world.policy) in r.stderr
    assert not (cache / "external" / "trust-inst").exists()
