"""One owner per concept (issue 22), guarded by the syntax tree, not by text patterns: each
guard walks every module of ``lemonpack/`` with :mod:`ast` and fails on a second copy of a
concept outside its owner; each guard has a test that plants a copy in a temporary package
and shows the guard catching it (and leaving the owner alone).

Among them: ``lemonpack/digest.py`` owns digest text (a ``"sha256:"`` literal, digest text built
from the algorithm's name, a digest split at its ``:``) and hashing (``hashlib``: the one hashing
sink is :class:`lemonpack.digest.Hasher`); ``lemonpack/oci/mediatypes.py`` every media-type
string (``application/vnd.…``); ``lemonpack/oci/reference.py`` the image-reference type and its
parsers; ``lemonpack/digest.py``'s ``FileDigests`` the one digest trusted by a file's stat facts.
Docstrings are documentation, not code, and are not looked at; ``tests/`` (fixtures)
and data files (JSON schemas) are not Python of ``lemonpack/`` either."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
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


# -- launch options: lemonpack/runtime/launch/options.py ------------------------------------------
# (The guards of this section and the next do not look at docstrings: documentation, not code.)

OPTIONS_OWNER = "lemonpack/runtime/launch/options.py"
#: ``extends`` merges options between recipes (RFC section 6): the contract's own merge, which
#: the launch merge applies step by step.
OPTIONS_MERGE_ALLOWED = {"lemonpack/contract/extends.py": "extends: a base's options into the child (RFC 6)"}
#: The attributes that hold one layer of launch options (a recipe's, a model's).
_LAYERS = frozenset({"recipe_options", "custom_options"})


def _layer(node: ast.AST) -> str | None:
    """The source of ``node`` when it reads one options layer: ``X.recipe_options``,
    ``X.custom_options`` or ``getattr(X, "recipe_options", ...)``; else None."""
    if isinstance(node, ast.Attribute) and node.attr in _LAYERS:
        return ast.unparse(node)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in _LAYERS:
        return ast.unparse(node)
    return None


def _layer_base(node: ast.AST) -> str | None:
    """The object whose layer ``node`` reads (``served.spec`` of ``served.spec.recipe_options``)."""
    if _layer(node) is None:
        return None
    if isinstance(node, ast.Attribute):
        return ast.unparse(node.value)
    assert isinstance(node, ast.Call)  # getattr(X, "recipe_options")
    return ast.unparse(node.args[0])


def options_merges(module: str, tree: ast.AST) -> list[str]:
    """Launch options merged outside :mod:`lemonpack.runtime.launch.options`, as
    ``module:line: what``: a call of ``merge_recipe_options``; a custom option's
    ``default_value`` read (``o["default_value"]``, ``o.get("default_value")``); a layer
    combined with others (``{**X.recipe_options, ...}``, ``d.update(X.recipe_options)``,
    ``dict(X.recipe_options, ...)`` with a second source, ``ChainMap``, ``|``); one function
    reading the layers of two objects (``a.recipe_options.get(k) or b.recipe_options.get(k)``)."""
    out: list[str] = []

    def hit(node: ast.AST, what: str) -> None:
        out.append(f"{module}:{getattr(node, 'lineno', 0)}: {what}: {ast.unparse(node)[:120]}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else \
                node.func.id if isinstance(node.func, ast.Name) else ""
            args = [*node.args, *(k.value for k in node.keywords)]
            if name == "merge_recipe_options":
                hit(node, "merge_recipe_options called")
            elif name == "get" and node.args and isinstance(node.args[0], ast.Constant) \
                    and node.args[0].value == "default_value":
                hit(node, "a custom option's default_value read")
            elif name in ("update", "ChainMap") and any(_layer(a) for a in args):
                hit(node, "an options layer merged")
            elif name == "dict" and len(args) > 1 and any(_layer(a) for a in args):
                hit(node, "an options layer merged")
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                and node.slice.value == "default_value":
            hit(node, "a custom option's default_value read")
        elif isinstance(node, ast.Dict) and any(k is None and _layer(v) for k, v in zip(node.keys, node.values)):
            hit(node, "an options layer merged")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr) and (_layer(node.left) or _layer(node.right)):
            hit(node, "an options layer merged")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            bases = {b for n in ast.walk(node) if (b := _layer_base(n)) is not None}
            if len(bases) > 1:
                out.append(f"{module}:{node.lineno}: {node.name} reads the options of {', '.join(sorted(bases))}")
    return sorted(set(out))


def _walk_package(package: Path, check, skip: set[str]) -> list[str]:
    """``check(module, tree)`` over every module of ``package`` (:func:`modules`) not in ``skip``."""
    return [f for rel, tree in modules(package) if rel not in skip for f in check(rel, tree)]


def test_launch_options_are_merged_in_launch_options_py_only():
    found = _walk_package(PACKAGE, options_merges, {OPTIONS_OWNER, *OPTIONS_MERGE_ALLOWED})
    assert not found, ("launch options merged outside lemonpack/runtime/launch/options.py (call launch_options, "
                       "and memory_options for the estimate's figures):\n" + "\n".join(found))


def test_the_options_guard_catches_planted_merges(tmp_path):
    """Each way of merging (or picking across) option layers by hand, planted in a module:
    every one is found; the owner and a module reading one merged mapping pass."""
    planted = {
        "driver_copy.py": "def est(served, options):\n"
                          "    merged = {**served.recipe.recipe_options, **served.spec.recipe_options, **options}\n"
                          "    return merged.get('ctx_size')\n",
        "build_copy.py": "def merged(recipe, model, options):\n"
                         "    out = {o['name']: o['default_value'] for o in recipe.custom_options}\n"
                         "    out.update(model.recipe_options)\n"
                         "    return out\n",
        "pick_copy.py": "def device(rec, spec, options):\n"
                        "    return options.get('device') or spec.recipe_options.get('device') "
                        "or rec.recipe_options.get('device')\n",
        "getattr_copy.py": "def memory(self, recipe):\n"
                           "    opts = dict(getattr(self.entry, 'recipe_options', None) or {})\n"
                           "    return opts | recipe.recipe_options\n",
        "extends_copy.py": "from lemonpack.contract.extends import merge_recipe_options\n"
                           "def opts(recipe, model):\n"
                           "    return merge_recipe_options(recipe.recipe_options, model.recipe_options)\n",
        "chain_copy.py": "from collections import ChainMap\n"
                         "def opts(load, model, defaults):\n"
                         "    return ChainMap(load, model.recipe_options, defaults)\n",
        "get_default.py": "def default(option):\n    return option.get('default_value')\n",
    }
    pkg = tmp_path / "lemonpack"
    (pkg / "runtime" / "launch").mkdir(parents=True)
    for name, source in planted.items():
        (pkg / name).write_text(source)
    (pkg / "runtime" / "launch" / "options.py").write_text(planted["build_copy.py"])  # the owner may
    (pkg / "clean.py").write_text("def token(ctx, kind):\n    return ctx.recipe_options.get(kind)\n"
                                  "def show(e):\n    return dict(e.recipe_options)\n")
    found = _walk_package(pkg, options_merges, {OPTIONS_OWNER})
    assert {f.split(":")[0].removeprefix("lemonpack/") for f in found} == set(planted), found
    assert any("reads the options of rec, spec" in f for f in found)
    assert any("default_value read" in f and "build_copy" in f for f in found)


# -- the recipe-id pattern: lemonpack/contract/model.py --------------------------------------------

RECIPE_ID_OWNER = "lemonpack/contract/model.py"
#: JSON schemas that carry a copy of the pattern (JSON cannot import), each path to it; held
#: equal to ``RECIPE_ID_PATTERN`` by :func:`test_the_schema_copies_equal_the_owner`.
RECIPE_ID_SCHEMA_COPIES = {
    "lemonpack/contract/schema/recipe-v1.schema.json": (("properties", "recipe", "pattern"),
                                                       ("properties", "extends", "pattern"),
                                                       ("properties", "variant_of", "pattern")),
    "lemonpack/runtime/models/schema/user_models.schema.json": (("$defs", "recipe_id", "pattern"),),
}
#: Strings a recipe id pattern accepts, and strings it refuses (RFC 4.1: ^[a-z0-9][a-z0-9_-]{1,63}$).
_IDS = ("ab", "llamacpp", "llamacpp-vulkan_custom", "0x", "a-", "a_", "9" + "z" * 63)
_NOT_IDS = ("", "a", "A", "Ab", "aB", "-ab", "_ab", "a.b", "a b", "a/b", "é1", "a" * 65, "ab\n", "ab:c")


def is_recipe_id_regex(text: str) -> bool:
    """Whether ``text`` is a regex that behaves as the recipe-id pattern (it accepts every one
    of :data:`_IDS` and none of :data:`_NOT_IDS`): a copy in any spelling
    (``\\A[a-z\\d][-_a-z\\d]{1,63}\\Z`` too), not only the one text."""
    if "[" not in text:
        return False
    try:
        rx = re.compile(text)
    except (re.error, RecursionError, OverflowError):
        return False
    return all(rx.fullmatch(s) for s in _IDS) and not any(rx.fullmatch(s) for s in _NOT_IDS)


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def recipe_id_regexes(module: str, tree: ast.AST) -> list[str]:
    """Recipe-id regexes in string constants of a module (f-string parts included), the whole
    constant or one of its words (a pattern quoted in a message): ``module:line: text``."""
    docs = _docstrings(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            words = [node.value, *(w.strip("`'\"(),;.") for w in node.value.split())]
            if any(is_recipe_id_regex(w) for w in dict.fromkeys(words)):
                out.append(f"{module}:{node.lineno}: {node.value[:120]}")
    return out


def _json_patterns(doc, path=()):
    """``(path, value)`` of every ``pattern`` keyword's string in a JSON document."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k == "pattern" and isinstance(v, str):
                yield (*path, k), v
            else:
                yield from _json_patterns(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _json_patterns(v, (*path, i))


def schema_recipe_id_copies(package: Path, allowed) -> list[str]:
    """Recipe-id patterns in the JSON files of ``package`` other than the ``allowed``
    ``{file: (path, ...)}`` places: ``file: path: pattern``."""
    out = []
    for path in sorted(package.rglob("*.json")):
        rel = path.relative_to(package.parent).as_posix()
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, ValueError):
            continue
        for where, value in _json_patterns(doc):
            if is_recipe_id_regex(value) and where not in allowed.get(rel, ()):
                out.append(f"{rel}: {'/'.join(map(str, where))}: {value}")
    return out


