"""Seed 002 section 8 as run_pipeline: discovery (dirs, env var, symlink dedupe), validation
keeping every reason, selection with dependencies, collisions, API version, include scan."""

from __future__ import annotations

import json

import pytest

from lemonpack.extensions.pipeline import ExtensionError, host_api, run_pipeline
from support.extensions import REPO, manifest, write_extension

LOCK = ["deepseek_v4_flash", "embedding_gemma2", "minimax_h3", "qwen", "qwen3_asr", "qwen3_tts",
        "qwen38_flash_next", "qwen_image_21"]
CPU = frozenset({"linux"})
HIP = frozenset({"linux", "hip"})
#: The repository's extension API revision (the number of change records).
REV = host_api(REPO)[1]
API = f"0.1.{REV}"


def names(sel):
    return [e.name for e in sel.extensions]


def test_lock_selection_in_lock_order_with_availability(tree):
    sel = run_pipeline(tree, features=CPU, environ={})
    assert names(sel) == LOCK and all(e.official for e in sel.extensions)
    assert sel.api_version == API and sel.rejected == ()
    status = {s.provider.id: (s.available, s.reason) for s in sel.providers}
    assert status["flash-next-q4"] == (False, "target gufo_qwen38_flash_next_hip not built: needs hip")
    assert status["qwen27-cpu"] == (True, None)
    assert status["minimax-h3"] == (False, "target gufo_minimax_h3_hip not built: needs hip")
    assert run_pipeline(tree, features=frozenset(), environ={}).providers[-1].reason == \
        "target gufo_qwen_image_21_hip not built: needs hip"
    none = {s.provider.id: s.reason for s in run_pipeline(tree, features=frozenset(), environ={}).providers}
    assert none["minimax-h3"] == "target gufo_minimax_h3_hip not built: needs hip, linux"
    assert all(s.available for s in run_pipeline(tree, features=HIP, environ={}).providers)


def test_select_all_takes_what_the_features_build(tree):
    assert names(run_pipeline(tree, select="all", features=CPU, environ={})) == ["embedding_gemma2", "qwen", "qwen3_tts"]
    assert names(run_pipeline(tree, select="all", features=HIP, environ={})) == LOCK


def test_explicit_list_is_closed_over_dependencies_in_registry_order(tree):
    sel = run_pipeline(tree, select=["qwen38_flash_next", "deepseek_v4_flash"], features=CPU, environ={})
    assert names(sel) == ["deepseek_v4_flash", "qwen", "qwen38_flash_next"]


def test_community_after_lock_by_name_and_directory_selection(tree, tmp_path):
    write_extension(tmp_path / "c" / "zeta", manifest("zeta"))
    write_extension(tmp_path / "c" / "alpha", manifest("alpha", dependencies=["qwen"]))
    sel = run_pipeline(tree, extra_dirs=[tmp_path / "c"], select="all", features=CPU, environ={})
    assert names(sel) == ["embedding_gemma2", "qwen", "qwen3_tts", "alpha", "zeta"]
    assert [e.official for e in sel.extensions][-2:] == [False, False]
    sel = run_pipeline(tree, select=[str(tmp_path / "c" / "alpha")], features=CPU, environ={})
    assert names(sel) == ["qwen", "alpha"]


def test_env_var_and_symlink_dedupe(tree, tmp_path):
    d = write_extension(tmp_path / "c" / "solo", manifest("solo"))
    (tmp_path / "link").symlink_to(tmp_path / "c")
    env = {"GUFO_EXTENSION_DIRS": f"{tmp_path / 'link'}::{d}"}
    sel = run_pipeline(tree, extra_dirs=[tmp_path / "c"], select="all", features=CPU, environ=env)
    assert names(sel).count("solo") == 1 and sel.rejected == ()  # reached three ways, counted once
    sel = run_pipeline(tree, select="all", features=CPU, environ={"GUFO_EXTENSION_DIRS": str(tmp_path / "link")})
    assert "solo" in names(sel)


def test_missing_extension_dir_is_an_error(tree, tmp_path):
    with pytest.raises(ExtensionError, match="does not exist"):
        run_pipeline(tree, extra_dirs=[tmp_path / "nope"], environ={})


def test_invalid_manifests_are_rejected_with_every_reason(tree, tmp_path):
    doc = manifest("bad")
    doc["colour"] = "red"
    doc["providers"][0]["keys"] = ["nokey"]
    write_extension(tmp_path / "c" / "bad", doc)
    sel = run_pipeline(tree, extra_dirs=[tmp_path / "c"], select="all", features=CPU, environ={})
    ((path, reasons),) = sel.rejected
    assert path == tmp_path / "c" / "bad" / "extension.json"
    assert any("colour" in r for r in reasons) and any("providers[0].keys[0]" in r for r in reasons)
    with pytest.raises(ExtensionError, match="rejected"):
        run_pipeline(tree, select=[str(tmp_path / "c" / "bad")], features=CPU, environ={})


