"""The one rule for what a tree of artifact files may contain, shared by the extractor
(:mod:`lemonpack.fetch.archive`, used by ``install`` and ``build``) and the OCI layer writer
(:mod:`lemonpack.oci.layer`). It sits below both rooms, like :mod:`lemonpack.errors`.

It also holds the one path-component rule and the one "is P inside B" test, used wherever a
name or a relative path taken from a file, an archive, a URL or an argument becomes part of a
path on disk or in an image (archive members, layer paths, mirror paths, ``--binary``, the Nix
sources, include headers, extension files, release recipe files, model checkpoints):

- :func:`component_problem` / :func:`safe_component`: one name. Refused: empty, ``.``, ``..``,
  and a name holding ``/``, a backslash (a separator on Windows: ``a\\..\\b`` is one harmless
  name here and a way out of the directory where a Windows artifact is unpacked) or NUL
  (which ends the name at the kernel);
- :func:`path_problem` / :func:`safe_relative_path`: a relative ``/``-separated path: not
  empty, not absolute (no leading ``/``), every component a safe one (so no empty component:
  ``a//b`` and ``a/`` are refused). Callers that read a format whose names are written
  loosely (tar's ``./a``, ``dir/``) normalise them first, then apply the rule;
- :func:`inside`: ``path`` is ``base`` or below it, lexically (no file is touched, no symlink
  resolved: pass ``os.path.realpath`` results to judge where a path resolves).

Each ``*_problem`` returns ``None`` (fine) or a short reason (``"'..' component"``,
``"absolute path"``, ...) that the caller puts in its own typed error naming the file and
the field.

And two checks on what a tree holds, each returning ``None`` (fine) or a one-line reason:

- :func:`name_problem`: a path component starting with ``.wh.`` is refused. In an OCI
  layer such a name is a *whiteout* (image-spec v1.1 ``layer.md``, "Whiteouts"): it
  deletes a sibling, or (``.wh..wh..opq``) empties its directory, so the file would vanish
  from the image or make it unloadable while an install keeps it. Refusing it everywhere
  keeps an installed tree and the unpacked image identical.
- :func:`symlink_problem`: a symlink is judged by where it *resolves*, not by its text.
  Its target is walked component by component from the link's directory, following the
  symlinks that already exist in the tree (physically, as the kernel does in
  ``path_resolution(7)``), and is refused when:

  * the target is empty, absolute or holds NUL;
  * a ``..`` would leave the root (e.g. ``s -> ../..`` at depth 2 is the root itself,
    so ``s/../etc`` leaves it, although ``s/../etc`` looks lexically inside);
  * a ``..`` follows a component that does not exist yet or is not a directory: a
    later member could make that component a symlink (``d -> .``) and so move the
    ``..`` outside after the check; by refusing it, every part of the walk that a
    later member could still create is a plain downward name;
  * more than :data:`MAX_SYMLINK_HOPS` symlinks are followed (loops included).

  What makes the verdict hold for the rest of an extraction: the extractor never writes
  through a symlinked parent, never replaces a symlink or a directory with a later member,
  and checks each link right after creating it (so a link through itself is a loop). The
  part of the walk that exists is then fixed, the part that does not is downward names
  whose symlinks, when created, pass this same check. The extractor runs the check once
  more over the finished tree, which is exactly what the layer writer sees, so the two
  agree on every tree.
"""

from __future__ import annotations

import os
import stat

WHITEOUT_PREFIX = ".wh."
"""OCI whiteout marker (image-spec v1.1 ``layer.md``); ``.wh..wh..opq`` is the opaque one."""

MAX_SYMLINK_HOPS = 40
"""Symlinks followed in one resolution before giving up: Linux's ``MAXSYMLINKS``
(``include/linux/namei.h``), so a chain the kernel refuses (ELOOP) is refused here too."""


def component_problem(name: str) -> str | None:
    """Why ``name`` may not be one component of a path, or ``None`` (module docstring):
    ``"empty component"``, ``"'.' component"``, ``"'..' component"``, ``"'/' in name"``,
    ``"backslash in name"``, ``"NUL in name"``."""
    if not name:
        return "empty component"
    if name in (".", ".."):
        return f"{name!r} component"
    if "/" in name:
        return "'/' in name"
    if "\\" in name:
        return "backslash in name"
    if "\x00" in name:
        return "NUL in name"
    return None


def safe_component(name: str) -> bool:
    """True when ``name`` is a safe path component (:func:`component_problem` finds nothing)."""
    return component_problem(name) is None


