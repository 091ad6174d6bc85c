"""flake.nix and nix/lib.nix with the real nix (Nix 2.8, no nixpkgs): `nix build .#gufo`, an
override from a consumer flake, evaluation failures (collision, stale lock, API version,
dependencies), `nix flake check`, per-recipe fixed-output fetches."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lemonpack.extensions.pipeline import ExtensionError, run_pipeline
from support.nixflake import (REPO, SYSTEM, consumer_flake, copy_flake, nix, write_api, write_extension,
                              write_lock)
from support.tools import need

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("nix_installed")]

GEN = ("extensions.json", "gufo_ext_registry.cpp", "gufo_ext_constants.hpp")


def cli_generate(tree: Path, out: Path, select=None, features=("linux",), extra_dirs=()) -> subprocess.CompletedProcess:
    """`lemonpack extensions generate` (this tree's CLI) into ``out``."""
    argv = [sys.executable, "-m", "lemonpack.cli", "extensions", "generate", "--tree", str(tree), "--out", str(out)]
    argv += [a for f in features for a in ("--feature", f)]
    argv += [a for d in extra_dirs for a in ("--extension-dir", str(d))]
    if select is not None:
        argv += [a for i in ([select] if isinstance(select, str) else select) for a in ("--select", str(i))]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "1000"})


def fixture_tree(root: Path) -> Path:
    """This repo's flake over a small tree: official ``beta`` and ``alpha`` (alpha depends on
    beta; one provider needing hip, one always built), lock ``[beta, alpha]``, API 0.1.3."""
    copy_flake(root)
    write_api(root, minor=1, revision=3)
    ext = root / "catalogue" / "extensions"
    write_extension(ext / "alpha", "alpha", api=">= 0.1.2", dependencies=["beta"],
                    providers=[{"id": "alpha-q4", "keys": ["gguf:alpha"], "target": "gufo_alpha_hip"},
                               {"id": "alpha.cpu", "keys": ["gguf:alpha", "gguf:alpha2"], "target": "gufo_alpha"}],
                    options=[{"name": "--alpha-mode", "commands": ["serve", "chat"], "type": "choice",
                              "help": 'say "hi" \\ there', "values": ["fast", "slow"]}],
                    targets=[{"name": "gufo_alpha_hip", "requires": ["linux", "hip"]},
                             {"name": "gufo_alpha", "requires": []}],
                    sources={"extension.cpp": "void alpha_register() {}\n", "src/provider.cpp": "// p\n"})
    write_extension(ext / "beta", "beta")
    write_lock(root, ["beta", "alpha"])
    return root


def community(directory: Path, name: str = "gamma", key: str = "gguf:gamma", api: str = ">= 0.1.3", **kw) -> Path:
    return write_extension(directory, name, api=api,
                           providers=[{"id": f"{name}-tts", "keys": [key], "target": f"gufo_{name}",
                                       "capability": "speech_synthesis"}],
                           targets=[{"name": f"gufo_{name}", "requires": ["linux"]}], **kw)


def built(cwd: Path) -> Path:
    """The ``share/gufo`` directory of the ``result`` link nix build left in ``cwd``."""
    return Path(os.readlink(cwd / "result")) / "share" / "gufo"


def eval_error(tree: Path, expr: str) -> str:
    """Evaluate ``EXPR`` (with ``flake`` bound to the flake at ``tree``); the evaluation must
    fail: returns stderr."""
    out = nix("eval", "--impure", "--raw", "--expr",
              f'let flake = builtins.getFlake "path:{tree}"; in {expr}')
    assert out.returncode != 0, out.stdout
    return out.stderr


