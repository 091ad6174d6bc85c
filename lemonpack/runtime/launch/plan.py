"""The launch plan: everything needed to spawn one engine, with every token resolved.

Produced by :mod:`lemonpack.runtime.launch.build` (passthrough recipes, and variant_of
recipes through a built-in's launch plan, RFC sections 7 and 9); consumed by the
supervisor, which never looks at the recipe's templates again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from lemonpack.contract.model import HealthProbe


@dataclass(frozen=True)
class LaunchPlan:
    """One engine launch.

    ``argv`` is the full argument vector (``argv[0]`` is ``executable``), spawned with
    ``execvp``-style semantics, never through a shell. ``env`` holds the variables to
    set on top of the inherited environment. ``host``/``port`` are where the engine
    listens. ``stop_argv_template`` is the stop command with every token but ``{pid}``
    already resolved from the load-time snapshot; :meth:`stop_argv` fills in the pid.
    ``container_name``/``container_runtime`` are set when the command is a
    ``podman``/``docker`` ``run`` with ``--name``. ``platform_path`` is the JSON path of
    the effective block (``platforms.linux.rocm.arch.gfx1151``); ``accelerator`` and
    ``gpu_arch`` the selection that produced it; ``mode`` the model's deployment mode
    label (section 5), None when the recipe declares no moded capability.
    """

    recipe: str
    model: str
    executable: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    working_dir: str | None = None
    host: str = "127.0.0.1"
    port: int = 0
    health_probe: HealthProbe = field(default_factory=HealthProbe)
    stop_argv_template: tuple[str, ...] | None = None
    container_name: str | None = None
    container_runtime: str | None = None
    platform_path: str = ""
    accelerator: str = ""
    gpu_arch: str | None = None
    mode: str | None = None

    def stop_argv(self, pid: int | None) -> tuple[str, ...] | None:
        """The stop command argv (section 9: run first on unload, tokens from the load-time
        snapshot) with ``{pid}`` replaced by ``pid``; None when the recipe has no stop
        command. Raises nothing."""
        if self.stop_argv_template is None:
            return None
        return tuple(a.replace("{pid}", str(pid if pid is not None else "")) for a in self.stop_argv_template)

    @property
    def url(self) -> str:
        """The engine's base URL, ``http://host:port``."""
        return f"http://{self.host}:{self.port}"
