"""Every error a room raises for the user is a typed one (a subclass of LemonpackError that says
what went wrong: :mod:`lemonpack.errors` and the rooms' own classes), never the bare base class:
callers catch by kind, ``--json`` reports the kind, and the exit code follows from it."""

from __future__ import annotations

import ast
from pathlib import Path

import lemonpack

PACKAGE = Path(lemonpack.__file__).parent

#: Rooms not converted yet (being split elsewhere): shrink this as they are, never grow it.
NOT_YET_CONVERTED: tuple[str, ...] = ()


def _bare_raises(path: Path) -> list[int]:
    """Line numbers of ``raise LemonpackError`` / ``raise LemonpackError(...)`` (also
    ``errors.LemonpackError``) in the module at ``path``."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if not isinstance(node, ast.Raise) or node.exc is None:
            continue
        target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        name = target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) else None
        if name == "LemonpackError":
            lines.append(node.lineno)
    return lines


def _rel(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def test_rooms_raise_typed_errors_not_the_bare_base_class():
    found = [f"lemonpack/{_rel(p)}:{n}" for p in sorted(PACKAGE.rglob("*.py"))
             if not _rel(p).startswith(NOT_YET_CONVERTED) for n in _bare_raises(p)]
    assert not found, ("raise a typed error (lemonpack.errors, or the room's own class) instead of the bare "
                       "LemonpackError at: " + ", ".join(found))


def test_the_allowlist_names_rooms_that_still_need_it():
    """An allowlisted room that is converted must leave the list (so it cannot regress)."""
    still_bare = {prefix for prefix in NOT_YET_CONVERTED
                  for p in PACKAGE.rglob("*.py") if _rel(p).startswith(prefix) and _bare_raises(p)}
    assert still_bare == set(NOT_YET_CONVERTED), (
        f"converted, remove from NOT_YET_CONVERTED: {sorted(set(NOT_YET_CONVERTED) - still_bare)}")


def test_the_check_sees_both_spellings(tmp_path):
    """A test that cannot fail is a defect: the walker finds the call, the attribute and the bare name."""
    f = tmp_path / "m.py"
    f.write_text("from lemonpack import errors\nfrom lemonpack.errors import LemonpackError, UsageError\n"
                 "def a():\n    raise LemonpackError('x')\n"
                 "def b():\n    raise errors.LemonpackError('y') from None\n"
                 "def c():\n    raise LemonpackError\n"
                 "def d():\n    raise UsageError('fine')\n")
    assert _bare_raises(f) == [4, 6, 8]
