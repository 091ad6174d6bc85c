"""Container control: the container CLI calls the runtime makes about its engines.

Design notes: ``lemonpack/runtime/lifecycle/SUPERVISOR.md`` ("Containers"). Every call is an argv run
through :func:`lemonpack.runtime.engines.proctable.run_child` (never a shell) with a timeout;
``<cli>`` is podman, docker, nerdctl or podman-remote (their ``ps``/``inspect``/``rm``
flags used here are common to all four: podman 4.3.1, docker 28.2.2, nerdctl 1.x).

- **Which CLI**: :class:`ContainerCLI` is the program *and the global options* of the engine's
  command line (``podman --root /x --runroot /y``, ``podman --url ...``,
  ``/usr/bin/podman-remote --connection c``; ``container run``'s group word and wrappers in
  front left out) plus the plan's env, so every command about an engine's container reaches
  the store, host or connection it was created in. A bare program name means its defaults.

- **Labels**: :func:`inject_labels` puts ``--label lemonpack.owner=<runtime-id>`` (and the
  recipe and engine ids) right after ``run`` of the recipe's argv, read by
  :func:`lemonpack.oci.cmdline.read_container_argv`; a label is how the runtime finds what a
  crashed runtime left, without guessing from names (:func:`container_labels`,
  :func:`container_by_label`).
- **State and removal**: :func:`container_state` (``inspect``), :func:`container_exists`
  (``ps -a``), :func:`remove_container` (``rm -f -t 0``, then poll until gone),
  :func:`wait_container_gone`.
- **Leftovers**: :func:`remove_orphan_containers` removes containers labelled by a dead runtime
  (or by one given runtime: the crash sentinel) among those one :class:`ContainerCLI` sees.
  The start-up scan (:meth:`lemonpack.runtime.engines.handles.Engines.cleanup_leftovers`) runs each
  installed CLI without global options: it covers the *default* store of each, not a
  ``--root``/``--url``/``--connection`` a dead runtime's recipe chose.

Failures of the CLI during clean-up are logged to ``lemonpack.runtime.engines.containers``, never
dropped silently.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Union

from lemonpack.errors import LemonpackError, RuntimeFailure
from lemonpack.oci.cmdline import CONTAINER_CLIS, read_container_argv
from lemonpack.runtime.engines.proctable import owner_alive, run_child

log = logging.getLogger("lemonpack.runtime.engines.containers")

LABEL_OWNER = "lemonpack.owner"
LABEL_RECIPE = "lemonpack.recipe"
LABEL_ENGINE = "lemonpack.engine"


def inject_labels(argv: tuple[str, ...], labels: Mapping[str, str]) -> tuple[str, ...]:
    """``argv`` of a container ``run``/``create`` (as :func:`lemonpack.oci.cmdline.read_container_argv`
    reads it: any container CLI, global options, ``container run``, wrappers in front) with
    ``--label k=v`` inserted right after the subcommand; unchanged for any other argv.
    Raises :class:`~lemonpack.oci.cmdline.UnreadableCommandLine` for an unreadable argv."""
    inv = read_container_argv(argv)
    return tuple(argv) if inv is None else inv.with_labels(argv, labels)


def reaches_container_cli(argv: tuple[str, ...]) -> bool:
    """True when ``argv`` calls a container CLI (through wrappers too), or may (unreadable)."""
    try:
        return read_container_argv(argv) is not None
    except LemonpackError:
        return True


@dataclass(frozen=True)
class ContainerCLI:
    """How to call the container CLI that manages an engine's containers.

    ``argv``: the program and its global options as the engine's command line gave them
    (:meth:`lemonpack.oci.cmdline.ContainerInvocation.cli_prefix`: ``("podman", "--root",
    "/x")``, ``("/usr/bin/podman-remote", "--connection", "c")``), so that ``inspect``,
    ``ps`` and ``rm`` reach the store, host or connection the container was created in.
    ``env``: ``(name, value)`` pairs set on top of the inherited environment for those calls
    (the plan's ``env``: ``CONTAINER_HOST``, ``DOCKER_HOST``, ``CONTAINERS_STORAGE_CONF`` ...
    select a store or daemon just as global options do). Hashable; ``str()`` is the argv
    as a shell would read it (for messages only: it is never run through a shell)."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, cli: CLILike) -> ContainerCLI:
        """``cli`` as a :class:`ContainerCLI`: a program name (``"podman"``), an argv prefix,
        or a :class:`ContainerCLI` (returned as is)."""
        if isinstance(cli, ContainerCLI):
            return cli
        if isinstance(cli, str):
            return cls((cli,))
        return cls(tuple(cli))

    @classmethod
    def for_argv(cls, argv: Sequence[str], env: Mapping[str, str] | None = None,
                 fallback: str | None = None) -> ContainerCLI | None:
        """The CLI an engine's ``argv`` calls (wrappers in front seen through), with the
        plan's ``env``; None when ``argv`` reaches no container CLI. An argv that cannot be
        read (:class:`~lemonpack.oci.cmdline.UnreadableCommandLine`) gives ``fallback``
        (a program name) without global options, or None."""
        try:
            inv = read_container_argv(argv)
        except LemonpackError:
            inv = None
            if fallback is None:
                return None
        prefix = inv.cli_prefix(argv) if inv is not None else ((fallback,) if fallback else ())
        if not prefix:
            return None
        return cls(prefix, tuple(sorted((env or {}).items())))

    @property
    def name(self) -> str:
        """The program's basename (``podman``, ``podman-remote``, ``docker``, ``nerdctl``)."""
        return os.path.basename(self.argv[0])

    def __str__(self) -> str:
        return shlex.join(self.argv)

    def command(self, *args: str) -> str:
        """``<argv> args...`` as text, for messages that tell the user what to run."""
        return shlex.join((*self.argv, *args))

    def run(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
        """``<argv> args...`` run to completion (see :func:`run_child`), stdout and stderr
        captured as text. Raises ``OSError`` and ``subprocess.TimeoutExpired``."""
        env = {**os.environ, **dict(self.env)} if self.env else None
        return run_child([*self.argv, *args], timeout=timeout, env=env)


CLILike = Union[ContainerCLI, str, Sequence[str]]
"""What the functions below accept as the CLI: see :meth:`ContainerCLI.of`."""


def _ctl_failed(r: subprocess.CompletedProcess, what: str) -> None:
    """Log a failed container CLI call (its first error line), never silently drop it."""
    msg = (r.stderr or r.stdout or "").strip().splitlines()
    log.warning("%s failed (exit %s): %s", what, r.returncode, msg[-1] if msg else "no output")


def gone_error(r: subprocess.CompletedProcess) -> bool:
    """True when a failed ``rm``/``inspect`` only says the container does not exist."""
    text = (r.stderr or "").lower()
    return "no such container" in text or "no container with name or id" in text or "does not exist" in text


def container_labels(cli: CLILike, name: str) -> dict[str, str] | None:
    """The labels of the container named exactly ``name`` (None: there is none)."""
    r = ContainerCLI.of(cli).run("ps", "-a", "--filter", f"name=^{name}$",
                                 "--format", "{{.ID}}\t{{.Names}}\t{{json .Labels}}")
    for line in r.stdout.splitlines():
        cid, names, labels = (line.split("\t", 2) + ["", ""])[:3]
        if name in names.split(","):
            try:
                return json.loads(labels) or {}
            except ValueError:
                return {}
    return None


def container_by_label(cli: CLILike, key: str, value: str) -> str | None:
    """The id of a container labelled ``key=value`` (None: there is none)."""
    cli = ContainerCLI.of(cli)
    r = cli.run("ps", "-a", "-q", "--filter", f"label={key}={value}", timeout=30.0)
    if r.returncode != 0:
        _ctl_failed(r, f"`{cli.command('ps', '--filter', f'label={key}={value}')}`")
    ids = r.stdout.split()
    return ids[0] if ids else None


def container_exists(cli: CLILike, name: str) -> bool:
    """True while a container named exactly ``name`` exists (in any state)."""
    r = ContainerCLI.of(cli).run("ps", "-a", "-q", "--filter", f"name=^{name}$")
    return bool(r.stdout.strip())


def container_state(cli: CLILike, name: str) -> dict | None:
    """``State`` of ``<cli> inspect --type container NAME`` (podman, docker and nerdctl
    report ``Running`` and ``Pid``; podman also ``ConmonPid``); None when there is no such
    container. Raises ``OSError``/``subprocess.TimeoutExpired`` when the CLI cannot be run."""
    cli = ContainerCLI.of(cli)
    r = cli.run("inspect", "--type", "container", "--format", "{{json .State}}", name, timeout=30.0)
    if r.returncode != 0:
        if not gone_error(r):
            _ctl_failed(r, f"`{cli.command('inspect', name)}`")
        return None
    try:
        state = json.loads(r.stdout.strip().splitlines()[0])
    except (ValueError, IndexError):
        return None
    return state if isinstance(state, dict) else None


def wait_container_gone(cli: CLILike, name: str, timeout: float = 30.0, poll: float = 0.05) -> bool:
    """Poll until no container is named ``name``; True when it is gone within ``timeout``."""
    cli = ContainerCLI.of(cli)
    deadline = time.monotonic() + timeout
    while container_exists(cli, name):
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)
    return True


