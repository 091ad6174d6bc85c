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


#: A module longer than this is listed in docs/architecture.md's "Large modules" table.
LARGE_MODULE_LINES = 500


def large_module_table(text: str) -> dict[str, tuple[int, str]]:
    """``{module path: (lines at most, its one job)}`` from the rows of docs/architecture.md's
    "Large modules and their one job" section (`` | `lemonpack/PATH.py` | BOUND | JOB | ``)."""
    section = text.split("## Large modules and their one job", 1)[1].split("\n## ", 1)[0]
    table = {}
    for line in section.splitlines():
        m = re.match(r"\|\s*`(lemonpack/[\w/]+\.py)`\s*\|\s*(\d+)\s*\|([^|]*)\|\s*$", line)
        if m:
            table[m.group(1)] = (int(m.group(2)), m.group(3).strip())
    return table


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_every_module_over_500_lines_is_listed_with_its_bound_and_one_job():
    """A module over 500 lines cannot grow silently: it is in the table, within its bound, with
    its job said; every row names a module that exists."""
    table = large_module_table(DOC.read_text(encoding="utf-8"))
    wrong = []
    for path in _python_sources():
        rel, n = str(path.relative_to(ROOT)), _lines(path)
        if n > LARGE_MODULE_LINES and rel not in table:
            wrong.append(f"{rel}: {n} lines and not in docs/architecture.md's \"Large modules and their one job\" "
                         "(split off its second job, or list it with its one job and a bound)")
        elif rel in table and n > table[rel][0]:
            wrong.append(f"{rel}: {n} lines, over its bound of {table[rel][0]} in docs/architecture.md")
    for rel, (_, job) in table.items():
        if not (ROOT / rel).is_file():
            wrong.append(f"docs/architecture.md lists {rel}, which does not exist")
        if not job:
            wrong.append(f"docs/architecture.md lists {rel} without its job")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("row, expected", [
    ("| `lemonpack/oci/cmdline.py` | 680 | reading a command line |", {"lemonpack/oci/cmdline.py": (680, "reading a command line")}),
    ("| `lemonpack/x.py` | many | a job |", {}),
    ("| module | lines at most | its one job |", {}),
])
def test_large_module_rows(row, expected):
    assert large_module_table(f"## Large modules and their one job\n\n{row}\n\n## Next\n| `lemonpack/y.py` | 1 | j |") == expected


# ----------------------------------------------------------------- the runtime's sub-rooms

RUNTIME = PACKAGE / "runtime"


def subroom_table(text: str) -> dict[str, set[str]]:
    """``{sub-room: allowed sub-rooms}`` from the rows of "The runtime's sub-rooms" whose first
    cell is `` `runtime/NAME/` ``, in table order (top first)."""
    table: dict[str, set[str]] = {}
    for line in text.splitlines():
        m = re.match(r"\|\s*`runtime/(\w+)/`\s*\|([^|]*)\|([^|]*)\|\s*$", line)
        if m:
            table[m.group(1)] = set(re.findall(r"`(\w+)`", m.group(3)))
    return table


def subroom_modules(text: str) -> dict[str, set[str]]:
    """``{sub-room: module names its "holds" cell names}``: each backticked name followed by its
    job in parentheses (`` `policy` (the serving policy) ``)."""
    out: dict[str, set[str]] = {}
    for line in text.splitlines():
        m = re.match(r"\|\s*`runtime/(\w+)/`\s*\|([^|]*)\|", line)
        if m:
            out[m.group(1)] = set(re.findall(r"`(\w+)` \(", m.group(2)))
    return out


