"""The model a launch is built for and the files a launch needs on this machine (RFC sections
4.3, 7, 9, 10): :class:`ModelSpec`, where its checkpoints are (absolute paths, the main
checkpoint, the model directory), and the checks that they exist, that a ``variant_of``
recipe's binary is installed and executable, and that its install record still matches the
recipe's pin.

The path functions are pure; the ``check_*`` functions only test existence and read the
install record (``<external>.install.json``, written by ``lemonpack install``).
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from lemonpack.contract.model import EMPTY
from lemonpack.contract.select import EffectiveBlock
from lemonpack.digest import sha256_text
from lemonpack.errors import InputError, LemonpackError
from lemonpack.paths import install_record
from lemonpack.safetree import inside


class MissingCheckpointError(LemonpackError):
    """A ``lemond_managed`` model references a local checkpoint that does not exist (section 4.3)."""

    kind = "checkpoint"


class MissingBinaryError(LemonpackError):
    """A variant_of recipe's binary is not installed (section 9: the load fails, naming the install)."""

    kind = "missing-binary"


@dataclass(frozen=True)
class ModelSpec:
    """The model a plan is built for, independent of the model registry.

    ``name`` is the model id (``{model_name}``); ``checkpoints`` maps checkpoint NAME
    (``main``, ``mmproj`` ...) to a local path, absolute or relative to ``model_dir``;
    ``recipe_options`` the model's options (they override the recipe's defaults);
    ``mode`` the deployment mode label (``chat``, ``embeddings`` ...), None to take the
    first declared capability's mode; ``model_dir`` the directory ``{model_dir}`` names
    (None: derived, see the module docstring).
    """

    name: str
    checkpoints: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    recipe_options: Mapping[str, Any] = field(default_factory=lambda: EMPTY)
    mode: str | None = None
    model_dir: str | None = None

    @classmethod
    def from_entry(cls, entry: Any) -> "ModelSpec":
        """Build from a registry entry, duck-typed: ``entry.name``, ``entry.checkpoints``
        (a mapping NAME -> path, or one string taken as ``main``), optional
        ``entry.recipe_options``, ``entry.mode`` and ``entry.model_dir``. Raises
        :class:`LemonpackError` when ``name`` is missing or checkpoints have another shape.
        Models reference a recipe plus recipe_options (section 10)."""
        name = getattr(entry, "name", None)
        if not isinstance(name, str) or not name:
            raise InputError(f"model entry {entry!r} has no name")
        raw = getattr(entry, "checkpoints", None) or {}
        if isinstance(raw, (str, os.PathLike)):
            raw = {"main": os.fspath(raw)}
        if not isinstance(raw, Mapping):
            raise InputError(f"model {name!r}: checkpoints must be a mapping NAME -> path, got {raw!r}")
        checkpoints = {str(k): os.fspath(v) for k, v in raw.items()}
        options = getattr(entry, "recipe_options", None) or {}
        model_dir = getattr(entry, "model_dir", None)
        return cls(name=name, checkpoints=MappingProxyType(checkpoints),
                   recipe_options=MappingProxyType(dict(options)), mode=getattr(entry, "mode", None),
                   model_dir=os.fspath(model_dir) if model_dir is not None else None)


def absolute_checkpoints(model: ModelSpec, model_dir: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, path in model.checkpoints.items():
        if not os.path.isabs(path):
            if ":" in path:
                raise InputError(f"model {model.name!r}: checkpoint {name!r} is the hub reference {path!r}; "
                                 "lemonpack does not download model weights (RFC section 8): download the file "
                                 "and register its local path (lemonpack models add ... --replace)")
            if model_dir is None:
                raise InputError(f"model {model.name!r}: checkpoint {name!r} path {path!r} is relative "
                                 "and the model has no model_dir")
            path = os.path.join(model_dir, path)
        out[name] = os.path.normpath(path)
    return out


def main_checkpoint(checkpoints: Mapping[str, str]) -> str | None:
    if "main" in checkpoints:
        return checkpoints["main"]
    if len(checkpoints) == 1:
        return next(iter(checkpoints.values()))
    return None


def derive_model_dir(model: ModelSpec, hf_cache: str | None) -> str | None:
    if model.model_dir is not None:
        return os.path.normpath(model.model_dir)
    main = main_checkpoint(model.checkpoints)
    if main is None or not os.path.isabs(main):
        return hf_cache
    if hf_cache and inside(main, hf_cache):
        return hf_cache
    return os.path.dirname(os.path.normpath(main))


def check_binary(ref: str, path: str) -> None:
    install = f"lemonpack install {shlex.quote(ref)}"
    if not os.path.isfile(path):
        raise MissingBinaryError(f"variant_of binary {path} is not installed; run `{install}`")
    if not os.access(path, os.X_OK):
        raise MissingBinaryError(f"variant_of binary {path} is not executable; reinstall it with `{install}`")


def check_installed_pin(ref: str, external: Path, eff: EffectiveBlock) -> None:
    """Refuse an installed artifact whose recorded sha256 is not the one the recipe pins
    now (the recipe changed after ``lemonpack install``). A binary without an install
    record is user-provided (RFC section 7) and is not checked."""
    record = install_record(external)
    prov = eff.provenance
    if prov.policy != "pinned" or not prov.sha256 or not record.is_file():
        return
    try:
        installed = json.loads(record.read_text()).get("sha256", "")
    except (OSError, ValueError):
        return
    if installed != sha256_text(prov.sha256) and installed != prov.sha256:  # the record's form, or a bare hex
        raise MissingBinaryError(
            f"the installed artifact of {eff.recipe.recipe} ({external}) has {installed}, but {eff.path} now pins "
            f"{sha256_text(prov.sha256)}; run `lemonpack install {shlex.quote(ref)}`")


def check_checkpoints(model: str, referenced: Mapping[str, str]) -> None:
    for name, path in referenced.items():
        if not os.path.exists(path):
            raise MissingCheckpointError(
                f"model {model!r}: checkpoint {name!r} ({path}) does not exist; pull the model first "
                "(or set model_management: self_managed if the engine manages its own weights)")


__all__ = ["MissingBinaryError", "MissingCheckpointError", "ModelSpec", "absolute_checkpoints",
           "check_binary", "check_checkpoints", "check_installed_pin", "derive_model_dir", "inside",
           "main_checkpoint"]
