"""POSIX trust checks for recipe descriptor files (RFC section 8, "Discovery and integrity").

A descriptor is loaded only when all of these hold:

- the file is a regular file and not a symbolic link (checked with ``lstat``);
- it has no group or world write bit (``mode & 0o022 == 0``);
- it is owned by the effective user (``geteuid()``) when found in a *user* directory,
  by root (uid 0) when found in a *system* directory;
- every ancestor directory, up to ``/``, is not group or world writable unless it has
  the sticky bit (``/tmp`` style, mode ``1777``). Ancestors are taken both from the
  path as written and from its symlink-resolved form, so a symlinked directory is
  judged by where it really points *and* by the directory holding the link.

The checks are pure functions over ``os.stat_result`` values (:func:`file_problems`,
:func:`ancestor_problem`) so tests can feed them any mode and owner; :func:`check_descriptor`
is the thin impure wrapper that performs the ``lstat`` calls. Ancestor ownership is not
checked (the RFC does not ask for it). On non-POSIX systems the checks are skipped: the
Windows DACL rules of the RFC are not implemented (lemonpack targets Linux).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Scope = Literal["user", "system"]

#: The write bits that make a file or directory untrustworthy (group and other write).
UNSAFE_WRITE_BITS = stat.S_IWGRP | stat.S_IWOTH  # 0o022


@dataclass(frozen=True)
class TrustViolation:
    """One failed trust rule.

    ``path`` is the file or ancestor directory at fault (as a string), ``rule`` a stable
    id (``symlink``, ``not-regular``, ``writable-file``, ``owner``, ``writable-ancestor``,
    ``unstatable``) and ``message`` a sentence for the user.
    """

    path: str
    rule: str
    message: str

    def __str__(self) -> str:
        return self.message


def expected_owner(scope: Scope, euid: int) -> int:
    """The uid that must own a descriptor: ``euid`` for ``user`` scope, 0 for ``system``."""
    return euid if scope == "user" else 0


def file_problems(path: str, st: os.stat_result, scope: Scope, euid: int) -> list[TrustViolation]:
    """Trust violations of the descriptor file itself, from its ``lstat`` result ``st``.

    ``scope`` is ``user`` or ``system`` (which owner is required), ``euid`` the effective
    uid of this process. Returns every violation found (empty list: trusted). A symlink
    is reported alone (its mode and owner are those of the link, meaningless here).
    """
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        return [TrustViolation(path, "symlink", f"{path} is a symbolic link; descriptors must be regular files")]
    if not stat.S_ISREG(mode):
        return [TrustViolation(path, "not-regular", f"{path} is not a regular file")]
    out: list[TrustViolation] = []
    if mode & UNSAFE_WRITE_BITS:
        out.append(TrustViolation(
            path, "writable-file",
            f"{path} is group or world writable (mode {stat.S_IMODE(mode):04o}); "
            f"remove the write bits with chmod go-w"))
    owner = expected_owner(scope, euid)
    if st.st_uid != owner:
        who = "root" if scope == "system" else f"the current user (uid {euid})"
        out.append(TrustViolation(
            path, "owner",
            f"{path} is owned by uid {st.st_uid}; a {scope} descriptor must be owned by {who}"))
    return out


def ancestor_problem(path: str, st: os.stat_result) -> TrustViolation | None:
    """The violation of one ancestor directory (from its ``lstat`` result), or None.

    A directory that is group or world writable is accepted only with the sticky bit.
    A symlink or non-directory ancestor returns None: a link's own mode is meaningless,
    and the directory holding it and its resolved target are checked separately.
    """
    mode = st.st_mode
    if not stat.S_ISDIR(mode):
        return None
    if mode & UNSAFE_WRITE_BITS and not mode & stat.S_ISVTX:
        return TrustViolation(
            path, "writable-ancestor",
            f"ancestor directory {path} is group or world writable without the sticky bit "
            f"(mode {stat.S_IMODE(mode):04o})")
    return None


def ancestors(path: str | Path) -> tuple[str, ...]:
    """Every ancestor directory of ``path`` to check, nearest first, no duplicates.

    Both the lexical parents of the absolute path and the parents of its fully resolved
    (``realpath``) form are included, so a link anywhere on the way is judged twice:
    where it lives and where it leads.
    """
    lexical = Path(os.path.abspath(path))
    resolved = Path(os.path.realpath(lexical.parent)) / lexical.name
    seen: dict[str, None] = {}
    for p in (lexical, resolved):
        for parent in p.parents:
            seen.setdefault(str(parent), None)
    return tuple(seen)


def check_descriptor(path: str | Path, scope: Scope, *, euid: int | None = None,
                     st: os.stat_result | None = None) -> tuple[TrustViolation, ...]:
    """All trust violations of the descriptor at ``path`` (empty tuple: load it).

    ``st`` is the file's ``lstat`` result when the caller already has it; ``euid``
    defaults to ``os.geteuid()``. Never raises for file-system errors: an ``lstat``
    failure is itself a violation (rule ``unstatable``). On non-POSIX systems returns ().
    """
    if os.name != "posix":
        return ()
    file = str(path)
    if euid is None:
        euid = os.geteuid()
    if st is None:
        try:
            st = os.lstat(file)
        except OSError as e:
            return (TrustViolation(file, "unstatable", f"cannot stat {file}: {e.strerror}"),)
    out = file_problems(file, st, scope, euid)
    for parent in ancestors(file):
        try:
            pst = os.lstat(parent)
        except OSError as e:
            out.append(TrustViolation(parent, "unstatable", f"cannot stat ancestor {parent}: {e.strerror}"))
            continue
        problem = ancestor_problem(parent, pst)
        if problem is not None:
            out.append(problem)
    return tuple(out)


__all__ = [
    "Scope", "TrustViolation", "UNSAFE_WRITE_BITS", "ancestor_problem", "ancestors", "check_descriptor",
    "expected_owner", "file_problems",
]