@pytest.mark.parametrize("kind, why", [
    ("directory", "cannot read file"), ("fifo", "cannot read file"), ("dangling link", "cannot read file"),
    # a link leaving the directory is judged by its text, unread: the same reason on a copy
    # where it dangles (Nix's store) as on the user's tree (shared/cases 70)
    ("absolute link", "must stay inside its directory"), ("link out of the tree", "must stay inside its directory"),
])
def test_a_manifest_that_is_not_a_regular_file_is_rejected_not_skipped(tree, tmp_path, kind, why):
    import os

    d = tmp_path / "c" / "odd"
    d.mkdir(parents=True)
    m = d / "extension.json"
    (tmp_path / "outside.json").write_text(json.dumps(manifest("odd")))
    if kind == "directory":
        m.mkdir()
    elif kind == "fifo":
        os.mkfifo(m)
    elif kind == "dangling link":
        m.symlink_to("nowhere.json")
    elif kind == "absolute link":
        m.symlink_to(tmp_path / "outside.json")
    else:
        m.symlink_to("../../outside.json")
    sel = run_pipeline(tree, extra_dirs=[tmp_path / "c"], select="all", features=CPU, environ={})
    ((path, reasons),) = sel.rejected
    assert path == m and any(why in r for r in reasons), reasons
    with pytest.raises(ExtensionError) as e:  # selected by its directory, as Nix selects a path
        run_pipeline(tree, select=[str(d)], features=CPU, environ={})
    assert why in str(e.value) and "not an extension directory" not in str(e.value)


def test_missing_dependency_names_the_chain(tree, tmp_path):
    write_extension(tmp_path / "c" / "a", manifest("a", dependencies=["b"]))
    write_extension(tmp_path / "c" / "b", manifest("b", dependencies=["c"]))
    with pytest.raises(ExtensionError, match=r"missing dependency a -> b -> c: no extension named 'c'"):
        run_pipeline(tree, extra_dirs=[tmp_path / "c"], select=["a"], features=CPU, environ={})
    sel = run_pipeline(tree, extra_dirs=[tmp_path / "c"], select="all", features=CPU, environ={})
    assert "a" not in names(sel) and "b" not in names(sel)  # skipped in 'all', with the chain as reason
    assert any("b -> c" in r for _, rs in sel.rejected for r in rs)


def test_a_name_found_nowhere_points_at_manifests_whose_name_could_not_be_read(tree, tmp_path):
    # a variant of case 71: a manifest that is not JSON cannot say its name, so selecting that
    # name finds nothing; the message names the unreadable manifest and why
    write_extension(tmp_path / "c" / "dir-c", manifest("trunc"))
    bad = tmp_path / "c" / "dir-c" / "extension.json"
    bad.write_text(bad.read_text()[:60])
    with pytest.raises(ExtensionError) as e:
        run_pipeline(tree, extra_dirs=[tmp_path / "c"], select=["trunc"], features=CPU, environ={})
    assert "no extension named 'trunc'" in str(e.value) and f"{bad}: not valid JSON" in str(e.value)
    assert str(e.value).count(str(bad)) == 1


def test_cyclic_dependency_names_the_chain(tree, tmp_path):
    write_extension(tmp_path / "c" / "a", manifest("a", dependencies=["b"]))
    write_extension(tmp_path / "c" / "b", manifest("b", dependencies=["a"]))
    with pytest.raises(ExtensionError, match=r"dependency cycle: a -> b -> a"):
        run_pipeline(tree, extra_dirs=[tmp_path / "c"], select=["a"], features=CPU, environ={})


def test_unknown_name_and_stale_lock(tree, tmp_path):
    with pytest.raises(ExtensionError, match="no extension named 'nope'"):
        run_pipeline(tree, select=["nope"], features=CPU, environ={})
    lock = json.loads((tree / "extensions.lock").read_text())
    lock["extensions"].append("gone_model")
    (tree / "extensions.lock").write_text(json.dumps(lock))
    for mode in ("lock", "all"):
        with pytest.raises(ExtensionError, match=r"extensions\[8\]: 'gone_model' names no extension"):
            run_pipeline(tree, select=mode, features=CPU, environ={})


