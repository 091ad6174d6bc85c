"""extends (RFC section 6): merge, chains, cycles, missing and dropped bases."""

from __future__ import annotations

from pathlib import Path

from lemonpack.contract import load_recipe
from lemonpack.contract.extends import merge_custom_options, resolve_extends

from support.recipes import load_doc, recipe_doc

EXAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "lemonade-examples"


def opt(name: str, default="0", flag: str | None = None) -> dict:
    return {"name": name, "cli_flag": flag or f"--{name.replace('_', '-')}", "default_value": default,
            "help": f"{name} help"}


def recipe(rid: str, **fields):
    """A loaded passthrough recipe ``rid`` running ``/opt/<rid>``, as if read from ``/descriptors/``."""
    fields.setdefault("capabilities", ["completion"])
    return load_doc(recipe_doc(rid, command=f"/opt/{rid}", **fields), f"/descriptors/{rid}.json")


def by_id(*recipes):
    return {r.recipe: r for r in recipes}


def test_recipes_without_extends_pass_through_unchanged():
    a = recipe("aaa", recipe_options={"x": 1})
    res = resolve_extends(by_id(a))
    assert res.recipes["aaa"] is a and res.dropped == () and res.chains == {}


def test_child_wins_and_only_declarative_data_is_inherited():
    base = recipe("base", capabilities=["chat_completion", "completion", "embeddings"],
                  recipe_options={"ctx_size": 2048, "threads": 8},
                  custom_options=[opt("vk_device", "0"), opt("gpu_layers", 99)],
                  platforms={"linux": {"vulkan": {"command": "/opt/base", "args": []}},
                            "darwin": {"metal": {"command": "b", "args": []}}})
    child = recipe("child", extends="base", recipe_options={"ctx_size": 8192, "batch": 1},
                   custom_options=[opt("gpu_layers", 10, "--ngl"), opt("split", "none")])
    res = resolve_extends(by_id(base, child))
    got = res.recipes["child"]
    assert dict(got.recipe_options) == {"ctx_size": 8192, "threads": 8, "batch": 1}
    assert [(c["name"], c["default_value"], c["cli_flag"]) for c in got.custom_options] == [
        ("vk_device", "0", "--vk-device"), ("gpu_layers", 10, "--ngl"), ("split", "none", "--split")]
    # never inherited: capabilities and platform blocks (and the rest of execution)
    assert got.capabilities == ("completion",)
    assert set(got.platforms) == {"linux"} and set(got.platforms["linux"]) == {"cpu"}
    # the authored document is kept; identity fields stay the child's
    assert got.document == child.document and got.canonical == child.canonical
    assert got.recipe == "child" and got.extends == "base" and got.file == child.file
    assert res.recipes["base"] is base
    assert res.chains == {"child": ("base",)}


def test_chain_of_three_resolves_from_the_root():
    c = recipe("ccc", recipe_options={"a": "c", "b": "c", "c": "c"}, custom_options=[opt("o1", "c")])
    b = recipe("bbb", extends="ccc", recipe_options={"a": "b", "b": "b"}, custom_options=[opt("o2", "b")])
    a = recipe("aaa", extends="bbb", recipe_options={"a": "a"}, custom_options=[opt("o1", "a")])
    res = resolve_extends(by_id(a, b, c))
    assert dict(res.recipes["aaa"].recipe_options) == {"a": "a", "b": "b", "c": "c"}
    assert [(o["name"], o["default_value"]) for o in res.recipes["aaa"].custom_options] == [("o1", "a"), ("o2", "b")]
    assert res.chains == {"aaa": ("bbb", "ccc"), "bbb": ("ccc",)}
    # order of the input mapping does not matter
    assert resolve_extends({"ccc": c, "aaa": a, "bbb": b}) == res


def test_cycle_drops_every_member_and_names_the_cycle():
    a = recipe("aaa", extends="bbb")
    b = recipe("bbb", extends="ccc")
    c = recipe("ccc", extends="aaa")
    tail = recipe("ddd", extends="aaa")
    ok = recipe("eee")
    res = resolve_extends(by_id(a, b, c, tail, ok))
    assert list(res.recipes) == ["eee"]
    rules = {d.recipe: d.rule for d in res.dropped}
    assert rules == {"aaa": "extends-cycle", "bbb": "extends-cycle", "ccc": "extends-cycle",
                     "ddd": "extends-base-dropped"}
    for d in res.dropped[:3]:
        assert "aaa -> bbb -> ccc -> aaa" in d.reason
    assert res.dropped[3].file == "/descriptors/ddd.json" and "'aaa'" in res.dropped[3].reason


def test_two_cycle_found_from_a_child_outside_it():
    res = resolve_extends(by_id(recipe("aa1", extends="zz2"), recipe("zz1", extends="zz2"),
                                recipe("zz2", extends="zz1")))
    rules = {d.recipe: d.rule for d in res.dropped}
    assert rules == {"aa1": "extends-base-dropped", "zz1": "extends-cycle", "zz2": "extends-cycle"}
    assert "zz2 -> zz1 -> zz2" in next(d for d in res.dropped if d.recipe == "zz1").reason


def test_missing_base_drops_the_child_and_its_descendants():
    res = resolve_extends(by_id(recipe("child", extends="ghost"), recipe("grandchild", extends="child"),
                                recipe("other")))
    assert list(res.recipes) == ["other"]
    (child, grand) = res.dropped
    assert child.rule == "extends-missing-base" and "'ghost'" in child.reason and "not found" in child.reason
    assert grand.rule == "extends-base-dropped" and "'child'" in grand.reason


def test_builtin_base_is_unresolvable_with_a_clear_reason():
    res = resolve_extends(by_id(recipe("child", extends="llamacpp")))
    (d,) = res.dropped
    assert d.rule == "extends-missing-base" and "built-in" in d.reason


def test_merge_custom_options_keeps_base_order():
    base = (opt("a"), opt("b"), opt("c"))
    child = (opt("d"), opt("b", "new"))
    assert [(o["name"], o["default_value"]) for o in merge_custom_options(base, child)] == [
        ("a", "0"), ("b", "new"), ("c", "0"), ("d", "0")]


def test_real_example_as_base():
    base = load_recipe(EXAMPLES / "llamacpp_vulkan_custom.json")
    child = recipe("my-vulkan", extends=base.recipe, recipe_options={"vk_device": "1"})
    res = resolve_extends(by_id(base, child))
    assert dict(res.recipes["my-vulkan"].recipe_options) == {**base.recipe_options, "vk_device": "1"}
