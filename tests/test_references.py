"""No dangling file references: every ``*.md`` file and every ``<dir>/<name>.py`` path the code
and the docs name exists; every ``:mod:`` a docstring names is a module, and every fully
qualified cross reference (``:func:`lemonpack.x.y```, ``:class:`` ...) names something.

What is read: the code (``lemonpack/``, ``tests/``, ``scripts/``, ``bench/``, ``pyproject.toml``)
and the docs (every ``*.md`` file of the repository). In a Python file only its docstrings,
comments and string constants count (in ``tests/`` docstrings and comments only: a test's
strings name the temporary files it makes); any other text file is read whole. A bare
``name.py`` is not a path (the server room's table names ``main.py`` ...); a placeholder is
written ``<name>``, which names nothing.

A reference exists when it names a file relative to the repository root or to the referring
file's directory (a module path may also leave out ``lemonpack/``: ``runtime/launch/tokens.py``).
A module a change plans but has not written yet is marked so right after its path:
`` `lemonpack/trust/policy.py` (planned ``. Other projects' files (the OCI image-spec's
``manifest.md`` ...) are :data:`EXTERNAL`, each with the project that holds it: a name there
is never looked for here.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CODE_DIRS = ("lemonpack", "tests", "scripts", "bench")
CODE_FILES = ("pyproject.toml",)
SKIP_DIRS = {".git", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", "node_modules"}

#: Files of other projects the code and docs cite by name, each with where it lives.
EXTERNAL: dict[str, str] = {
    # OCI image-spec v1.1 (opencontainers/image-spec)
    "image-layout.md": "opencontainers/image-spec", "manifest.md": "opencontainers/image-spec",
    "image-index.md": "opencontainers/image-spec", "descriptor.md": "opencontainers/image-spec",
    "layer.md": "opencontainers/image-spec", "config.md": "opencontainers/image-spec",
    "annotations.md": "opencontainers/image-spec", "media-types.md": "opencontainers/image-spec",
    "considerations.md": "opencontainers/image-spec",
    # OCI distribution-spec v1.1 and distribution/distribution's token auth
    "spec.md": "opencontainers/distribution-spec", "docs/spec/auth/token.md": "distribution/distribution",
    "oauth.md": "distribution/distribution", "jwt.md": "distribution/distribution",
    # the rest
    "specs/SIGNATURE_SPEC.md": "sigstore/cosign",
    "docs/command-reference.md": "containerd/nerdctl",
    "examples/server/README.md": "leejet/stable-diffusion.cpp",
    "docs/gguf.md": "ggml-org/ggml",
    "LoaderDriverInterface.md": "KhronosGroup/Vulkan-Loader",
    # model artifacts (issue 23): CNCF ModelPack, KitOps, RamaLama
    "docs/spec.md": "modelpack/model-spec", "pkg/artifact/spec.md": "kitops-ml/kitops",
    "docs/ramalama-oci.5.md": "containers/ramalama", "ramalama/annotations.py": "containers/ramalama",
    "ramalama/transports/oci/oci.py": "containers/ramalama",
}

_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+")
_MD = re.compile(r"(?<![\w/.<>-])((?:\.\.?/)*(?:[\w-][\w.-]*/)*[\w-][\w.-]*\.md)(?![\w-])")
_PY_PATH = re.compile(r"(?<![\w/.<>-])((?:\.\.?/)*(?:[\w-][\w.-]*/)+[\w-][\w.-]*\.py)(?![\w-])")
_PLANNED = re.compile(r"`?\s*\(planned\b")


def python_texts(path: Path, source: str, *, strings: bool) -> list[tuple[int, str]]:
    """``[(line, text)]`` of a Python file's docstrings and comments (and, with ``strings``,
    every other string constant): the parts of code that name files for a reader."""
    out: list[tuple[int, str]] = []
    tree = ast.parse(source, str(path))
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                docstrings.add(id(first.value))
                out.append((first.lineno, first.value.value))
    if strings:
        out += [(n.lineno, n.value) for n in ast.walk(tree)
                if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.string))
    return out


def references(text: str, *, py_paths: bool = True) -> list[tuple[int, str]]:
    """``[(line offset, reference)]``: the ``*.md`` names and (unless not ``py_paths``) the
    ``<dir>/<name>.py`` paths in ``text``, URLs left out, and a reference followed by
    ``(planned`` left out."""
    out = []
    for n, line in enumerate(text.splitlines()):
        line = _URL.sub(" ", line)
        for pattern in (_MD, _PY_PATH) if py_paths else (_MD,):
            for m in pattern.finditer(line):
                if not _PLANNED.match(line, m.end()):
                    out.append((n, m.group(1)))
    return out


def resolves(ref: str, referrer: Path, root: Path) -> bool:
    """Whether ``ref`` names a file relative to ``root``, to ``referrer``'s directory, or (a
    ``.py`` path) to ``root/lemonpack``; or is one of :data:`EXTERNAL`."""
    if ref in EXTERNAL:
        return True
    bases = [root, referrer.parent] + ([root / "lemonpack"] if ref.endswith(".py") else [])
    return any((base / ref).is_file() for base in bases)


def _files(root: Path):
    for top in CODE_DIRS:
        for path in sorted((root / top).rglob("*")):
            if path.is_file() and not path.is_symlink() and not SKIP_DIRS & set(path.relative_to(root).parts):
                yield path
    for name in CODE_FILES:
        if (root / name).is_file():
            yield root / name
    for path in sorted(root.rglob("*.md")):
        rel = path.relative_to(root)
        if rel.parts[0] not in CODE_DIRS and not SKIP_DIRS & set(rel.parts) and not path.is_symlink():
            yield path


def dangling(root: Path) -> list[str]:
    """``["FILE:LINE: REF"]`` of every reference under ``root`` that names no file."""
    wrong = []
    for path in _files(root):
        rel = path.relative_to(root)
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if path.suffix == ".py":
            try:
                parts = python_texts(path, text, strings=rel.parts[0] != "tests")
            except SyntaxError:  # a fixture that is not Python: read whole
                parts = [(1, text)]
        else:
            parts = [(1, text)]
        for line, part in parts:  # pyproject.toml's .py paths are package-data globs, relative to their package
            for offset, ref in references(part, py_paths=path.name != "pyproject.toml"):
                if not resolves(ref, path, root):
                    wrong.append(f"{rel}:{line + offset}: {ref}")
    return sorted(set(wrong))


def test_no_dangling_file_references():
    wrong = dangling(ROOT)
    assert not wrong, ("files named but not in the repository (fix the name, or list another "
                       "project's file in EXTERNAL with its project):\n" + "\n".join(wrong))


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_a_planted_dangling_reference_is_found(tmp_path):
    root = _tree(tmp_path, {
        "README.md": "See docs/a.md, [b](docs/b.md), `lemonpack/x/y.py`, `x/y.py`, `x/gone.py`, `x/new.py` (planned).\n"
                     "Specs: manifest.md, https://example.org/spec/none.md.\n",
        "docs/a.md": "Back to [the readme](../README.md); DESIGN.md.\n",
        "lemonpack/__init__.py": '"""Rooms (see DESIGN.md)."""\nX = "docs/a.md"  # STYLE.md\nY = "gone.md"\n',
        "lemonpack/x/__init__.py": "",
        "lemonpack/x/y.py": '"""Notes: ``NOTES.md`` next to this file; tested by ``tests/test_y.py``."""\n',
        "lemonpack/x/NOTES.md": "notes\n",
        "tests/test_t.py": '"""Reads README.md."""\nP = "RESULTS.md"  # a temporary file: not a reference\n',
        "pyproject.toml": 'readme = "README.md"\n# the code follows STYLE.md\n"x" = ["tree/y.py"]\n',
    })
    assert dangling(root) == sorted([
        "README.md:1: docs/b.md", "README.md:1: x/gone.py", "docs/a.md:1: DESIGN.md",
        "lemonpack/x/y.py:1: tests/test_y.py",
        "lemonpack/__init__.py:1: DESIGN.md", "lemonpack/__init__.py:2: STYLE.md", "lemonpack/__init__.py:3: gone.md",
        "pyproject.toml:2: STYLE.md",
    ])


@pytest.mark.parametrize("text, expected", [
    ("docs/architecture.md, ../bench/RESULTS.md and README.md", ["docs/architecture.md", "../bench/RESULTS.md", "README.md"]),
    ("https://github.com/ggml-org/ggml/blob/master/docs/gguf.md", []),
    ("api/changes/NNNN-<slug>.md", []),
    ("`lemonpack/trust/policy.py` (planned, issue 24)", []),
    ("`runtime/launch/tokens.py`, bare main.py", ["runtime/launch/tokens.py"]),
])
def test_references_in_a_line(text, expected):
    assert [r for _, r in references(text)] == expected


def module_names(package: Path) -> set[str]:
    """Every module and package under ``package`` as a dotted name (``lemonpack.oci.layer``)."""
    root = package.parent
    return {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
            for p in package.rglob("*.py") if "tree" not in p.relative_to(package).parts}


_MOD = re.compile(r":mod:`~?([\w.]+)`")


def dangling_modules(package: Path) -> list[str]:
    """``["FILE:LINE: :mod:`X`"]`` of every ``:mod:`` in ``package``'s code naming no module;
    ``.name`` is relative to the file's package, as in a relative import."""
    names, wrong = module_names(package), []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent)
        if "tree" in path.relative_to(package).parts:
            continue
        here = list(rel.with_suffix("").parts)
        pkg = here[:-1] if path.name != "__init__.py" else here[:-1]
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for ref in _MOD.findall(line):
                full = ref
                if ref.startswith("."):
                    dots = len(ref) - len(ref.lstrip("."))
                    base = pkg[: len(pkg) - (dots - 1)]
                    full = ".".join(base + ([ref.lstrip(".")] if ref.lstrip(".") else []))
                if full not in names:
                    wrong.append(f"{rel}:{n}: :mod:`{ref}`")
    return wrong