def test_build_gufo_from_lock(tmp_path):
    tree = fixture_tree(tmp_path / "repo")
    out = nix("build", f"path:{tree}#gufo", cwd=tree)
    assert out.returncode == 0, out.stderr
    assert out.seconds < 30
    share = built(tree)
    assert sorted(p.relative_to(share).as_posix() for p in share.rglob("*") if p.is_file()) == [
        "extensions.json", "extensions.lock", "extensions/alpha/extension.cpp", "extensions/alpha/extension.json",
        "extensions/alpha/src/provider.cpp", "extensions/beta/extension.cpp", "extensions/beta/extension.json",
        "gufo_ext_constants.hpp", "gufo_ext_registry.cpp"]
    for rel in ("alpha/extension.json", "alpha/src/provider.cpp", "beta/extension.cpp"):
        assert (share / "extensions" / rel).read_bytes() == (tree / "catalogue/extensions" / rel).read_bytes()
    assert (share / "extensions.lock").read_bytes() == (tree / "extensions.lock").read_bytes()
    doc = json.loads((share / "extensions.json").read_bytes())
    assert doc["api_version"] == "0.1.3" and doc["features"] == ["linux"]
    assert [(e["name"], e["official"]) for e in doc["extensions"]] == [("beta", True), ("alpha", True)]
    assert [(p["id"], p["available"], p["reason"]) for p in doc["extensions"][1]["providers"]] == [
        ("alpha-q4", False, "target gufo_alpha_hip not built: needs hip"), ("alpha.cpu", True, None)]
    assert doc["extensions"][1]["options"][0]["help"] == 'say "hi" \\ there'
    registry = (share / "gufo_ext_registry.cpp").read_text()
    assert registry.endswith(
        "void gufo_ext_register_all(gufo::ext::Registry &registry) {\n"
        '  registry.set_extension("beta");\n  beta_register(registry);\n'
        '  registry.set_extension("alpha");\n  alpha_register(registry);\n'
        '  registry.set_extension("alpha");\n'
        '  registry.unavailable("alpha", "alpha-q4", "text_generation", {"gguf:alpha"}, '
        '"target gufo_alpha_hip not built: needs hip");\n'
        "  alpha_alpha_cpu_register(registry);\n}\n")
    header = (share / "gufo_ext_constants.hpp").read_text()
    assert 'inline constexpr const char *provider_alpha_cpu_keys[] = {"gguf:alpha", "gguf:alpha2"};\n' in header
    assert 'inline constexpr const char *option_alpha_mode_values[] = {"fast", "slow"};\n' in header


def test_consumer_flake_overrides_with_community_extension(tmp_path):
    tree = fixture_tree(tmp_path / "repo")
    app = tmp_path / "app"
    community(app / "community" / "gamma")
    consumer_flake(app, tree, '{ extensions = [ "alpha" ./community/gamma ]; features = [ "linux" "hip" ]; }')
    out = nix("build", f"path:{app}", cwd=app)
    assert out.returncode == 0, out.stderr
    assert out.seconds < 30
    share = built(app)
    doc = json.loads((share / "extensions.json").read_bytes())
    # dependencies close the selection (beta); lock order first, then community by name
    assert [(e["name"], e["official"]) for e in doc["extensions"]] == [
        ("beta", True), ("alpha", True), ("gamma", False)]
    assert doc["features"] == ["hip", "linux"]
    assert all(p["available"] for e in doc["extensions"] for p in e["providers"])
    assert (share / "extensions/gamma/extension.json").read_bytes() == (
        app / "community/gamma/extension.json").read_bytes()
    assert "// Extension API 0.1.3; features: hip linux\n" in (share / "gufo_ext_registry.cpp").read_text()


def test_community_collision_fails_evaluation(tmp_path):
    tree = fixture_tree(tmp_path / "repo")
    app = tmp_path / "app"
    community(app / "community" / "gamma", key="gguf:alpha2")
    consumer_flake(app, tree, '{ extensions = [ ./community/gamma ]; }')
    out = nix("build", f"path:{app}", cwd=app)
    assert out.returncode == 1
    assert re.search(r"error: selected extension /nix/store/[a-z0-9]{32}-source/community/gamma/extension.json was "
                     r"rejected:\n {9}community extension gamma \(/nix/store/\S+/community/gamma/extension.json\) "
                     r"claims key 'gguf:alpha2', which official extension alpha "
                     r"\(/nix/store/\S+/catalogue/extensions/alpha/extension.json\) owns\n", out.stderr), out.stderr
    assert not (app / "result").exists()


