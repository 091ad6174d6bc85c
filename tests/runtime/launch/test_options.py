"""The one merge of launch options (runtime/launch/options.py): precedence, extends, token values."""

from __future__ import annotations


import pytest

from lemonpack.contract.extends import resolve_extends
from lemonpack.errors import TokenError
from lemonpack.runtime.launch.options import MemoryOptions, custom_option_defaults, launch_options, memory_options
from support.recipes import load_doc, recipe_doc


def _opt(name, default):
    return {"name": name, "cli_flag": "--" + name.replace("_", "-"), "default_value": default, "help": name}


def _recipe(rid="opts", **top):
    return load_doc(recipe_doc(rid, display_name=rid, command="/bin/true", args=["-c", "{ctx_size}"], **top),
                    f"{rid}.json")


def test_precedence_custom_defaults_then_recipe_then_model_then_load():
    r = _recipe(custom_options=[_opt("ctx_size", 8192), _opt("threads", 4), _opt("flash", True)],
                recipe_options={"threads": 8, "temp": 0.5})
    assert dict(launch_options(r)) == {"ctx_size": 8192, "threads": 8, "flash": True, "temp": 0.5}
    got = launch_options(r, {"ctx_size": 2048, "seed": 1}, {"ctx_size": 1024, "flash": False})
    assert dict(got) == {"ctx_size": 1024, "threads": 8, "flash": False, "temp": 0.5, "seed": 1}
    with pytest.raises(TypeError):
        got["x"] = 1  # type: ignore[index]  (read-only)
    assert dict(launch_options(None, {"a": 1}, {"b": 2})) == {"a": 1, "b": 2}  # no recipe discovered
    assert dict(custom_option_defaults(r)) == {"ctx_size": 8192, "threads": 4, "flash": True}


def test_a_null_in_a_higher_layer_is_kept_and_the_token_takes_its_default():
    r = _recipe(custom_options=[_opt("ctx_size", 8192)])
    merged = launch_options(r, {"ctx_size": None})
    assert merged["ctx_size"] is None
    assert memory_options(merged) == MemoryOptions(4096, "f16", "f16")  # the launch's {ctx_size} default


def test_extends_inherited_options_take_part():
    """RFC section 6: a child inherits its base's recipe_options and custom_options (child wins);
    the merge sees them through the resolved recipe."""
    base = _recipe("base", custom_options=[_opt("ctx_size", 16384), _opt("cache_type_k", "q8_0")],
                   recipe_options={"cache_type_v": "q8_0"})
    child = _recipe("child", extends="base", custom_options=[_opt("cache_type_k", "q4_0")])
    resolved = resolve_extends({"base": base, "child": child}).recipes["child"]
    assert memory_options(launch_options(resolved)) == MemoryOptions(16384, "q4_0", "q8_0")


@pytest.mark.parametrize("value, ok", [(8192, True), ("8192", True), ("-1", True), ("8k", False), (True, False),
                                       ([1], False), (1.5, False)])
def test_memory_options_apply_the_launch_token_rule(value, ok):
    if ok:
        assert memory_options({"ctx_size": value}).ctx_size == int(value)
    else:
        with pytest.raises(TokenError, match="ctx_size"):
            memory_options({"ctx_size": value})


def test_launch_plan_reads_the_same_merge(tmp_path):
    from lemonpack.contract.host import HostFacts
    from lemonpack.runtime.launch.build import build_launch_plan
    from lemonpack.runtime.launch.modelfiles import ModelSpec

    r = _recipe(custom_options=[_opt("ctx_size", 8192)])
    model = ModelSpec(name="m", checkpoints={"main": str(tmp_path / "m.gguf")})
    host = HostFacts(os="linux")
    plan = build_launch_plan(r, model, host, port=1, check_files=False)
    assert plan.argv[-2:] == ("-c", "8192")
    assert memory_options(launch_options(r, model.recipe_options)).ctx_size == 8192
    plan = build_launch_plan(r, model, host, port=1, check_files=False, options={"ctx_size": 512})
    assert plan.argv[-1] == "512"