def subroom_edges() -> dict[tuple[str, str], list[str]]:
    """``{(from sub-room, to sub-room): [where]}`` of every import between runtime sub-rooms."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(RUNTIME.rglob("*.py")):
        rel = path.relative_to(RUNTIME).parts
        if len(rel) < 2:
            continue
        for line, module, _ in imports(path):
            parts = module.split(".")
            if parts[:2] == ["lemonpack", "runtime"] and len(parts) > 2 and parts[2] != rel[0]:
                edges.setdefault((rel[0], parts[2]), []).append(f"{path.relative_to(ROOT)}:{line}")
    return edges


def test_runtime_modules_live_in_the_sub_rooms_the_table_names():
    text = DOC.read_text(encoding="utf-8")
    table, named = subroom_table(text), subroom_modules(text)
    flat = sorted(p.name for p in RUNTIME.glob("*.py") if p.name != "__init__.py")
    assert not flat, f"modules directly in lemonpack/runtime/ (put each in its sub-room): {flat}"
    on_disk = {p.name for p in RUNTIME.iterdir() if (p / "__init__.py").is_file()}
    assert on_disk == set(table), f"sub-rooms on disk {sorted(on_disk)} != table {sorted(table)}"
    wrong = []
    for sub in sorted(on_disk):
        modules = {p.stem for p in (RUNTIME / sub).glob("*.py")} - {"__init__"}
        wrong += [f"runtime/{sub}/{m}.py is not named in its row" for m in sorted(modules - named[sub])]
        wrong += [f"runtime/{sub}/'s row names {m}, which is not a module there" for m in sorted(named[sub] - modules)]
    assert not wrong, "\n".join(wrong)


def test_runtime_sub_room_imports_follow_the_table_both_ways():
    """No import the table does not allow, and no allowed edge that nothing uses (an allowed
    but unused edge is a map that no longer matches the code)."""
    table = subroom_table(DOC.read_text(encoding="utf-8"))
    edges = subroom_edges()
    wrong = [f"{where[0]}: runtime/{a}/ imports runtime/{b}/ (the table allows {sorted(table.get(a, ()))})"
             for (a, b), where in sorted(edges.items()) if b not in table.get(a, set())]
    wrong += [f"the table lets runtime/{a}/ import runtime/{b}/, but nothing does: drop the edge"
              for a, allowed in table.items() for b in sorted(allowed) if (a, b) not in edges]
    assert not wrong, "\n".join(wrong)


def test_runtime_sub_room_table_is_ordered():
    table = subroom_table(DOC.read_text(encoding="utf-8"))
    order = list(table)
    wrong = [f"runtime/{a}/ may import runtime/{b}/, listed above it" for a, allowed in table.items()
             for b in allowed if b in order and order.index(b) <= order.index(a)]
    assert not wrong, "\n".join(wrong)


def module_import_graph() -> dict[str, set[str]]:
    """``{module: modules it imports at import time}`` for every lemonpack module: imports at
    module level, outside ``if TYPE_CHECKING:`` (the ones that can form a circle at import time);
    ``from PKG import NAME`` counts as an import of ``PKG.NAME`` when that is a module."""
    graph: dict[str, set[str]] = {}
    names = {".".join(("lemonpack", *p.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")
             for p in PACKAGE.rglob("*.py")}
    for path in PACKAGE.rglob("*.py"):
        me = ".".join(("lemonpack", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        out: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lemonpack"):
                out |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in names}
                out.add(node.module)
            elif isinstance(node, ast.Import):
                out |= {a.name for a in node.names if a.name.startswith("lemonpack")}
        graph[me] = {m for m in out if m in names and m != me}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph`` (each as a path ``a -> b -> ... -> a``), by depth-first search."""
    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append([*stack[stack.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return cycles


def test_no_import_circle():
    cycles = import_cycles(module_import_graph())
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_import_cycles_finds_a_planted_circle():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_sub_room_rows_parse():
    text = ("| `runtime/serving/` | `policy` (p, `X`), `gateway` (g) | `lifecycle` |\n"
            "| `runtime/launch/` | `plan` (`LaunchPlan`) | (runtime's rooms only) |")
    assert subroom_table(text) == {"serving": {"lifecycle"}, "launch": set()}
    assert subroom_modules(text) == {"serving": {"policy", "gateway"}, "launch": {"plan"}}
