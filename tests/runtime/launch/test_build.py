"""Token resolution and passthrough launch plans (RFC sections 4.2, 4.3, 4.6, 5, 9)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lemonpack.contract import HostFacts, load_recipe_text
from lemonpack.contract.tokens import render
from lemonpack.errors import LemonpackError, ManifestError, SelectionError, TokenError
from lemonpack.oci.cmdline import UnreadableCommandLine, valid_container_name
from lemonpack.runtime.launch.build import build_launch_plan, container_of
from lemonpack.runtime.launch.modelfiles import MissingCheckpointError, ModelSpec
from lemonpack.runtime.launch.tokens import TokenContext, resolve_token
from support.recipes import load_doc, recipe_doc

ROCM = HostFacts("linux", frozenset({"cpu", "rocm", "vulkan"}), rocm_arch="gfx1151")
CUDA = HostFacts("linux", frozenset({"cpu", "cuda"}), cuda_arch="sm_90")
CPU = HostFacts("linux")


def recipe(args, *, env=None, top=None, block=None, accel="cpu"):
    """A passthrough recipe running ``/opt/engine/server`` with ``args`` on linux/<accel>, loaded."""
    extra = {**(block or {}), **({"env": env} if env else {})}
    return load_doc(recipe_doc("test-engine", display_name="Test", command="/opt/engine/server", args=args,
                               accelerator=accel, block=extra, **(top or {})))


@pytest.fixture
def model(tmp_path: Path) -> ModelSpec:
    (tmp_path / "models" / "org").mkdir(parents=True)
    main = tmp_path / "models" / "org" / "m.gguf"
    mmproj = tmp_path / "models" / "org" / "mmproj.gguf"
    main.write_bytes(b"GGUF")
    mmproj.write_bytes(b"GGUF")
    return ModelSpec("user.tiny", {"main": str(main), "mmproj": str(mmproj)}, model_dir=str(tmp_path / "models"))


def plan(r, m, host=CPU, **kw):
    kw.setdefault("port", 8123)
    kw.setdefault("environ", {})
    kw.setdefault("cache_root", "/cache/lemonpack")
    return build_launch_plan(r, m, host, **kw)


def ctx(**kw) -> TokenContext:
    base = dict(recipe="r", model_name="m", port=9000)
    base.update(kw)
    return TokenContext(**base)


# ---------------------------------------------------------------- every token kind

def test_runtime_tokens(model):
    p = plan(recipe(["{port}", "{host}", "{log_level}", "{recipe}", "{model_name}"]), model, host_addr="0.0.0.0")
    assert p.argv == ("/opt/engine/server", "8123", "0.0.0.0", "info", "test-engine", "user.tiny")
    assert p.executable == "/opt/engine/server" and p.port == 8123 and p.host == "0.0.0.0"


def test_checkpoint_tokens(model, tmp_path):
    p = plan(recipe(["{checkpoint:main}", "{checkpoint_relative:main}", "{checkpoint:mmproj}", "{resolved_path}",
                     "{model_relative_path}", "{model_dir}"]), model)
    models = tmp_path / "models"
    assert p.argv[1:] == (str(models / "org/m.gguf"), "org/m.gguf", str(models / "org/mmproj.gguf"),
                          str(models / "org/m.gguf"), "org/m.gguf", str(models))


def test_checkpoint_relative_paths_are_taken_under_model_dir(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "w.bin").write_bytes(b"x")
    m = ModelSpec("m", {"main": "a/w.bin"}, model_dir=str(tmp_path))
    assert plan(recipe(["{checkpoint:main}"]), m).argv[1] == str(tmp_path / "a" / "w.bin")


def test_unknown_checkpoint_names_it(model):
    with pytest.raises(TokenError, match=r"\{checkpoint:draft\}.*no checkpoint 'draft' \(it has: main, mmproj\)"):
        plan(recipe(["{checkpoint:draft}"]), model)


def test_checkpoint_outside_model_dir_fails(tmp_path):
    (tmp_path / "w.bin").write_bytes(b"x")
    m = ModelSpec("m", {"main": str(tmp_path / "w.bin")}, model_dir=str(tmp_path / "elsewhere"))
    with pytest.raises(TokenError, match="not inside model_dir"):
        plan(recipe(["{checkpoint_relative:main}"]), m)


def test_paths_tokens_hf_cache_cache_dir_exe_dir(model):
    p = plan(recipe(["{hf_cache}", "{cache_dir}", "{exe_dir}"]), model, environ={"HF_HOME": "/srv/hf"})
    assert p.argv[1:] == ("/srv/hf/hub", "/cache/lemonpack", "/opt/engine")
    p = plan(recipe(["{hf_cache}"]), model, environ={"HOME": "/home/u"})
    assert p.argv[1] == "/home/u/.cache/huggingface/hub"
    p = plan(recipe(["{hf_cache}"]), model, environ={"HF_HUB_CACHE": "/hub", "HF_HOME": "/ignored"})
    assert p.argv[1] == "/hub"


def test_model_dir_defaults_to_hf_cache_when_the_checkpoint_lives_there(tmp_path):
    hub = tmp_path / "hf" / "hub"
    snap = hub / "models--org--m" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "m.gguf").write_bytes(b"x")
    m = ModelSpec("m", {"main": str(snap / "m.gguf")})
    p = plan(recipe(["{model_dir}", "{checkpoint_relative:main}"]), m, environ={"HF_HOME": str(tmp_path / "hf")})
    assert p.argv[1:] == (str(hub), "models--org--m/snapshots/abc/m.gguf")


def test_hardware_tokens_rocm():
    r = recipe(["{rocm_arch}", "{target_device}", "{hip_visible_devices}", "{rocr_visible_devices}",
                "{ggml_vk_visible_devices}", "{cuda_visible_devices}", "{ze_affinity_mask}"], accel="rocm")
    p = plan(r, ModelSpec("m"), ROCM)
    assert p.argv[1:] == ("gfx1151", "rocm", "0", "0", "0", "0", "0")
    assert p.accelerator == "rocm" and p.gpu_arch == "gfx1151"


def test_visible_device_tokens_come_from_options():
    r = recipe(["{cuda_visible_devices}", "{ze_affinity_mask}", "{cuda_arch}"], accel="cuda")
    p = plan(r, ModelSpec("m", recipe_options={"cuda_visible_devices": "1,2", "ze_affinity_mask": 3}), CUDA)
    assert p.argv[1:] == ("1,2", "3", "sm_90")


def test_missing_host_arch_fails_loudly():
    with pytest.raises(TokenError, match=r"\{cuda_arch\}.*no CUDA"):
        plan(recipe(["{cuda_arch}"]), ModelSpec("m"), ROCM)
    with pytest.raises(TokenError, match=r"\{rocm_arch\}.*no ROCm"):
        plan(recipe(["{rocm_arch}"]), ModelSpec("m"), CPU)


def test_arch_alias_mapped_glob_and_unmapped():
    top = {"arch_aliases": {"gfx1151": "strix-halo", "gfx110*": "rdna3"}}
    r = recipe(["img-{arch_alias}"], top=top, accel="rocm")
    assert plan(r, ModelSpec("m"), ROCM).argv[1] == "img-strix-halo"
    rdna3 = HostFacts("linux", frozenset({"cpu", "rocm"}), rocm_arch="gfx1100")
    assert plan(r, ModelSpec("m"), rdna3).argv[1] == "img-rdna3"
    other = HostFacts("linux", frozenset({"cpu", "rocm"}), rocm_arch="gfx942")
    with pytest.raises(TokenError, match=r"\{arch_alias\}.*gfx942"):
        plan(r, ModelSpec("m"), other)
    with pytest.raises(TokenError, match=r"\{arch_alias\}.*needs a GPU arch"):
        plan(recipe(["{arch_alias}"], top=top), ModelSpec("m"), CPU)


def test_option_tokens_defaults_and_overrides():
    r = recipe(["{ctx_size}", "{batch_size}", "{ubatch_size}", "{threads}", "{cache_type_k}", "{cache_type_v}"])
    assert plan(r, ModelSpec("m")).argv[1:] == ("4096", "2048", "512", "-1", "f16", "f16")
    r2 = recipe(["{ctx_size}", "{threads}", "{cache_type_k}"], top={"recipe_options": {"ctx_size": 8192, "threads": 4}})
    m = ModelSpec("m", recipe_options={"ctx_size": 16384, "cache_type_k": "q8_0"})
    assert plan(r2, m).argv[1:] == ("16384", "4", "q8_0")
    assert plan(r2, m, options={"ctx_size": 2048}).argv[1] == "2048"


def test_custom_tokens_with_and_without_default():
    r = recipe(["{custom:gpu_layers:-0}", "--flag={custom:mode}"], top={"recipe_options": {"mode": "fast"}})
    assert plan(r, ModelSpec("m")).argv[1:] == ("0", "--flag=fast")
    m = ModelSpec("m", recipe_options={"gpu_layers": 99, "mode": True})
    assert plan(r, m).argv[1:] == ("99", "--flag=true")
    with pytest.raises(TokenError, match=r"\{custom:missing\}.*'missing' is not set"):
        plan(recipe(["{custom:missing}"]), ModelSpec("m"))


def test_env_tokens_through_the_allowlist():
    r = recipe(["{env:HF_HOME}", "{env:HF_HUB_CACHE:-/none}"], env={"CACHE": "{env:XDG_CACHE_HOME:-/tmp/c}"})
    p = plan(r, ModelSpec("m"), environ={"HF_HOME": "/srv/hf"})
    assert p.argv[1:] == ("/srv/hf", "/none") and p.env == {"CACHE": "/tmp/c"}
    for name in ("HF_TOKEN", "LEMONPACK_CACHE_DIR", "LEMONADE_API_KEY", "HOME"):
        with pytest.raises(TokenError, match=name):
            plan(recipe([f"{{env:{name}:-x}}"]), ModelSpec("m"), environ={name: "v"})


def test_resolve_token_accepts_text_and_pid_outside_stop_fails():
    c = ctx(recipe_options={"a": "b"})
    assert resolve_token("{port}", c) == "9000"
    assert resolve_token("{custom:a}", c) == "b"
    with pytest.raises(TokenError, match=r"\{pid\} is only valid in stop_command"):
        resolve_token("{pid}", c)
    assert resolve_token("{pid}", ctx(pid=42)) == "42"
    # The contract rejects {pid} outside a stop command when the recipe is loaded.
    with pytest.raises(ManifestError, match=r"token-pid"):
        recipe(["{pid}"])


# ---------------------------------------------------------------- leading dash

@pytest.mark.parametrize("value", ["-0", "-12", "-1.5"])
def test_negative_numbers_are_accepted(value):
    r = recipe(["--n-gpu-layers", "{custom:ngl}", "{custom:scale}"])
    p = plan(r, ModelSpec("m", recipe_options={"ngl": value, "scale": value}))
    assert p.argv[1:] == ("--n-gpu-layers", value, value)


@pytest.mark.parametrize("value", ["abc", "1.5", "4k"])
def test_integer_options_are_checked(value):
    with pytest.raises(TokenError, match="'ctx_size' must be an integer"):
        plan(recipe(["-c", "{ctx_size}"]), ModelSpec("m", recipe_options={"ctx_size": value}))


def test_custom_option_default_value_is_the_base_layer():
    doc_opts = [{"name": "docroot", "cli_flag": "--docroot", "default_value": "/srv/a", "help": "h"}]
    r = recipe(["--dir", "{custom:docroot}"], top={"custom_options": doc_opts})
    assert plan(r, ModelSpec("m")).argv[1:] == ("--dir", "/srv/a")
    assert plan(r, ModelSpec("m", recipe_options={"docroot": "/srv/b"})).argv[1:] == ("--dir", "/srv/b")


def test_unresolvable_token_names_file_and_field():
    with pytest.raises(TokenError) as e:
        plan(recipe(["--dir", "{custom:nothing}"]), ModelSpec("m"))
    assert "platforms.linux.cpu.args[1]" in str(e.value) and "<memory>" in str(e.value)


@pytest.mark.parametrize("value", ["--rpc", "-x", "-1e5", "-", "--"])
def test_leading_dash_values_are_rejected(value):
    with pytest.raises(TokenError, match="begins with '-'"):
        plan(recipe(["--opt", "{custom:v}"]), ModelSpec("m", recipe_options={"v": value}))


def test_leading_dash_model_name_positional_is_rejected():
    with pytest.raises(TokenError, match=r"\{model_name\}.*begins with '-'"):
        plan(recipe(["serve", "{model_name}"]), ModelSpec("--exec=evil"))


def test_leading_dash_in_env_value_and_default_is_rejected():
    with pytest.raises(TokenError, match="begins with '-'"):
        plan(recipe(["x"], env={"A": "{custom:v:--evil}"}), ModelSpec("m"))


def test_render_is_the_one_dash_rule(model):
    # the same rule, through the contract's render, for a mid-string token: the value, not the element
    c = ctx(recipe_options={"v": "-x"})
    with pytest.raises(TokenError):
        render("prefix{custom:v}", lambda t: resolve_token(t, c))


# ---------------------------------------------------------------- custom_args and reserved_args


def test_custom_args_expand_in_place():
    r = recipe(["-m", "x", "{custom_args}", "--end"])
    p = plan(r, ModelSpec("m", recipe_options={"custom_args": "--temp 0.5 --top-k=40"}))
    assert p.argv[1:] == ("-m", "x", "--temp", "0.5", "--top-k=40", "--end")
    assert plan(r, ModelSpec("m")).argv[1:] == ("-m", "x", "--end")


@pytest.mark.parametrize("args", ["--port 1", "--port=1", "-m other", "-m=x", "--top-level x", "--top-level=1"])
def test_reserved_args_exact_and_flag_equals_block_and_top_level(args):
    r = recipe(["{custom_args}"], block={"reserved_args": ["--port", "-m"]}, top={"reserved_args": ["--top-level"]})
    flag = args.split()[0].split("=")[0]
    with pytest.raises(TokenError, match=f"reserved flag '{flag}'"):
        plan(r, ModelSpec("m", recipe_options={"custom_args": args}))
    with pytest.raises(TokenError, match=f"reserved flag '{flag}'"):
        plan(r, ModelSpec("m", recipe_options={"custom_args": args.split()}))


def test_reserved_args_do_not_match_prefixes_without_equals():
    r = recipe(["{custom_args}"], top={"reserved_args": ["--port"]})
    p = plan(r, ModelSpec("m", recipe_options={"custom_args": "--portable -mx"}))
    assert p.argv[1:] == ("--portable", "-mx")


# ---------------------------------------------------------------- capability_enable_args

def _caps_recipe(caps, enable):
    return load_doc(recipe_doc("multi", display_name="Multi", capabilities=caps, command="/opt/multi",
                               capability_enable_args=enable))


def test_capability_enable_args_for_the_mode_of_the_model():
    r = _caps_recipe(["chat_completion", "completion", "embeddings", "reranking", "responses"],
                     {"chat_completion": ["--chat"], "responses": ["--responses"], "embeddings": ["--embed"],
                      "reranking": ["--rerank", "{custom:rerank_top:-5}"]})
    chat = plan(r, ModelSpec("m"))  # first declared capability's mode: chat
    assert chat.mode == "chat" and chat.argv[3:] == ("--chat", "--responses")
    emb = plan(r, ModelSpec("m", mode="embeddings"))
    assert emb.mode == "embeddings" and emb.argv[3:] == ("--embed",)
    rr = plan(r, ModelSpec("m"), mode="reranking")
    assert rr.argv[3:] == ("--rerank", "5")


def test_capability_enable_args_unknown_mode_is_an_error():
    r = _caps_recipe(["chat_completion"], {})
    with pytest.raises(SelectionError, match="mode 'image'.*chat"):
        plan(r, ModelSpec("m", mode="image"))


def test_capability_enable_args_plumbing_only_recipe_has_no_mode():
    r = _caps_recipe(["tokenize", "chat_completion"], {"chat_completion": ["--c"]})
    assert plan(r, ModelSpec("m")).argv[3:] == ("--c",)


# ---------------------------------------------------------------- env, working_dir, stop, containers

def test_env_working_dir_and_stop_command(model):
    r = recipe(["{port}"], env={"GGML_VK_VISIBLE_DEVICES": "{custom:vk_device:-0}", "PORT": "{port}"},
               block={"working_dir": "{model_dir}", "stop_command": "kill", "stop_command_args": ["-9", "{pid}"]})
    p = plan(r, model)
    assert dict(p.env) == {"GGML_VK_VISIBLE_DEVICES": "0", "PORT": "8123"}
    assert p.working_dir == model.model_dir
    assert p.stop_argv_template == ("kill", "-9", "{pid}")
    assert p.stop_argv(4242) == ("kill", "-9", "4242")


def test_stop_value_cannot_smuggle_a_pid_placeholder():
    r = recipe(["x"], block={"stop_command": "/bin/stop", "stop_command_args": ["{custom:v}"]})
    with pytest.raises(TokenError, match=r"contains \{pid\}"):
        plan(r, ModelSpec("m", recipe_options={"v": "{pid}"}))


@pytest.mark.parametrize(("argv", "expected"), [
    (["podman", "run", "--rm", "--name", "lemonade-x-1", "img"], ("podman", "lemonade-x-1")),
    (["/usr/bin/docker", "run", "--name=ctr", "img"], ("docker", "ctr")),
    (["podman", "--log-level=debug", "run", "--name", "n", "img"], ("podman", "n")),
    (["podman", "pull", "img"], (None, None)),  # the subcommand is not "run"
    (["podman", "--remote", "run", "--name", "n", "img"], ("podman", "n")),
    # the forms the old detection missed (issue 6 section 2): one reader for all of them
    (["podman", "--root", "/r", "container", "run", "--name", "n", "img"], ("podman", "n")),
    (["nerdctl", "-n", "ns", "run", "--name", "n", "img"], ("nerdctl", "n")),
    (["podman-remote", "run", "--name=n", "img"], ("podman-remote", "n")),
    (["nice", "-n", "5", "setsid", "podman", "run", "--name", "n", "img"], ("podman", "n")),
    (["podman", "run", "--rm", "img", "--name", "n"], (None, None)),  # the container's own argv
    (["podman", "run", "--rm", "img"], (None, None)),
    (["podman", "exec", "--name", "n"], (None, None)),
    (["/opt/llama-server", "--name", "n"], (None, None)),
])
def test_container_detection(argv, expected):
    assert container_of(argv) == expected


def test_container_detection_refuses_what_it_cannot_read():
    with pytest.raises(UnreadableCommandLine, match="unknown podman pull option --name"):
        container_of(["podman", "pull", "--name", "n"])


def test_model_name_in_container_name_is_made_valid(tmp_path):
    """Case 06: ``--name lp-{model_name}`` with a model called ``Qwen3:Q4_K_M.gguf``. The name is
    mapped (valid_container_name) in the run argv, the stop argv and the plan's container_name."""
    r = recipe(["unused"], block={
        "command": "podman", "args": ["run", "--rm", "--name", "lp-{model_name}", "img@sha256:" + "a" * 64],
        "stop_command": "podman", "stop_command_args": ["rm", "-f", "-t", "0", "lp-{model_name}"]})
    p = plan(r, ModelSpec("Qwen3:Q4_K_M.gguf"))
    safe = valid_container_name("lp-Qwen3:Q4_K_M.gguf")
    assert safe != "lp-Qwen3:Q4_K_M.gguf"
    assert p.argv[:5] == ("podman", "run", "--rm", "--name", safe)
    assert p.stop_argv(1) == ("podman", "rm", "-f", "-t", "0", safe)
    assert (p.container_runtime, p.container_name) == ("podman", safe)
    # a valid name is left alone
    assert plan(r, ModelSpec("qwen3")).container_name == "lp-qwen3"


