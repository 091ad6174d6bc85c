"""Models from a registry, end to end with real parts (issue 23, points 3 and 4): the tiny llama GGUF
pushed by ``lemonpack models push`` as a ModelPack artifact (and with ``--modelcar`` as a modelcar image
on a busybox base) to the local registry (CNCF distribution),
``lemonpack models add -c main=oci://HOST/REPO@sha256:...``; then

- ``lemonpack serve`` pulls it into the model store on the first request and the real llama-server,
  launched with the store's path, answers a chat completion; ``serve --offline`` refuses to fetch a
  model the store lacks, saying so;
- ``lemonpack kube generate`` for that model and ``podman kube play``: podman 4.3 has no image
  volumes (measured: "HostPath, ConfigMap, EmptyDir, and PersistentVolumeClaim are currently the only
  supported VolumeSource"), so the file uses the modelcar init container (``--models
  MODEL=modelcar:REF``): podman pulls the modelcar from the registry, the init container copies
  ``/models`` into the pod's emptyDir, the engine (an image ``lemonpack build --base`` made with the
  real llama-server, plus busybox for its ``wget``) answers a chat completion on the published port
  with no hostPath in the file, and is still up, never restarted, after ``podman healthcheck run``
  of its ``--probe-exec`` livenessProbe (``wget`` of /health inside the image) several times, each
  one healthy.

slow: the llama-server build (tests/support/llama_server.py), the Debian base, podman."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml

from lemonpack.cli import main
from support.helpers import free_port, wait_for
from support.oci_base import busybox_base
from support.recipes import recipe_doc, write_recipe
from support.tools import need

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _push(registry, gguf: Path, repo: str, capsys, *flags: str) -> dict:
    """``lemonpack models push GGUF --to HOST/REPO:v1 --json FLAGS...``: its JSON answer."""
    capsys.readouterr()
    assert main(["models", "push", str(gguf), "--to", f"{registry.host}/{repo}:v1", "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def llama_bin():
    from support.llama_server import llama_server_dir

    d = llama_server_dir(build=True)
    if d is None or not (d / "llama-server").is_file():
        pytest.fail("llama-server is unavailable: build it with `python tests/support/llama_server.py`")
    return d


def test_serve_pulls_the_oci_model_on_first_use_and_llama_server_answers(live, llama_bin, registry, tmp_path,
                                                                        monkeypatch, capsys):
    from support.llama_server import write_tiny_gguf

    (tmp_path / "src").mkdir()
    gguf = write_tiny_gguf(tmp_path / "src" / "tiny.gguf")
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(tmp_path / "cache"))
    lv = live()
    monkeypatch.setenv("LEMONPACK_CONFIG_DIR", str(lv.registry.path.parent))  # models add writes lv's registry
    monkeypatch.setenv("LEMONPACK_BACKENDS_PATH", f"user:{lv.backends}")
    write_recipe(lv.backends / "llama-oci.json", {
        "recipe": "llama-oci", "display_name": "llama.cpp", "api_contract_version": "1",
        "capabilities": ["chat_completion"],
        "health_probe": {"type": "http", "endpoint": "/health", "expected_status": 200,
                         "timeout_seconds": 90, "poll_interval_ms": 20},
        "platforms": {"linux": {"cpu": {"command": str(llama_bin / "llama-server"),
                                        "args": ["--host", "{host}", "--port", "{port}", "-m", "{checkpoint:main}",
                                                 "--threads", "1", "-c", "256"]}}}})
    pushed = _push(registry, gguf, "models/tiny", capsys)
    ref = f"oci://{registry.host}/models/tiny@{pushed['digest']}"
    code = main(["models", "add", "user.tiny", "-r", "llama-oci", "-c", f"main=oci://{registry.host}/models/tiny:v1"])
    assert code == 1 and "tag is mutable" in capsys.readouterr().err  # a tag is refused
    assert main(["models", "add", "user.tiny", "-r", "llama-oci", "-c", f"main={ref}"]) == 0
    store = tmp_path / "cache" / "models"
    assert not store.exists() or not any(p.is_file() and p.stat().st_size == gguf.stat().st_size
                                         for p in store.rglob("*"))  # nothing pulled at add time
    lv.start()
    r = httpx.post(lv.url + "/v1/chat/completions", timeout=120,
                   json={"model": "user.tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8})
    assert r.status_code == 200, r.text
    assert r.json()["object"] == "chat.completion" and r.json()["model"] == "user.tiny"
    eng = lv.server.runner.engine("user.tiny")
    model_arg = eng.argv[list(eng.argv).index("-m") + 1]
    assert model_arg.startswith(str(store)) and os.path.basename(model_arg) == "tiny.gguf"
    assert Path(model_arg).read_bytes() == gguf.read_bytes()  # verified into the store, launched from there


def test_serve_offline_refuses_to_fetch_a_model_the_store_lacks(registry, tmp_path, capsys):
    from support.llama_server import write_tiny_gguf
    from support.serve import serve_cli

    (tmp_path / "src").mkdir()
    pushed = _push(registry, write_tiny_gguf(tmp_path / "src" / "tiny.gguf"), "models/offline", capsys)
    ref = f"oci://{registry.host}/models/offline@{pushed['digest']}"
    doc = recipe_doc("fake-oci", fake_engine=[])
    from lemonpack.runtime.models.registry import ModelRegistry

    with serve_cli(tmp_path, doc, "--offline") as (c, lines):
        ModelRegistry(tmp_path / "config" / "user_models.json").add("user.net", "fake-oci", {"main": ref})
        r = c.post("/v1/chat/completions", json={"model": "user.net", "messages": [{"role": "user", "content": "x"}]})
        assert r.status_code >= 500, r.text
        assert "--offline forbids fetching it" in r.text + "".join(lines), (r.text, lines)
        assert "lemonpack models pull" in r.text + "".join(lines)
    blobs = tmp_path / "cache" / "models" / "blobs"
    assert not blobs.exists() or not any(p.is_file() for p in blobs.rglob("*"))


def test_podman_kube_play_serves_the_model_from_the_registry_and_survives_health_checks(
        kube_env, podman_conf, debian_layout, registry, tmp_path, capsys, monkeypatch):
    from support.kube import BUSYBOX_PROBE, built_engine_image, llama_artifact, llama_recipe, with_busybox
    from support.llama_server import llama_server_dir, write_tiny_gguf

    need("podman")
    need("skopeo")
    env = podman_conf["env"]
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(tmp_path / "cache"))
    rid = "llamacpp-kube"
    artifact = llama_artifact(llama_server_dir(build=True))
    recipe_file = kube_env.descriptor(llama_recipe(rid, artifact))
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf")
    repo = f"kube-oci-{secrets.token_hex(4)}/tiny"
    pushed = _push(registry, gguf, repo, capsys, "--modelcar", "--modelcar-base", busybox_base(tmp_path / "bb"))
    car = pushed["modelcar"]["reference"]
    assert car == f"{registry.host}/{repo}:v1-modelcar@{pushed['modelcar']['digest']}"
    car_by_digest = f"{registry.host}/{repo}@{pushed['modelcar']['digest']}"
    model = f"user.kube-oci-{secrets.token_hex(4)}"  # a unique object name: podman is shared
    assert main(["models", "add", model, "-r", rid, "-c", f"main=oci://{registry.host}/{repo}@{pushed['digest']}",
                 "-o", "ctx_size=256"]) == 0
    image, remove = built_engine_image(recipe_file, artifact, debian_layout, tmp_path, env)
    probing, remove_probing = with_busybox(image, tmp_path, env)  # the tool of the exec livenessProbe
    # the default for a model registered by oci://: its artifact as an image volume (a cluster's file)
    cluster = tmp_path / "cluster.yaml"
    assert main(["kube", "generate", model, "--image", f"{rid}={image}", "--out", str(cluster)]) == 0
    pod = next(yaml.safe_load_all(cluster.read_text()))["spec"]["template"]["spec"]
    assert pod["volumes"][0] == {"name": "model", "image": {"reference": f"{registry.host}/{repo}@{pushed['digest']}",
                                                            "pullPolicy": "IfNotPresent"}}
    assert "hostPath" not in cluster.read_text()
    port = free_port()
    out = tmp_path / "play.yaml"
    assert main(["kube", "generate", model, "--image", f"{rid}={probing}", "--publish", f"127.0.0.1:{port}",
                 "--models", f"{model}=modelcar:{car_by_digest}", "--probe-exec", json.dumps(BUSYBOX_PROBE),
                 "--out", str(out)]) == 0
    assert "hostPath" not in out.read_text() and "initContainers" in out.read_text()
    name = model.removeprefix("user.")
    container = f"{name}-pod-0-engine"
    down = None
    try:
        for attempt in range(6):
            play = subprocess.run([need("podman"), "kube", "play", "--tls-verify=false", str(out)], env=env,
                                  capture_output=True, text=True, timeout=300)
            if "failed to remove once init container" not in play.stderr:
                break
            # podman 4.3 races with itself removing an init container that has just exited ("cannot remove
            # container ... as it is running", about one play in five here, a podman bug, not the file's):
            # take the pod down and play again. The annotation that keeps init containers ("always")
            # makes podman restart the engine with them, so it is no way out.
            # Seen three plays in a row on a quiet CI machine: six tries, a pause after each take-down.
            subprocess.run(["podman", "kube", "down", str(out)], env=env, capture_output=True, timeout=120)
            time.sleep(1 + attempt)
        else:  # podman's own race every time: not the file's fault, and nothing more can be checked here
            pytest.xfail("podman 4.3 raced removing the exited init container in six plays in a row: "
                         + play.stderr.strip()[-300:])
        assert play.returncode == 0, play.stderr
        url = f"http://127.0.0.1:{port}"

        def logs() -> str:
            r = subprocess.run(["podman", "logs", container], env=env, capture_output=True, text=True)
            return r.stdout + r.stderr

        assert wait_for(lambda: _ready(url), timeout=120), logs()
        try:
            r = httpx.post(url + "/v1/chat/completions", timeout=60,
                           json={"model": model, "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 8})
        except httpx.HTTPError as e:
            ps = subprocess.run(["podman", "ps", "-a", "--filter", f"pod={name}-pod-0", "--format",
                                 "{{.Names}} {{.Status}} {{.Restarts}}"], env=env, capture_output=True, text=True)
            raise AssertionError(f"{e}\n{ps.stdout}\n{logs()[-3000:]}") from None
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["role"] == "assistant"
        mounts = json.loads(subprocess.run(["podman", "inspect", container, "--format", "{{json .Mounts}}"],
                                           env=env, capture_output=True, text=True, check=True).stdout)
        assert not [m for m in mounts if m.get("Type") == "bind" and m["Destination"].startswith("/models")], mounts
        started = subprocess.run(["podman", "inspect", container, "--format", "{{.State.StartedAt}}"], env=env,
                                 capture_output=True, text=True, check=True).stdout
        for _ in range(4):  # what a systemd timer would run: the --probe-exec livenessProbe, inside the image
            hc = subprocess.run(["podman", "healthcheck", "run", container], env=env, capture_output=True, text=True)
            assert hc.returncode == 0 and "unhealthy" not in hc.stdout + hc.stderr, hc
            time.sleep(1)
        health = json.loads(subprocess.run(["podman", "inspect", container, "--format", "{{json .State.Health}}"],
                                           env=env, capture_output=True, text=True, check=True).stdout)
        assert health["Status"] == "healthy" and health["FailingStreak"] == 0, health
        assert _ready(url)
        assert subprocess.run(["podman", "inspect", container, "--format", "{{.State.StartedAt}}"], env=env,
                              capture_output=True, text=True).stdout == started
    finally:
        for _ in range(3):  # podman 4.3 under load can fail a removal once ("shm: device or resource busy")
            if not out.exists():
                break
            down = subprocess.run(["podman", "kube", "down", str(out)], env=env, capture_output=True, text=True,
                                  timeout=120)
            if down.returncode == 0 or "no pod with name" in down.stderr:
                break
            time.sleep(2)
        subprocess.run(["podman", "rmi", "-f", remove_probing], env=env, capture_output=True, timeout=120)
        subprocess.run(["podman", "rmi", "-f", remove], env=env, capture_output=True, timeout=120)
        subprocess.run(["podman", "rmi", car_by_digest], env=env, capture_output=True, timeout=120)
    assert down is not None and down.returncode == 0, down.stderr if down else "nothing generated"
