"""Release image definitions: ``containers/<name>.json``, read and validated.

A definition names one release image: its ``name``, the OCI ``architectures`` it is
built for, the extension pipeline's ``features``, its ``base`` (``scratch`` or a base image), which
``extensions`` of the release lock it ships (default: all of them) and which ``recipes``
shipped in the repository contribute their artifacts. The format is the JSON Schema
``schema/release-image-v1.schema.json`` (Draft 2020-12) plus the rules below; the page
``docs/release-images.md`` documents every field.

Rules beyond the schema (each reported as a :class:`~lemonpack.errors.Problem` naming the
file and the JSON path of the field):

- ``name`` equals the file name without ``.json`` (``name-file``);
- ``features`` holds ``linux`` (``linux-feature``): release images are Linux images;
- every ``recipes[i].file`` is a regular file inside the repository tree, reached without
  leaving it through a symlink (``recipe-file``), and ``accelerator`` is one of the
  contract's accelerators (``accelerator``);
- two entries of ``recipes`` never name the same file (``duplicate-recipe``);
- ``base`` is ``scratch``, ``oci:DIR[:TAG]`` or ``HOST/REPO@sha256:<hex>`` (``base``).

Spec: seed 002 section 6 (the release lock and the images it drives)
("Reproducible release images").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, cast

import jsonschema

from lemonpack.schemacheck import schema_problems
from lemonpack import jsonpath
from lemonpack.contract.builtins import ACCELERATORS
from lemonpack.errors import BuildError, ManifestError, Problem
from lemonpack.files import open_regular
from lemonpack.safetree import inside

SCHEMA_FILE = "release-image-v1.schema.json"


@dataclass(frozen=True)
class RecipeRef:
    """One ``recipes[i]`` entry: ``file`` as written (relative to the tree, ``/``
    separators), ``path`` the resolved file, ``accelerator`` the linux platform block,
    ``gpu_arch`` a concrete GPU arch or None, ``field`` its JSON path (``recipes[0]``)."""

    file: str
    path: Path
    accelerator: str
    gpu_arch: str | None
    field: str


@dataclass(frozen=True)
class ImageDefinition:
    """A validated release image definition.

    ``file``: the definition's path as given; ``name``; ``description`` (``""`` when
    absent); ``architectures``: OCI architectures in file order; ``features``: a frozenset
    of feature names (always holds ``linux``); ``base``: ``"scratch"``, ``oci:DIR[:TAG]``
    (DIR made absolute against the repository tree) or ``HOST/REPO@sha256:<hex>``; ``extensions``:
    ``"lock"`` or a tuple of names; ``recipes``: :class:`RecipeRef` tuple in file order.
    """

    file: str
    name: str
    description: str
    architectures: tuple[str, ...]
    features: frozenset[str]
    base: str
    extensions: str | tuple[str, ...]
    recipes: tuple[RecipeRef, ...]


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    """The release image definition JSON Schema (a dict), read from the package."""
    text = resources.files("lemonpack.release").joinpath("schema", SCHEMA_FILE).read_text("utf-8")
    return json.loads(text)


@lru_cache(maxsize=1)
def _validator() -> jsonschema.protocols.Validator:
    doc = schema()
    cls = jsonschema.validators.validator_for(doc)
    cls.check_schema(doc)
    return cls(doc)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def _explain(err: Any, path: list, file: str) -> list[Problem] | None:
    """A release image definition's own wording for some schema errors (see
    :data:`lemonpack.schemacheck.Explain`)."""
    where = jsonpath.join(path)
    if err.validator == "oneOf" and path == ["extensions"]:
        return [Problem(file, where, "extensions", f"{_short(err.instance)} is neither \"lock\" nor a non-empty "
                        "list of unique extension names (^[a-z][a-z0-9_]*$)")]
    if err.validator == "pattern" and path == ["name"]:
        return [Problem(file, where, "name", f"{_short(err.instance)} must be lower-case letters, digits, "
                        "'_' or '-', starting with a letter or digit (it becomes a tag and a directory)")]
    if err.validator == "pattern" and path[-1:] == ["file"]:
        return [Problem(file, where, "recipe-file", f"{_short(err.instance)} must be a relative path to a "
                        ".json file inside the repository, '/'-separated, without '.' or '..' segments")]
    if err.validator == "pattern" and path == ["base"]:
        return [Problem(file, "base", "base", f"{_short(err.instance)} is not scratch, oci:DIR[:TAG] (a local OCI "
                        "image layout) or HOST/REPO@sha256:<hex> (a registry image pinned by digest; a tag can move)")]
    return None


def _schema_problems(doc: Any, file: str) -> list[Problem]:
    return schema_problems(doc, file, validator=_validator(), explain=_explain)


def _inside(tree: Path, rel: str) -> Path | None:
    """``tree/rel`` resolved, or None when it leaves ``tree`` (a symlink) or is not a file."""
    root = tree.resolve()
    target = (root / rel).resolve()
    if not inside(target, root) or not target.is_file():
        return None
    return target


def check_definition(doc: Any, file: str, tree: Path) -> list[Problem]:
    """Every problem of the parsed definition ``doc`` read from ``file`` (schema, then the
    rules of the module docstring); ``tree`` is the repository top recipe paths are
    relative to. Returns ``[]`` for a valid definition."""
    problems = _schema_problems(doc, file)
    if problems or not isinstance(doc, dict):
        return problems
    stem = Path(file).name.removesuffix(".json")
    if doc["name"] != stem:
        problems.append(Problem(file, "name", "name-file",
                                f"name {_short(doc['name'])} must equal the file name without .json ({stem!r})"))
    if "linux" not in doc["features"]:
        problems.append(Problem(file, "features", "linux-feature",
                                "features must hold \"linux\": release images are Linux images"))
    seen: dict[Path, int] = {}
    for i, entry in enumerate(doc.get("recipes", [])):
        path = _inside(tree, entry["file"])
        if path is None:
            problems.append(Problem(file, f"recipes[{i}].file", "recipe-file",
                                    f"{_short(entry['file'])} is not a file inside the repository {tree}"))
        elif path in seen:
            problems.append(Problem(file, f"recipes[{i}].file", "duplicate-recipe",
                                    f"{_short(entry['file'])} is already named by recipes[{seen[path]}]"))
        else:
            seen[path] = i
        if entry["accelerator"] not in ACCELERATORS:
            problems.append(Problem(file, f"recipes[{i}].accelerator", "accelerator",
                                    f"{_short(entry['accelerator'])} is not one of: {', '.join(ACCELERATORS)}"))
    return problems


def _base(base: str, tree: Path) -> str:
    """``oci:DIR[:TAG]`` with a relative DIR made absolute against ``tree``; else ``base``."""
    if base.startswith("oci:") and not base[4:].startswith("/"):
        return f"oci:{tree / base[4:]}"
    return base


def load_definition(path: str | Path, tree: str | Path) -> ImageDefinition:
    """Read and validate the definition at ``path``; ``tree`` is the repository top.

    Returns :class:`ImageDefinition`. Raises :class:`~lemonpack.errors.ManifestError`
    carrying every problem found (unreadable file, not JSON, schema, the module's rules),
    each naming ``path`` and the field.
    """
    file, tree = str(path), Path(tree)
    try:
        with open_regular(path, follow_symlinks=True) as f:
            text = f.read().decode("utf-8")
    except OSError as exc:
        raise ManifestError([Problem(file, "", "unreadable", f"cannot read: {exc.strerror or exc}")]) from None
    except UnicodeDecodeError as exc:
        raise ManifestError([Problem(file, "", "utf-8", f"not UTF-8: {exc}")]) from None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ManifestError([Problem(file, "", "json", f"not valid JSON: {exc}")]) from None
    problems = check_definition(doc, file, tree)
    if problems:
        raise ManifestError(problems)
    # cast: check_definition refused every file that _inside finds outside the tree
    refs = tuple(RecipeRef(e["file"], cast(Path, _inside(tree, e["file"])), e["accelerator"], e.get("gpu_arch"),
                           f"recipes[{i}]") for i, e in enumerate(doc.get("recipes", [])))
    ext = doc.get("extensions", "lock")
    return ImageDefinition(file=file, name=doc["name"], description=doc.get("description", ""),
                           architectures=tuple(doc["architectures"]), features=frozenset(doc["features"]),
                           base=_base(doc["base"], tree), extensions=ext if ext == "lock" else tuple(ext), recipes=refs)


def load_definitions(directory: str | Path, tree: str | Path,
                     only: tuple[str, ...] = ()) -> list[ImageDefinition]:
    """Every ``*.json`` definition in ``directory`` (not recursive), sorted by file name.

    ``only``: keep just these names (each must exist). Every file is validated, also the
    ones ``only`` leaves out, and every problem of every file is reported at once.
    Raises :class:`ManifestError` (the problems), or :class:`LemonpackError` when the
    directory is missing, holds no definition, or ``only`` names an unknown image.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise BuildError(f"{directory}: no such directory of release image definitions")
    files = sorted(p for p in directory.glob("*.json") if p.is_file())
    if not files:
        raise BuildError(f"{directory}: holds no release image definition (*.json)")
    defs: list[ImageDefinition] = []
    problems: list[Problem] = []
    for f in files:
        try:
            defs.append(load_definition(f, tree))
        except ManifestError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ManifestError(problems)
    names = {d.name for d in defs}
    unknown = [n for n in only if n not in names]
    if unknown:
        raise BuildError(f"no release image named {', '.join(map(repr, unknown))} in {directory} "
                         f"(defined: {', '.join(sorted(names))})")
    return [d for d in defs if not only or d.name in only]


__all__ = ["ImageDefinition", "RecipeRef", "schema", "check_definition", "load_definition", "load_definitions"]
