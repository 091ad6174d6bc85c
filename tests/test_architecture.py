"""The room map of docs/architecture.md is the code's: every cross-room import is one the table
allows, every room is in the table, and no room reaches into another room's private names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "lemonpack"
DOC = ROOT / "docs" / "architecture.md"


def primitives(text: str) -> set[str]:
    """The module names of the table's ``primitives`` row (`` `errors.py` `` ...)."""
    row = next(line for line in text.splitlines() if line.startswith("| primitives |"))
    return set(re.findall(r"`(\w+)\.py`", row.split("|")[2]))


PRIMITIVES = primitives(DOC.read_text(encoding="utf-8"))


def room_table(text: str) -> dict[str, set[str] | None]:
    """``{room: allowed rooms}`` from the rows of the table whose first cell is
    `` `lemonpack/NAME/` ``; ``None`` stands for "every room"."""
    table: dict[str, set[str] | None] = {}
    for line in text.splitlines():
        m = re.match(r"\|\s*`lemonpack/(\w+)/`\s*\|[^|]*\|([^|]*)\|\s*$", line)
        if not m:
            continue
        cell = m.group(2)
        table[m.group(1)] = None if "every room" in cell else set(re.findall(r"`(\w+)`", cell))
    return table


def room_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE).parts
    return rel[0] if len(rel) > 1 else rel[0].removesuffix(".py")


def imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """``[(line, absolute module, imported names)]`` of every ``lemonpack`` import in a file,
    relative imports made absolute, function-level imports included."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = ["lemonpack", *path.relative_to(PACKAGE).parts[:-1]]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out.append((node.lineno, module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, a.name, []) for a in node.names)
    return [(line, m, names) for line, m, names in out if m == "lemonpack" or m.startswith("lemonpack.")]


def test_the_table_parses_and_names_every_room_on_disk():
    table = room_table(DOC.read_text(encoding="utf-8"))
    assert {"errors", "files", "strictjson", "schemacheck"} <= PRIMITIVES
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    assert PRIMITIVES <= modules, f"primitives named in docs/architecture.md but not on disk: {PRIMITIVES - modules}"
    assert {"cli", "contract", "oci", "runtime", "server"} <= set(table)
    on_disk = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    missing = sorted(on_disk - set(table))
    assert not missing, f"rooms missing from docs/architecture.md's table: {missing}"
    for room, allowed in table.items():
        if allowed is not None:
            unknown = allowed - set(table)
            assert not unknown, f"{room} may import unknown rooms {sorted(unknown)}"


def test_every_cross_room_import_is_allowed_by_the_table():
    table = room_table(DOC.read_text(encoding="utf-8"))
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        room = room_of(path)
        for line, module, _ in imports(path):
            parts = module.split(".")
            if len(parts) < 2:
                continue
            target = parts[1]
            if target == room or target in PRIMITIVES:
                continue
            if room in PRIMITIVES:
                wrong.append(f"{path.relative_to(ROOT)}:{line}: primitive {room} imports {module}")
                continue
            allowed = table.get(room, set())
            if allowed is not None and target not in allowed:
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {room} imports {module} "
                             f"(docs/architecture.md allows {sorted(allowed)})")
    assert not wrong, "\n".join(wrong)


def test_no_room_imports_another_rooms_private_names():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        room = room_of(path)
        for line, module, names in imports(path):
            parts = module.split(".")
            if len(parts) < 2 or parts[1] == room:
                continue
            private = [n for n in names if n.startswith("_")]
            private += [p for p in parts[2:] if p.startswith("_") and p != "__init__"]
            if private:
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {module}: {private}")
    assert not wrong, "private names used across rooms:\n" + "\n".join(wrong)


@pytest.mark.parametrize("row, expected", [
    ("| `lemonpack/cli/` | x | every room |", None),
    ("| `lemonpack/oci/` | x | (primitives only) |", set()),
    ("| `lemonpack/kube/` | x, y | `runtime`, `oci` |", {"runtime", "oci"}),
])
def test_room_table_rows(row, expected):
    assert list(room_table(row).values()) == [expected]


def _python_sources():
    return [p for p in sorted(PACKAGE.rglob("*.py"))]


def test_sha256_digests_are_recognised_in_one_place():
    """A hex-64 pattern outside ``lemonpack/digest.py`` is a second answer to "what is a
    digest": use ``Digest``, ``is_sha256_digest`` or ``is_sha256_hex``."""
    wrong = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
             for p in _python_sources() if p.name != "digest.py" or p.parent != PACKAGE
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"\{64\}", line)]
    assert not wrong, "digest patterns outside lemonpack/digest.py:\n" + "\n".join(wrong)