def schema_copy_drift(package: Path, copies, pattern: str) -> list[str]:
    """The listed schema copies that are not ``pattern`` (or are missing): ``file: path: value``."""
    out = []
    for rel, wheres in copies.items():
        doc = json.loads((package.parent / rel).read_text(encoding="utf-8"))
        for where in wheres:
            node = doc
            for key in where:
                node = node.get(key) if isinstance(node, dict) else None
            if node != pattern:
                out.append(f"{rel}: {'/'.join(where)}: {node!r}")
    return out


def test_the_recipe_id_regex_is_written_in_its_owner_only():
    from lemonpack.contract.model import RECIPE_ID_PATTERN

    assert is_recipe_id_regex(RECIPE_ID_PATTERN)
    owner = recipe_id_regexes(RECIPE_ID_OWNER, ast.parse((ROOT / RECIPE_ID_OWNER).read_text(), RECIPE_ID_OWNER))
    assert len(owner) == 1, owner  # RECIPE_ID_PATTERN itself
    found = _walk_package(PACKAGE, recipe_id_regexes, {RECIPE_ID_OWNER})
    found += schema_recipe_id_copies(PACKAGE, RECIPE_ID_SCHEMA_COPIES)
    assert not found, ("a recipe-id regex outside lemonpack/contract/model.py (use RECIPE_ID_PATTERN; a JSON "
                       "schema's copy is listed in RECIPE_ID_SCHEMA_COPIES):\n" + "\n".join(found))


