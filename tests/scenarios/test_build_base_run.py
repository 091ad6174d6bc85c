"""Images that run: ``lemonpack build --base`` on a real Debian base, then ``podman run``.

The base is Debian 12 from ``mmdebstrap`` (the ``debian_layout`` fixture of
:mod:`support.debian_base`, cached across runs);
the engines are the suite's real ``llama-server`` (:mod:`support.llama_server`) with the tiny
GGUF mounted read-only, and the shipped Python example. Each container runs with
``--network host`` on a free port of 127.0.0.1; images and containers carry unique names
and are removed afterwards.
"""

from __future__ import annotations

import io
import json
import secrets
import subprocess
import tarfile
import gzip
from pathlib import Path

import httpx
import pytest

from support.buildkit import need, tags, variant_recipe
from support.containers import podman_conf  # noqa: F401 (fixture)
from support.helpers import free_port, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("home")]


def _load(layout: Path, tag: str, env: dict) -> str:
    name = f"localhost/images-test-{secrets.token_hex(4)}:{tag.replace('.', '-')}"
    res = subprocess.run([need("skopeo"), "copy", "-q", f"oci:{layout}:{tag}", f"containers-storage:{name}"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    return name


class Container:
    """``podman run -d --network host IMAGE ARGS`` with a unique name; removed on exit."""

    def __init__(self, image: str, args: list[str], env: dict, volumes: list[str] = ()):
        self.name, self.image, self.env = f"images-test-{secrets.token_hex(4)}", image, env
        argv = [need("podman"), "run", "-d", "--name", self.name, "--network", "host"]
        for v in volumes:
            argv += ["-v", v]
        res = subprocess.run([*argv, image, *args], capture_output=True, text=True, env=env, timeout=120)
        assert res.returncode == 0, res.stderr

    def logs(self) -> str:
        return subprocess.run(["podman", "logs", self.name], capture_output=True, text=True, env=self.env).stderr

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        subprocess.run(["podman", "rm", "-f", "-t", "0", self.name], capture_output=True, env=self.env)
        subprocess.run(["podman", "rmi", "-f", self.image], capture_output=True, env=self.env)


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _chat(url: str, model: str) -> dict:
    r = httpx.post(url + "/v1/chat/completions", timeout=60,
                   json={"model": model, "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 8})
    assert r.status_code == 200, r.text
    return r.json()


def test_example_image_runs_on_the_debian_base(lp, tmp_path, debian_layout, podman_conf):  # noqa: F811
    out = tmp_path / "example-oci"
    r = lp("build", "--example", "--out", out, "--base", debian_layout, "--json")
    assert r.code == 0, r
    again = lp("build", "--example", "--out", tmp_path / "again", "--base", debian_layout, "--json")
    assert again.code == 0 and again.json()["indexes"] == r.json()["indexes"], "same inputs, same index digest"
    tag = "hello-engine.linux-cpu"
    inspect = subprocess.run([need("skopeo"), "inspect", f"oci:{out}:{tag}"], capture_output=True, text=True)
    assert inspect.returncode == 0, inspect.stderr
    info = json.loads(inspect.stdout)
    assert len(info["Layers"]) == 3 and info["Os"] == "linux" and info["Architecture"] == "amd64"
    bundle = tmp_path / "bundle"
    unpack = subprocess.run([need("umoci"), "unpack", "--rootless", "--image", f"{out}:{tag}", str(bundle)],
                            capture_output=True, text=True)
    assert unpack.returncode == 0, unpack.stderr
    assert (bundle / "rootfs/usr/bin/python3").exists()
    assert (bundle / "rootfs/opt/lemonpack/hello-engine/hello-engine").is_file()
    spec = json.loads((bundle / "config.json").read_text())
    assert spec["process"]["args"] == ["/opt/lemonpack/hello-engine/hello-engine"]

    image = _load(out, tag, podman_conf["env"])
    port = free_port()
    models = Path(__file__).resolve().parents[2] / "lemonpack/examples/models"
    with Container(image, ["-m", "/models/hello-model.txt", "--port", str(port), "--host", "127.0.0.1"],
                   podman_conf["env"], [f"{models}:/models:ro"]) as c:
        url = f"http://127.0.0.1:{port}"
        assert wait_for(lambda: _ready(url), timeout=60), c.logs()
        answer = _chat(url, "hello-model")
        assert answer["choices"][0]["message"]["content"].endswith("You said: Hello!")


def _artifact(directory: Path) -> bytes:
    """``llama-server`` and its libraries (``*.so*``, symlinks kept) as a tar.gz."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for p in sorted(directory.iterdir()):
            if p.name != "llama-server" and ".so" not in p.name:
                continue
            tf.add(p, arcname=p.name, recursive=False)
    return gzip.compress(raw.getvalue(), compresslevel=1, mtime=0)


def test_real_llama_server_image_runs_on_the_debian_base(lp, site, tmp_path, debian_layout, podman_conf):  # noqa: F811
    from support.llama_server import llama_server_dir, write_tiny_gguf

    server = llama_server_dir(build=True)
    recipe = variant_recipe(tmp_path / "recipes" / "llamacpp-variant.json", site, artifact=_artifact(server))
    out = tmp_path / "oci"
    r = lp("build", recipe, "--out", out, "--mirror", site.base, "--os", "linux", "--accelerator", "cpu",
           "--cpu-arch", "amd64", "--base", debian_layout)
    assert r.code == 0, r
    tag = "llamacpp-variant.linux-cpu"
    assert tag in tags(out)
    models = tmp_path / "models"
    models.mkdir()
    write_tiny_gguf(models / "tiny.gguf")
    image = _load(out, tag, podman_conf["env"])
    port = free_port()
    with Container(image, ["-m", "/models/tiny.gguf", "--port", str(port), "--host", "127.0.0.1"],
                   podman_conf["env"], [f"{models}:/models:ro"]) as c:
        url = f"http://127.0.0.1:{port}"
        assert wait_for(lambda: _ready(url), timeout=90), c.logs()
        answer = _chat(url, "tiny")
        assert answer["object"] == "chat.completion" and answer["choices"][0]["message"]["role"] == "assistant"