@pytest.mark.parametrize("what,change", [
    ("key 'gguf:qwen4exp'", dict(keys=["gguf:qwen4exp"])),
    ("provider id 'flash-next-q4'", dict(provider="flash-next-q4")),
    ("option '--mtp-model'", dict(options=[{"name": "--mtp-model", "commands": ["serve"], "type": "path", "help": "h"}])),
    ("value of --speculative 'dspark'", dict(options=[{"name": "--speculative", "commands": ["serve"], "type": "choice",
                                                       "help": "h", "values": ["dspark"], "contributes_to": "--speculative"}])),
])
def test_community_claiming_an_official_claim_is_rejected_naming_both(tree, tmp_path, what, change):
    d = write_extension(tmp_path / "c" / "gsq", manifest("flash_next_gsq", **change))
    sel = run_pipeline(tree, extra_dirs=[tmp_path / "c"], select="all", features=HIP, environ={})
    assert "flash_next_gsq" not in names(sel)
    ((path, reasons),) = sel.rejected
    owner = "qwen38_flash_next" if "spec" not in what else "deepseek_v4_flash"
    message = (f"community extension flash_next_gsq ({d / 'extension.json'}) claims {what}, which official "
               f"extension {owner} ({tree / 'catalogue/extensions' / owner / 'extension.json'}) owns")
    assert message in reasons
    with pytest.raises(ExtensionError, match="claims"):
        run_pipeline(tree, select=[str(d)], features=HIP, environ={})


def test_community_reusing_an_official_name_is_rejected(tree, tmp_path):
    write_extension(tmp_path / "c" / "qwen", manifest("qwen", keys=["gguf:qwenx"], provider="qwenx"))
    sel = run_pipeline(tree, extra_dirs=[tmp_path / "c"], features=CPU, environ={})
    assert names(sel) == LOCK and "claims extension name 'qwen'" in sel.rejected[0][1][0]


def test_community_extensions_may_share_keys(tree, tmp_path):
    write_extension(tmp_path / "c" / "one", manifest("one", keys=["gguf:shared"]))
    write_extension(tmp_path / "c" / "two", manifest("two", keys=["gguf:shared"]))
    sel = run_pipeline(tree, extra_dirs=[tmp_path / "c"], select=["one", "two"], features=CPU, environ={})
    assert names(sel) == ["one", "two"] and sel.rejected == ()
    # official-official: qwen27-q4 and qwen27-cpu already share gguf:qwen27 in the lock


@pytest.mark.parametrize("constraint,message", [
    (">= 0.2.0", f"needs extension API >= 0.2.0 but the host API is {API}: the minor numbers differ"),
    (f">= 0.1.{REV + 5}", f"needs extension API >= 0.1.{REV + 5} but the host API is {API}: revision {REV + 5} "
                          f"is newer than the host's {REV}"),
])
def test_api_version_mismatch_names_both_versions(tree, tmp_path, constraint, message):
    d = write_extension(tmp_path / "c" / "newer", manifest("newer", api_version=constraint))
    sel = run_pipeline(tree, extra_dirs=[tmp_path / "c"], select="all", features=CPU, environ={})
    assert any(message in r for r in sel.rejected[0][1])
    with pytest.raises(ExtensionError, match=f"the host API is {API}"):
        run_pipeline(tree, select=[str(d)], features=CPU, environ={})


def test_api_revision_counts_change_records(tree, tmp_path):
    for i in range(REV + 1, REV + 7):
        (tree / "api/changes" / f"{i:04d}-more.md").write_text(f"record {i}\n")
    write_extension(tmp_path / "c" / "newer", manifest("newer", api_version=f">= 0.1.{REV + 6}"))
    sel = run_pipeline(tree, extra_dirs=[tmp_path / "c"], select="all", features=CPU, environ={})
    assert sel.api_version == f"0.1.{REV + 6}" and "newer" in names(sel)


def test_include_allowlist_names_file_and_line(tree, tmp_path):
    d = write_extension(tmp_path / "c" / "leaky", manifest("leaky"),
                        extra_source='#include <vector>\n#include "own.hpp"\n#include "server/http.hpp"\n'
                                     '#  include <boost/asio.hpp>\n#include "gufo/ext/../../server.hpp"\n')
    (d / "own.hpp").write_text("#pragma once\n#include <cstdint>\n")
    sel = run_pipeline(tree, extra_dirs=[tmp_path / "c"], select="all", features=CPU, environ={})
    reasons = sel.rejected[0][1]
    src = d / "extension.cpp"
    assert [r.split(": #include")[0] for r in reasons] == [f"{src}:5", f"{src}:6", f"{src}:7"]
    assert '#include "server/http.hpp" is not allowed' in reasons[0]


def test_official_sources_are_not_scanned(tree):
    sel = run_pipeline(tree, features=CPU, environ={})
    assert sel.rejected == ()  # official stubs include the generated header: allowed anyway