def path_problem(rel: str) -> str | None:
    """Why ``rel`` may not be a relative ``/``-separated path below a directory, or ``None``:
    ``"empty path"``, ``"absolute path"`` (a leading ``/``), or the first component's
    :func:`component_problem`."""
    if not rel:
        return "empty path"
    if rel.startswith("/"):
        return "absolute path"
    for part in rel.split("/"):
        why = component_problem(part)
        if why:
            return why
    return None


def safe_relative_path(rel: str) -> bool:
    """True when ``rel`` is a safe relative path (:func:`path_problem` finds nothing)."""
    return path_problem(rel) is None


def inside(path: str | os.PathLike[str], base: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is ``base`` itself or below it, compared component by component after
    ``os.path.normpath`` (``..`` folded lexically: ``/a/b/../c`` is inside ``/a``; ``/ab`` is
    not inside ``/a``). Lexical only: no file is touched and no symlink resolved (pass
    ``os.path.realpath`` results to judge where a path resolves). An absolute path is never
    inside a relative base, nor the other way round; never raises."""
    p, b = os.fspath(path), os.fspath(base)
    if not p or not b or os.path.isabs(p) != os.path.isabs(b):
        return False
    pp = _parts(p)
    bp = _parts(b)
    return pp[:len(bp)] == bp and ".." not in pp[len(bp):]


def _parts(path: str) -> list[str]:
    norm = os.path.normpath(path)
    return [x for x in norm.split(os.sep) if x and x != "."]


def name_problem(rel: str) -> str | None:
    """Why the tree path ``rel`` (``a/b/c``, relative, ``/``-separated) may not be
    stored, or ``None``: a component with the OCI whiteout prefix ``.wh.``."""
    for part in rel.split("/"):
        if part.startswith(WHITEOUT_PREFIX):
            return (f"name {part!r} starts with the OCI whiteout prefix {WHITEOUT_PREFIX!r} "
                    "(image-spec layer.md: it would delete files in an image)")
    return None


def target_problem(target: str) -> str | None:
    """Why a symlink's target text is refused before any resolution, or ``None``."""
    if not target:
        return "symlink with an empty target"
    if "\x00" in target:
        return "symlink target holds NUL"
    if target.startswith("/"):
        return f"symlink to absolute path {target!r}"
    return None


def symlink_problem(root: str | os.PathLike[str], rel: str) -> str | None:
    """Why the symlink at ``root/rel`` is refused, or ``None`` (see the module docstring).

    ``root``: the tree's root directory on disk; ``rel``: the link's path inside it
    (``lib/libfoo.so``), whose parents must be real directories. The link must exist (it
    is read with ``os.readlink``). Only ``lstat``/``readlink`` are used: nothing outside
    ``root`` is ever touched, and the answer does not depend on the host's files.
    """
    root = os.fspath(root)
    target = os.readlink(os.path.join(root, rel))
    why = target_problem(target)
    if why:
        return why
    cur = rel.split("/")[:-1]  # where we are: a list of names below root
    pending = [p for p in target.split("/")][::-1]  # a stack: next component last
    hops = 0
    settled = True  # False once a component does not exist (or is not a directory)
    last = ""
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not settled:
                return (f"symlink target {target!r}: '..' after {last!r}, which is not an existing "
                        "directory (a later member could redirect it)")
            if not cur:
                return f"symlink target {target!r} resolves outside the destination"
            cur.pop()
            continue
        last = "/".join(cur + [part])
        if not settled:
            cur.append(part)
            continue
        try:
            st = os.lstat(os.path.join(root, *cur, part))
        except (FileNotFoundError, NotADirectoryError):
            settled = False
            cur.append(part)
            continue
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > MAX_SYMLINK_HOPS:
                return f"symlink target {target!r}: more than {MAX_SYMLINK_HOPS} symlinks (a loop?)"
            inner = os.readlink(os.path.join(root, *cur, part))
            why = target_problem(inner)
            if why:
                return f"symlink target {target!r} goes through {last!r}: {why}"
            pending.extend(inner.split("/")[::-1])
            continue
        cur.append(part)
        if not stat.S_ISDIR(st.st_mode):
            settled = False
    return None


__all__ = ["MAX_SYMLINK_HOPS", "WHITEOUT_PREFIX", "component_problem", "inside", "name_problem", "path_problem",
           "safe_component", "safe_relative_path", "symlink_problem", "target_problem"]
