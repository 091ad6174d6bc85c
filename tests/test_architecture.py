"""The room map of docs/architecture.md is the code's, both ways: every cross-room import is one
the table allows and every edge the table allows is used, every room is in the table, every
module is named in the page, no room reaches into another room's private names; and the package
docstrings list the real rooms, sub-rooms and modules."""

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


def room_table(text: str) -> dict[str, set[str]]:
    """``{room: allowed rooms}`` from the rows of the table whose first cell is
    `` `lemonpack/NAME/` ``, in table order (top first). A cell starting "every room" allows
    every other room of the table but the ones it names (`` every room but `nix` ``)."""
    table: dict[str, set[str]] = {}
    every: dict[str, set[str]] = {}
    for line in text.splitlines():
        m = re.match(r"\|\s*`lemonpack/(\w+)/`\s*\|[^|]*\|([^|]*)\|\s*$", line)
        if not m:
            continue
        cell, names = m.group(2), set(re.findall(r"`(\w+)`", m.group(2)))
        table[m.group(1)] = names
        if cell.strip().startswith("every room"):
            every[m.group(1)] = names
    for room, but in every.items():
        table[room] = set(table) - {room} - but
    return table


def room_of(path: Path, package: Path = PACKAGE) -> str:
    rel = path.relative_to(package).parts
    return rel[0] if len(rel) > 1 else rel[0].removesuffix(".py")