def test_lemond_managed_checks_referenced_checkpoints(tmp_path):
    m = ModelSpec("m", {"main": str(tmp_path / "missing.gguf"), "unused": str(tmp_path / "nope")})
    with pytest.raises(MissingCheckpointError, match=r"checkpoint 'main'.*missing\.gguf.*does not exist"):
        plan(recipe(["-m", "{checkpoint:main}"]), m)
    # an unreferenced checkpoint is not checked
    (tmp_path / "there.gguf").write_bytes(b"x")
    ok = ModelSpec("m", {"main": str(tmp_path / "there.gguf"), "unused": str(tmp_path / "nope")})
    assert plan(recipe(["-m", "{checkpoint:main}"]), ok).argv[-1] == str(tmp_path / "there.gguf")


def test_self_managed_skips_checkpoint_checks(tmp_path):
    r = recipe(["-m", "{checkpoint:main}"], top={"model_management": "self_managed"})
    m = ModelSpec("m", {"main": str(tmp_path / "absent.gguf")})
    assert plan(r, m).argv[-1] == str(tmp_path / "absent.gguf")


def test_no_block_for_the_host_os():
    with pytest.raises(SelectionError, match="no platform block for OS 'windows'"):
        plan(recipe(["x"]), ModelSpec("m"), HostFacts("windows"))


