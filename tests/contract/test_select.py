"""Platform selection (section 9) and arch overrides / aliases (section 4.6) on injected hosts."""

import json
from pathlib import Path

import pytest

from lemonpack.contract import HostFacts, arch_alias, load_recipe, load_recipe_text, select_block, targets
from lemonpack.contract.select import match_pattern
from lemonpack.errors import SelectionError

from support.recipes import load_doc, recipe_doc

EXAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "lemonade-examples"

ROCM_1151 = HostFacts("linux", frozenset({"cpu", "rocm", "vulkan"}), rocm_arch="gfx1151")
ROCM_1150 = HostFacts("linux", frozenset({"cpu", "rocm", "vulkan"}), rocm_arch="gfx1150")
CUDA_90 = HostFacts("linux", frozenset({"cpu", "cuda", "vulkan"}), cuda_arch="sm_90")
BOTH = HostFacts("linux", frozenset({"cpu", "cuda", "rocm", "vulkan"}), rocm_arch="gfx1151", cuda_arch="sm_90")
NONE = HostFacts("linux")
WINDOWS_CUDA = HostFacts("windows", frozenset({"cpu", "cuda"}), cuda_arch="sm_90")


def recipe(name):
    return load_recipe(EXAMPLES / name)


def doc(blocks, **top):
    """A loaded recipe whose ``platforms.linux`` is ``blocks``."""
    return load_doc(recipe_doc("sel-test", display_name="x", platforms={"linux": blocks}, **top))


def blk(tag):
    return {"command": "/bin/" + tag, "args": []}


@pytest.mark.parametrize("host, expected", [(ROCM_1151, "rocm"), (CUDA_90, "cuda"), (BOTH, "cuda"), (NONE, "cpu")])
def test_detection_order(host, expected):
    r = recipe("llamacpp_per_platform.json")
    assert select_block(r, host).accelerator == expected


def test_requested_device_then_default_accelerator_then_first_key():
    r = doc({"vulkan": blk("v"), "rocm": blk("r"), "cpu": blk("c")}, default_accelerator="vulkan")
    assert select_block(r, BOTH, device="cpu").accelerator == "cpu"
    assert select_block(r, BOTH, device="cuda").accelerator == "vulkan"  # no such block: falls through
    assert select_block(r, BOTH).accelerator == "vulkan"
    r2 = doc({"npu": blk("n"), "metal": blk("m")})
    assert select_block(r2, NONE).accelerator == "npu"  # nothing detected: first key


def test_no_block_for_host_os_is_a_clear_error():
    with pytest.raises(SelectionError, match="no platform block for OS 'windows'"):
        select_block(recipe("dflash_rocm.json"), WINDOWS_CUDA)


def test_windows_block():
    eff = select_block(recipe("llamacpp_per_platform.json"), WINDOWS_CUDA)
    assert eff.binary == "llama-server.exe" and eff.provenance.source.endswith("windows-cuda.zip")


def test_arch_override_exact_beats_glob_and_merges():
    r = recipe("llamacpp_arch_overrides.json")
    exact = select_block(r, ROCM_1151)
    assert exact.arch_pattern == "gfx1151"
    assert exact.argv_extra == ("--device-name", "strix-halo", "--mtp")
    assert exact.binary == "llama-server"  # inherited from the base block
    assert exact.provenance.sha256 == "5" * 64
    glob = select_block(r, ROCM_1150)
    assert glob.arch_pattern == "gfx115*" and glob.provenance.sha256 == "6" * 64
    assert glob.argv_extra == ("--device-name", "{arch_alias}")  # not overridden
    other = select_block(r, HostFacts("linux", frozenset({"rocm"}), rocm_arch="gfx1100"))
    assert other.arch_pattern is None and other.provenance.source is None


def test_first_matching_glob_wins_and_env_merges_key_by_key():
    r = doc({"rocm": {"command": "x", "args": ["a"], "env": {"A": "1", "B": "2"},
                      "arch": {"gfx11*": {"env": {"B": "glob1"}}, "gfx115*": {"env": {"B": "glob2", "C": "3"}}}}})
    eff = select_block(r, ROCM_1151)
    assert eff.arch_pattern == "gfx11*"
    assert dict(eff.env) == {"A": "1", "B": "glob1"}
    assert match_pattern(["gfx11*", "gfx1151"], "gfx1151") == "gfx1151"


def test_reserved_args_union_block_first():
    r = load_recipe_text(json.dumps({
        "recipe": "u-test", "display_name": "x", "api_contract_version": "1", "capabilities": ["completion"],
        "reserved_args": ["--port", "--api-key"],
        "platforms": {"linux": {"cpu": {"command": "x", "args": [], "reserved_args": ["-m", "--port"]}}}}))
    assert select_block(r, NONE).reserved_args == ("-m", "--port", "--api-key")


def test_arch_alias_resolves_and_fails_loudly():
    r = recipe("toolbox_arch_alias.json")
    assert arch_alias(r, "gfx1151") == "strix-halo"
    assert arch_alias(r, "gfx1150") == "strix-point"
    with pytest.raises(SelectionError, match="no entry for arch 'gfx1100'"):
        arch_alias(r, "gfx1100")
    with pytest.raises(SelectionError):
        arch_alias(r, None)


def test_vulkan_block_uses_the_gpu_arch():
    assert ROCM_1151.gpu_arch("vulkan") == "gfx1151"
    assert CUDA_90.gpu_arch("vulkan") == "sm_90"
    assert BOTH.gpu_arch("cuda") == "sm_90" and BOTH.gpu_arch("rocm") == "gfx1151"
    assert NONE.gpu_arch("cpu") is None


def test_targets_enumerate_blocks_and_overrides():
    r = recipe("llamacpp_arch_overrides.json")
    names = [t.target_name for t in targets(r)]
    assert names == ["linux-rocm", "linux-rocm-gfx1151", "linux-rocm-gfx115x", "windows-cuda"]
    assert [t.target_name for t in targets(r, arch="gfx1150")] == ["linux-rocm-gfx1150", "windows-cuda"]
    assert targets(r, arch="gfx1150")[0].arch_pattern == "gfx115*"
    assert [t.target_name for t in targets(r, os="windows")] == ["windows-cuda"]
    with pytest.raises(SelectionError, match="offers: linux/rocm, windows/cuda"):
        targets(r, accelerator="metal")
