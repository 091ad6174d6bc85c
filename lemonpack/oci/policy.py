"""The execution policy beyond the contract: images pinned by digest, no shell strings.

Used by lint and build (:mod:`lemonpack.builder`) and by discovery and ``run``
(:mod:`lemonpack.runtime`), so it lives here, below both (a rule two rooms use lives in a room
below both: docs/architecture.md, "Rooms"). It imports nothing above :mod:`lemonpack.oci`:
recipes are walked either as the raw JSON document (:func:`document_policy_problems`, which
lint uses even when the document breaks the contract) or as the loader's frozen model, read
through its attributes (:func:`recipe_policy_problems`).

The RFC (sections 8, 13.2, 19) leaves container digest pinning to convention; lemonpack enforces
it. Every image a container ``run``/``create``/``pull`` argv names (as read by
:func:`lemonpack.oci.cmdline.read_container_argv`, whatever wrapper is in front: the positional
image, each image of a multi-image ``podman pull``, each ``--mount type=image`` source), in ``command`` +
``args`` and in ``stop_command`` + ``stop_command_args``, at block and arch-override level, must be
``name@sha256:<64 hex>``: a mutable tag, a token in the reference or a malformed digest is a
``digest-pinning`` problem naming the argument (for a ``--mount`` source: the element holding the
``--mount`` value). An argv the reader cannot read unambiguously, or whose images live where the argv
does not show them (``build``, ``kube play``, ``load`` ...), is a ``container-argv`` problem (never a
guess).

Section 4.2 also says there is no shell string for ``command`` and ``args`` (the process is spawned
with execvp): a shell given a script with ``-c`` (``sh -c "podman run ..."``) would hide the argv
from every check, so it is refused (rule ``shell-string``), and so is ``env -S``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lemonpack import jsonpath
from lemonpack.errors import ManifestError, Problem, bound
from lemonpack.oci.cmdline import UnreadableCommandLine, program_index, read_container_argv
from lemonpack.oci.reference import check_pinned

#: Shells whose ``-c`` runs a script string.
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "busybox", "fish", "csh", "tcsh"})

#: The (command field, args field) pairs of a platform block or arch override (RFC section 4.2).
EXEC_FIELDS = (("command", "args"), ("stop_command", "stop_command_args"))

def _is_shell_script(argv: Sequence[str]) -> bool:
    name = os.path.basename(argv[0]) if argv else ""
    if name not in SHELLS:
        return False
    rest = list(argv[1:])
    if name == "busybox" and rest:
        if os.path.basename(rest[0]) not in SHELLS:
            return False
        rest = rest[1:]
    return any(a.startswith("-") and not a.startswith("--") and "c" in a for a in rest)


def argv_problems(file: str, path: str, fields: tuple[str, str], command: str,
                  args: Sequence[str]) -> list[Problem]:
    """Policy problems of one argv ``[command, *args]`` found at JSON ``path`` (a block or an
    arch override) in the fields ``fields`` = ``(command field, args field)``. Problem paths
    name the element: ``<path>.<args field>[i]`` (``<path>.<command field>`` for ``argv[0]``).
    All of them, in argv order (:func:`iter_argv_problems` yields them one at a time)."""
    return list(iter_argv_problems(file, path, fields, command, args))


def iter_argv_problems(file: str, path: str, fields: tuple[str, str], command: str,
                       args: Sequence[str]) -> Iterator[Problem]:
    """:func:`argv_problems` one at a time: a ``podman pull`` of a million tag-only images
    yields a million problems without holding them."""
    cmd_field, args_field = fields
    argv = (command, *args)

    def where(index: int | None) -> str:
        if index is None:
            return f"{path}.{args_field}"
        return f"{path}.{cmd_field}" if index == 0 else f"{path}.{args_field}[{index - 1}]"

    try:
        start = program_index(argv)
    except UnreadableCommandLine as e:
        bad = argv[e.index] if e.index is not None else ""
        if bad in ("-S", "--split-string") or bad.startswith(("-S", "--split-string=")) or e.reason.startswith("env -"):
            yield Problem(file, f"{path}.{args_field}", "shell-string",
                          f"{e.reason} (RFC section 4.2: a recipe gives an argv)")
            return
        yield Problem(file, where(e.index), "container-argv", str(e))
        return
    if start < len(argv) and _is_shell_script(argv[start:]):
        yield Problem(file, f"{path}.{args_field}", "shell-string",
                      f"{os.path.basename(argv[start])} -c runs a shell script; a recipe gives an argv "
                      "(RFC section 4.2): call the program directly")
        return
    try:
        inv = read_container_argv(argv)
    except UnreadableCommandLine as e:
        yield Problem(file, where(e.index), "container-argv", str(e))
        return
    if inv is None:
        return
    for index, image in inv.images:
        why = check_pinned(image)
        if why:
            yield Problem(file, where(index), "digest-pinning", f"container image not pinned by digest: {why}")


def _str_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(a, str) for a in value)


@dataclass(frozen=True)
class ArgvSite:
    """One well-typed argv of a raw recipe document (RFC section 4.2): the level it runs at,
    ``path`` (key tuple: ``("platforms", os, accelerator)`` for a block, ``+ ("arch",
    pattern)`` for an arch override), its ``fields`` ``(command field, args field)``, the
    effective ``command`` and ``args``, and the key tuple of the level whose field holds
    each (``command_at``, ``args_at``: the block's when an override inherits it)."""

    path: tuple[str, ...]
    fields: tuple[str, str]
    command: str
    args: tuple[str, ...]
    command_at: tuple[str, ...]
    args_at: tuple[str, ...]


def _level_argvs(path: tuple[str, ...], level: Mapping[str, Any], base: Mapping[str, Any] | None
                 ) -> Iterator[ArgvSite]:
    """The well-typed argvs of one level. An arch override (``base`` given) yields an argv
    only where it sets the command or its args, and takes the other from the block."""
    for fields in EXEC_FIELDS:
        cmd_field, args_field = fields
        command, args = level.get(cmd_field), level.get(args_field)
        command_at = args_at = path
        if base is not None:
            if command is None and args is None:
                continue
            if command is None:
                command, command_at = base.get(cmd_field), path[:3]
            if args is None:
                args, args_at = base.get(args_field), path[:3]
        if args is None:
            args = ()
        if isinstance(command, str) and command and _str_list(args):
            yield ArgvSite(path, fields, command, tuple(args), command_at, args_at)


def platform_argvs(platforms: Any) -> Iterator[ArgvSite]:
    """Every well-typed argv under a raw ``platforms`` mapping (blocks, then each block's arch
    overrides), whatever else is wrong with the document; never raises for a JSON value."""
    if not isinstance(platforms, Mapping):
        return
    for os_name, accels in platforms.items():
        if not isinstance(accels, Mapping):
            continue
        for accel, block in accels.items():
            if not isinstance(block, Mapping):
                continue
            where = ("platforms", str(os_name), str(accel))
            yield from _level_argvs(where, block, None)
            overrides = block.get("arch")
            if isinstance(overrides, Mapping):
                for pattern, override in overrides.items():
                    if isinstance(override, Mapping):
                        yield from _level_argvs((*where, "arch", str(pattern)), override, block)


def document_policy_problems(file: str, document: Any) -> list[Problem]:
    """Policy problems of a raw recipe document (parsed JSON, valid or not): every argv
    under ``platforms`` whose fields are well-typed is checked; ill-typed ones are the
    contract's to report. At most :data:`~lemonpack.errors.MAX_PROBLEMS`, then one
    ``more-problems`` problem counting the rest (:func:`lemonpack.errors.bound`: the report
    bound holds for policy problems too). Never raises for any JSON value."""
    if not isinstance(document, Mapping):
        return []
    return bound((p for site in platform_argvs(document.get("platforms"))
                  for p in iter_argv_problems(file, jsonpath.join(site.path), site.fields, site.command, site.args)),
                 file)


def _model_level(level: Any) -> dict[str, Any]:
    return {f: getattr(level, f) for pair in EXEC_FIELDS for f in pair if getattr(level, f, None) is not None}


def recipe_policy_problems(recipe: Any) -> list[Problem]:
    """Policy problems of a loaded recipe (``lemonpack.contract.model.Recipe``, read through
    its ``file`` and ``platforms`` attributes: the effective fields, ``extends`` merged)."""
    platforms: dict[str, dict[str, dict[str, Any]]] = {}
    for os_name, blocks in recipe.platforms.items():
        for accel, block in blocks.items():
            raw = _model_level(block)
            raw["arch"] = {o.pattern: _model_level(o) for o in block.arch}
            platforms.setdefault(os_name, {})[accel] = raw
    return document_policy_problems(recipe.file, {"platforms": platforms})


def require_pinned(recipe: Any) -> None:
    """Raise :class:`ManifestError` listing every policy problem of ``recipe`` (see
    :func:`recipe_policy_problems`); return None when there is none."""
    problems = recipe_policy_problems(recipe)
    if problems:
        raise ManifestError(problems)


def container_images(command: str, args: Sequence[str]) -> tuple[str, ...]:
    """Every image a ``[command, *args]`` container run/create/pull names, each once, in argv
    order (:attr:`lemonpack.oci.cmdline.ContainerInvocation.images`: the positional one, further
    ``podman pull`` images, ``--mount type=image`` sources), or ``()``. Raises
    :class:`UnreadableCommandLine` when the argv cannot be read."""
    inv = read_container_argv((command, *args))
    return tuple(dict.fromkeys(image for _, image in inv.images)) if inv is not None else ()


__all__ = ["ArgvSite", "EXEC_FIELDS", "SHELLS", "argv_problems", "iter_argv_problems", "platform_argvs", "container_images", "document_policy_problems",
           "recipe_policy_problems", "require_pinned"]