def test_device_option_selects_the_block():
    doc = {"recipe": "two", "display_name": "Two", "api_contract_version": "1", "capabilities": ["chat_completion"],
           "platforms": {"linux": {"rocm": {"command": "/r", "args": ["{target_device}"]},
                                   "vulkan": {"command": "/v", "args": ["{target_device}"]}}}}
    r = load_recipe_text(json.dumps(doc))
    assert plan(r, ModelSpec("m"), ROCM).argv == ("/r", "rocm")
    assert plan(r, ModelSpec("m"), ROCM, device="vulkan").argv == ("/v", "vulkan")
    assert plan(r, ModelSpec("m", recipe_options={"device": "vulkan"}), ROCM).argv == ("/v", "vulkan")


def test_model_spec_from_entry_is_duck_typed(tmp_path):
    class Entry:
        name = "user.x"
        recipe = "r"
        checkpoints = {"main": tmp_path / "a.gguf"}
        recipe_options = {"ctx_size": 1}

    spec = ModelSpec.from_entry(Entry())
    assert spec.name == "user.x" and spec.checkpoints == {"main": str(tmp_path / "a.gguf")}
    assert spec.recipe_options == {"ctx_size": 1} and spec.mode is None

    class One:
        name = "one"
        checkpoints = "/m/a.gguf"

    assert ModelSpec.from_entry(One()).checkpoints == {"main": "/m/a.gguf"}