def test_two_community_extensions_may_share_a_key(tmp_path):
    tree = fixture_tree(tmp_path / "repo")
    a, b = community(tmp_path / "c" / "gamma"), community(tmp_path / "c" / "delta", name="delta")
    out = nix("eval", "--impure", "--json", "--expr",
              f'let flake = builtins.getFlake "path:{tree}"; in '
              f'map (m: m.name) (flake.packages.{SYSTEM}.gufo.override {{ extensions = [ {a} {b} ]; }}).selection.extensions')
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["delta", "gamma"]


def _nix_list(items) -> str:
    return "[ " + " ".join(str(i) if isinstance(i, Path) else json.dumps(i) for i in items) + " ]"


def same_failure(tree: Path, select, features=("linux",), extra_dirs=()) -> str:
    """Evaluate the gufo package of ``tree`` (read in place, not copied to the store, so paths
    in messages are the same) and run the Python pipeline on it: both must fail, Nix's error
    being the CLI's message. Returns the message."""
    with pytest.raises(ExtensionError) as e:
        run_pipeline(tree, extra_dirs=[Path(d) for d in extra_dirs],
                     select="lock" if select is None else [str(i) for i in select], features=frozenset(features))
    message = str(e.value)
    args = (f"root = {tree}; system = \"{SYSTEM}\"; features = {_nix_list(features)}; "
            f"extensionDirs = {_nix_list(extra_dirs)}; "
            + ("" if select is None else f"extensions = {_nix_list(select)};"))
    out = nix("eval", "--impure", "--raw", "--expr",
              f'(builtins.getFlake "path:{tree}").lib.mkGufo {{ {args} }}')
    assert out.returncode == 1, out.stdout
    shown = out.stderr.replace("\n       ", "\n")  # nix indents the lines of a multi-line error by 7
    assert f"error: {message}\n" in shown, f"python: {message}\nnix: {out.stderr}"
    return message


def test_collision_messages_equal_the_cli(tmp_path):
    tree = fixture_tree(tmp_path / "repo")
    gamma = community(tmp_path / "c" / "gamma", key="gguf:alpha2",
                      options=[{"name": "--alpha-mode", "commands": ["serve"], "type": "string", "help": "h"}])
    msg = same_failure(tree, [gamma])
    assert "claims key 'gguf:alpha2', which official extension alpha" in msg
    assert "claims option '--alpha-mode'" in msg
    named = community(tmp_path / "d" / "alpha", name="alpha", key="gguf:other")
    msg = same_failure(tree, [named])
    assert "claims extension name 'alpha'" in msg


def test_stale_lock_name_fails_evaluation(tmp_path):
    tree = fixture_tree(tmp_path / "repo")
    write_lock(tree, ["beta", "alpha", "gone"])
    msg = same_failure(tree, None)
    assert msg.endswith("extensions.lock: extensions[2]: 'gone' names no extension in "
                        f"{tree}/catalogue/extensions")
    cli = cli_generate(tree, tmp_path / "gen")
    assert cli.returncode == 1 and cli.stderr == f"error: {msg}\n"
    same_failure(tree, ["beta"])  # the lock is validated in every mode
    err = eval_error(tree, f"flake.packages.{SYSTEM}.gufo.drvPath")  # the flake's own package, from the store
    assert "extensions.lock: extensions[2]: 'gone' names no extension in /nix/store/" in err


def test_api_version_mismatch_fails_evaluation(tmp_path):
    tree = fixture_tree(tmp_path / "repo")
    newer = community(tmp_path / "c" / "gamma", api=">= 0.1.4")
    assert "needs extension API >= 0.1.4 but the host API is 0.1.3: revision 4 is newer" in same_failure(tree, [newer])
    other = community(tmp_path / "d" / "gamma", api=">= 0.2.0")
    assert "the minor numbers differ (2 != 1)" in same_failure(tree, [other])
    (tree / "api" / "changes" / "0003-change-3.md").unlink()  # official alpha needs 0.1.2: fine; then 0.1.1
    (tree / "api" / "changes" / "0002-change-2.md").unlink()
    assert "cannot select alpha: extension 'alpha' was rejected" in same_failure(tree, None)