def test_every_mod_reference_names_a_module():
    wrong = dangling_modules(ROOT / "lemonpack")
    assert not wrong, ":mod: references to no module:\n" + "\n".join(wrong)


def test_a_planted_mod_reference_to_no_module_is_found(tmp_path):
    root = _tree(tmp_path, {
        "lemonpack/__init__.py": '"""See :mod:`lemonpack.a.b` and :mod:`lemonpack.gone`."""\n',
        "lemonpack/a/__init__.py": '"""Modules: :mod:`.b`, :mod:`.c`, :mod:`~lemonpack.a`."""\n',
        "lemonpack/a/b.py": '"""In the style of :mod:`.serving`; see :mod:`.c` and :mod:`..a`."""\n',
        "lemonpack/a/c.py": "",
    })
    assert dangling_modules(root / "lemonpack") == [
        "lemonpack/__init__.py:1: :mod:`lemonpack.gone`", "lemonpack/a/b.py:1: :mod:`.serving`"]


_XREF = re.compile(r":(?:func|class|meth|data|attr|exc|obj):`~?([A-Za-z_]\w*(?:\.\w+)+)`")


def dangling_names(package: Path) -> list[str]:
    """``["FILE:LINE: NAME"]`` of every fully qualified cross reference (``:func:`PKG.mod.name```,
    ``:class:``, ``:meth:`` ...) in ``package``'s code whose target cannot be found: the longest
    importable module prefix, then attributes. Names relative to a module or class (``:meth:`close```)
    are a reader's shorthand and are not looked up. ``package`` must be importable."""
    import importlib

    wrong = []
    for path in sorted(package.rglob("*.py")):
        if "tree" in path.relative_to(package).parts:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for name in _XREF.findall(line):
                parts = name.split(".")
                if parts[0] != package.name:
                    continue
                found = False
                for k in range(len(parts), 0, -1):
                    try:
                        obj = importlib.import_module(".".join(parts[:k]))
                    except ImportError:
                        continue
                    found = True
                    for attr in parts[k:]:
                        if not hasattr(obj, attr):
                            found = False
                            break
                        obj = getattr(obj, attr)
                    break
                if not found:
                    wrong.append(f"{path.relative_to(package.parent)}:{n}: {name}")
    return wrong


def test_every_qualified_cross_reference_names_something():
    wrong = dangling_names(ROOT / "lemonpack")
    assert not wrong, "cross references to nothing:\n" + "\n".join(wrong)


def test_a_planted_cross_reference_to_nothing_is_found(tmp_path, monkeypatch):
    _tree(tmp_path, {
        "plantpkg/__init__.py": '"""See :func:`plantpkg.a.f`, :class:`~plantpkg.a.C`, :meth:`plantpkg.a.C.m`."""\n',
        "plantpkg/a.py": '"""Moved: :func:`plantpkg.a.build`, :meth:`plantpkg.a.C.gone`, :mod:`x`; local :meth:`m`."""\n'
                         "def f(): pass\nclass C:\n    def m(self): pass\n",
        "plantpkg/b.py": '"""Gone: :data:`plantpkg.old.Explain`."""\n',
    })
    monkeypatch.syspath_prepend(str(tmp_path))
    assert dangling_names(tmp_path / "plantpkg") == [
        "plantpkg/a.py:1: plantpkg.a.build", "plantpkg/a.py:1: plantpkg.a.C.gone", "plantpkg/b.py:1: plantpkg.old.Explain"]
