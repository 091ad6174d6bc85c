"""Quick commands import only what they need (docs/architecture.md, "Start-up"): the import
set is checked, not the time (bench/startup.py measures that), so a heavy import creeping
back fails here on any machine.

Each case runs the command in a fresh interpreter (``main(argv)``, what the console script
calls) and reads ``sys.modules`` afterwards: the libraries that made ``--help`` and
``catalogue search`` slow (typer 0.29's pydantic layer, rich, jsonschema, the recipe
contract, discovery) must not be among them, and the lemonpack modules must be the few the
command needs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lemonpack.cli import COMMAND_MODULES

#: Libraries none of the quick commands may import.
HEAVY = ("pydantic", "typer._adapters", "rich", "jsonschema", "fastjsonschema", "referencing", "httpx",
         "cryptography", "yaml", "jinja2", "gguf", "aiohttp", "lightkube", "oras", "podman", "docker",
         "hashlib")  # hashlib: loading OpenSSL costs a few ms

#: lemonpack modules every quick command may import: the entry point, the command modules
#: (only for a command line that needs them), the error types, and the light modules they
#: take names from at import time.
BASE = {"lemonpack", "lemonpack.errors", "lemonpack.cli", "lemonpack.cli._app"}
COMMAND_MODULES_OK = {"lemonpack.runtime", "lemonpack.runtime.lifecycle", "lemonpack.runtime.lifecycle.stop_signals",
                      "lemonpack.extensions", "lemonpack.extensions.vocabulary"}
SEARCH_OK = {"lemonpack.cli.catalogue_cmds", "lemonpack.catalogue", "lemonpack.catalogue.index",
             "lemonpack.catalogue.names", "lemonpack.catalogue.search", "lemonpack.canonical", "lemonpack.paths"}

CODE = ("import json, sys\n"
        "from lemonpack.cli import main\n"
        "rc = main(sys.argv[1:])\n"
        "sys.stdout.flush()\n"
        "print('\\nMODULES ' + json.dumps(sorted(sys.modules)))\n"
        "sys.exit(rc)\n")


def _run(tmp_path, *argv: str, columns: int = 80) -> tuple[str, set[str]]:
    """(stdout without the module line, the modules loaded) of ``lemonpack ARGV`` in a new process."""
    env = {**os.environ, "LEMONPACK_CACHE_DIR": str(tmp_path / "cache"),
           "LEMONPACK_CONFIG_DIR": str(tmp_path / "config"), "COLUMNS": str(columns)}
    r = subprocess.run([sys.executable, "-c", CODE, *argv], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    out, _, modules = r.stdout.rpartition("\nMODULES ")
    return out, set(json.loads(modules))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def _lemonpack(modules: set[str]) -> set[str]:
    return {m for m in modules if m == "lemonpack" or m.startswith("lemonpack.")}


def test_root_help_is_the_stored_page(tmp_path):
    out, modules = _run(tmp_path, "--help")
    assert "catalogue" in out and "build" in out and "serve" in out
    assert not _heavy(modules) and "typer" not in modules, _heavy(modules)
    assert _lemonpack(modules) == {"lemonpack", "lemonpack.cli", "lemonpack.cli._root_help"}


def test_root_help_typer_renders_imports_every_command_module_and_no_room(tmp_path):
    """On a narrow terminal typer renders the root page (as for ``lemonpack`` alone or a
    typo): every command module is imported, none of the rooms."""
    out, modules = _run(tmp_path, "--help", columns=60)
    assert "catalogue" in out and "build" in out and "serve" in out
    assert "typer" in modules and not _heavy(modules), _heavy(modules)
    commands = {m for m in modules if m.startswith("lemonpack.cli.") and m.endswith("_cmds")}
    assert commands == {f"lemonpack.cli.{m}" for m in COMMAND_MODULES}  # typer builds the whole tree
    assert _lemonpack(modules) - commands <= BASE | COMMAND_MODULES_OK, sorted(_lemonpack(modules) - commands - BASE)


@pytest.mark.parametrize("argv", [("catalogue", "search", "llama"), ("catalogue", "search", "llama", "--json")])
def test_catalogue_search_of_the_shipped_index_imports_the_reader_only(tmp_path, argv):
    out, modules = _run(tmp_path, *argv)
    assert "recipe:hello-engine" in out  # the shipped index was read and searched
    assert not _heavy(modules), _heavy(modules)
    assert _lemonpack(modules) <= BASE | SEARCH_OK, sorted(_lemonpack(modules) - BASE - SEARCH_OK)


def test_version_imports_no_command_module(tmp_path):
    out, modules = _run(tmp_path, "--version")
    assert out.startswith("lemonpack ")
    assert not _heavy(modules) and "typer" not in modules, _heavy(modules)
    assert _lemonpack(modules) == {"lemonpack", "lemonpack.cli"}


def test_the_heavy_list_would_see_what_it_forbids(tmp_path):
    """The check can fail: a command that needs the recipe contract imports jsonschema."""
    (tmp_path / "r.json").write_text("{}")
    env = {**os.environ, "LEMONPACK_CACHE_DIR": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, "-c", CODE, "lint", str(tmp_path / "r.json")], capture_output=True,
                       text=True, env=env, timeout=120)
    modules = set(json.loads(r.stdout.rpartition("\nMODULES ")[2]))
    assert "jsonschema" in _heavy(modules)


def test_a_warm_search_of_a_built_index_reads_the_compact_file_and_hashes_nothing(tmp_path):
    """A built index with its catalogue-search.json: the first search verifies it (hashing
    catalogue.json), the next one finds the verified pair remembered and imports no hashing."""
    from lemonpack.catalogue.index import search_file_for

    shipped = Path(__file__).resolve().parents[2] / "lemonpack" / "catalogue" / "shipped" / "catalogue.json"
    d = tmp_path / "idx"
    d.mkdir()
    data = shipped.read_bytes()
    (d / "catalogue.json").write_bytes(data)
    (d / "catalogue-search.json").write_bytes(search_file_for(data))
    out, first = _run(tmp_path, "catalogue", "search", "llama", "--index", str(d), "--json")
    assert "recipe:hello-engine" in out and (tmp_path / "cache" / "catalogue-search-verified.json").is_file()
    out, warm = _run(tmp_path, "catalogue", "search", "llama", "--index", str(d), "--json")
    assert "recipe:hello-engine" in out
    assert not _heavy(warm), _heavy(warm)
    assert _lemonpack(warm) <= BASE | SEARCH_OK, sorted(_lemonpack(warm) - BASE - SEARCH_OK)
