"""flake.nix and nix/lib.nix with the real nix (Nix 2.8, no nixpkgs): `nix build .#gufo`, an
override from a consumer flake, evaluation failures (collision, stale lock, API version,
dependencies), `nix flake check`, per-recipe fixed-output fetches."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.nixflake import (REPO, SYSTEM, consumer_flake, copy_flake, nix, write_api, write_extension,
                              write_lock)
from support.tools import need

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("nix_installed")]

GEN = ("extensions.json", "gufo_ext_registry.cpp", "gufo_ext_constants.hpp")


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


def community(directory: Path, name: str = "gamma", key: str = "gguf:gamma", **kw) -> Path:
    return write_extension(directory, name, api=">= 0.1.3",
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
        "void gufo_ext_register_all(gufo::ext::Registry &registry) {\n  beta_register(registry);\n"
        "  alpha_register(registry);\n"
        '  registry.unavailable("alpha-q4", "target gufo_alpha_hip not built: needs hip");\n'
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
    assert "community extension 'gamma' claims key 'gguf:alpha2' owned by official extension 'alpha'" in out.stderr
    assert "/community/gamma/extension.json" in out.stderr
    assert "/catalogue/extensions/alpha/extension.json" in out.stderr
    assert not (app / "result").exists()


def test_two_community_extensions_may_share_a_key(tmp_path):
    tree = fixture_tree(tmp_path / "repo")
    a, b = community(tmp_path / "c" / "gamma"), community(tmp_path / "c" / "delta", name="delta")
    out = nix("eval", "--impure", "--json", "--expr",
              f'let flake = builtins.getFlake "path:{tree}"; in '
              f'map (m: m.name) (flake.packages.{SYSTEM}.gufo.override {{ extensions = [ {a} {b} ]; }}).selection.extensions')
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["delta", "gamma"]


def test_stale_lock_name_fails_evaluation(tmp_path):
    tree = fixture_tree(tmp_path / "repo")
    write_lock(tree, ["beta", "alpha", "gone"])
    err = eval_error(tree, f"flake.packages.{SYSTEM}.gufo.drvPath")
    assert "extensions.lock: extension 'gone' named in the lock was not found" in err


def test_api_version_mismatch_fails_evaluation(tmp_path):
    tree = fixture_tree(tmp_path / "repo")
    newer = community(tmp_path / "c" / "gamma")
    (newer / "extension.json").write_text((newer / "extension.json").read_text().replace(">= 0.1.3", ">= 0.1.4"))
    err = eval_error(tree, f'(flake.lib.mkGufo {{ system = "{SYSTEM}"; extensions = [ {newer} ]; }}).drvPath')
    assert "extension 'gamma' needs extension API >= 0.1.4 but this host provides 0.1.3" in err
    other = community(tmp_path / "d" / "gamma")
    (other / "extension.json").write_text((other / "extension.json").read_text().replace(">= 0.1.3", ">= 0.2.0"))
    err = eval_error(tree, f'(flake.lib.mkGufo {{ system = "{SYSTEM}"; extensions = [ {other} ]; }}).drvPath')
    assert "needs extension API >= 0.2.0 but this host provides 0.1.3" in err


def test_missing_and_cyclic_dependencies_name_the_chain(tmp_path):
    tree = fixture_tree(tmp_path / "repo")
    a = community(tmp_path / "c" / "gamma", dependencies=["alpha", "nowhere"])
    err = eval_error(tree, f'(flake.lib.mkGufo {{ system = "{SYSTEM}"; extensions = [ {a} ]; }}).drvPath')
    assert "missing extension dependency: gamma -> nowhere" in err
    x = community(tmp_path / "d" / "xx", name="xx", key="gguf:xx", dependencies=["yy"])
    y = community(tmp_path / "d" / "yy", name="yy", key="gguf:yy", dependencies=["xx"])
    err = eval_error(tree, f'(flake.lib.mkGufo {{ system = "{SYSTEM}"; extensions = [ {x} {y} ]; }}).drvPath')
    assert "cyclic extension dependency: xx -> yy -> xx" in err


def test_flake_check(tmp_path):
    tree = fixture_tree(tmp_path / "repo")
    out = nix("flake", "check", f"path:{tree}", cwd=tree)
    assert out.returncode == 0, out.stderr
    assert out.seconds < 30
    write_lock(tree, ["beta", "alpha", "gone"])
    bad = nix("flake", "check", f"path:{tree}", cwd=tree)
    assert bad.returncode == 1 and "'gone' named in the lock was not found" in bad.stderr


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
