"""Recipes and a test environment for the ``lemonpack kube`` tests: the ``kube_env`` fixture
(registered in tests/conftest.py) is a discovery directory, a model registry and model files in
the test's sandboxed lemonpack home (:mod:`support.home`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from lemonpack.runtime.models.registry import ModelRegistry
from support.recipes import http_probe, recipe_doc, write_recipe

DIGEST = "sha256:" + "ab" * 32
IMAGE = f"registry.example.test/engines/llamacpp@{DIGEST}"
TOOLBOX_IMAGE = f"registry.example.test/toolbox/llama@sha256:{'cd' * 32}"
SOURCE = {"source": "https://example.invalid/llama.tar.gz", "sha256": "sha256:" + "ef" * 32}


#: A variant_of llama.cpp fork with an NVIDIA block (sm_90 override) and an AMD block (gfx115* override).
GPU_FORK = recipe_doc(
    "llamacpp-gpu", display_name="llamacpp-gpu", variant_of="llamacpp", platforms={"linux": {
        "cuda": {"binary": "llama-server", "argv_extra": ["-ngl", "99", "--device", "CUDA0"],
                 "env": {"CUDA_VISIBLE_DEVICES": "{cuda_visible_devices}"},
                 "arch": {"sm_90": {"argv_extra": ["-ngl", "99", "--flash-attn", "on"]}}},
        "rocm": {"binary": "llama-server", "argv_extra": ["-ngl", "99"],
                 "env": {"HSA_OVERRIDE_GFX_VERSION": "{custom:hsa_gfx:-11.0.0}", "LP_ARCH": "{rocm_arch}"},
                 "arch": {"gfx115*": {"argv_extra": ["-ngl", "99", "--alias", "{arch_alias}"]}}},
        "cpu": {"binary": "llama-server"}}},
    arch_aliases={"gfx1151": "strix-halo", "gfx1150": "strix-point"},
    health_probe=http_probe(timeout=300, poll_ms=500),
    recipe_options={"ctx_size": 8192, "hsa_gfx": "11.5.1"},
    extensions={"dev.lemonpack.serves": ["*.gguf"]}, **SOURCE)

#: A passthrough recipe whose argv is a digest-pinned container run (RFC 13.2's shape).
TOOLBOX = recipe_doc(
    "toolbox", display_name="toolbox", accelerator="vulkan", command="podman", args=[
        "run", "--rm", "--init", "--name", "lp-{recipe}-{port}", "--device", "/dev/dri", "--group-add", "video",
        "--security-opt", "label=disable", "-v", "{model_dir}:/data:ro", "--network", "host",
        "-e", "GGML_VK_VISIBLE_DEVICES={ggml_vk_visible_devices}", TOOLBOX_IMAGE,
        "llama-server", "-m", "/data/{checkpoint_relative:main}", "--host", "{host}", "--port", "{port}"],
    block={"stop_command": "podman", "stop_command_args": ["rm", "-f", "lp-{recipe}-{port}"]},
    health_probe={"type": "tcp", "timeout_seconds": 60, "poll_interval_ms": 2000})


@dataclass
class KubeEnv:
    root: Path
    backends: Path
    registry: ModelRegistry
    models: Path

    def descriptor(self, doc: dict) -> Path:
        return write_recipe(self.backends / f"{doc['recipe']}.json", doc)

    def model_file(self, name: str, data: bytes = b"GGUF") -> Path:
        path = self.models / name
        path.write_bytes(data)
        return path

    def register(self, name: str, recipe_id: str, file: str = "qwen.gguf", **options) -> None:
        path = self.models / file
        if not path.exists():
            path.write_bytes(b"GGUF")
        self.registry.add(name, recipe_id, {"main": str(path)}, options or None)




@pytest.fixture
def kube_env(home) -> KubeEnv:
    """Descriptors in ``backends/`` (the only search directory), the model registry of the home's
    config, model files in ``models/``; a CPU-only host injected (the target accelerator must not
    depend on the machine's)."""
    (backends,) = home.search_path("user", home.root / "backends")
    home.host()
    models = home.root / "models"
    models.mkdir()
    return KubeEnv(home.root, backends, ModelRegistry(home.config / "user_models.json"), models)


# --- an engine image built by `lemonpack build --base` on the Debian base ---------------------

LLAMA_URL = "https://example.invalid/llama/llama-server.tar.gz"


def llama_artifact(server_dir: Path) -> bytes:
    """``llama-server`` and its libraries (symlinks kept) as a tar.gz: a variant_of artifact."""
    import gzip
    import io
    import tarfile

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for p in sorted(server_dir.iterdir()):
            if p.name.startswith(".") or p.name.endswith(".json"):
                continue
            tf.add(p, arcname=p.name, recursive=False)
    return gzip.compress(raw.getvalue(), compresslevel=1, mtime=0)


def llama_recipe(rid: str, artifact: bytes) -> dict:
    """A variant_of llama.cpp recipe (linux/cpu) whose artifact is ``artifact`` at :data:`LLAMA_URL`."""
    import hashlib

    return recipe_doc(rid, binary="llama-server", variant_of="llamacpp", source=LLAMA_URL,
                      sha256=f"sha256:{hashlib.sha256(artifact).hexdigest()}",
                      health_probe=http_probe(timeout=120, poll_ms=200, status=None))


def build_engine_layout(recipe_file: Path, artifact: bytes, base: str, work: Path, env: dict) -> tuple[Path, str, str]:
    """``(layout, tag, digest)``: ``lemonpack build RECIPE --base BASE`` into ``work/layout``,
    the artifact served from a 127.0.0.1 mirror; ``tag``/``digest`` of the image it built."""
    import json
    import subprocess
    import sys
    from urllib.parse import urlsplit

    from support.helpers import serve_directory

    u = urlsplit(LLAMA_URL)
    mirror = work / "mirror"
    (mirror / u.hostname / u.path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    (mirror / u.hostname / u.path.lstrip("/")).write_bytes(artifact)
    layout = work / "layout"
    with serve_directory(mirror) as url:
        r = subprocess.run([sys.executable, "-c", "from lemonpack.cli import main; main()", "build", str(recipe_file),
                            "--out", str(layout), "--mirror", url, "--base", base, "--no-progress", "--json"],
                           env={**env, "LEMONPACK_CACHE_DIR": str(work / "cache")}, capture_output=True, text=True,
                           timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"lemonpack build --base failed ({r.returncode}): {r.stderr}{r.stdout}")
    target = next(t for t in json.loads(r.stdout)["targets"] if t["kind"] == "image")
    return layout, target["tag"], target["digest"]


def built_engine_image(recipe_file: Path, artifact: bytes, base: str, work: Path, env: dict) -> tuple[str, str]:
    """``(name@sha256:digest, name:tag)``: :func:`build_engine_layout`, loaded into podman's
    storage with ``skopeo copy`` under a unique name; the digest is the one ``lemonpack build``
    wrote (skopeo keeps it)."""
    import secrets
    import subprocess

    layout, tag, digest = build_engine_layout(recipe_file, artifact, base, work, env)
    name = f"localhost/kube-test-{secrets.token_hex(4)}/llama"
    tagged = f"{name}:{tag.replace('.', '-')}"
    subprocess.run(["skopeo", "copy", "-q", f"oci:{layout}:{tag}", f"containers-storage:{tagged}"],
                   env=env, check=True, capture_output=True, timeout=600)
    return f"{name}@{digest}", tagged


#: The exec livenessProbe of an image that carries busybox (:func:`with_busybox`): ``wget`` of /health.
BUSYBOX_PROBE = ["/bin/busybox", "wget", "-q", "--spider", "http://127.0.0.1:{port}/health"]


def with_busybox(image: str, work: Path, env: dict) -> tuple[str, str]:
    """``(name@sha256:digest, name:tag)``: ``image`` (in podman's storage) plus ``/bin/busybox``
    (Debian's busybox-static: its ``wget`` is the tool an exec probe runs, as upstream llama.cpp
    images carry curl), made by ``podman build`` of a ``COPY`` (no RUN: no container runs) under a
    unique name. Remove it by its tag (podman's storage is shared)."""
    import secrets
    import subprocess

    from support.tools import need

    ctx = work / f"busybox-{secrets.token_hex(4)}"
    ctx.mkdir(parents=True)
    (ctx / "busybox").write_bytes(Path(need("busybox")).read_bytes())
    (ctx / "busybox").chmod(0o755)
    (ctx / "Containerfile").write_text(f"FROM {image}\nCOPY busybox /bin/busybox\n")
    tagged = f"localhost/kube-probe-{secrets.token_hex(4)}/engine:bb"
    subprocess.run([need("podman"), "build", "-q", "-t", tagged, str(ctx)], env=env, check=True, capture_output=True,
                   timeout=300)
    digest = subprocess.run([need("podman"), "inspect", tagged, "--format", "{{.Digest}}"], env=env, check=True,
                            capture_output=True, text=True, timeout=60).stdout.strip()
    return f"{tagged.rpartition(':')[0]}@{digest}", tagged