def test_canonical_json_is_encoded_in_one_place():
    """Hashed JSON bytes come from ``lemonpack.canonical.canonical_json`` only: a
    ``sort_keys=True`` compact ``json.dumps`` elsewhere is a second canonical form."""
    pattern = re.compile(r"json\.dumps\([^\n]*sort_keys=True[^\n]*separators=\(\",\", \":\"\)")
    allowed = {PACKAGE / "canonical.py",
               PACKAGE / "extensions" / "generate.py"}  # Nix builtins.toJSON's ASCII form
    wrong = [f"{p.relative_to(ROOT)}:{n}" for p in _python_sources() if p not in allowed
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert not wrong, "canonical JSON encoded outside lemonpack/canonical.py:\n" + "\n".join(wrong)


def test_finished_writes_are_renamed_into_place_in_one_place():
    """``os.replace`` appears only in ``lemonpack/files.py`` (:func:`lemonpack.files.commit`,
    :func:`lemonpack.files.replace_file`), where each caller states its durability."""
    wrong = [f"{p.relative_to(ROOT)}:{n}" for p in _python_sources() if p != PACKAGE / "files.py"
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if "os.replace(" in line and not line.lstrip().startswith("#")]
    assert not wrong, "os.replace outside lemonpack/files.py (use files.commit or replace_file):\n" + "\n".join(wrong)


def test_rooms_import_only_rooms_below_them_in_the_table():
    """"Read the table from the bottom up": the rooms a row may import are all below it, so the
    table is an order and the allowed imports cannot form a cycle."""
    table = room_table(DOC.read_text(encoding="utf-8"))
    order = list(table)
    wrong = [f"{room} may import {sorted(a for a in allowed if order.index(a) <= order.index(room))}, "
             f"listed above it" for room, allowed in table.items()
             if allowed is not None and any(order.index(a) <= order.index(room) for a in allowed)]
    assert not wrong, "docs/architecture.md's table is not ordered:\n" + "\n".join(wrong)


#: Modules over :data:`MAX_LINES` lines, each with the one job it holds (a module past the bound
#: holding two jobs is split instead, as runtime/launch.py and contract/loader.py were). A module
#: shrinking under the bound may stay listed; a new one over it fails until it is split or listed.
MAX_LINES = 500
LONG_MODULES = {
    "extensions/probe.py": "GGUF provider probes (seed 002): reading a model's metadata and matching providers",
    "extensions/pipeline.py": "seed 002's pipeline: discovery, selection, collisions, API version",
    "oci/cmdline.py": "the container command-line reader (every CLI's global options and run flags)",
    "oci/layout.py": "OCI image layout read and write (image-layout.md)",
    "catalogue/build.py": "debt: the catalogue build (signatures, fetching, facts, index, feed, output)",
    "runtime/discovery.py": "recipe discovery: search path, trust, scanning and its cache, resolution",
    "builder/pipeline.py": "the build pipeline: recipes to OCI layouts and Nix",
    "runtime/engines.py": "engine handles: spawn, readiness, stop, clean-up",
    "registry/client.py": "registry operations (manifests, blobs, tags, mounts, uploads)",
    "runtime/models.py": "the model registry (user_models.json): entries, their rules, atomic changes",
}


def test_long_modules_are_listed_with_their_one_job():
    long = {str(p.relative_to(PACKAGE)): n for p in _python_sources()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    new = sorted(f"{m} ({n} lines)" for m, n in long.items() if m not in LONG_MODULES)
    assert not new, (f"modules over {MAX_LINES} lines: {new}; split a module that holds two jobs, or list "
                     "its one job in LONG_MODULES")
