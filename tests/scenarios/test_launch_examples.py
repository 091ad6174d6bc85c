"""The six reference recipes and the RFC's section 13 examples, turned into launch plans
for injected hosts (ROCm gfx1151/gfx1150, CUDA sm_90, both, CPU only, Windows CUDA)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lemonpack.contract import HostFacts, load_recipe, load_recipe_text
from lemonpack.errors import SelectionError, TokenError
from lemonpack.runtime.launch.build import build_launch_plan
from lemonpack.runtime.launch.modelfiles import MissingBinaryError, ModelSpec

EXAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "lemonade-examples"

GFX1151 = HostFacts("linux", frozenset({"cpu", "rocm", "vulkan"}), rocm_arch="gfx1151")
GFX1150 = HostFacts("linux", frozenset({"cpu", "rocm", "vulkan"}), rocm_arch="gfx1150")
SM90 = HostFacts("linux", frozenset({"cpu", "cuda", "vulkan"}), cuda_arch="sm_90")
BOTH = HostFacts("linux", frozenset({"cpu", "rocm", "cuda"}), rocm_arch="gfx1151", cuda_arch="sm_90")
CPU = HostFacts("linux")
WIN_CUDA = HostFacts("windows", frozenset({"cpu", "cuda"}), cuda_arch="sm_89")
PORT = 13350


@pytest.fixture
def hub(tmp_path: Path) -> Path:
    """A Hugging Face hub cache holding one GGUF snapshot."""
    snap = tmp_path / "hf" / "hub" / "models--unsloth--gemma-3-270m-it-GGUF" / "snapshots" / "0abc"
    snap.mkdir(parents=True)
    (snap / "gemma-3-270m-it-UD-IQ2_M.gguf").write_bytes(b"GGUF")
    return tmp_path / "hf" / "hub"


@pytest.fixture
def model(hub: Path) -> ModelSpec:
    snap = hub / "models--unsloth--gemma-3-270m-it-GGUF" / "snapshots" / "0abc"
    return ModelSpec("user.toolbox-270m", {"main": str(snap / "gemma-3-270m-it-UD-IQ2_M.gguf")})


REL = "models--unsloth--gemma-3-270m-it-GGUF/snapshots/0abc/gemma-3-270m-it-UD-IQ2_M.gguf"


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def install(cache: Path, recipe: str, binary: str = "llama-server") -> Path:
    d = cache / "external" / recipe
    d.mkdir(parents=True, exist_ok=True)
    (d / binary).write_text("#!/bin/sh\n")
    (d / binary).chmod(0o755)
    return d / binary


def build(name_or_recipe, model, host, cache, hub, **kw):
    r = load_recipe(EXAMPLES / name_or_recipe) if isinstance(name_or_recipe, str) else name_or_recipe
    return build_launch_plan(r, model, host, port=PORT, cache_root=cache,
                             environ={"HF_HOME": str(hub.parent)}, **kw)


# ---------------------------------------------------------------- dflash_rocm.json (13.2)

@pytest.mark.parametrize("host", [GFX1151, SM90, BOTH, CPU], ids=["rocm", "cuda", "both", "cpu"])
def test_dflash_rocm_container(host, model, cache, hub):
    p = build("dflash_rocm.json", model, host, cache, hub)
    assert p.platform_path == "platforms.linux.rocm"  # the only linux block (last-resort on non-ROCm hosts)
    assert p.executable == "podman" and p.argv[:5] == ("podman", "run", "--rm", "--name", f"lemonade-dflash-rocm-{PORT}")
    assert f"{hub}:/models:ro" in p.argv
    assert p.argv[-6:] == ("/opt/lucebox-hub/server/build/dflash_server", f"/models/{REL}",
                           "--host", "127.0.0.1", "--port", str(PORT))
    assert p.container_runtime == "podman" and p.container_name == f"lemonade-dflash-rocm-{PORT}"
    assert p.stop_argv(123) == ("podman", "rm", "-f", "-t", "0", f"lemonade-dflash-rocm-{PORT}")
    assert p.health_probe.timeout_seconds == 300 and p.health_probe.poll_interval_ms == 500


def test_dflash_rocm_has_no_windows_block(model, cache, hub):
    with pytest.raises(SelectionError, match="no platform block for OS 'windows'"):
        build("dflash_rocm.json", model, WIN_CUDA, cache, hub)


# ---------------------------------------------------------------- llamacpp_vulkan_custom.json (13.1)

@pytest.mark.parametrize("host", [GFX1151, SM90, BOTH, CPU], ids=["rocm", "cuda", "both", "cpu"])
def test_llamacpp_vulkan_custom(host, model, cache, hub):
    p = build("llamacpp_vulkan_custom.json", model, host, cache, hub)
    assert p.argv == ("/opt/lemonade/bin/llamacpp/vulkan/llama-server", "-m", model.checkpoints["main"],
                      "--host", "127.0.0.1", "--port", str(PORT), "-c", "4096", "-t", "-1")
    assert dict(p.env) == {"GGML_VK_VISIBLE_DEVICES": "0"}
    assert p.stop_argv_template == ("kill", "-9", "{pid}") and p.stop_argv(77) == ("kill", "-9", "77")
    assert p.container_name is None and p.health_probe.poll_interval_ms == 200


def test_llamacpp_vulkan_custom_with_options(model, cache, hub):
    m = ModelSpec(model.name, model.checkpoints, {"vk_device": "1", "ctx_size": 32768, "threads": 8})
    p = build("llamacpp_vulkan_custom.json", m, SM90, cache, hub)
    assert p.argv[-4:] == ("-c", "32768", "-t", "8") and p.env == {"GGML_VK_VISIBLE_DEVICES": "1"}


# ---------------------------------------------------------------- toolbox_arch_alias.json (13.5)

@pytest.mark.parametrize(("host", "alias"), [(GFX1151, "strix-halo"), (GFX1150, "strix-point")])
def test_toolbox_arch_alias(host, alias, model, cache, hub):
    p = build("toolbox_arch_alias.json", model, host, cache, hub)
    assert f"docker.io/kyuz0/amd-{alias}-toolboxes:vulkan-radv" in p.argv
    assert p.platform_path == "platforms.linux.vulkan" and p.gpu_arch == host.rocm_arch
    assert f"{hub}:/models:ro" in p.argv and f"/models/{REL}" in p.argv
    assert p.argv[-2:] == ("-c", "4096")
    assert p.container_name == f"lemonade-toolbox-arch-alias-{PORT}"
    assert p.stop_argv(1) == ("podman", "rm", "-f", f"lemonade-toolbox-arch-alias-{PORT}")


@pytest.mark.parametrize(("host", "why"), [(SM90, "sm_90"), (CPU, "needs a GPU arch")], ids=["cuda", "cpu"])
def test_toolbox_arch_alias_unmapped_fails_loudly(host, why, model, cache, hub):
    with pytest.raises(TokenError, match=why):
        build("toolbox_arch_alias.json", model, host, cache, hub)


# ---------------------------------------------------------------- llamacpp_arch_overrides.json (13.5)

def test_llamacpp_arch_overrides_gfx1151(model, cache, hub):
    exe = install(cache, "llamacpp-arch-overrides")
    p = build("llamacpp_arch_overrides.json", model, GFX1151, cache, hub)
    assert p.executable == str(exe)
    assert p.platform_path == "platforms.linux.rocm.arch.gfx1151"
    assert p.argv[1:] == ("-m", model.checkpoints["main"], "--ctx-size", "4096", "--port", str(PORT),
                          "--host", "127.0.0.1", "--jinja", "--metrics", "--device-name", "strix-halo", "--mtp")


def test_llamacpp_arch_overrides_gfx1150_glob_and_alias(model, cache, hub):
    install(cache, "llamacpp-arch-overrides")
    p = build("llamacpp_arch_overrides.json", model, GFX1150, cache, hub)
    assert p.platform_path == "platforms.linux.rocm.arch.gfx115*"
    assert p.argv[-2:] == ("--device-name", "strix-point") and "--mtp" not in p.argv


def test_llamacpp_arch_overrides_without_rocm_arch(model, cache, hub):
    install(cache, "llamacpp-arch-overrides")
    with pytest.raises(TokenError, match="arch_alias"):
        build("llamacpp_arch_overrides.json", model, SM90, cache, hub)
    unmapped = HostFacts("linux", frozenset({"cpu", "rocm"}), rocm_arch="gfx1100")
    with pytest.raises(TokenError, match="gfx1100"):
        build("llamacpp_arch_overrides.json", model, unmapped, cache, hub)


def test_llamacpp_arch_overrides_windows_cuda(model, cache, hub):
    exe = install(cache, "llamacpp-arch-overrides", "llama-server.exe")
    p = build("llamacpp_arch_overrides.json", model, WIN_CUDA, cache, hub)
    assert p.executable == str(exe) and p.argv[-2:] == ("--jinja", "--metrics")


# ---------------------------------------------------------------- llamacpp_per_platform.json (13.4)

@pytest.mark.parametrize(("host", "block", "extra"), [
    (GFX1151, "rocm", ("--gpu-layers", "999")),
    (SM90, "cuda", ("--gpu-layers", "999")),
    (BOTH, "cuda", ("--gpu-layers", "999")),  # detection order: cuda before rocm
    (CPU, "cpu", ()),
], ids=["rocm", "cuda", "both", "cpu"])
def test_llamacpp_per_platform(host, block, extra, model, cache, hub):
    install(cache, "llamacpp-per-platform")
    p = build("llamacpp_per_platform.json", model, host, cache, hub)
    assert p.platform_path == f"platforms.linux.{block}" and p.accelerator == block
    assert p.argv[9:] == ("--jinja", "--metrics", *extra)


def test_llamacpp_per_platform_device_and_reserved(model, cache, hub):
    install(cache, "llamacpp-per-platform")
    p = build("llamacpp_per_platform.json", model, BOTH, cache, hub, device="rocm")
    assert p.accelerator == "rocm"
    m = ModelSpec(model.name, model.checkpoints, {"custom_args": "--host=0.0.0.0"})
    with pytest.raises(TokenError, match="reserved flag '--host'"):
        build("llamacpp_per_platform.json", m, GFX1151, cache, hub)


# ---------------------------------------------------------------- llamacpp_rocm_nightly.json (13.3)

def test_llamacpp_rocm_nightly(model, cache, hub):
    exe = install(cache, "llamacpp-rocm-nightly")
    p = build("llamacpp_rocm_nightly.json", model, GFX1151, cache, hub)
    assert p.argv == (str(exe), "-m", model.checkpoints["main"], "--ctx-size", "4096", "--port", str(PORT),
                      "--host", "127.0.0.1", "--jinja", "--metrics", "--gpu-layers", "0")
    m = ModelSpec(model.name, model.checkpoints, {"gpu_layers": 99})
    assert build("llamacpp_rocm_nightly.json", m, GFX1151, cache, hub).argv[-1] == "99"
    emb = build("llamacpp_rocm_nightly.json", model, GFX1151, cache, hub, mode="embeddings")
    assert emb.argv[-3:] == ("--embeddings", "--gpu-layers", "0") and emb.mode == "embeddings"


@pytest.mark.parametrize("host", [SM90, CPU], ids=["cuda", "cpu"])
def test_llamacpp_rocm_nightly_other_hosts_use_the_only_block(host, model, cache, hub):
    install(cache, "llamacpp-rocm-nightly")
    assert build("llamacpp_rocm_nightly.json", model, host, cache, hub).accelerator == "rocm"


def test_llamacpp_rocm_nightly_not_installed(model, cache, hub):
    with pytest.raises(MissingBinaryError, match="lemonpack install llamacpp-rocm-nightly"):
        build("llamacpp_rocm_nightly.json", model, GFX1151, cache, hub)


# ---------------------------------------------------------------- the seed's own texts

SEED_13_3 = {
    "recipe": "llamacpp-rocm-nightly", "display_name": "llama.cpp ROCm Nightly (community fork)",
    "api_contract_version": "1", "variant_of": "llamacpp",
    "capabilities": ["chat_completion", "completion", "embeddings"],
    "source": "https://example.invalid/llamacpp-rocm/nightly/llama-server-linux-rocm.tar.gz",
    "version_policy": "pinned",
    "sha256": "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    "platforms": {"linux": {"rocm": {"binary": "llama-server",
                                     "argv_extra": ["--gpu-layers", "{custom:gpu_layers:-0}"],
                                     "reserved_args": ["--port", "--host", "-m"]}}},
}

TOOLBOX_LLAMACPP = {  # the seed's test guide manifest (two blocks, picked by hardware)
    "recipe": "toolbox-llamacpp", "display_name": "kyuz0 Strix Halo llama.cpp toolbox", "api_contract_version": "1",
    "capabilities": ["chat_completion", "completion"],
    "health_probe": {"type": "http", "endpoint": "/health", "expected_status": 200,
                     "timeout_seconds": 300, "poll_interval_ms": 500},
    "platforms": {"linux": {
        "vulkan": {"command": "podman", "args": [
            "run", "--rm", "--init", "--name", "lemonade-{recipe}-{port}", "--device", "/dev/dri", "--group-add", "video",
            "--security-opt", "seccomp=unconfined", "--security-opt", "label=disable",
            "-v", "{hf_cache}:/models:ro", "--network", "host", "docker.io/kyuz0/amd-strix-halo-toolboxes:vulkan-radv",
            "llama-server", "-m", "/models/{checkpoint_relative:main}",
            "--host", "127.0.0.1", "--port", "{port}", "-c", "{ctx_size}"],
            "stop_command": "podman", "stop_command_args": ["rm", "-f", "lemonade-{recipe}-{port}"]},
        "rocm": {"command": "podman", "args": [
            "run", "--rm", "--init", "--name", "lemonade-{recipe}-{port}", "--device", "/dev/dri", "--device", "/dev/kfd",
            "--group-add", "video", "--group-add", "render", "--security-opt", "seccomp=unconfined",
            "--security-opt", "label=disable", "-v", "{hf_cache}:/models:ro", "--network", "host",
            "docker.io/kyuz0/amd-strix-halo-toolboxes:rocm-10.0", "llama-server", "-m", "/models/{checkpoint_relative:main}",
            "--host", "127.0.0.1", "--port", "{port}", "-c", "{ctx_size}"],
            "stop_command": "podman", "stop_command_args": ["rm", "-f", "lemonade-{recipe}-{port}"]}}},
}


def test_seed_13_3_pinned_nightly(model, cache, hub):
    exe = install(cache, "llamacpp-rocm-nightly")
    p = build(load_recipe_text(json.dumps(SEED_13_3)), model, GFX1151, cache, hub)
    assert p.executable == str(exe) and p.argv[-2:] == ("--gpu-layers", "0")
    bad = ModelSpec(model.name, model.checkpoints, {"custom_args": "-m /etc/passwd"})
    with pytest.raises(TokenError, match="reserved flag '-m'"):
        build(load_recipe_text(json.dumps(SEED_13_3)), bad, GFX1151, cache, hub)


@pytest.mark.parametrize(("host", "image"), [
    (GFX1151, "docker.io/kyuz0/amd-strix-halo-toolboxes:rocm-10.0"),  # rocm detected before vulkan
    (HostFacts("linux", frozenset({"cpu", "vulkan"}), rocm_arch="gfx1151"),
     "docker.io/kyuz0/amd-strix-halo-toolboxes:vulkan-radv"),
])
def test_seed_toolbox_guide_manifest(host, image, model, cache, hub):
    p = build(load_recipe_text(json.dumps(TOOLBOX_LLAMACPP)), model, host, cache, hub)
    assert image in p.argv
    assert p.container_name == f"lemonade-toolbox-llamacpp-{PORT}"
    assert p.argv[p.argv.index("-m") + 1] == f"/models/{REL}"
    assert p.stop_argv(None) == ("podman", "rm", "-f", f"lemonade-toolbox-llamacpp-{PORT}")