def test_the_schema_copies_equal_the_owner():
    from lemonpack.contract.model import RECIPE_ID_PATTERN

    assert schema_copy_drift(PACKAGE, RECIPE_ID_SCHEMA_COPIES, RECIPE_ID_PATTERN) == []


def test_the_recipe_id_guard_catches_planted_copies(tmp_path):
    """A copy in the owner's spelling, one reshaped, one quoted in a message, one in a schema,
    and a listed schema copy that drifted: each is found; near-miss patterns (other ids of the
    house: a release image name, a publisher id, a catalogue entry id) and docstrings are not."""
    pkg = tmp_path / "lemonpack"
    (pkg / "contract" / "schema").mkdir(parents=True)
    planted = {
        "same.py": 'import re\nRECIPE = re.compile(r"^[a-z0-9][a-z0-9_-]{1,63}$")\n',
        "reshaped.py": 'import re\nRID = re.compile(r"\\A[a-z\\d][-_a-z\\d]{1,63}\\Z")\n',
        "message.py": 'def why(v):\n    return f"recipe {v!r} must match ^[a-z0-9][a-z0-9_-]{{1,63}}$ (RFC 4.1)"\n',
    }
    for name, source in planted.items():
        (pkg / name).write_text(source)
    (pkg / "near.py").write_text('"""A recipe id is ^[a-z0-9][a-z0-9_-]{1,63}$ (a docstring)."""\n'
                                 'NAME = r"^[a-z0-9][a-z0-9_-]*$"\nPUB = r"^[a-z0-9][a-z0-9-]{0,62}$"\n'
                                 'ENTRY = r"^[a-z0-9][a-z0-9_.-]{0,99}$"\n')
    found = _walk_package(pkg, recipe_id_regexes, set())
    assert {f.split(":")[0].removeprefix("lemonpack/") for f in found} == set(planted), found
    schema = {"properties": {"recipe": {"pattern": "^[a-z0-9][a-z0-9_-]{1,63}$"},
                             "id": {"pattern": "^[a-z0-9][a-z0-9_-]{1,63}$"}}}
    (pkg / "contract" / "schema" / "x.schema.json").write_text(json.dumps(schema))
    listed = {"lemonpack/contract/schema/x.schema.json": (("properties", "recipe", "pattern"),)}
    assert schema_recipe_id_copies(pkg, listed) == [
        "lemonpack/contract/schema/x.schema.json: properties/id/pattern: ^[a-z0-9][a-z0-9_-]{1,63}$"]
    assert schema_copy_drift(pkg, listed, "^[a-z0-9][a-z0-9_-]{1,63}$") == []
    schema["properties"]["recipe"]["pattern"] = "^[a-z0-9][a-z0-9_-]{1,62}$"  # drifted: no longer a copy
    (pkg / "contract" / "schema" / "x.schema.json").write_text(json.dumps(schema))
    assert schema_copy_drift(pkg, listed, "^[a-z0-9][a-z0-9_-]{1,63}$") == [
        "lemonpack/contract/schema/x.schema.json: properties/recipe/pattern: '^[a-z0-9][a-z0-9_-]{1,62}$'"]


