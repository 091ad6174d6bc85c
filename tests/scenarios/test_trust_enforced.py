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


# --policy FILE / --registries.d DIR on every command that enforces: the named files are used
# instead of the default places (the world's $HOME policy accepts the signed image; the named
# one rejects its repository), the refusal names that file, and nothing is started or written.

def rejecting_policy(world, tmp_path: Path) -> tuple[Path, Path]:
    """A policy file rejecting ``HOST/ns/engines`` (everything else accepted) and an empty
    registries.d, outside the default places."""
    pfile = write_policy_file(tmp_path / "named-policy.json", {
        "default": [{"type": "insecureAcceptAnything"}],
        "transports": {"docker": {f"{world.host}/ns/engines": [{"type": "reject"}]}}})
    return pfile, write_registries_d(tmp_path / "named-rd", None)


def assert_refused_by(line: str, world, pfile: Path, image: str) -> None:
    assert image in line and f"rejected by the trust policy {pfile} " in line, line
    assert f'scope transports.docker["{world.host}/ns/engines"]' in line, line


def test_run_policy_option_overrides_the_default_places(world, tmp_path):
    recipe = write_recipe(tmp_path / "good.json", world.recipe("good-engine", world.signed))
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF")
    assert world.image(world.signed) in prepare_run(str(recipe), str(model)).plan.argv  # the default accepts it
    pfile, rd = rejecting_policy(world, tmp_path)
    r = subprocess.run([sys.executable, "-m", "lemonpack.cli", "run", str(recipe), "--model", str(model),
                        "--policy", str(pfile), "--registries.d", str(rd)],
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 3, r.stderr
    assert_refused_by(r.stderr.strip().splitlines()[-1], world, pfile, world.image(world.signed))
    assert world.calls() == [] and running_with(str(world.podman)) == []


def test_run_policy_option_naming_a_missing_file_fails_before_anything(world, tmp_path):
    recipe = write_recipe(tmp_path / "good.json", world.recipe("good-engine", world.signed))
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF")
    missing = tmp_path / "no-such-policy.json"
    r = subprocess.run([sys.executable, "-m", "lemonpack.cli", "run", str(recipe), "--model", str(model),
                        "--policy", str(missing)], capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 3, r.stderr
    assert str(missing) in r.stderr and "Traceback" not in r.stderr
    assert world.calls() == []


def test_serve_policy_option_refuses_with_403_and_status_reports_it(world, tmp_path):
    from support.serve import serve_cli

    pfile, rd = rejecting_policy(world, tmp_path)
    doc = world.recipe("good-engine", world.signed)
    with serve_cli(tmp_path / "srv", doc, "--policy", str(pfile), "--registries.d", str(rd)) as (c, _lines):
        assert c.get("/v1/status").json()["models"][0]["trust"] is None  # nothing checked yet
        r = c.post("/v1/chat/completions", json={"model": "user.fake", "messages": [{"role": "user", "content": "x"}]})
        assert r.status_code == 403, r.text
        assert r.json()["error"]["code"] == "trust_policy_rejected"
        assert_refused_by(r.json()["error"]["message"], world, pfile, world.image(world.signed))
        (m,) = c.get("/v1/status").json()["models"]
    assert world.calls() == []
    t = m["trust"]
    assert t["allowed"] is False and t["scope"] == f'transports.docker["{world.host}/ns/engines"]'
    assert t["policy"] == str(pfile) and t["reference"] == world.image(world.signed) and t["reason"]


def test_status_reports_the_accepted_and_the_rejected_verdict(world, live):
    srv = live()
    srv.add("user.good", world.recipe("good-engine", world.signed))
    srv.add("user.bad", world.recipe("bad-engine", world.unsigned))
    srv.start()
    for model, code in (("user.good", 200), ("user.bad", 403)):
        r = httpx.post(f"{srv.url}/v1/chat/completions", timeout=60,
                       json={"model": model, "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == code, r.text
    got = {m["id"]: m["trust"] for m in httpx.get(f"{srv.url}/v1/status", timeout=30).json()["models"]}
    scope = f'transports.docker["{world.host}/ns/engines"]'
    assert got["user.good"] == {"allowed": True, "scope": scope, "reason": None, "policy": str(world.policy),
                                "reference": world.image(world.signed)}
    bad = got["user.bad"]
    assert bad["allowed"] is False and bad["scope"] == scope and "no signature exists" in bad["reason"]


def test_kube_generate_policy_option_writes_nothing(world, kube_env, capsys, tmp_path):
    from lemonpack.cli import main
    from support.kube import GPU_FORK

    kube_env.descriptor(GPU_FORK)
    kube_env.register("user.qwen", "llamacpp-gpu", "qwen.gguf")
    pfile, rd = rejecting_policy(world, tmp_path)
    out, adm = tmp_path / "engines.yaml", tmp_path / "admission.yaml"
    args = ["kube", "generate", "user.qwen", "--accelerator", "cuda:sm_89", "--out", str(out),
            "--image", f"llamacpp-gpu={world.image(world.signed)}", "--admission", str(adm)]
    assert main([*args, "--policy", str(pfile), "--registries.d", str(rd)]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "kube generate: model user.qwen" in err[0]
    assert_refused_by(err[0], world, pfile, world.image(world.signed))
    assert not out.exists() and not adm.exists()
    assert main(args) == 0 and out.exists()  # the default places accept it


def test_install_oci_policy_option_installs_nothing(world, registry, tmp_path, monkeypatch):
    from lemonpack.oci.reference import parse_registry_reference
    from lemonpack.registry.transfer import publish_layout
    from support.registry import variant_layout

    cache = tmp_path / "cache"
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(cache))
    layout = variant_layout(tmp_path, "trust-opt", "1")
    with RegistryClient(registry.host) as c:
        res = publish_layout(layout, parse_registry_reference(f"{registry.host}/ns/engines/opt:v1"), c,
                             tag="trust-opt")
    digest = res.pushed[0].digest
    pfile, rd = rejecting_policy(world, tmp_path)
    r = subprocess.run([sys.executable, "-m", "lemonpack.cli", "install", f"oci://{registry.host}/ns/engines/opt@{digest}",
                        "--yes", "--policy", str(pfile), "--registries.d", str(rd)], capture_output=True, text=True,
                       timeout=300, stdin=subprocess.DEVNULL)
    assert r.returncode == 3, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("error: install: ")
    assert_refused_by(line, world, pfile, f"{registry.host}/ns/engines/opt@{digest}")
    assert not (cache / "external" / "trust-opt").exists()


def test_the_status_page_shows_each_trust_verdict_as_text(world, live):
    """The page (headless Chromium) renders /v1/status's trust: "accepted"/"rejected", the scope,
    the reason, each a text node (no element but the page's own spans in the cell)."""
    from support.browser import chromium
    from support.helpers import wait_for

    srv = live()
    srv.add("user.good", world.recipe("good-engine", world.signed))
    srv.add("user.bad", world.recipe("bad-engine", world.unsigned))
    srv.start()
    for model in ("user.good", "user.bad"):
        httpx.post(f"{srv.url}/v1/chat/completions", timeout=60,
                   json={"model": model, "messages": [{"role": "user", "content": "hi"}]})
    cells = ("return Object.fromEntries(Array.from(document.querySelectorAll('#model-rows tr[data-model]'))"
             ".map(tr => { const td = tr.children[7]; return [tr.dataset.model, {text: td.textContent,"
             " tags: Array.from(td.querySelectorAll('*')).map(e => e.tagName + '.' + e.className)}]; }));")
    with chromium(offline=False, loopback=True) as driver:
        driver.get(srv.url + "/")
        assert wait_for(lambda: "rejected" in (driver.execute_script(cells).get("user.bad") or {}).get("text", ""), 20)
        got = driver.execute_script(cells)
    scope = f'scope transports.docker["{world.host}/ns/engines"]'
    assert got["user.good"]["text"] == "accepted" + scope
    assert got["user.good"]["tags"] == ["SPAN.trust trust-ok", "SPAN.scope"]
    bad = got["user.bad"]
    assert bad["text"].startswith("rejected" + scope) and "no signature exists" in bad["text"]
    assert bad["tags"] == ["SPAN.trust trust-rejected", "SPAN.scope", "SPAN.reason"]