def test_missing_and_cyclic_dependencies_name_the_chain(tmp_path):
    tree = fixture_tree(tmp_path / "repo")
    a = community(tmp_path / "c" / "gamma", dependencies=["alpha", "nowhere"])
    assert "cannot select gamma: missing dependency gamma -> nowhere: no extension named 'nowhere'" in (
        same_failure(tree, [a]))
    x = community(tmp_path / "d" / "xx", name="xx", key="gguf:xx", dependencies=["yy"])
    y = community(tmp_path / "d" / "yy", name="yy", key="gguf:yy", dependencies=["xx"])
    assert "dependency cycle: xx -> yy -> xx" in same_failure(tree, [x, y])
    assert same_failure(tree, ["nothing"]) == "cannot select nothing: no extension named 'nothing'"


def test_flake_check(tmp_path):
    """`nix flake check` on this repository's flake (lock, api/, catalogue/ copied) passes;
    with a stale lock name it fails naming it."""
    tree = copy_flake(tmp_path / "repo", with_repo_tree=True)
    out = nix("flake", "check", f"path:{tree}", cwd=tree)
    assert out.returncode == 0, out.stderr
    assert out.seconds < 30
    names = json.loads((tree / "extensions.lock").read_text())["extensions"]
    write_lock(tree, names + ["gone"])
    bad = nix("flake", "check", f"path:{tree}", cwd=tree)
    assert bad.returncode == 1 and f"extensions[{len(names)}]: 'gone' names no extension in" in bad.stderr


