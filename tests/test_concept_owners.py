"""One owner per concept (issue 22, "What to build" 2), guarded by the syntax tree, not by text
shapes: each guard walks every module of ``lemonpack/`` with :mod:`ast` and fails on a copy of
its concept outside the owner, and each has a test that plants a copy in a temporary module and
shows the guard catching it (and the owner, or a clean module, passing).

Owners guarded here:

- ``lemonpack/runtime/launch/options.py``: the merge of launch options (a recipe's
  ``custom_options`` defaults, its ``recipe_options``, the model's, the load's);
- ``lemonpack/contract/model.py``: the recipe-id pattern (``RECIPE_ID_PATTERN``), in Python
  and in the JSON schemas of ``lemonpack/`` (the schemas that carry a copy are listed, and held
  equal to it).

Docstrings are documentation, not code, and are not looked at.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "lemonpack"


# -- launch options: lemonpack/runtime/launch/options.py ------------------------------------------

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
    found: list[str] = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).as_posix()
        if rel not in skip:
            found += check(rel, ast.parse(path.read_text(encoding="utf-8"), rel))
    return found


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
