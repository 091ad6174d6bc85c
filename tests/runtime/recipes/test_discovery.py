"""Discovery (RFC section 8): search path, trust, shadowing, built-in collision,
rejected list, extends through discovery, the stat cache and the watcher."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pytest

from lemonpack.runtime.recipes.discovery import (BACKENDS_PATH_ENV, SYSTEM_DIRS, Discovery,
                                         SearchDir, default_search_path, parse_search_path, search_path)

from support.recipes import recipe_doc, write_recipe
from support.tools import need_root

EXAMPLES = Path(__file__).resolve().parents[2] / "fixtures" / "lemonade-examples"
NOBODY = 65534
def needs_root(test):
    """The ownership cases chown to another uid: they fail (never skip) when not run as root."""
    import functools

    @functools.wraps(test)
    def wrapper(*args, **kwargs):
        need_root()
        return test(*args, **kwargs)
    return wrapper


@pytest.fixture
def dirs(tmp_path):
    """(user_dir, system_dir) and a Discovery over them, user first."""
    user, system = tmp_path / "user", tmp_path / "system"
    for d in (user, system):
        d.mkdir()
        os.chmod(d, 0o755)
    return user, system, Discovery([SearchDir(user, "user"), SearchDir(system, "system")])


# --- search path ---------------------------------------------------------------------


def test_parse_search_path_scopes():
    sep = os.pathsep
    got = parse_search_path(sep.join(["user", "/a", "system", "/b", "/c", "", "system:/d", "user:/e"]))
    assert [(str(s.path), s.scope) for s in got] == [
        ("/a", "user"), ("/b", "system"), ("/c", "user"), ("/d", "system"), ("/e", "user")]
    assert parse_search_path("") == ()


def test_env_replaces_search_path(tmp_path):
    env = {BACKENDS_PATH_ENV: f"system{os.pathsep}{tmp_path}"}
    assert search_path(env) == (SearchDir(tmp_path, "system"),)
    assert search_path({BACKENDS_PATH_ENV: ""}) == ()


def test_default_search_path_order(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("LEMONPACK_CONFIG_DIR", raising=False)
    monkeypatch.delenv("LEMONPACK_CACHE_DIR", raising=False)
    got = default_search_path()
    assert [(str(s.path), s.scope) for s in got] == [
        (f"{tmp_path}/cfg/lemonpack/backends", "user"),
        (f"{tmp_path}/cfg/lemonade/backends", "user"),
        (f"{tmp_path}/cache/lemonpack/backends", "user"),
        (f"{tmp_path}/cache/lemonade/backends", "user"),
    ] + [(d, "system") for d in SYSTEM_DIRS]
    assert "/usr/share/lemonade-server/backends" in SYSTEM_DIRS and "/etc/lemonade/backends" in SYSTEM_DIRS


def test_default_search_path_follows_lemonpack_dirs(monkeypatch, tmp_path):
    monkeypatch.setenv("LEMONPACK_CONFIG_DIR", str(tmp_path / "conf"))
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(tmp_path / "cachedir"))
    got = default_search_path()
    assert got[0] == SearchDir(tmp_path / "conf" / "backends", "user")
    assert got[2] == SearchDir(tmp_path / "cachedir" / "backends", "user")


# --- loading -------------------------------------------------------------------------


def test_reference_examples_all_load(tmp_path):
    d = tmp_path / "b"
    d.mkdir()
    os.chmod(d, 0o755)
    for f in EXAMPLES.glob("*.json"):
        shutil.copy(f, d / f.name)
        os.chmod(d / f.name, 0o644)
    result = Discovery([SearchDir(d, "user")]).scan()
    # Two reference examples run a container image that is not pinned by digest (a 62-digit
    # digest, a token in the image): lint/build reject them, and so does discovery.
    unpinned = {"dflash_rocm.json", "toolbox_arch_alias.json"}
    assert {(r.file.name, r.kind) for r in result.rejected} == {(n, "unpinned") for n in unpinned}
    assert all(p.rule == "digest-pinning" for r in result.rejected for p in r.problems)
    assert {r.recipe for r in result.rejected} == {"dflash-rocm", "toolbox-arch-alias"}
    assert set(result.recipes) == {json.loads(f.read_text())["recipe"] for f in EXAMPLES.glob("*.json")
                                   if f.name not in unpinned}
    nightly = result.recipes["llamacpp-rocm-nightly"]
    assert nightly.file == d / "llamacpp_rocm_nightly.json" and nightly.directory == d and nightly.scope == "user"
    assert nightly.kind == "variant_of:llamacpp"


def test_unpinned_container_image_is_rejected_and_does_not_block_a_lower_copy(dirs):
    user, system, d = dirs
    args = ["run", "--rm", "--name", "x", "-p", "{port}:8080", "docker.io/library/engine:latest", "serve"]
    bad = write_recipe(user / "tagged.json", recipe_doc("engine", platforms={"linux": {"cpu": {
        "command": "podman", "args": args}}}))
    pinned = "docker.io/library/engine@sha256:" + "ab" * 32
    good = write_recipe(system / "pinned.json", recipe_doc("engine", platforms={"linux": {"cpu": {
        "command": "podman", "args": [*args[:-2], pinned, "serve"]}}}))
    result = d.scan()
    assert result.recipes["engine"].file == good
    (r,) = result.rejected
    assert r.kind == "unpinned" and r.file == bad and r.recipe == "engine"
    assert "not pinned by digest" in r.reason and "[digest-pinning]" in r.reason
    assert [(p.rule, p.path) for p in r.problems] == [("digest-pinning", "platforms.linux.cpu.args[6]")]


def test_missing_directories_and_other_files_are_ignored(dirs, tmp_path):
    user, system, _ = dirs
    write_recipe(user / "a.json", recipe_doc("aaa"))
    write_recipe(user / "notes.txt", "hello")
    write_recipe(user / ".hidden.json", recipe_doc("hidden"))
    d = Discovery([SearchDir(tmp_path / "absent", "user"), SearchDir(user, "user")])
    result = d.scan()
    assert list(result.recipes) == ["aaa"] and result.rejected == ()


def test_higher_priority_shadows_lower_and_is_recorded(dirs):
    user, system, d = dirs
    hi = write_recipe(user / "mine.json", recipe_doc("engine", display_name="user copy"))
    lo = write_recipe(system / "engine.json", recipe_doc("engine", display_name="system copy"))
    write_recipe(system / "other.json", recipe_doc("other"))
    result = d.scan()
    assert result.recipes["engine"].recipe.display_name == "user copy"
    assert result.recipes["engine"].file == hi and result.recipes["engine"].priority == 0
    assert result.recipes["other"].scope == "system"
    (shadow,) = result.rejected
    assert shadow.kind == "shadowed" and shadow.file == lo and shadow.recipe == "engine"
    assert str(hi) in shadow.reason
    assert result.shadowed == (shadow,) and result.errors == ()


def test_builtin_collision_is_rejected_with_the_loader_rule(dirs):
    user, system, d = dirs
    p = write_recipe(user / "llama.json", recipe_doc("llamacpp"))
    result = d.scan()
    assert result.recipes == {}
    (r,) = result.rejected
    assert r.kind == "builtin-collision" and r.file == p and r.recipe == "llamacpp"
    assert "built-in" in r.reason and "[builtin-collision]" in r.reason
    assert [x.rule for x in r.problems] == ["builtin-collision"]


def test_builtin_collision_does_not_shadow_a_lower_copy_and_invalid_keeps_all_problems(dirs):
    user, system, d = dirs
    bad = recipe_doc("engine", bogus=1)
    bad["capabilities"] = ["telepathy"]
    p = write_recipe(user / "bad.json", bad)
    write_recipe(system / "engine.json", recipe_doc("engine"))
    write_recipe(user / "broken.json", "{not json")
    result = d.scan()
    assert result.recipes["engine"].scope == "system"  # a rejected descriptor never blocks a lower one
    by_file = {r.file.name: r for r in result.rejected}
    assert by_file["bad.json"].kind == "invalid" and by_file["bad.json"].recipe == "engine"
    assert {x.rule for x in by_file["bad.json"].problems} == {"unknown-field", "unknown-capability"}
    assert "more problem" in by_file["bad.json"].reason
    assert all(x.file == str(p) for x in by_file["bad.json"].problems)
    assert by_file["broken.json"].kind == "invalid" and by_file["broken.json"].problems[0].rule == "json-syntax"


def test_duplicate_ids_in_one_directory_are_ambiguous(dirs):
    user, system, d = dirs
    write_recipe(user / "a.json", recipe_doc("engine"))
    write_recipe(user / "b.json", recipe_doc("engine"))
    low = write_recipe(system / "c.json", recipe_doc("engine"))
    result = d.scan()
    assert "engine" not in result.recipes
    kinds = sorted((r.file.name, r.kind) for r in result.rejected)
    assert kinds == [("a.json", "duplicate"), ("b.json", "duplicate"), ("c.json", "shadowed")]
    assert "a.json, b.json" in result.rejected[0].reason
    assert next(r for r in result.rejected if r.file == low).reason.startswith("recipe 'engine' is shadowed by")


@needs_root
def test_untrusted_descriptors_are_rejected_with_reasons(dirs, tmp_path):
    user, system, d = dirs
    write_recipe(user / "writable.json", recipe_doc("writable"), mode=0o666)
    foreign = write_recipe(user / "foreign.json", recipe_doc("foreign"))
    os.chown(foreign, NOBODY, NOBODY)
    sysfile = write_recipe(system / "sysforeign.json", recipe_doc("sysforeign"))
    os.chown(sysfile, NOBODY, 0)
    target = write_recipe(tmp_path / "elsewhere" / "t.json", recipe_doc("linked"))
    (user / "link.json").symlink_to(target)
    write_recipe(system / "fine.json", recipe_doc("fine"))
    result = d.scan()
    assert list(result.recipes) == ["fine"]
    rules = {r.file.name: (r.kind, [p.rule for p in r.problems]) for r in result.rejected}
    assert rules == {
        "writable.json": ("untrusted", ["trust-writable-file"]),
        "foreign.json": ("untrusted", ["trust-owner"]),
        "sysforeign.json": ("untrusted", ["trust-owner"]),
        "link.json": ("untrusted", ["trust-symlink"]),
    }


def test_world_writable_ancestor_rejects_every_file_below(tmp_path):
    top = tmp_path / "open"
    inner = top / "backends"
    write_recipe(inner / "a.json", recipe_doc("aaa"))
    os.chmod(top, 0o777)
    result = Discovery([SearchDir(inner, "user")]).scan()
    assert result.recipes == {}
    assert [p.rule for p in result.rejected[0].problems] == ["trust-writable-ancestor"]
    os.chmod(top, 0o1777)  # sticky makes it acceptable
    assert list(Discovery([SearchDir(inner, "user")]).scan().recipes) == ["aaa"]


@needs_root
def test_user_scope_follows_given_euid(tmp_path):
    d = tmp_path / "b"
    p = write_recipe(d / "a.json", recipe_doc("aaa"))
    os.chown(p, NOBODY, NOBODY)
    assert list(Discovery([SearchDir(d, "user")], euid=NOBODY).scan().recipes) == ["aaa"]
    assert Discovery([SearchDir(d, "user")]).scan().recipes == {}


def test_extends_resolved_across_directories(dirs):
    user, system, d = dirs
    write_recipe(system / "base.json", recipe_doc("base", recipe_options={"ctx_size": 2048, "threads": 4},
                                          custom_options=[{"name": "vk_device", "cli_flag": "--vk-device",
                                                           "default_value": "0", "help": "device"}]))
    write_recipe(user / "child.json", recipe_doc("child", extends="base", recipe_options={"ctx_size": 8192}))
    write_recipe(user / "orphan.json", recipe_doc("orphan", extends="nothere"))
    result = d.scan()
    child = result.recipes["child"]
    assert dict(child.recipe.recipe_options) == {"ctx_size": 8192, "threads": 4}
    assert [c["name"] for c in child.recipe.custom_options] == ["vk_device"]
    assert child.extends_chain == ("base",)
    (r,) = result.rejected
    assert r.kind == "extends" and r.recipe == "orphan" and "nothere" in r.reason
    assert r.problems[0].rule == "extends-missing-base"


def test_rejections_are_logged_once(dirs, caplog):
    user, system, d = dirs
    write_recipe(user / "a.json", recipe_doc("llamacpp"))
    write_recipe(user / "e.json", recipe_doc("engine"))
    write_recipe(system / "e.json", recipe_doc("engine"))
    with caplog.at_level(logging.INFO, logger="lemonpack.runtime.recipes.discovery"):
        d.scan()
        d.scan()
        d.scan()
    records = [r for r in caplog.records if r.name == "lemonpack.runtime.recipes.discovery"]
    assert len(records) == 2
    levels = sorted((r.levelname, "shadowed" in r.getMessage()) for r in records)
    assert levels == [("INFO", True), ("WARNING", False)]
    assert "a.json" in records[0].getMessage() or "a.json" in records[1].getMessage()


def test_only_changed_files_are_reparsed(dirs):
    user, system, d = dirs
    a = write_recipe(user / "a.json", recipe_doc("aaa"))
    write_recipe(user / "b.json", recipe_doc("bbb"))
    first = d.scan()
    assert d.parse_count == 2
    assert d.scan() == first and d.parse_count == 2
    a.write_text(json.dumps(recipe_doc("aaa", display_name="changed name")))
    second = d.scan()
    assert d.parse_count == 3
    assert second.recipes["aaa"].recipe.display_name == "changed name"
    os.chmod(a, 0o664)  # a mode change is seen without re-parsing
    assert d.scan().recipes.keys() == {"bbb"} and d.parse_count == 3


def test_to_json_has_both_lists(dirs):
    user, system, d = dirs
    write_recipe(user / "a.json", recipe_doc("aaa"))
    write_recipe(user / "b.json", recipe_doc("whispercpp"))
    doc = json.loads(json.dumps(d.scan().to_json()))
    assert [r["recipe"] for r in doc["recipes"]] == ["aaa"]
    assert doc["rejected"][0]["kind"] == "builtin-collision"
    assert doc["rejected"][0]["problems"][0]["rule"] == "builtin-collision"


# --- watcher -------------------------------------------------------------------------


