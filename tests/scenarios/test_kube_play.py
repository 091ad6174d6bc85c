"""One host, the same files: ``podman kube play`` runs what ``lemonpack kube generate`` wrote,
with the real llama-server in an image ``lemonpack build --base`` made on a Debian base
(mmdebstrap, :mod:`support.debian_base`), and answers a chat completion on the published
127.0.0.1 port; ``podman kube down`` removes it.

Two ways to the image, both by digest: loaded into podman's storage with ``skopeo copy`` under
the name the file uses (the digest the build wrote is kept), and the README's three commands
(``build --base``, ``publish`` to a local registry, ``kube generate``), where ``podman kube
play`` pulls the image from the registry by that digest."""

from __future__ import annotations

import json
import secrets
import subprocess
from pathlib import Path

import httpx
import pytest

from lemonpack.cli import main
from support.helpers import free_port, wait_for
from support.kube import build_engine_layout, built_engine_image, llama_artifact, llama_recipe
from support.tools import need

pytestmark = pytest.mark.slow


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize("source", ["storage", "registry"])
def test_podman_kube_play_serves_the_generated_engine(source, kube_env, podman_conf, debian_layout, tmp_path,
                                                      request, capsys):
    from support.llama_server import llama_server_dir, write_tiny_gguf

    need("podman")
    need("skopeo")
    env = podman_conf["env"]
    rid = "llamacpp-kube"
    artifact = llama_artifact(llama_server_dir(build=True))
    recipe_file = kube_env.descriptor(llama_recipe(rid, artifact))
    model = f"user.kube-test-{secrets.token_hex(4)}"  # its objects' name is unique: podman is shared
    write_tiny_gguf(kube_env.models / "tiny.gguf")
    kube_env.registry.add(model, rid, {"main": str(kube_env.models / "tiny.gguf")}, {"ctx_size": 256})
    play_flags: list[str] = []
    if source == "storage":
        ref, remove = built_engine_image(recipe_file, artifact, debian_layout, tmp_path, env)
    else:
        registry = request.getfixturevalue("registry")
        layout, tag, digest = build_engine_layout(recipe_file, artifact, debian_layout, tmp_path, env)
        repo = f"{registry.host}/kube-test-{secrets.token_hex(4)}/llama"
        capsys.readouterr()
        assert main(["publish", f"{layout}:{tag}", "--to", repo, "--json"]) == 0
        pushed = {p["tag"]: p["digest"] for p in json.loads(capsys.readouterr().out)["pushed"]}
        assert pushed[tag] == digest  # the registry holds the digest the build wrote
        ref = remove = f"{repo}@{digest}"
        play_flags = ["--tls-verify=false"]  # a plain-http registry on 127.0.0.1
    port = free_port()
    out = tmp_path / "engines.yaml"
    down = None
    try:
        assert main(["kube", "generate", model, "--image", f"{rid}={ref}", "--publish", f"127.0.0.1:{port}",
                     "--out", str(out)]) == 0
        play = subprocess.run([need("podman"), "kube", "play", *play_flags, str(out)], env=env, capture_output=True,
                              text=True, timeout=300)
        assert play.returncode == 0, play.stderr
        url = f"http://127.0.0.1:{port}"
        name = model.removeprefix("user.")

        def logs() -> str:
            r = subprocess.run(["podman", "logs", f"{name}-pod-0-engine"], env=env, capture_output=True, text=True)
            return r.stdout + r.stderr

        assert wait_for(lambda: _ready(url), timeout=120), logs()
        r = httpx.post(url + "/v1/chat/completions", timeout=60,
                       json={"model": model, "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 8})
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["object"] == "chat.completion" and answer["choices"][0]["message"]["role"] == "assistant"
    finally:
        if Path(out).exists():
            down = subprocess.run(["podman", "kube", "down", str(out)], env=env, capture_output=True, text=True,
                                  timeout=120)
        subprocess.run(["podman", "rmi", "-f", remove], env=env, capture_output=True, timeout=120)
    assert down is not None and down.returncode == 0, down.stderr if down else "nothing generated"
    assert not _ready(url)