# -- helpers of the digest, media-type and reference guards ---------------------------------

# (``_docstrings`` is the recipe-id section's, above.)


@dataclass(frozen=True)
class Finding:
    """One copy of a concept: the module (relative to the repository), the line, the rule
    broken, and the offending text (a constant, or the source of a call)."""

    module: str
    line: int
    rule: str
    text: str

    def __str__(self) -> str:
        return f"{self.module}:{self.line}: {self.rule}: {self.text}"


def _package_modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _strings(tree: ast.AST):
    """``(constant, parent)`` for every string constant that is not a docstring (f-string parts
    included: ``f"sha256:{h}"`` holds the constant ``"sha256:"``)."""
    docs, parents = _docstrings(tree), _parents(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node, parents.get(id(node))


def _method_calls(tree: ast.AST, names: set[str]):
    """``(call, receiver source)`` of every ``X.name(...)`` call with ``name`` in ``names``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in names:
            yield node, ast.unparse(node.func.value)


def _first_arg(call: ast.Call) -> object:
    return call.args[0].value if call.args and isinstance(call.args[0], ast.Constant) else None


def _scan(check, owner: str, allowed: dict[tuple[str, str], str]) -> list[Finding]:
    """Every finding of ``check(module, tree)`` in ``lemonpack/`` outside ``owner``, minus the
    ``allowed`` ``(module, text)`` pairs."""
    found = []
    for path in _package_modules():
        rel = _rel(path)
        if rel == owner:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), rel)
        found += [f for f in check(rel, tree) if (f.module, f.text) not in allowed]
    return found


def _plant(tmp_path: Path, source: str, check) -> list[Finding]:
    """The findings of ``check`` in a module holding ``source`` (a planted copy)."""
    path = tmp_path / "planted.py"
    path.write_text(source, encoding="utf-8")
    return check("planted.py", ast.parse(source, str(path)))


def _unused(allowed: dict[tuple[str, str], str], check, owner: str) -> list[tuple[str, str]]:
    """Allowlist entries that no longer match anything (so the list cannot rot)."""
    seen = {(f.module, f.text) for f in _scan(check, owner, {})}
    return [key for key in allowed if key not in seen]


# -- digest text: lemonpack/digest.py ------------------------------------------------------------

DIGEST_OWNER = "lemonpack/digest.py"
_DIGESTISH = re.compile(r"digest|sha|image_id|hex", re.IGNORECASE)

#: Places that keep a literal or a split for a real reason, with the reason.
DIGEST_ALLOWED: dict[tuple[str, str], str] = {
    ("lemonpack/cli/catalogue_cmds.py", "sha256:HEX"):
        "the --sha256 option's metavar: help text naming the form, not a digest",
    ("lemonpack/oci/reference.py", "digest.split(':', 1)"):
        "the distribution grammar's digest of any algorithm (sha512 too), split before lemonpack's "
        "sha256 rule applies: the reference owner's job",
    ("lemonpack/oci/reference.py", "digest.partition(':')"):
        "check_pinned names the algorithm a foreign digest uses (sha512, md5...) in its message",
}


def digest_copies(module: str, tree: ast.AST) -> list[Finding]:
    """Digest text written or read outside :mod:`lemonpack.digest`: a string starting with
    ``sha256:``; a string ending with ``sha256:`` joined to something (``f"(sha256:{h})"``,
    ``"sha256:" + h`` inside a message); the algorithm's name ``"sha256"`` built into text
    (``+``, ``%``, an f-string, ``":".join``); a ``split``/``partition`` at ``":"`` or a
    ``[7:]`` slice of something named like a digest."""
    out = []
    for node, parent in _strings(tree):
        text = node.value
        if text.startswith("sha256:"):
            out.append(Finding(module, node.lineno, "a sha256: literal", text))
        elif text.endswith("sha256:") and (isinstance(parent, ast.JoinedStr) or _concatenation(parent)):
            out.append(Finding(module, node.lineno, "digest text built by hand", text))
        elif text == "sha256" and (_starts_text(node, parent) or (
                isinstance(parent, (ast.Tuple, ast.List)) and _in_join_or_format(tree, parent))):
            out.append(Finding(module, node.lineno, "digest text built from the algorithm's name", text))
    for call, receiver in _method_calls(tree, {"split", "rsplit", "partition", "rpartition"}):
        if _first_arg(call) == ":" and _DIGESTISH.search(receiver):
            out.append(Finding(module, call.lineno, "a digest split by hand", ast.unparse(call)))
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice) and \
                isinstance(node.slice.lower, ast.Constant) and node.slice.lower.value == len("sha256:") and \
                node.slice.upper is None and _DIGESTISH.search(ast.unparse(node.value)):
            out.append(Finding(module, node.lineno, "a digest's prefix cut by hand", ast.unparse(node)))
    return out


def _concatenation(node: ast.AST | None) -> bool:
    """Whether ``node`` joins text: ``a + b`` or ``fmt % args`` (not ``path / "sha256"``)."""
    return isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod))


def _starts_text(node: ast.Constant, parent: ast.AST | None) -> bool:
    """Whether ``node`` begins text that goes on: ``"sha256" + x`` or ``f"sha256{sep}{h}"``
    (not ``PREFIX + "sha256"``, an annotation key)."""
    if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Add):
        return parent.left is node
    if isinstance(parent, ast.JoinedStr):
        return parent.values[0] is node and len(parent.values) > 1
    return False


def _in_join_or_format(tree: ast.AST, seq: ast.AST) -> bool:
    parent = _parents(tree).get(id(seq))
    return (isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Mod)) or (
        isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute) and parent.func.attr == "join")


def hashing_copies(module: str, tree: ast.AST) -> list[Finding]:
    """Hashing outside :mod:`lemonpack.digest`: ``hashlib`` imported or used (a hashing sink
    class, an incremental hash in a loop, a one-off ``sha256(data).hexdigest()``): hash through
    ``Digest.of_bytes``, ``Hasher`` (tee, sizes, a writer thread) or ``HashingReader``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] in ("hashlib", "_hashlib") for a in node.names):
            out.append(Finding(module, node.lineno, "hashlib imported", "import hashlib"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("hashlib", "_hashlib"):
            out.append(Finding(module, node.lineno, "hashlib imported", f"from {node.module} import ..."))
        elif isinstance(node, ast.ClassDef) and any(isinstance(n, ast.Name) and n.id == "hashlib"
                                                    for n in ast.walk(node)):
            out.append(Finding(module, node.lineno, "a hashing sink class", node.name))
    return out


def test_digest_text_is_built_and_parsed_in_digest_py_only():
    found = _scan(digest_copies, DIGEST_OWNER, DIGEST_ALLOWED)
    assert not found, ("digest text outside lemonpack/digest.py (use Digest.parse/of_bytes, .hex, str(d), "
                       "sha256_text, hex_of):\n" + "\n".join(map(str, found)))


def test_hashing_happens_in_digest_py_only():
    found = _scan(hashing_copies, DIGEST_OWNER, {})
    assert not found, ("hashing outside lemonpack/digest.py (use Digest.of_bytes, Hasher, HashingReader, "
                       "file_digest):\n" + "\n".join(map(str, found)))


def test_the_digest_allowlist_has_no_stale_entry():
    assert not _unused(DIGEST_ALLOWED, digest_copies, DIGEST_OWNER)


def test_the_digest_guard_catches_planted_copies(tmp_path):
    planted = '''
"""A docstring may say sha256:<hex>."""
import hashlib
PREFIX = "sha256:"
def a(h): return "sha256:" + h
def b(h): return f"sha256:{h}"
def c(h, url): return f"artifact {url} (sha256:{h})"
def d(h): return "sha256" + ":" + h if h else f"sha256{':'}{h}"
def e(h): return "%s:%s" % ("sha256", h)
def f(h): return ":".join(["sha256", h])
def g(digest): return digest.split(":", 1)[1]
def h(image_id): return image_id.partition(":")[2]
def i(sha): return sha.removeprefix("sha256:")
def j(digest): return digest[7:]
'''
    found = _plant(tmp_path, planted, digest_copies)
    assert sorted(f.line for f in found) == [4, 5, 6, 7, 8, 8, 9, 10, 11, 12, 13, 14]
    assert not _plant(tmp_path, 'from lemonpack.digest import Digest, sha256_text\n'
                                'def a(h): return sha256_text(h)\n'
                                'def b(d): return Digest.parse(d).hex\n'
                                'def c(text): return text.split(":", 1)\n'
                                'def d(layout, h): return layout / "blobs" / "sha256" / h\n'
                                'KEY = "dev.lemonpack." + "sha256"\n', digest_copies)


def test_the_hashing_guard_catches_planted_sinks(tmp_path):
    planted = '''
import hashlib
from hashlib import sha256
class HashingWriter:
    def __init__(self, out):
        self.out, self.sha = out, hashlib.sha256()
    def write(self, data):
        self.sha.update(data)
        return self.out.write(data)
'''
    found = _plant(tmp_path, planted, hashing_copies)
    assert [(f.line, f.rule) for f in found] == [(2, "hashlib imported"), (3, "hashlib imported"),
                                                  (4, "a hashing sink class")]
    assert not _plant(tmp_path, 'from lemonpack.digest import Hasher\n'
                                'class Counting:\n'
                                '    def __init__(self, out):\n'
                                '        self.hash = Hasher(out)\n', hashing_copies)


# -- media types: lemonpack/oci/mediatypes.py ---------------------------------------------------

MEDIA_OWNER = "lemonpack/oci/mediatypes.py"
_MEDIA_PREFIX = "application/vnd."


def media_type_copies(module: str, tree: ast.AST) -> list[Finding]:
    """A media-type string (``application/vnd.`` …: OCI, Docker, CNCF, cosign, lemonpack's
    own) outside :mod:`lemonpack.oci.mediatypes`."""
    return [Finding(module, node.lineno, "a media-type literal", node.value) for node, _ in _strings(tree)
            if node.value.startswith(_MEDIA_PREFIX)]


def test_media_types_are_spelled_in_mediatypes_py_only():
    found = _scan(media_type_copies, MEDIA_OWNER, {})
    assert not found, ("media types outside lemonpack/oci/mediatypes.py (import its names):\n"
                       + "\n".join(map(str, found)))


def test_the_media_type_guard_catches_planted_copies(tmp_path):
    planted = '''
"""Reads application/vnd.oci.image.manifest.v1+json (documentation is fine)."""
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
LIST = ("application/vnd.docker.distribution.manifest.list.v2+json",)
def model(kind): return f"application/vnd.cncf.model.{kind}.v1+json"
SIG = "application/vnd.dev.cosign.simplesigning.v1+json"
'''
    assert sorted(f.line for f in _plant(tmp_path, planted, media_type_copies)) == [3, 4, 5, 6]
    assert not _plant(tmp_path, 'from lemonpack.oci.mediatypes import MEDIA_TYPE_IMAGE_MANIFEST\n'
                                'JSON = "application/json"\n', media_type_copies)


# -- image references: lemonpack/oci/reference.py ------------------------------------------------

REFERENCE_OWNER = "lemonpack/oci/reference.py"
_PARSER_NAME = re.compile(r"_?parse\w*ref(erence)?s?\Z")


def reference_copies(module: str, tree: ast.AST) -> list[Finding]:
    """A second image-reference type or parser outside :mod:`lemonpack.oci.reference`: a class
    named ``…Reference``, a function named ``parse…reference``/``parse…ref``, or an image
    reference split at its ``@`` by hand."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name.endswith("Reference"):
            out.append(Finding(module, node.lineno, "a second reference type", node.name))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _PARSER_NAME.match(node.name):
            out.append(Finding(module, node.lineno, "a second reference parser", node.name))
    for call, _receiver in _method_calls(tree, {"split", "rsplit", "partition", "rpartition"}):
        if _first_arg(call) == "@":
            out.append(Finding(module, call.lineno, "a reference split by hand", ast.unparse(call)))
    return out


def test_image_references_are_parsed_in_reference_py_only():
    found = _scan(reference_copies, REFERENCE_OWNER, {})
    assert not found, ("image references outside lemonpack/oci/reference.py (use ImageReference, "
                       "parse_reference, parse_registry_reference):\n" + "\n".join(map(str, found)))


def test_the_reference_guard_catches_planted_copies(tmp_path):
    planted = '''
from dataclasses import dataclass
@dataclass(frozen=True)
class Reference:
    host: str
    repository: str
def parse_reference(s):
    host, _, rest = s.partition("/")
    name, _, digest = rest.partition("@")
    return Reference(host, name)
def _parse_image_ref(s): return s.rsplit("@", 1)
'''
    found = _plant(tmp_path, planted, reference_copies)
    assert sorted((f.line, f.rule) for f in found) == [
        (4, "a second reference type"), (7, "a second reference parser"), (9, "a reference split by hand"),
        (11, "a reference split by hand"), (11, "a second reference parser")]
    assert not _plant(tmp_path, 'from lemonpack.oci.reference import parse_registry_reference\n'
                                'class RecipeRef: ...\n'
                                'def parse_listen(text): return text.rpartition(":")\n', reference_copies)


# -- file locks: lemonpack/files.py --------------------------------------------------------------

LOCK_OWNER = "lemonpack/files.py"


def flock_copies(module: str, tree: ast.AST) -> list[Finding]:
    """A file lock taken by hand outside :mod:`lemonpack.files` (whose ``locked`` and ``lock_fd``
    are the one helper): any use of the ``fcntl`` module's ``flock``/``lockf`` or its ``LOCK_*``
    constants, however ``fcntl`` was imported."""
    aliases = import_aliases(tree)  # type: ignore[arg-type]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            name = dotted(node, aliases) or ""
            if name.startswith("fcntl.") and (name[6:] in ("flock", "lockf") or name[6:].startswith("LOCK_")):
                out.append(Finding(module, node.lineno, "a file lock by hand", name))
        elif isinstance(node, ast.Name) and aliases.get(node.id, "").startswith(("fcntl.flock", "fcntl.lockf",
                                                                                   "fcntl.LOCK_")):
            out.append(Finding(module, node.lineno, "a file lock by hand", aliases[node.id]))
    return out


def test_file_locks_are_taken_in_files_py_only():
    found = _scan(flock_copies, LOCK_OWNER, {})
    assert not found, ("file locks taken outside lemonpack/files.py (use lemonpack.files.locked, or "
                       "lock_fd for a file opened for another reason):\n" + "\n".join(map(str, found)))


def test_the_lock_guard_catches_planted_copies(tmp_path):
    planted = '''
"""Holds an fcntl.flock (documentation is fine)."""
import fcntl
import fcntl as f
from fcntl import flock, LOCK_EX
def a(fd): fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
def b(fd): f.lockf(fd, f.LOCK_SH)
def c(fd): flock(fd, LOCK_EX)
'''
    found = _plant(tmp_path, planted, flock_copies)
    assert sorted(f.line for f in found) == [6, 6, 6, 7, 7, 8, 8], found
    assert not _plant(tmp_path, "from lemonpack.files import locked\nwith locked('x'):\n    pass\n", flock_copies)


# -- a digest trusted by stat facts: lemonpack/digest.py (FileDigests) ---------------------------

FACTS_OWNER = "lemonpack/digest.py"
#: Stat tuples that are not a recorded digest, each with why it is not FileDigests' concept.
FACTS_ALLOWED = {
    ("lemonpack/runtime/recipes/discovery.py", "(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, "
     "st.st_mode, st.st_uid, st.st_gid)"): "an in-memory cache of parsed recipe files (nothing recorded)",
    ("lemonpack/runtime/models/registry.py", "(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)"):
        "an in-memory cache of the parsed user_models.json (nothing recorded)",
    ("lemonpack/catalogue/index.py", "[st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]"):
        "the search index's stamp: three files verified together (index, compact index, code), not one file's digest",
}


def stat_facts_copies(module: str, tree: ast.AST) -> list[Finding]:
    """A second "digest of this file while its stat facts are unchanged" outside
    :class:`lemonpack.digest.FileDigests`: a tuple or list of stat fields holding both
    ``st_ctime_ns`` and ``st_ino`` (the facts such a record is checked against), or any use of
    a ``stat_facts`` name (the helper the four records each compared by hand)."""
    aliases = import_aliases(tree)  # type: ignore[arg-type]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List)):
            fields = {e.attr for e in node.elts if isinstance(e, ast.Attribute)}
            if {"st_ctime_ns", "st_ino"} <= fields:
                out.append(Finding(module, node.lineno, "stat facts gathered by hand", ast.unparse(node)))
        elif isinstance(node, ast.Name) and (node.id == "stat_facts" or aliases.get(node.id, "").endswith(".stat_facts")):
            out.append(Finding(module, node.lineno, "a second stat-facts helper", node.id))
        elif isinstance(node, ast.Attribute) and node.attr == "stat_facts":
            out.append(Finding(module, node.lineno, "a second stat-facts helper", ast.unparse(node)))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "stat_facts":
            out.append(Finding(module, node.lineno, "a second stat-facts helper", node.name))
    return out


def test_a_digest_trusted_by_stat_facts_lives_in_digest_py_only():
    found = _scan(stat_facts_copies, FACTS_OWNER, FACTS_ALLOWED)
    assert not found, ("stat facts compared outside lemonpack/digest.py (use lemonpack.digest.FileDigests: "
                       "known, record with the facts taken before hashing, forget, save):\n"
                       + "\n".join(map(str, found)))


def test_the_stat_facts_allowlist_has_no_stale_entry():
    assert not _unused(FACTS_ALLOWED, stat_facts_copies, FACTS_OWNER)


def test_the_stat_facts_guard_catches_planted_copies(tmp_path):
    planted = '''
"""Compares stat_facts (documentation is fine)."""
import os
from lemonpack.files import stat_facts as sf
def stat_facts(p): return os.lstat(p)
def a(p, rec): return rec["stat"] == sf(p)
def b(st): return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]
def c(p, files): return files.stat_facts(p)
def d(st): return (st.st_size, st.st_mtime_ns)
'''
    found = _plant(tmp_path, planted, stat_facts_copies)
    assert sorted(f.line for f in found) == [5, 6, 7, 8], found
    assert not _plant(tmp_path, "from lemonpack.digest import FileDigests\n"
                                "def a(r, p): return r.known(p) == FileDigests.facts(p)\n", stat_facts_copies)
