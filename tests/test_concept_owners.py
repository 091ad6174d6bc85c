"""One owner per concept (issue 22), guarded by the syntax tree, not by text patterns: each
guard walks every module of ``lemonpack/`` with :mod:`ast` and fails on a second copy of a
concept outside its owner; each guard has a test that plants a copy in a temporary package
and shows the guard catching it (and leaving the owner alone)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "lemonpack"


# -- shared helpers -----------------------------------------------------------------------

def modules(package: Path) -> Iterator[tuple[str, ast.Module]]:
    """``(path relative to the package's parent, e.g. "lemonpack/fetch/download.py", tree)``
    of every module under ``package``, sorted."""
    for path in sorted(package.rglob("*.py")):
        yield path.relative_to(package.parent).as_posix(), ast.parse(path.read_text(encoding="utf-8"), str(path))


def import_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> dotted name of what it was imported as, over the whole module (imports
    inside functions included): ``import httpx as h`` gives ``{"h": "httpx"}``, ``from httpx
    import Client as C`` gives ``{"C": "httpx.Client"}``."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """``httpx.Client`` for the expression ``httpx.Client`` (or an alias of it), else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(aliases.get(node.id, node.id))
    return ".".join(reversed(parts))


def enclosing_functions(tree: ast.Module) -> dict[ast.AST, str]:
    """Every node -> the name of the innermost function (or class) holding it ("" at module level)."""
    out: dict[ast.AST, str] = {}

    def visit(node: ast.AST, owner: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else owner
            out[child] = name
            visit(child, name)
    visit(tree, "")
    return out


# -- one HTTP client factory: lemonpack/httpclient.py ----------------------------------------

HTTP_OWNER = "lemonpack/httpclient.py"
#: What makes an HTTP client (or sends a request with a client of its own) outside the factory.
HTTP_CONSTRUCTORS = frozenset({
    "httpx.Client", "httpx.AsyncClient", "aiohttp.ClientSession", "aiohttp.request",
    "httpx.get", "httpx.post", "httpx.put", "httpx.patch", "httpx.delete", "httpx.head", "httpx.options",
    "httpx.request", "httpx.stream", "urllib.request.urlopen", "http.client.HTTPConnection",
    "http.client.HTTPSConnection",
})
#: Raw connections that speak HTTP by hand, each with its reason.
RAW_HTTP_ALLOWED = {
    "lemonpack/server/upstream.py": "the proxy's streaming relay: passes a chunked answer on with its framing, "
                                    "faster than an httpx stream (bench/proxy.py; docs/architecture.md, server room)",
}


def http_client_problems(package: Path) -> list[str]:
    """``file:line: what`` for every HTTP client made outside :data:`HTTP_OWNER` (a call or a
    subclass of one of :data:`HTTP_CONSTRUCTORS`), and every ``asyncio.open_connection``
    outside :data:`RAW_HTTP_ALLOWED`."""
    wrong: list[tuple[str, int, int, str]] = []
    for rel, tree in modules(package):
        if rel == HTTP_OWNER:
            continue
        aliases = import_aliases(tree)
        for node in ast.walk(tree):
            targets = [node.func] if isinstance(node, ast.Call) else list(node.bases) if isinstance(node, ast.ClassDef) else []
            for target in targets:
                name = dotted(target, aliases)
                if name in HTTP_CONSTRUCTORS:
                    wrong.append((rel, target.lineno, target.col_offset,
                                  f"{rel}:{node.lineno}: {name} (make clients with lemonpack.httpclient)"))
                elif name == "asyncio.open_connection" and rel not in RAW_HTTP_ALLOWED:
                    wrong.append((rel, target.lineno, target.col_offset,
                                  f"{rel}:{node.lineno}: {name} (a hand-made HTTP connection)"))
    return [w[-1] for w in sorted(wrong)]


def test_every_http_client_is_made_by_the_factory():
    assert (PACKAGE.parent / HTTP_OWNER).is_file()
    wrong = http_client_problems(PACKAGE)
    assert not wrong, "HTTP clients made outside lemonpack/httpclient.py:\n" + "\n".join(wrong)


def test_http_guard_catches_a_planted_client(tmp_path):
    pkg = tmp_path / "lemonpack"
    (pkg / "server").mkdir(parents=True)
    (pkg / "httpclient.py").write_text("import httpx\n\ndef client():\n    return httpx.Client()\n")
    (pkg / "server" / "upstream.py").write_text("import asyncio\nasync def f():\n    await asyncio.open_connection('h', 1)\n")
    (pkg / "server" / "planted.py").write_text(
        "import aiohttp\nimport httpx as hx\nfrom httpx import AsyncClient as AC\nimport asyncio\n\n"
        "def f():\n    import httpx\n    return httpx.Client(trust_env=False)\n\n"
        "def g():\n    return AC(), hx.get('http://x'), aiohttp.ClientSession()\n\n"
        "class Mine(hx.Client):\n    pass\n\n"
        "async def h():\n    await asyncio.open_connection('h', 1)\n\n"
        "def typed(c: hx.Client) -> hx.AsyncClient: ...\n")  # annotations are not clients
    got = http_client_problems(pkg)
    assert [g.split(": ", 1)[1].split(" (")[0] for g in got] == [
        "httpx.Client", "httpx.AsyncClient", "httpx.get", "aiohttp.ClientSession", "httpx.Client",
        "asyncio.open_connection"], got
    assert all(g.startswith("lemonpack/server/planted.py:") for g in got)


# -- one SOURCE_DATE_EPOCH reader: lemonpack/sourcedate.py -----------------------------------

EPOCH_OWNER = "lemonpack/sourcedate.py"
EPOCH_VARIABLE = "SOURCE_DATE_EPOCH"


def epoch_reader_problems(package: Path) -> list[str]:
    """``file:line`` of every read of ``SOURCE_DATE_EPOCH`` outside :data:`EPOCH_OWNER`: the
    name as an argument of a call (``os.environ.get(...)``, ``os.getenv(...)``), as the key
    of a subscript that is read (``os.environ[...]``) or as an operand of a comparison
    (``... in os.environ``). Docstrings, and an environment a child is given
    (``env["SOURCE_DATE_EPOCH"] = ...``, ``{"SOURCE_DATE_EPOCH": ...}``), are not reads."""
    wrong: list[tuple[str, int, int]] = []
    for rel, tree in modules(package):
        if rel == EPOCH_OWNER:
            continue
        for node in ast.walk(tree):
            operands: list[ast.AST] = []
            if isinstance(node, ast.Call):
                operands = [*node.args, *(k.value for k in node.keywords)]
            elif isinstance(node, ast.Subscript) and not isinstance(node.ctx, ast.Store):
                operands = [node.slice]
            elif isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
            wrong += [(rel, o.lineno, o.col_offset) for o in operands
                      if isinstance(o, ast.Constant) and o.value == EPOCH_VARIABLE]
    return [f"{rel}:{line}" for rel, line, _ in sorted(wrong)]


def test_source_date_epoch_is_read_in_one_place():
    assert (PACKAGE.parent / EPOCH_OWNER).is_file()
    wrong = epoch_reader_problems(PACKAGE)
    assert not wrong, "SOURCE_DATE_EPOCH read outside lemonpack/sourcedate.py:\n" + "\n".join(wrong)


def test_epoch_guard_catches_a_planted_reader(tmp_path):
    pkg = tmp_path / "lemonpack"
    (pkg / "catalogue").mkdir(parents=True)
    (pkg / "sourcedate.py").write_text("import os\nos.environ.get('SOURCE_DATE_EPOCH')\n")
    (pkg / "catalogue" / "planted.py").write_text(
        '"""Dates from SOURCE_DATE_EPOCH."""\nimport os\n\n'
        "def a():\n    return os.environ.get('SOURCE_DATE_EPOCH', '0')\n\n"
        "def b():\n    return int(os.environ['SOURCE_DATE_EPOCH'])\n\n"
        "def c():\n    return 'SOURCE_DATE_EPOCH' in os.environ and os.getenv(key='SOURCE_DATE_EPOCH')\n\n"
        "def child_env(env):\n    env['SOURCE_DATE_EPOCH'] = '0'\n    return {'SOURCE_DATE_EPOCH': '0'}\n")
    assert epoch_reader_problems(pkg) == ["lemonpack/catalogue/planted.py:5", "lemonpack/catalogue/planted.py:8",
                                          "lemonpack/catalogue/planted.py:11", "lemonpack/catalogue/planted.py:11"]


# -- one inside() test: lemonpack/safetree.py -------------------------------------------------

INSIDE_OWNER = "lemonpack/safetree.py"
#: Calls that answer "is P inside B" (``relative_to`` raises when it is not; ``commonpath``
#: compared with the base; ``str(p).startswith(str(b))`` is wrong for ``/ab`` and ``/a``).
INSIDE_METHODS = frozenset({"relative_to", "is_relative_to"})
#: ``(file, function)`` that call one of them for another reason, with that reason.
INSIDE_ALLOWED = {
    ("lemonpack/extensions/apilock.py", "interface"):
        "names the files a glob found under the tree (below it by construction), as /-separated keys",
    ("lemonpack/catalogue/fetching.py", "tree_digest"):
        "names the files os.walk found under the root in the tree's listing",
    ("lemonpack/catalogue/memo.py", "code_fingerprint"):
        "names the package's own files (rglob under the package) in a fingerprint",
    ("lemonpack/fetch/staging.py", "ensure_dir"):
        "walks the components below base of a path its caller built under base (a precondition, not a check)",
}


def inside_check_problems(package: Path) -> list[str]:
    """``file:line: what`` for every ``.relative_to(``/``.is_relative_to(``,
    ``os.path.commonpath(`` and ``.startswith(str(...))`` outside :data:`INSIDE_OWNER` and
    :data:`INSIDE_ALLOWED`: use :func:`lemonpack.safetree.inside`."""
    wrong: list[tuple[str, int, int, str]] = []
    for rel, tree in modules(package):
        if rel == INSIDE_OWNER:
            continue
        aliases = import_aliases(tree)
        owner_of = enclosing_functions(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            what = None
            if isinstance(node.func, ast.Attribute) and node.func.attr in INSIDE_METHODS:
                what = f".{node.func.attr}()"
            elif dotted(node.func, aliases) in ("os.path.commonpath", "posixpath.commonpath"):
                what = "os.path.commonpath()"
            elif (isinstance(node.func, ast.Attribute) and node.func.attr == "startswith" and node.args
                  and isinstance(node.args[0], ast.Call) and dotted(node.args[0].func, aliases) == "str"):
                what = ".startswith(str(...))"
            if what and (rel, owner_of.get(node, "")) not in INSIDE_ALLOWED:
                wrong.append((rel, node.lineno, node.col_offset,
                              f"{rel}:{node.lineno}: {what} in {owner_of.get(node) or 'the module'}"))
    return [w[-1] for w in sorted(wrong)]


def test_inside_checks_have_one_owner():
    assert (PACKAGE.parent / INSIDE_OWNER).is_file()
    wrong = inside_check_problems(PACKAGE)
    assert not wrong, ("'is P inside B' answered outside lemonpack.safetree.inside (or allow it in INSIDE_ALLOWED "
                       "with its reason):\n" + "\n".join(wrong))


def test_inside_allowlist_entries_exist():
    """An allowlist entry whose function no longer calls ``relative_to`` is stale."""
    used = set()
    for rel, tree in modules(PACKAGE):
        owner_of = enclosing_functions(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in INSIDE_METHODS:
                used.add((rel, owner_of.get(node, "")))
    assert set(INSIDE_ALLOWED) <= used, set(INSIDE_ALLOWED) - used


def test_inside_guard_catches_a_planted_check(tmp_path):
    pkg = tmp_path / "lemonpack"
    (pkg / "fetch").mkdir(parents=True)
    (pkg / "safetree.py").write_text("import os\ndef inside(p, b):\n    return os.path.commonpath([p, b]) == b\n")
    (pkg / "fetch" / "staging.py").write_text("def ensure_dir(path, base):\n    return path.relative_to(base)\n")
    (pkg / "fetch" / "planted.py").write_text(
        "import os\nfrom os.path import commonpath as cp\nfrom pathlib import Path\n\n"
        "def a(p: Path, b: Path):\n    return p.is_relative_to(b)\n\n"
        "def b(p: Path, b: Path):\n    try:\n        p.relative_to(b)\n    except ValueError:\n        return False\n\n"
        "def c(p, b):\n    return os.path.commonpath([p, b]) == b or cp([p, b]) == b\n\n"
        "def d(p, b):\n    return str(p).startswith(str(b))\n\n"
        "def ensure_dir(path, base):\n    return path.relative_to(base)\n")  # allowed in staging.py only
    got = inside_check_problems(pkg)
    assert [g.split(": ", 1)[1] for g in got] == [
        ".is_relative_to() in a", ".relative_to() in b", "os.path.commonpath() in c", "os.path.commonpath() in c",
        ".startswith(str(...)) in d", ".relative_to() in ensure_dir"], got
    assert all(g.startswith("lemonpack/fetch/planted.py:") for g in got)
