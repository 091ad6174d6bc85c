"""Extension trees for tests: a private copy of the repository's extension files
(``copy_tree``; the ``tree`` fixture, registered in tests/conftest.py) and community extension
directories written on the fly (``write_extension``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: What a tree needs for the extension pipeline and the API lock.
TREE_PARTS = ("catalogue/extensions", "api", "extensions.lock", "include/gufo/ext",
              "lemonpack/extensions/schema", "lemonpack/extensions/templates.py")


def copy_tree(dest: Path) -> Path:
    """Copy the repository's extension parts (:data:`TREE_PARTS`) to ``dest``; return ``dest``."""
    for part in TREE_PARTS:
        src, dst = REPO / part, dest / part
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copy2(src, dst)
    return dest



@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of catalogue/extensions, api/, extensions.lock and the public headers (:func:`copy_tree`)."""
    return copy_tree(tmp_path / "tree")

def manifest(name: str, *, provider: str | None = None, keys=None, options=(), requires=("linux",),
             dependencies=(), api_version: str = ">= 0.1.0", capability: str = "text_generation",
             arch: str | None = None) -> dict:
    """A valid community manifest with one provider (``<name>-p`` unless given) on one target."""
    provider = provider or f"{name.replace('_', '-')}-p"
    return {
        "name": name, "version": "0.3.1", "api_version": api_version, "entry": f"{name}_register",
        "providers": [{"id": provider, "capability": capability, "keys": list(keys or [f"gguf:{name}"]),
                       "target": f"{name}_lib", "entry": f"{name}_provider_register",
                       "probe": {"format": "gguf", "architecture": [arch or name]}}],
        "options": list(options),
        "targets": [{"name": f"{name}_lib", "requires": list(requires)}],
        "files": ["extension.cpp"], "dependencies": list(dependencies),
    }


STUB = '''#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"
{extra}
namespace c = gufo::ext::constants::{name};

extern "C" void {name}_register(gufo::ext::Registry &registry) {{
  registry.add_extension(c::name, c::version);
}}

extern "C" void {entry}(gufo::ext::Registry &registry) {{
  registry.add_provider(c::provider_{pid}, "{cap}", c::provider_{pid}_keys);
}}
'''


MORE = '''
extern "C" void {entry}(gufo::ext::Registry &registry) {{
  registry.add_provider(c::provider_{pid}, "{cap}", c::provider_{pid}_keys);
}}
'''


def write_extension(directory: Path, doc: dict, *, extra_source: str = "") -> Path:
    """Write ``doc`` as ``directory/extension.json`` plus a stub ``extension.cpp`` holding
    every entry point (the extension's and each provider's; ``extra_source`` goes after the
    includes); return ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "extension.json").write_text(json.dumps(doc, indent=2) + "\n")
    first, *others = doc["providers"]

    def pid(p: dict) -> str:
        return p["id"].replace("-", "_").replace(".", "_")

    (directory / "extension.cpp").write_text(STUB.format(
        extra=extra_source, name=doc["name"], entry=first["entry"], pid=pid(first), cap=first["capability"])
        + "".join(MORE.format(entry=p["entry"], pid=pid(p), cap=p["capability"]) for p in others))
    return directory