def remove_container(cli: CLILike, name: str, timeout: float = 30.0) -> None:
    """``rm -f -t 0`` the container ``name`` and wait until it is gone; RuntimeFailure if not."""
    cli = ContainerCLI.of(cli)
    r = cli.run("rm", "-f", "-t", "0", name, timeout=timeout)
    if r.returncode != 0 and not gone_error(r):
        _ctl_failed(r, f"`{cli.command('rm', '-f', '-t', '0', name)}`")
    if not wait_container_gone(cli, name, timeout):
        raise RuntimeFailure(f"container {name} is still there after `{cli.command('rm', '-f', name)}`")


def remove_orphan_containers(cli: CLILike, *, only_owner: str | None = None) -> list[str]:
    """Remove containers labelled ``lemonpack.owner`` whose owner is dead (or, with
    ``only_owner``, exactly that owner's) among those ``cli`` sees (its store, host or
    connection: the default one for a bare program name); returns their names."""
    cli = ContainerCLI.of(cli)
    r = cli.run("ps", "-a", "--filter", f"label={LABEL_OWNER}", "--format", "{{.Names}}\t{{json .Labels}}")
    if r.returncode != 0:
        if "cannot connect" in (r.stderr or "").lower():  # a docker CLI without its daemon: nothing to find
            log.info("%s cannot reach its daemon; no leftover containers to look for", cli)
        else:
            _ctl_failed(r, f"`{cli.command('ps')}` looking for leftover containers")
        return []
    removed = []
    for line in r.stdout.splitlines():
        name, _, labels = line.partition("\t")
        try:
            owner = (json.loads(labels) or {}).get(LABEL_OWNER, "")
        except ValueError:
            continue
        if not owner:
            continue
        if (only_owner is not None and owner == only_owner) or (only_owner is None and not owner_alive(owner)):
            rm = cli.run("rm", "-f", "-t", "0", name)
            if rm.returncode != 0 and not gone_error(rm):
                _ctl_failed(rm, f"`{cli.command('rm', '-f', '-t', '0', name)}` (a leftover of runtime {owner})")
                continue
            log.info("removed leftover container %s of runtime %s", name, owner)
            removed.append(name)
    return removed


__all__ = [
    "CLILike", "CONTAINER_CLIS", "ContainerCLI", "LABEL_ENGINE", "LABEL_OWNER", "LABEL_RECIPE", "container_by_label",
    "container_exists", "container_labels", "container_state", "gone_error", "inject_labels", "reaches_container_cli",
    "remove_container", "remove_orphan_containers", "wait_container_gone",
]