def test_model_spec_from_the_real_registry_entry(tmp_path):
    from lemonpack.runtime.models.registry import ModelEntry

    (tmp_path / "q.gguf").write_bytes(b"x")
    entry = ModelEntry("user.q", "test-engine", {"main": str(tmp_path / "q.gguf")}, {"ctx_size": 1024})
    p = plan(recipe(["-m", "{checkpoint:main}", "-c", "{ctx_size}"]), ModelSpec.from_entry(entry))
    assert p.argv[1:] == ("-m", str(tmp_path / "q.gguf"), "-c", "1024") and p.model == "user.q"
    hub = ModelEntry("user.h", "test-engine", {"main": "org/repo:file.gguf"}, {})
    with pytest.raises(LemonpackError, match="hub reference 'org/repo:file.gguf'"):
        plan(recipe(["{checkpoint:main}"]), ModelSpec.from_entry(hub))


def test_launch_images_are_the_plans_images_without_building_it(model):
    """launch_images reads the block build_launch_plan picks (same device, same options), so it
    lists what the plan's argv runs; a variant_of recipe or a program runs no image."""
    from lemonpack.oci.policy import container_images
    from lemonpack.runtime.launch.build import launch_images

    digest = "sha256:" + "cd" * 32
    cpu, rocm = f"r.example/engine-cpu@{digest}", f"r.example/engine-rocm@{digest}"
    mount = f"type=image,source=r.example/weights@{digest},destination=/w"
    doc = recipe_doc("boxed", platforms={"linux": {
        "cpu": {"command": "podman", "args": ["run", "--rm", "--mount", mount, cpu, "--port", "{port}"]},
        "rocm": {"command": "podman", "args": ["run", "--rm", rocm, "-m", "{checkpoint:main}"]}}})
    r = load_doc(doc)
    for host, device, want in ((ROCM, None, (rocm,)), (ROCM, "cpu", (f"r.example/weights@{digest}", cpu)),
                               (CPU, None, (f"r.example/weights@{digest}", cpu))):
        plan = build_launch_plan(r, model, host, device=device, port=9000)
        assert launch_images(r, model, host, device=device) == container_images(plan.argv[0], plan.argv[1:]) == want
    assert launch_images(r, model, ROCM, options={"device": "cpu"})[-1] == cpu  # the device option picks too
    assert launch_images(recipe(["--port", "{port}"]), model, CPU) == ()
    with pytest.raises(SelectionError):
        launch_images(r, model, HostFacts("windows"))
