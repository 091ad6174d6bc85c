"""One owner per concept (issue 22, "What to build" 2), guarded by the syntax tree, not by text
shapes: each guard walks every module of ``lemonpack/`` with :mod:`ast` and fails on a copy of
its concept outside the owner, and each has a test that plants a copy in a temporary module and
shows the guard catching it (and a clean module passing).

Owners guarded here:

- ``lemonpack/digest.py``: digest text (a ``"sha256:"`` literal, digest text built from the
  algorithm's name, a digest split at its ``:``) and hashing (``hashlib``: the one hashing sink
  is :class:`lemonpack.digest.Hasher`);
- ``lemonpack/oci/mediatypes.py``: every media-type string (``application/vnd.…``);
- ``lemonpack/oci/reference.py``: the image-reference type and its parsers.

Docstrings are documentation, not code, and are not looked at; ``tests/`` (fixtures) and data
files (JSON schemas) are not Python of ``lemonpack/`` and are not either.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "lemonpack"


# -- shared helpers ---------------------------------------------------------------------------

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


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _docstrings(tree: ast.AST) -> set[int]:
    """``id()`` of every docstring constant of a module, class or function in ``tree``."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and \
                    isinstance(first.value.value, str):
                out.add(id(first.value))
    return out


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
    for path in _modules():
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
