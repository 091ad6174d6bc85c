"""The one rule for what a tree of artifact files may contain, shared by the extractor
(:mod:`lemonpack.fetch.archive`, used by ``install`` and ``build``) and the OCI layer writer
(:mod:`lemonpack.oci.layer`). It sits below both rooms, like :mod:`lemonpack.errors`.

Two checks, each returning ``None`` (fine) or a one-line reason:

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


__all__ = ["name_problem", "symlink_problem", "target_problem", "WHITEOUT_PREFIX", "MAX_SYMLINK_HOPS"]
