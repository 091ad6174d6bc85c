"""Frozen, typed models of a validated recipe (contract major 1).

Built only by :mod:`lemonpack.contract.loader` after the schema and every semantic
rule passed, so downstream code never reads raw dicts and can rely on the invariants
(RFC sections 4 to 7): ids match their patterns, tokens parse, provenance is complete.
Mappings are read-only (``MappingProxyType``) and sequences are tuples.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

EMPTY: Mapping[str, Any] = MappingProxyType({})

#: A recipe id (RFC section 4.1, "recipe: stable id, ^[a-z0-9][a-z0-9_-]{1,63}$"): the pattern
#: of the recipe schema's ``recipe``, ``extends`` and ``variant_of``
#: (``contract/schema/recipe-v1.schema.json``), as JSON Schema (ECMA-262) writes it. The one
#: spelling in the code: the loader's message, the model registry (``user_models.json``'s
#: ``recipe``, whose schema carries a copy) use it; ``tests/test_concept_owners.py`` holds the
#: schemas' copies equal to it and fails on a recipe-id regex anywhere else.
RECIPE_ID_PATTERN = "^[a-z0-9][a-z0-9_-]{1,63}$"


def freeze(value: Any) -> Any:
    """Deep-freeze JSON data: dicts become read-only mappings, lists become tuples."""
    if isinstance(value, dict):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Inverse of :func:`freeze`: plain dicts and lists again (for JSON output)."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


@dataclass(frozen=True)
class HealthProbe:
    """``health_probe`` (section 4.3). ``endpoint`` is an engine-side path for http."""

    type: str = "http"
    endpoint: str = "/health"
    expected_status: int = 200
    timeout_seconds: int = 60
    poll_interval_ms: int = 500


@dataclass(frozen=True)
class Provenance:
    """Where a variant_of artifact comes from (section 7). ``sha256`` is the lowercase
    hex digest without prefix; ``policy`` is ``pinned`` or ``roll_forward``."""

    source: str | None
    sha256: str | None
    policy: str

    @property
    def fetches(self) -> bool:
        """True when there is an artifact to download."""
        return self.source is not None


@dataclass(frozen=True)
class ExecFields:
    """The execution fields shared by a platform block and an arch override
    (section 4.2). ``None`` means "not set here" (an override inherits the base)."""

    command: str | None = None
    args: tuple[str, ...] | None = None
    stop_command: str | None = None
    stop_command_args: tuple[str, ...] | None = None
    working_dir: str | None = None
    env: Mapping[str, str] | None = None
    binary: str | None = None
    argv_extra: tuple[str, ...] | None = None
    reserved_args: tuple[str, ...] | None = None
    source: str | None = None
    sha256: str | None = None
    version_policy: str | None = None


@dataclass(frozen=True)
class ArchOverride(ExecFields):
    """One entry of a block's ``arch`` map (section 4.6): ``pattern`` is an exact arch
    (``gfx1151``) or a glob (``gfx115*``); the fields are the deltas."""

    pattern: str = ""


@dataclass(frozen=True)
class PlatformBlock(ExecFields):
    """``platforms.<os>.<accelerator>`` with its ordered ``arch`` overrides."""

    os: str = ""
    accelerator: str = ""
    arch: tuple[ArchOverride, ...] = ()

    @property
    def path(self) -> str:
        """JSON path of this block: ``platforms.linux.rocm``."""
        return f"platforms.{self.os}.{self.accelerator}"


@dataclass(frozen=True)
class Recipe:
    """A validated recipe. ``file`` is where it was loaded from (or ``<memory>``),
    ``document`` the frozen original JSON, ``canonical`` its canonical JSON bytes
    (sorted keys, compact, UTF-8): the exact bytes packaged into images."""

    file: str
    recipe: str
    display_name: str
    api_contract_version: str
    capabilities: tuple[str, ...]
    platforms: Mapping[str, Mapping[str, PlatformBlock]]
    document: Mapping[str, Any]
    canonical: bytes
    extends: str | None = None
    variant_of: str | None = None
    capability_enable_args: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: EMPTY)
    health_probe: HealthProbe = field(default_factory=HealthProbe)
    requested_ports: int = 1
    reserved_args: tuple[str, ...] = ()
    slot_policy: str = "standard"
    model_management: str = "lemond_managed"
    default_accelerator: str | None = None
    recipe_options: Mapping[str, Any] = field(default_factory=lambda: EMPTY)
    source: str | None = None
    sha256: str | None = None
    version_policy: str | None = None
    endpoints: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    custom_options: tuple[Mapping[str, Any], ...] = ()
    downsize_endpoint: str | None = None
    extensions: Mapping[str, Any] = field(default_factory=lambda: EMPTY)
    arch_aliases: tuple[tuple[str, str], ...] = ()

    @property
    def is_passthrough(self) -> bool:
        """True for a manifest-only passthrough recipe (no ``variant_of``)."""
        return self.variant_of is None

    def block(self, os_name: str, accelerator: str) -> PlatformBlock | None:
        """The platform block for ``(os, accelerator)`` or None."""
        return self.platforms.get(os_name, EMPTY).get(accelerator)