def test_recipe_packages_are_what_lemonpack_build_emits(tmp_path):
    """nix/recipes/hello-engine is byte for byte what `lemonpack build --example` writes, and
    the flake's fixed-output fetch realises to the example artifact (added to the store first:
    its origin, example.invalid, does not resolve)."""
    need("nix-store")
    out = subprocess.run([sys.executable, "-m", "lemonpack.cli", "build", "--example", "--out", str(tmp_path / "oci")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for name in ("sources.json", "default.nix"):
        assert (tmp_path / "oci/nix/hello-engine" / name).read_bytes() == (
            REPO / "nix/recipes/hello-engine" / name).read_bytes(), f"nix/recipes/hello-engine/{name} is stale"
    from lemonpack.examples import EXAMPLE_ARCHIVE
    add = subprocess.run([need("nix-store"), "--add-fixed", "sha256", str(EXAMPLE_ARCHIVE)],
                         capture_output=True, text=True, timeout=60)
    assert add.returncode == 0, add.stderr
    tree = fixture_tree(tmp_path / "repo")
    res = nix("build", f"path:{tree}#hello-engine-linux-cpu", cwd=tree)
    assert res.returncode == 0, res.stderr
    assert Path(os.readlink(tree / "result")) == Path(add.stdout.strip())
    assert Path(os.readlink(tree / "result")).read_bytes() == EXAMPLE_ARCHIVE.read_bytes()


def test_release_package_is_byte_identical_to_the_python_generator(tmp_path):
    """`nix build .#gufo` of this repository (flake, lock, api/, catalogue/ copied) holds the
    three files `lemonpack extensions generate` writes for the lock and features [linux]."""
    tree = copy_flake(tmp_path / "repo", with_repo_tree=True)
    out = nix("build", f"path:{tree}#gufo", cwd=tree)
    assert out.returncode == 0, out.stderr
    assert out.seconds < 30
    share = built(tree)
    gen = cli_generate(tree, tmp_path / "gen")
    assert gen.returncode == 0, gen.stderr
    assert sorted(p.name for p in (tmp_path / "gen").iterdir()) == sorted(GEN)
    for name in GEN:
        assert (share / name).read_bytes() == (tmp_path / "gen" / name).read_bytes(), name
    lock = json.loads((tree / "extensions.lock").read_text())["extensions"]
    assert sorted(p.name for p in (share / "extensions").iterdir()) == sorted(lock)
    for name in lock:
        for f in (tree / "catalogue/extensions" / name).rglob("*"):
            if f.is_file():
                rel = f.relative_to(tree / "catalogue/extensions")
                assert (share / "extensions" / rel).read_bytes() == f.read_bytes(), rel


@pytest.mark.parametrize("select, features", [
    (["qwen", "COMMUNITY"], ("linux", "hip")),
    (["COMMUNITY", "deepseek_v4_flash", "qwen38_flash_next"], ("linux", "testing")),
    ("all", ("linux", "hip", "testing")),
    (None, ("windows",)),
])
def test_overrides_are_byte_identical_to_the_python_generator(tmp_path, select, features):
    """Overrides (names, a community directory, `all`, other features) generate what the
    Python generator writes for the same selection and features."""
    tree = copy_flake(tmp_path / "repo", with_repo_tree=True)
    comm = community(tmp_path / "community" / "gamma", api=">= 0.1.0",
                     options=[{"name": "--gamma-voice", "commands": ["serve", "chat"], "type": "choice",
                               "help": "voice \"name\"", "values": ["a-b", "c.d"]}])
    items = None if select is None else select if isinstance(select, str) else [
        comm if s == "COMMUNITY" else s for s in select]
    extra = [tmp_path / "community"] if select == "all" else []
    gen = cli_generate(tree, tmp_path / "gen", items, features, extra)
    assert gen.returncode == 0, gen.stderr
    expected = {name: (tmp_path / "gen" / name).read_bytes() for name in GEN}
    nix_ext = "" if items is None else (
        f'extensions = "{items}";' if isinstance(items, str) else f"extensions = {_nix_list(items)};")
    args = f'system = "{SYSTEM}"; features = {_nix_list(features)}; extensionDirs = {_nix_list(extra)}; {nix_ext}'
    app = tmp_path / "app"
    app.mkdir()
    out = nix("build", "--impure", "--expr",
              f'(builtins.getFlake "path:{tree}").packages.{SYSTEM}.gufo.override {{ {args} }}', cwd=app)
    assert out.returncode == 0, out.stderr
    share = built(app)
    for name in GEN:
        assert (share / name).read_bytes() == expected[name], name
    doc = json.loads(expected["extensions.json"])
    if select is not None and select != "all":
        assert ("gamma" in [e["name"] for e in doc["extensions"]]) == ("COMMUNITY" in select)


def test_readme_override_snippet_builds(tmp_path):
    """The README's Nix section: its `gufo.override` lines, pasted into a consumer flake
    with a community extension at ./path/to/community-extension, build that selection."""
    readme = (REPO / "README.md").read_text()
    section = re.search(r"^## Nix\n(.*?)(?=^## )", readme, re.S | re.M).group(1)
    snippet = re.search(r"^```nix\n(.*?)^```", section, re.S | re.M).group(1).replace("x86_64-linux", SYSTEM)
    tree = copy_flake(tmp_path / "repo", with_repo_tree=True)
    app = tmp_path / "app"
    community(app / "path/to/community-extension", name="fish_drama3", key="gguf:fishdrama3", api=">= 0.1.0")
    app.joinpath("flake.nix").write_text(
        f'{{\n  inputs.lemonpack.url = "path:{tree}";\n  outputs = {{ self, lemonpack }}: {{\n{snippet}  }};\n}}\n')
    out = nix("build", f"path:{app}", cwd=app)
    assert out.returncode == 0, out.stderr
    doc = json.loads((built(app) / "extensions.json").read_bytes())
    assert [(e["name"], e["official"]) for e in doc["extensions"]] == [("qwen", True), ("fish_drama3", False)]
    assert doc["features"] == ["hip", "linux"]


def test_include_allowlist_rejects_like_the_cli(tmp_path):
    """A community extension including a private or outside header is rejected at evaluation
    with the CLI's reasons (file:line); allowed includes pass; the Nix header lists equal
    the Python ones."""
    tree = fixture_tree(tmp_path / "repo")
    good = {"extension.cpp": '#include "gufo/ext/registry.hpp"\n#include <vector>\n#include "own.hpp"\n'
                             '  #  include <gufo_ext_constants.hpp>\n',
            "own.hpp": "#pragma once\n#include <cstdint>\n", "sub/deep.cpp": '#include "../own.hpp"\n'}
    ok = community(tmp_path / "c" / "gamma", sources=good)
    out = nix("eval", "--impure", "--json", "--expr",
              f'map (m: m.name) ((builtins.getFlake "path:{tree}").lib.mkGufo {{ root = {tree}; '
              f'system = "{SYSTEM}"; extensions = [ {ok} ]; }}).selection.extensions')
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["gamma"]
    bad = {"extension.cpp": '#include <vector>\n\n#include "core/runner.hpp"\n',
           "src/a.cpp": '#include "../../escape.hpp"\n#include <gufo/ext/../../core.hpp>\n',
           "b.cu": "#include <cuda_runtime.h>\n", "notes.txt": '#include "ignored.hpp"\n'}
    rejected = community(tmp_path / "d" / "gamma", sources=bad)
    (tmp_path / "escape.hpp").write_text("\n")
    msg = same_failure(tree, [rejected])
    assert f"{rejected}/extension.cpp:3: #include \"core/runner.hpp\" is not allowed" in msg
    assert f"{rejected}/b.cu:1: #include <cuda_runtime.h> is not allowed" in msg
    assert msg.count("is not allowed") == 4
    lists = nix("eval", "--impure", "--json", "--expr",
                f"let l = import {REPO}/nix/lib.nix; in {{ inherit (l) sourceSuffixes standardHeaders generatedHeaders; }}")
    assert lists.returncode == 0, lists.stderr
    from lemonpack.extensions import pipeline
    got = json.loads(lists.stdout)
    assert tuple(got["sourceSuffixes"]) == pipeline.SOURCE_SUFFIXES
    assert set(got["standardHeaders"]) == pipeline.STANDARD_HEADERS
    assert set(got["generatedHeaders"]) == pipeline.GENERATED_HEADERS


def test_overlay_uses_the_given_pkgs(tmp_path):
    """overlays.default: `gufo` is the flake's package (same derivation) for the overlay's
    system, and recipe fetches go through the overlay's pkgs.fetchurl."""
    tree = fixture_tree(tmp_path / "repo")
    expr = (f'let flake = builtins.getFlake "path:{tree}"; '
            f'final = {{ stdenv.hostPlatform.system = "{SYSTEM}"; fetchurl = args: {{ fetched = args; }}; }}; '
            f'o = flake.overlays.default final {{ }}; in '
            f'{{ same = o.gufo.drvPath == flake.packages.{SYSTEM}.gufo.drvPath; '
            f'fetch = o.lemonpackRecipes.hello-engine.linux-cpu.fetched; }}')
    out = nix("eval", "--impure", "--json", "--expr", expr)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    sources = json.loads((REPO / "nix/recipes/hello-engine/sources.json").read_text())["sources"]["linux-cpu"]
    assert got == {"same": True, "fetch": {"url": sources["url"], "hash": sources["hash"],
                                           "name": sources["storeName"]}}


def test_unknown_feature_fails_evaluation_with_the_cli_message(tmp_path):
    from lemonpack.extensions.manifest import REQUIREMENTS

    schema = json.loads((REPO / "lemonpack" / "extensions" / "schema" / "extension-v1.schema.json").read_text())
    assert tuple(schema["$defs"]["requirement"]["enum"]) == REQUIREMENTS  # the vocabulary nix reads
    tree = fixture_tree(tmp_path / "repo")
    cli = cli_generate(tree, tmp_path / "gen", features=("linux", "gpu"))
    assert cli.returncode == 2
    message = re.search(r"unknown feature 'gpu' \(one of [a-z, ]+\)", cli.stderr).group()
    assert message == f"unknown feature 'gpu' (one of {', '.join(REQUIREMENTS)})"
    for expr in (f"(flake.lib.mkGufo {{ root = {tree}; system = \"{SYSTEM}\"; features = [ \"linux\" \"gpu\" ]; }})"
                 ".drvPath",
                 f"(flake.packages.{SYSTEM}.gufo.override {{ features = [ \"gpu\" ]; }}).drvPath",
                 f"(flake.packages.{SYSTEM}.gufo.override {{ extensions = \"all\"; features = [ \"gpu\" ]; }})"
                 ".selection.providers"):
        err = eval_error(tree, expr)
        assert f"error: {message}\n" in err, err
    assert nix("eval", "--impure", "--raw", "--expr",  # a known feature still evaluates
               f'(builtins.getFlake "path:{tree}").packages.{SYSTEM}.gufo.override {{ features = [ "linux" "hip" ]; }}'
               ).returncode == 0