def imports(path: Path, package_dir: Path = PACKAGE) -> list[tuple[int, str, list[str]]]:
    """``[(line, absolute module, imported names)]`` of every ``lemonpack`` import in a file,
    relative imports made absolute, function-level imports included."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = ["lemonpack", *path.relative_to(package_dir).parts[:-1]]
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
        unknown = allowed - set(table)
        assert not unknown, f"{room} may import unknown rooms {sorted(unknown)}"


def room_edges(package: Path, primitives: set[str]) -> dict[tuple[str, str], list[str]]:
    """``{(room, room it imports): ["FILE:LINE", ...]}`` of every import from one room into
    another under ``package`` (a primitive counts as a room of its own; imports of primitives
    are left out: every room may import them). ``from lemonpack import NAME`` imports room NAME
    when NAME is a room (``__version__`` is the package's own)."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        room = room_of(path, package)
        for line, module, names in imports(path, package):
            parts = module.split(".")
            for target in parts[1:2] or [n for n in names if (package / n / "__init__.py").is_file()]:
                if target != room and target not in primitives:
                    edges.setdefault((room, target), []).append(f"{path.relative_to(package.parent)}:{line}")
    return edges


def forbidden_edges(table: dict[str, set[str]], edges: dict[tuple[str, str], list[str]],
                    primitives: set[str]) -> list[str]:
    """The imports ``table`` does not allow (a primitive imports no room)."""
    wrong = []
    for (room, target), where in sorted(edges.items()):
        if room in primitives:
            wrong.append(f"{where[0]}: primitive {room} imports lemonpack.{target}")
        elif target not in table.get(room, set()):
            wrong.append(f"{where[0]}: {room} imports lemonpack.{target} "
                         f"(docs/architecture.md allows {sorted(table.get(room, set()))})")
    return wrong


def unused_edges(table: dict[str, set[str]], edges: dict[tuple[str, str], list[str]]) -> list[str]:
    """The edges ``table`` allows that no import uses: a map that no longer matches the code."""
    return [f"docs/architecture.md lets {room} import {target}, but nothing in {room} does: drop the edge"
            for room, allowed in table.items() for target in sorted(allowed) if (room, target) not in edges]


def test_every_cross_room_import_is_allowed_by_the_table():
    table = room_table(DOC.read_text(encoding="utf-8"))
    wrong = forbidden_edges(table, room_edges(PACKAGE, PRIMITIVES), PRIMITIVES)
    assert not wrong, "\n".join(wrong)


def test_every_allowed_room_edge_is_used():
    table = room_table(DOC.read_text(encoding="utf-8"))
    wrong = unused_edges(table, room_edges(PACKAGE, PRIMITIVES))
    assert not wrong, "\n".join(wrong)


def _tree(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (``{relative path: text}``) under ``root``; returns ``root``."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


PLANTED_TABLE = """| room | holds | may import |
|---|---|---|
| `lemonpack/cli/` | the CLI | every room but `c` |
| `lemonpack/a/` | a | `b`, `c` |
| `lemonpack/b/` | b | `c` |
| `lemonpack/c/` | c | (primitives only) |
| primitives | `errors.py`, `files.py` | (other primitives only) |
"""


def test_both_directions_fail_on_a_planted_package(tmp_path):
    package = _tree(tmp_path, {
        "lemonpack/__init__.py": "", "lemonpack/errors.py": "", "lemonpack/files.py": "from lemonpack.c import x\n",
        "lemonpack/cli/__init__.py": "from lemonpack import a, b\nfrom lemonpack.a import z\n",
        "lemonpack/a/__init__.py": "", "lemonpack/a/z.py": "from lemonpack.b import y\nfrom lemonpack.errors import E\n",
        "lemonpack/b/__init__.py": "", "lemonpack/b/y.py": "def f():\n    from ..a import z\n",
        "lemonpack/c/__init__.py": "", "lemonpack/c/x.py": "from . import x\n",
    }) / "lemonpack"
    table = room_table(PLANTED_TABLE)
    assert table == {"cli": {"a", "b"}, "a": {"b", "c"}, "b": {"c"}, "c": set()}
    edges = room_edges(package, primitives(PLANTED_TABLE))
    assert set(edges) == {("cli", "a"), ("cli", "b"), ("a", "b"), ("b", "a"), ("files", "c")}
    assert forbidden_edges(table, edges, primitives(PLANTED_TABLE)) == [
        "lemonpack/b/y.py:2: b imports lemonpack.a (docs/architecture.md allows ['c'])",
        "lemonpack/files.py:1: primitive files imports lemonpack.c"]
    assert unused_edges(table, edges) == [
        "docs/architecture.md lets a import c, but nothing in a does: drop the edge",
        "docs/architecture.md lets b import c, but nothing in b does: drop the edge"]


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
    ("| `lemonpack/cli/` | x | every room |", set()),
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
             if any(order.index(a) <= order.index(room) for a in allowed)]
    assert not wrong, "docs/architecture.md's table is not ordered:\n" + "\n".join(wrong)


#: A module longer than this is listed in docs/architecture.md's "Large modules" table.
LARGE_MODULE_LINES = 500


def large_module_table(text: str) -> dict[str, tuple[int, str]]:
    """``{module path: (lines at most, its one job)}`` from the rows of docs/architecture.md's
    "Large modules and their one job" section (`` | `lemonpack/<path>.py` | BOUND | JOB | ``)."""
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


# ----------------------------------------------------------------- every module named in the page

def section(text: str, title: str) -> str:
    """The body of the section whose heading is ``title`` (any level), up to the next heading."""
    m = re.search(rf"^#+ {re.escape(title)}\n(.*?)(?=^#+ |\Z)", text, re.S | re.M)
    return m.group(1) if m else ""


def module_lists(text: str) -> dict[str, set[str]]:
    """``{room: module names}`` the page gives: the bullets of "Modules of each room"
    (`` - `ROOM/`: `a` (its job), `b` (its job) ``, a bullet may wrap onto indented lines), the
    server room's module table (`` | `NAME.py` | job | ``) and, as room ``primitives``, the
    room table's primitives row."""
    out: dict[str, set[str]] = {}
    bullets = re.split(r"^- ", section(text, "Modules of each room"), flags=re.M)[1:]
    for bullet in bullets:
        m = re.match(r"`(\w+)/`:", bullet)
        if m:
            out[m.group(1)] = set(re.findall(r"`(\w+)` \(", " ".join(bullet.split())))
    out["server"] = set(re.findall(r"^\|\s*`(\w+)\.py`\s*\|", section(text, "The server room"), re.M))
    out["primitives"] = primitives(text) if "| primitives |" in text else set()
    return out


def modules_on_disk(package: Path) -> dict[str, set[str]]:
    """``{room: module names}`` of every room under ``package`` (``__init__`` left out,
    ``__main__`` kept), and ``primitives``: the modules directly in ``package``. ``runtime``
    is left out: its modules are in sub-rooms, held by the sub-room table."""
    out = {"primitives": {p.stem for p in package.glob("*.py")} - {"__init__", "__main__"}}
    for room in sorted(p for p in package.iterdir() if (p / "__init__.py").is_file() and p.name != "runtime"):
        out[room.name] = {p.stem for p in room.glob("*.py")} - {"__init__"}
    return out


def module_map_problems(on_disk: dict[str, set[str]], named: dict[str, set[str]]) -> list[str]:
    """Both ways: a module the page does not name, a name the page gives that is no module."""
    wrong = []
    for room in sorted(on_disk):
        where = "lemonpack/" if room == "primitives" else f"lemonpack/{room}/"
        wrong += [f"{where}{m}.py is not named in docs/architecture.md" for m in sorted(on_disk[room] - named.get(room, set()))]
        wrong += [f"docs/architecture.md names {m} in {room}, which has no such module"
                  for m in sorted(named.get(room, set()) - on_disk[room])]
    wrong += [f"docs/architecture.md lists modules of {room}, which is no room" for room in sorted(set(named) - set(on_disk))]
    return wrong


def test_every_module_is_named_in_the_page():
    wrong = module_map_problems(modules_on_disk(PACKAGE), module_lists(DOC.read_text(encoding="utf-8")))
    assert not wrong, "\n".join(wrong)


def test_the_module_map_fails_on_a_planted_mismatch(tmp_path):
    package = _tree(tmp_path, {
        "lemonpack/__init__.py": "", "lemonpack/errors.py": "", "lemonpack/files.py": "",
        "lemonpack/a/__init__.py": "", "lemonpack/a/one.py": "", "lemonpack/a/two.py": "", "lemonpack/a/__main__.py": "",
        "lemonpack/server/__init__.py": "", "lemonpack/server/main.py": "", "lemonpack/server/app.py": "",
        "lemonpack/runtime/__init__.py": "", "lemonpack/runtime/x/__init__.py": "", "lemonpack/runtime/x/y.py": "",
    }) / "lemonpack"
    doc = PLANTED_TABLE + """
### Modules of each room

- `a/`: `one` (the first), `gone` (a module since removed), `__main__`
  (`python -m lemonpack.a`); `two` is not in the form.
- `b/`: `z` (a room that is not on disk).

### The server room

| module | job |
|---|---|
| `main.py` | `run` |

## Next
| `app.py` | not the server's table any more |
"""
    named = module_lists(doc)
    assert named == {"a": {"one", "gone", "__main__"}, "b": {"z"}, "server": {"main"}, "primitives": {"errors", "files"}}
    assert module_map_problems(modules_on_disk(package), named) == [
        "lemonpack/a/two.py is not named in docs/architecture.md",
        "docs/architecture.md names gone in a, which has no such module",
        "lemonpack/server/app.py is not named in docs/architecture.md",
        "docs/architecture.md lists modules of b, which is no room"]


# ----------------------------------------------------------------- package docstrings

def docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


def docstring_rooms(doc: str) -> list[str]:
    """The rooms ``lemonpack/__init__.py``'s docstring lists: each ``NAME`` followed by its job in
    parentheses, in the paragraph starting "Rooms", in order."""
    para = next((p for p in doc.split("\n\n") if p.startswith("Rooms")), "")
    return re.findall(r"``(\w+)`` \(", " ".join(para.split()))


def test_the_package_docstring_lists_every_room_in_table_order():
    rooms = docstring_rooms(docstring(PACKAGE / "__init__.py"))
    order = list(room_table(DOC.read_text(encoding="utf-8")))
    on_disk = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert set(rooms) == on_disk, f"lemonpack/__init__.py lists {sorted(rooms)}; the rooms are {sorted(on_disk)}"
    assert rooms == order, f"lemonpack/__init__.py lists the rooms as {rooms}; the table's order is {order}"


def test_docstring_rooms_of_a_planted_docstring():
    doc = ("lemonpack.\n\nRooms (from the top): ``cli`` (the CLI), ``build``\n(the build), and ``oci`` "
           "(OCI). Below them ``errors``.\n\nNot rooms: ``x`` (y).")
    assert docstring_rooms(doc) == ["cli", "build", "oci"]


def import_claims(doc: str, prefix: str = "lemonpack.") -> set[str] | None:
    """The rooms a room's docstring says it imports: the names in its sentences starting
    "Imports" (``NAME``, :mod:`lemonpack.NAME`; with ``prefix="runtime."``, ``runtime.NAME``);
    ``None`` when no sentence says (a sentence "Imports no ..." says: none)."""
    out: set[str] | None = None
    for sentence in re.findall(r"(?:^|(?<=[.!?]\s))Imports\b[^.]*(?:\.(?!\s|$)[^.]*)*", " ".join(doc.split())):
        out = out or set()
        if prefix == "lemonpack.":
            out |= {a or b for a, b in re.findall(r"``(\w+)``|:mod:`~?lemonpack\.(\w+)`", sentence)}
        else:
            out |= set(re.findall(rf"``{re.escape(prefix)}(\w+)``", sentence))
    return out


def docstring_problems(package: Path, table: dict[str, set[str]], subtable: dict[str, set[str]]) -> list[str]:
    """What the room and sub-room docstrings get wrong: no docstring (no job said); a sentence
    "Imports ..." naming other rooms than the table allows; a module list (a ``Modules:``
    paragraph or ``- :mod:`` bullets in a room, ``name`` (job) entries in a sub-room) that misses
    a module or names a module the room does not have."""
    wrong = []
    rooms = sorted(p for p in package.iterdir() if (p / "__init__.py").is_file())
    subs = sorted(p for p in (package / "runtime").iterdir() if (p / "__init__.py").is_file()) \
        if (package / "runtime").is_dir() else []
    for room in rooms + subs:
        rel = room.relative_to(package.parent)
        doc = docstring(room / "__init__.py")
        modules = {p.stem for p in room.glob("*.py")} - {"__init__", "__main__"}
        if not doc.strip():
            wrong.append(f"{rel}/__init__.py has no docstring saying the room's job")
            continue
        is_sub = room.parent.name == "runtime"
        claims = import_claims(doc, "runtime." if is_sub else "lemonpack.")
        allowed = subtable.get(room.name, set()) if is_sub else table.get(room.name, set())
        if claims is not None and claims != allowed:
            wrong.append(f"{rel}/__init__.py says it imports {sorted(claims)}; the table allows {sorted(allowed)}")
        if is_sub:  # module names are lower case: ``LaunchPlan`` (argv, env, cwd) is no entry
            listed = set(re.findall(r"``([a-z][a-z0-9_]*)`` \(", " ".join(doc.split())))
        else:
            paras = [p for p in doc.split("\n\n") if p.startswith("Modules:") or p.lstrip().startswith("- :mod:")]
            listed = {m.split(".")[-1] for p in paras for m in re.findall(r":mod:`~?([\w.]+)`", p)
                      if m.startswith(".") or m.startswith(f"lemonpack.{room.name}.")}
            if not paras:
                continue
        wrong += [f"{rel}/__init__.py's module list misses {m}" for m in sorted(modules - listed)]
        wrong += [f"{rel}/__init__.py lists {m}, which is no module there" for m in sorted(listed - modules)]
    return wrong


def test_room_docstrings_say_their_job_and_their_modules():
    text = DOC.read_text(encoding="utf-8")
    wrong = docstring_problems(PACKAGE, room_table(text), subroom_table(text))
    assert not wrong, "\n".join(wrong)


def test_docstring_problems_of_a_planted_tree(tmp_path):
    package = _tree(tmp_path, {
        "lemonpack/__init__.py": "",
        "lemonpack/a/__init__.py": '"""Room a.\n\nModules: :mod:`.one`, :mod:`.gone`.\n\nImports ``b`` and ``c``."""\n',
        "lemonpack/a/one.py": "", "lemonpack/a/two.py": "",
        "lemonpack/b/__init__.py": '"""Room b, no list.\n\nImports :mod:`lemonpack.c` only."""\n', "lemonpack/b/x.py": "",
        "lemonpack/c/__init__.py": "", "lemonpack/c/x.py": "",
        "lemonpack/runtime/__init__.py": '"""The runtime."""\n',
        "lemonpack/runtime/s/__init__.py": '"""``p`` (the p), ``q`` (a gone one). Imports ``runtime.t`` only."""\n',
        "lemonpack/runtime/s/p.py": "", "lemonpack/runtime/s/r.py": "",
        "lemonpack/runtime/t/__init__.py": '"""``u`` (u). Imports no other runtime sub-room."""\n', "lemonpack/runtime/t/u.py": "",
        "lemonpack/runtime/v/__init__.py": '"""``w`` (w). Imports no other runtime sub-room."""\n', "lemonpack/runtime/v/w.py": "",
    }) / "lemonpack"
    table = {"a": {"b"}, "b": {"c"}, "c": set(), "runtime": set()}
    assert docstring_problems(package, table, {"s": set(), "t": set(), "v": {"t"}}) == [
        "lemonpack/a/__init__.py says it imports ['b', 'c']; the table allows ['b']",
        "lemonpack/a/__init__.py's module list misses two",
        "lemonpack/a/__init__.py lists gone, which is no module there",
        "lemonpack/c/__init__.py has no docstring saying the room's job",
        "lemonpack/runtime/s/__init__.py says it imports ['t']; the table allows []",
        "lemonpack/runtime/s/__init__.py's module list misses r",
        "lemonpack/runtime/s/__init__.py lists q, which is no module there",
        "lemonpack/runtime/v/__init__.py says it imports []; the table allows ['t']"]
    assert import_claims("Room.\n\nNo claim here.") is None
