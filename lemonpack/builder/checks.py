"""Build policy checks beyond the contract: enforced digest pinning, no shell strings.

The RFC (sections 8, 13.2, 19) leaves container digest pinning to convention; lemonpack
enforces it. Every container image in a ``podman``/``docker`` ``run``/``create``/``pull``
argv, in ``command``+``args`` and in ``stop_command``+``stop_command_args``, must be
``name@sha256:<64 hex>``: a mutable tag, a token in the reference, or a malformed digest
is a :class:`~lemonpack.errors.Problem` naming the field and the argument.

Section 4.2 also says there is no shell string for ``command`` and ``args`` (the process
is spawned with execvp) and the stop command is not a shell pipeline. A shell given a
script with ``-c`` (``sh -c "podman run ..."``) would hide the argv from every check, so
it is refused (rule ``shell-string``), and so is ``env -S``. ``env [NAME=VALUE]... CMD`` is
seen through, so ``env podman run IMAGE:tag`` is checked like ``podman run IMAGE:tag``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from lemonpack.contract import Recipe, load_recipe
from lemonpack.errors import ManifestError, Problem
from lemonpack.oci.reference import check_pinned, find_run_images

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "busybox", "fish", "csh", "tcsh"})


def _argvs(recipe: Recipe) -> Iterator[tuple[str, str, str, Sequence[str]]]:
    """Every (path, args field, command, args) a recipe can execute: each platform block and
    each arch override that sets the command or its args (with the effective command)."""
    for blocks in recipe.platforms.values():
        for block in blocks.values():
            levels = [(block.path, block)]
            levels += [(f"{block.path}.arch.{o.pattern}", o) for o in block.arch]
            for path, level in levels:
                for cmd_field, args_field in (("command", "args"), ("stop_command", "stop_command_args")):
                    command, args = getattr(level, cmd_field), getattr(level, args_field)
                    if level is not block:
                        if command is None and args is None:
                            continue
                        command = command or getattr(block, cmd_field)
                        args = args if args is not None else getattr(block, args_field)
                    if command:
                        yield path, args_field, command, args or ()


#: ``env`` options that take a value as the next argument (coreutils env(1)).
_ENV_VALUE_OPTIONS = frozenset({"-u", "--unset", "-C", "--chdir"})


def _unwrap_env(command: str, args: Sequence[str]) -> tuple[str, Sequence[str], int, bool]:
    """See through ``env [OPTION]... [NAME=VALUE]... COMMAND [ARG]...``.

    Returns ``(command, args, offset, split_string)``: the wrapped program, its args,
    where they start in the original args, and whether ``-S``/``--split-string`` (a
    string env splits like a shell) was used. Not ``env``: returned unchanged.
    """
    if os.path.basename(command) != "env":
        return command, args, 0, False
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-S", "--split-string") or a.startswith(("-S", "--split-string=")):
            return command, args, 0, True
        if a in _ENV_VALUE_OPTIONS:
            i += 2
        elif a.startswith("-") or ("=" in a and not a.startswith("=")):
            i += 1
        else:
            return a, args[i + 1:], i + 1, False
    return command, args, 0, False


def _is_shell_script(command: str, args: Sequence[str]) -> bool:
    name = os.path.basename(command)
    if name not in SHELLS:
        return False
    rest = list(args)
    if name == "busybox" and rest:
        if os.path.basename(rest[0]) not in SHELLS:
            return False
        rest = rest[1:]
    return any(a.startswith("-") and not a.startswith("--") and "c" in a for a in rest)


def recipe_policy_problems(recipe: Recipe) -> list[Problem]:
    """Pinning and shell-string problems of every execution argv of ``recipe``."""
    problems: list[Problem] = []
    for path, args_field, command, args in _argvs(recipe):
        command, args, offset, split_string = _unwrap_env(command, args)
        if split_string or _is_shell_script(command, args):
            problems.append(Problem(recipe.file, f"{path}.{args_field}", "shell-string",
                                    f"{os.path.basename(command)} -c runs a shell script; a recipe gives an argv "
                                    "(RFC section 4.2): call the program directly"))
        for index, image in find_run_images(command, args):
            why = check_pinned(image)
            if why:
                problems.append(Problem(recipe.file, f"{path}.{args_field}[{index + offset}]", "digest-pinning",
                                        f"container image not pinned by digest: {why}"))
    return problems


def lint_problems(path: str | Path) -> list[Problem]:
    """Every problem ``lemonpack lint`` reports for the file at ``path``: the contract's,
    and when the recipe passes them, this policy's. The file is read and parsed once."""
    try:
        return recipe_policy_problems(load_recipe(path))
    except ManifestError as e:
        return list(e.problems)


def require_pinned(recipe: Recipe) -> None:
    """Raise :class:`ManifestError` listing every policy problem of ``recipe``."""
    problems = recipe_policy_problems(recipe)
    if problems:
        raise ManifestError(problems)
