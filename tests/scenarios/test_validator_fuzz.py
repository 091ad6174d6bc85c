"""Property tests of the validator: any JSON value, any bytes, any mutation of a real recipe
gets an answer (problems, or ok and a model), never an exception outside the
:class:`~lemonpack.errors.LemonpackError` family, within a per-example deadline.

Both the loader and ``lemonpack lint`` (in process, text and ``--json``) are driven.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
from datetime import timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lemonpack.cli import main
from lemonpack.contract.loader import check_text, load_recipe_text
from lemonpack.strictjson import decode_json_bytes, parse_json_strict
from lemonpack.errors import ManifestError, Problem

EXAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "lemonade-examples"
RECIPES = [json.loads(p.read_text()) for p in sorted(EXAMPLES.glob("*.json"))]

# A generous per-example bound: a linear validator answers these in milliseconds.
# LEMONPACK_FUZZ_EXAMPLES raises the count for a longer hunt (the suite keeps it short).
FUZZ = settings(max_examples=int(os.environ.get("LEMONPACK_FUZZ_EXAMPLES", "80")), deadline=timedelta(seconds=3),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# Every code point, lone surrogates and controls included.
TEXT = st.text(st.characters(codec=None, categories=None), max_size=20)
KEYS = st.one_of(TEXT, st.sampled_from(["recipe", "platforms", "linux", "cpu", "args", "command", "arch",
                                        "capabilities", "health_probe", "env", "binary", "variant_of"]))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=-(10 ** 120), max_value=10 ** 120),
                    st.floats(allow_nan=False, allow_infinity=False), TEXT)
JSON = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                      st.dictionaries(KEYS, inner, max_size=5)), max_leaves=30)


def check_answer(text: str, file: str = "<fuzz>") -> list[Problem]:
    """The loader's answer for ``text``: problems, or a model when there are none."""
    doc, problems = check_text(text, file)
    assert all(isinstance(p, Problem) and isinstance(p.path, str) and "\n" not in str(p) for p in problems)
    try:
        recipe = load_recipe_text(text, file)
    except ManifestError as e:
        assert problems and list(e.problems) == problems
    else:
        assert not problems and recipe.canonical
    return problems


_DIR = tempfile.TemporaryDirectory(prefix="lemonpack-fuzz-")


def lint_answer(capsys, data: bytes) -> None:
    """``lemonpack lint`` (text and --json) on a file holding ``data``: exit 0 or 1, one
    line per problem, JSON that parses."""
    path = Path(_DIR.name) / "recipe.json"
    path.write_bytes(data)
    code = main(["lint", str(path)])
    text = capsys.readouterr()
    assert code in (0, 1) and "Traceback" not in text.out + text.err
    code_json = main(["lint", "--json", str(path)])
    out = json.loads(capsys.readouterr().out)
    assert code_json == code and out["ok"] == (code == 0)
    n = len(out["files"][0]["problems"])
    assert len(text.out.splitlines()) == max(1, n)


def dumps(value, ascii_only: bool) -> str:
    return json.dumps(value, ensure_ascii=ascii_only, allow_nan=False)


@FUZZ
@given(value=JSON, ascii_only=st.booleans())
def test_any_json_value_gets_an_answer(capsys, value, ascii_only):
    text = dumps(value, ascii_only)
    check_answer(text)
    if ascii_only:  # the same document as a file (surrogates only survive as escapes)
        lint_answer(capsys, text.encode())


@FUZZ
@given(data=st.binary(max_size=300))
def test_any_bytes_get_an_answer(capsys, data):
    text, problems = decode_json_bytes(data, "<fuzz>")
    if text is not None:
        parse_json_strict(text, "<fuzz>")
        check_answer(text)
    else:
        assert [p.rule for p in problems] == ["encoding"]
    lint_answer(capsys, data)


def _paths(value, base=()):
    yield base
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, base + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, base + (i,))


@st.composite
def mutated_recipes(draw):
    doc = copy.deepcopy(draw(st.sampled_from(RECIPES)))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        how = draw(st.sampled_from(["replace", "delete", "add", "nest"]))
        if how == "replace":
            parent[path[-1]] = draw(JSON)
        elif how == "delete":
            del parent[path[-1]]
        elif how == "add" and isinstance(parent, dict):
            parent[draw(KEYS)] = draw(JSON)
        elif how == "nest":
            parent[path[-1]] = [parent[path[-1]]] if draw(st.booleans()) else {"x": parent[path[-1]]}
    return doc


@FUZZ
@given(doc=mutated_recipes(), ascii_only=st.booleans(), text_edit=st.sampled_from(["", "dup", "newline", "deep"]))
def test_mutated_real_recipes_get_an_answer(capsys, doc, ascii_only, text_edit):
    text = dumps(doc, ascii_only)
    if text_edit == "dup" and text.startswith("{") and len(text) > 2:
        text = '{"recipe": "dup-key", ' + text[1:]
    elif text_edit == "newline":
        text = text.replace('",', '\\n",', 1)
    elif text_edit == "deep":
        text = text.replace("[", "[" * 40, 1).replace("]", "]" * 40, 1)
    check_answer(text)
    lint_answer(capsys, text.encode("utf-8", "surrogatepass"))


def test_unmutated_examples_pass():
    for doc in RECIPES:
        assert check_answer(json.dumps(doc)) == []
