"""The user model registry, ``user_models.json`` (RFC section 10, "Management and consent").

Models reference a recipe through this file. Its location is
``paths.config_root()/user_models.json`` and its shape is one JSON object::

    {
      "user.qwen-0.5b": {
        "recipe": "llamacpp-vulkan-custom",
        "checkpoints": {"main": "/models/qwen.gguf", "mmproj": "org/repo:mmproj.gguf"},
        "recipe_options": {"ctx_size": 4096, "vk_device": "1"}
      }
    }

Rules (every violation is reported, each naming the file and the JSON path of the entry, as a
:class:`~lemonpack.errors.ManifestError`): the JSON Schema ``schema/user_models.schema.json``
(draft 2020-12, package data; its descriptions say each field's rule) through
:mod:`lemonpack.schemacheck` like every other description file, in the registry's own wording
(:data:`_WORDING`), then what a schema cannot say (:func:`registry_problems`). In short: a name
is ``user.`` then ``[A-Za-z0-9][A-Za-z0-9._-]*`` (at most 128 characters); an entry has
``recipe`` (a recipe id, :data:`lemonpack.contract.model.RECIPE_ID_PATTERN`), ``checkpoints``
(names of the ``{checkpoint:NAME}`` grammar, ``main`` required, values non-empty text without
NUL or line breaks: a local path or a hub reference ``org/repo:file``, nothing downloaded),
optional ``recipe_options`` (JSON scalars, numbers finite) and ``backend`` (the selector's
hard override, :mod:`lemonpack.runtime.selection.selector`; ``LEMONPACK_BACKEND`` wins), no
other field. ``endpoints`` (or ``endpoint``, one URL), for a model served by engines lemonpack
does not spawn (``lemonpack serve`` is then its gateway; ``checkpoints`` may be left out): each
``http(s)://HOST:PORT`` by :func:`endpoint_problem` (an explicit port, no user or password,
no path, query or fragment), none given twice. An ``oci://`` checkpoint (an OCI model
artifact in a registry, issue 23) must be pinned by digest and name its registry host
(:func:`oci_checkpoint_problem`; a tag alone is refused as container images' tags are, rule
``checkpoint-oci``).

OCI artifact, local path or hub reference (:func:`checkpoint_kind`, used by ``models add``):
a value starting ``oci://`` is an OCI artifact; else a value that names an existing file is a local path; otherwise a value of the form
``ORG/REPO:FILE`` (``ORG`` and ``REPO`` made of letters, digits, ``.``, ``_``, ``-``, not
starting with ``.``, no other ``/`` before the ``:``, a non-empty ``FILE``) is a hub
reference; anything else is a local path. ``models add`` stores a local path absolute
(:func:`normalize_checkpoint`: ``~`` expanded, made absolute against the current
directory, normalised, symlinks kept) and refuses one that does not exist unless ``--force``.

The registry checks shapes only. Whether ``recipe`` names a known recipe depends on
discovery and is the caller's decision (the CLI checks it, see ``models add``).

Writes are atomic (a temporary file in the same directory, ``fsync``, ``os.replace``,
then the directory is fsync'ed), the file is mode ``0600``, read-modify-write cycles
hold an ``flock`` on ``user_models.json.lock`` so two CLI runs cannot lose an update,
and a failed validation changes nothing on disk. A missing file is an empty registry.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

from lemonpack.contract.model import RECIPE_ID_PATTERN
from lemonpack.files import locked, replace_file
from lemonpack import paths
from lemonpack import jsonpath
from lemonpack.strictjson import parse_json_strict, short_repr
from lemonpack.errors import InputError, ManifestError, NotFoundError, Problem, StorageError

#: The registry's JSON Schema, package data beside this module.
SCHEMA_FILE = "user_models.schema.json"

Scalar = str | int | float | bool | None


@dataclass(frozen=True)
class ModelEntry:
    """One registered model.

    ``name`` is ``user.*``; ``recipe`` the recipe id it runs with; ``checkpoints`` maps
    checkpoint name (``main``, ``mmproj``, ``draft`` ...) to a local path or a hub
    reference, as text; ``recipe_options`` maps option name to a JSON scalar; ``backend``
    the model's backend override for the selector (None: none). Mappings are read-only.
    """

    name: str
    recipe: str
    checkpoints: Mapping[str, str]
    recipe_options: Mapping[str, Scalar]
    backend: str | None = None
    endpoints: tuple[str, ...] = ()

    @property
    def main(self) -> str:
        """The ``main`` checkpoint (``""`` for an endpoint model registered without one)."""
        return self.checkpoints.get("main", "")

    def to_json(self) -> dict[str, Any]:
        """The entry's value as stored in ``user_models.json`` (without the name)."""
        out: dict[str, Any] = {"recipe": self.recipe}
        if self.checkpoints or not self.endpoints:
            out["checkpoints"] = dict(self.checkpoints)
        if self.endpoints:
            out["endpoints"] = list(self.endpoints)
        if self.recipe_options:
            out["recipe_options"] = dict(self.recipe_options)
        if self.backend is not None:
            out["backend"] = self.backend
        return out


def default_path() -> Path:
    """``paths.config_root()/user_models.json``."""
    return paths.config_root() / "user_models.json"


def _is_scalar(value: Any) -> bool:
    if value is None or isinstance(value, (str, bool, int)):
        return True
    return isinstance(value, float) and math.isfinite(value)


def endpoint_problem(url: Any) -> str | None:
    """Why ``url`` is not a valid engine endpoint (None: valid): it must be a string
    ``http://HOST:PORT`` or ``https://HOST:PORT`` (RFC 3986 authority, parsed by
    :func:`urllib.parse.urlsplit`) with a host and an explicit port 1-65535, no user or
    password (credentials do not belong in a registry file), no query, fragment or path
    other than ``/``, no whitespace or control characters."""
    import urllib.parse

    if not isinstance(url, str) or not url:
        return "must be a non-empty URL string"
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        return "must not contain whitespace or control characters"
    try:
        u = urllib.parse.urlsplit(url)
        port = u.port
    except ValueError as e:
        return f"is not a valid URL ({e})"
    if u.scheme not in ("http", "https"):
        return f"must use http or https, not {u.scheme or 'no scheme'!r}"
    if "@" in u.netloc:
        return "must not carry a user or password (credentials do not belong in the model registry)"
    if not u.hostname:
        return "has no host"
    if port is None:
        return "must give the port explicitly (http://HOST:PORT)"
    if port == 0:
        return "port must be 1-65535"
    if u.path not in ("", "/") or u.query or u.fragment or url.endswith("?") or url.endswith("#"):
        return "must be scheme://HOST:PORT only (no path, query or fragment: routes come from the recipe)"
    return None


def normalize_endpoint(url: str) -> str:
    """A valid endpoint without its trailing ``/`` and with a lower-case scheme and host."""
    import urllib.parse

    u = urllib.parse.urlsplit(url)
    host = u.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{u.scheme.lower()}://{host.lower()}:{u.port}"


def entry_endpoints(value: Mapping[str, Any]) -> list:
    """The endpoint URLs of a raw entry (``endpoint`` and ``endpoints`` together), unchecked."""
    return [url for _rel, url in _endpoint_fields(value)]


def _endpoint_fields(value: Mapping[str, Any]) -> list[tuple[list, Any]]:
    """``(path in the entry, URL)`` of ``endpoint`` and each ``endpoints`` item, unchecked."""
    eps = value.get("endpoints")
    return ([(["endpoint"], value["endpoint"])] if "endpoint" in value else []) \
        + ([(["endpoints", i], url) for i, url in enumerate(eps)] if isinstance(eps, list) else [])


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    """The registry's JSON Schema (a dict), read from the package (:data:`SCHEMA_FILE`)."""
    return json.loads(resources.files("lemonpack.runtime.models").joinpath("schema", SCHEMA_FILE).read_text("utf-8"))


@lru_cache(maxsize=1)
def _validator() -> Any:
    from lemonpack.schemacheck import strict_validator  # jsonschema: only when a registry is checked

    return strict_validator(schema(), shipped=True)


def _shown_url(value: Any) -> str:
    """An endpoint value for a message: at most 200 characters, a password never echoed."""
    return re.sub(r"//[^/@]*@", "//***@", str(value)[:200])


_MISSING = "required field {field!r} is missing"
_NOT_ENTRY = "a model entry must be an object with 'recipe' and 'checkpoints'"
_BAD_ENDPOINT = "endpoint {url} must be a non-empty URL string"
_NOT_SCALAR = "option {item} must be a JSON scalar (string, number, boolean or null)"

#: The registry's wording of schema errors, by (field, part[, validator]): ``field`` the entry
#: field (``registry``: the document, ``entry``: an entry), ``part`` ``key`` (a member's name,
#: JSON Schema ``propertyNames``), ``value`` (the field itself) or ``item`` (a member of it);
#: the validator ``null`` is a ``type`` error on a null. Each gives the rule, the message
#: (formatted with ``value``, ``key``, ``item``, ``url``, ``field``, ``most``, ``pattern``) and
#: what the problem's path adds to the error's (``key``: the member's name, ``main``).
_WORDING: dict[tuple[str, ...], tuple[str, str, str | None]] = {
    ("registry", "key"): ("model-name", "model name {key} must be 'user.' followed by [A-Za-z0-9][A-Za-z0-9._-]* "
                                        "(at most {most} characters)", "key"),
    ("registry", "value"): ("schema-type", "the model registry must be a JSON object of 'user.NAME' -> entry", None),
    ("entry", "value", "type"): ("schema-type", _NOT_ENTRY, None),
    ("entry", "value", "null"): ("schema-type", _NOT_ENTRY, None),
    ("recipe", "value", "null"): ("missing-field", _MISSING, None),
    ("recipe", "value"): ("recipe-id", "recipe {value} must be a recipe id matching {pattern}", None),
    ("checkpoints", "value", "null"): ("missing-field", _MISSING, None),
    ("checkpoints", "value", "required"): ("missing-field", "the 'main' checkpoint is required", "main"),
    ("checkpoints", "value"): ("schema-type", "'checkpoints' must be an object of name -> path or hub reference",
                               None),
    ("checkpoints", "key"): ("checkpoint-name", "checkpoint name {key} must match [A-Za-z0-9_.-]+", "key"),
    ("checkpoints", "item", "pattern"): ("checkpoint-value", "checkpoint {item} must not contain NUL or line breaks",
                                         None),
    ("checkpoints", "item"): ("checkpoint-value", "checkpoint {item} must be a non-empty string", None),
    ("recipe_options", "value"): ("schema-type", "'recipe_options' must be an object", None),
    ("recipe_options", "key"): ("option-name", "option name {key} must match [A-Za-z0-9_][A-Za-z0-9_.-]*", "key"),
    ("recipe_options", "item"): ("option-value", _NOT_SCALAR, None),
    ("backend", "value"): ("backend-name", "backend {value} must be a recipe id or a default's name matching "
                                           "[A-Za-z0-9][A-Za-z0-9._-]* (at most 64 characters)", None),
    ("endpoint", "value"): ("endpoint-url", _BAD_ENDPOINT, None),
    ("endpoints", "value"): ("schema-type", "'endpoints' must be a non-empty list of http(s)://HOST:PORT URLs", None),
    ("endpoints", "item"): ("endpoint-url", _BAD_ENDPOINT, None),
}


def registry_explain(err: Any, path: list, file: str) -> list[Problem] | None:
    """The model registry's own wording for schema errors (a :data:`lemonpack.schemacheck.Explain`):
    the messages ``lemonpack models`` has always given, each with its rule (:data:`_WORDING`;
    an unknown field lists the allowed ones). None: the shared wording (a missing field)."""
    field = "registry" if not path else "entry" if len(path) == 1 else str(path[1])
    inner = path[2:]
    part = "key" if "propertyNames" in err.schema_path else "item" if inner else "value"
    if field == "entry" and err.validator == "additionalProperties" and isinstance(err.instance, dict):
        allowed = list(err.schema.get("properties", {}))
        return [Problem(file, jsonpath.join(path + [k]), "unknown-field",
                        f"unknown field {short_repr(k)} (allowed: {', '.join(allowed)})")
                for k in err.instance if k not in allowed]
    vkey = "null" if err.validator == "type" and err.instance is None else str(err.validator)
    wording = _WORDING.get((field, part, vkey)) or _WORDING.get((field, part))
    if wording is None:
        return None
    rule, message, suffix = wording
    text = message.format(value=short_repr(err.instance), key=short_repr(err.instance), field=field,
                          item=short_repr(inner[0]) if inner else "", url=repr(_shown_url(err.instance)),
                          most=schema()["propertyNames"]["maxLength"], pattern=RECIPE_ID_PATTERN)
    where = path + [err.instance] if suffix == "key" else path + ["main"] if suffix == "main" else path
    return [Problem(file, jsonpath.join(where), rule, text)]


def _endpoint_problems(name: str, value: Mapping[str, Any], file: str) -> list[Problem]:
    """The endpoint rules a schema cannot say: each URL by :func:`endpoint_problem`, none given
    twice (``endpoint`` and ``endpoints`` together); a value that is no non-empty string is the schema's."""
    out: list[Problem] = []
    seen: set[str] = set()
    for rel, url in _endpoint_fields(value):
        if not isinstance(url, str) or not url:
            continue
        why = endpoint_problem(url)
        if why:
            out.append(Problem(file, jsonpath.join([name, *rel]), "endpoint-url",
                               f"endpoint {_shown_url(url)!r} {why}"))
        elif normalize_endpoint(url) in seen:
            out.append(Problem(file, jsonpath.join([name, *rel]), "endpoint-url", f"endpoint {url!r} is given twice"))
        else:
            seen.add(normalize_endpoint(url))
    return out


def _finite_option_problems(name: str, value: Mapping[str, Any], file: str) -> list[Problem]:
    """A ``recipe_options`` number that is not finite (only the Python API can pass one: the
    strict JSON reader refuses ``NaN`` and ``Infinity``; JSON Schema's ``number`` takes it)."""
    options = value.get("recipe_options")
    if not isinstance(options, dict):
        return []
    return [Problem(file, jsonpath.join([name, "recipe_options", k]), "option-value",
                    _NOT_SCALAR.format(item=short_repr(k)))
            for k, v in options.items() if isinstance(v, float) and not math.isfinite(v)]


def _oci_problems(name: str, value: Mapping[str, Any], file: str) -> list[Problem]:
    """An ``oci://`` checkpoint that is not pinned by digest or names no registry host
    (:func:`oci_checkpoint_problem`); other values are the schema's."""
    ckpts = value.get("checkpoints")
    if not isinstance(ckpts, dict):
        return []
    out = []
    for k, v in ckpts.items():
        if isinstance(v, str) and v.startswith(OCI_SCHEME):
            why = oci_checkpoint_problem(v)
            if why:
                out.append(Problem(file, jsonpath.join([name, "checkpoints", k]), "checkpoint-oci", why))
    return out


def registry_problems(doc: Any, file: str) -> list[Problem]:
    """Every problem of a parsed registry document ``doc`` read from ``file`` (empty list: valid):
    the schema's (:func:`schema` through :func:`lemonpack.schemacheck.schema_problems`, worded by
    :func:`registry_explain`), then the endpoint and finite-number checks of each entry that is an
    object; each once, at JSON paths such as ``["user.x"].checkpoints.main``. Raises nothing."""
    from lemonpack.schemacheck import schema_problems

    problems = schema_problems(doc, file, validator=_validator(), explain=registry_explain)
    if isinstance(doc, dict):
        for name, value in doc.items():
            if isinstance(value, dict):
                problems += _endpoint_problems(name, value, file) + _finite_option_problems(name, value, file) \
                    + _oci_problems(name, value, file)
    return list(dict.fromkeys(problems))  # once each (a name both too long and badly formed ...)


def entry_problems(name: str, value: Any, file: str) -> list[Problem]:
    """Every problem of one registry entry ``name: value`` (empty list: valid): the
    :func:`registry_problems` of the document ``{name: value}``. ``file`` is used in the
    :class:`Problem` records (``models add`` passes ``""`` and names its arguments)."""
    return registry_problems({name: value}, file)


def _build(name: str, value: dict) -> ModelEntry:
    return ModelEntry(name=name, recipe=value["recipe"],
                      checkpoints=MappingProxyType(dict(value.get("checkpoints") or {})),
                      recipe_options=MappingProxyType(dict(value.get("recipe_options") or {})),
                      backend=value.get("backend"),
                      endpoints=tuple(normalize_endpoint(u) for u in entry_endpoints(value)))


def parse_registry(text: str, file: str) -> dict[str, ModelEntry]:
    """Parse and validate the text of a registry file into entries, by name.

    Raises :class:`ManifestError` with every problem (JSON syntax, duplicate keys:
    :func:`lemonpack.strictjson.parse_json_strict`; then :func:`registry_problems`).
    """
    doc, problems = parse_json_strict(text, file)
    if problems and doc is None:  # not JSON (a None document without problems is the JSON null)
        raise ManifestError(problems)
    problems += registry_problems(doc, file)
    if problems:
        raise ManifestError(problems)
    return {name: _build(name, value) for name, value in doc.items()}


class ModelRegistry:
    """Read and change one ``user_models.json`` (default :func:`default_path`).

    Every method reads the file afresh (it is small), so two registries or two
    processes never work from a stale copy. Errors: :class:`ManifestError` for a
    malformed file or invalid arguments (naming the file and the entry);
    :class:`LemonpackError` for an unknown name, an existing name without
    ``replace=True``, or an I/O failure. Never raises anything else for bad content.
    """

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else default_path()
        self._cached: tuple[tuple, Mapping[str, "ModelEntry"]] | None = None

    # reading ---------------------------------------------------------------------

    def load(self) -> Mapping[str, ModelEntry]:
        """Every entry by name, sorted (empty when the file does not exist).

        The parsed file is kept while its stat facts (device, inode, size, mtime and ctime in
        ns) stay the same: a server reads the registry on every request, and every write here
        replaces the file (a new inode), so a change is always seen."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return MappingProxyType({})
        except OSError:
            st = None  # read_text below reports it
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) if st is not None else None
        if key is not None and self._cached is not None and self._cached[0] == key:
            return self._cached[1]
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return MappingProxyType({})
        except (OSError, UnicodeDecodeError) as e:
            msg = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            raise ManifestError([Problem(str(self.path), "", "unreadable", f"cannot read file: {msg}")]) from None
        entries = MappingProxyType(dict(sorted(parse_registry(text, str(self.path)).items())))
        if key is not None:
            self._cached = (key, entries)
        return entries

    def list(self) -> tuple[ModelEntry, ...]:
        """Every entry, sorted by name."""
        return tuple(self.load().values())

    def get(self, name: str) -> ModelEntry:
        """The entry called ``name``; :class:`LemonpackError` when there is none."""
        entry = self.load().get(name)
        if entry is None:
            raise NotFoundError(f"no model named {name!r} in {self.path}")
        return entry

    # writing ---------------------------------------------------------------------

    def add(self, name: str, recipe: str, checkpoints: Mapping[str, str],
            recipe_options: Mapping[str, Scalar] | None = None, *, replace: bool = False,
            backend: str | None = None, endpoints: builtins.list[str] | tuple[str, ...] = ()) -> ModelEntry:
        """Register ``name`` and return its entry (``backend``: the selector override,
        ``endpoints``: engine URLs lemonpack does not spawn; both optional).

        Validates everything first (a :class:`ManifestError` leaves the file untouched);
        an existing ``name`` is an error unless ``replace`` is true.
        """
        value: dict[str, Any] = {"recipe": recipe}
        if checkpoints or not endpoints:
            value["checkpoints"] = dict(checkpoints)
        if endpoints:
            value["endpoints"] = list(endpoints)
        if recipe_options:
            value["recipe_options"] = dict(recipe_options)
        if backend is not None:
            value["backend"] = backend
        problems = entry_problems(name, value, str(self.path))
        if problems:
            raise ManifestError(problems)
        entry = _build(name, value)
        with self._locked():
            entries = dict(self.load())
            if name in entries and not replace:
                raise InputError(f"model {name!r} already exists in {self.path} (use --replace to overwrite)")
            entries[name] = entry
            self._write(entries)
        return entry

    def remove(self, name: str) -> ModelEntry:
        """Remove ``name`` and return the removed entry; :class:`LemonpackError` when absent."""
        with self._locked():
            entries = dict(self.load())
            if name not in entries:
                raise NotFoundError(f"no model named {name!r} in {self.path}")
            removed = entries.pop(name)
            self._write(entries)
        return removed

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self._ensure_dir()
        with locked(self.path.with_name(self.path.name + ".lock")):
            yield

    def _ensure_dir(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as e:
            raise StorageError(f"cannot create {self.path.parent}: {e.strerror}") from None

    def _write(self, entries: Mapping[str, ModelEntry]) -> None:
        """Atomically replace the file with ``entries`` (sorted, indented, mode 0600)."""
        doc = {name: entries[name].to_json() for name in sorted(entries)}
        data = (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        try:
            replace_file(self.path, data, mode=0o600)
        except OSError as e:
            raise StorageError(f"cannot write {self.path}: {e.strerror or e}") from None


def parse_option(text: str) -> tuple[str, Scalar]:
    """Parse a CLI ``KEY=VALUE`` option: the value is a JSON scalar when it parses as
    one (``4096``, ``1.5``, ``true``, ``null``, ``"0"``), otherwise the text as written.

    Raises :class:`LemonpackError` when there is no ``=`` or the key is empty.
    """
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise InputError(f"option {text!r} must be KEY=VALUE")
    value, problems = parse_json_strict(raw, "--option")
    return (key, value) if not problems and _is_scalar(value) else (key, raw)


def parse_checkpoint(text: str) -> tuple[str, str]:
    """Parse a CLI ``NAME=PATH`` checkpoint (``main=/models/x.gguf``). Raises
    :class:`LemonpackError` when there is no ``=`` or the name or the value is empty."""
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise InputError(f"checkpoint {text!r} must be NAME=PATH (for example main=/models/model.gguf "
                         "or main=org/repo:model.gguf)")
    return name, value


#: ``ORG/REPO:FILE``: a Hugging Face hub reference (see the module docstring).
HUB_REF_RE = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]*/[A-Za-z0-9_-][A-Za-z0-9._-]*:.+$")

#: File name suffixes that mark a command-line model argument as a file path.
MODEL_FILE_SUFFIXES = (".gguf", ".ggml", ".bin", ".safetensors", ".onnx", ".pt", ".pth", ".ckpt")


#: The scheme of a checkpoint that is an OCI model artifact in a registry (issue 23, point 3).
OCI_SCHEME = "oci://"


def checkpoint_kind(value: str) -> str:
    """``"oci"``, ``"local"`` or ``"hub"`` for a checkpoint value (rule in the module
    docstring): ``oci://`` first, whatever the disk holds."""
    if value.startswith(OCI_SCHEME):
        return "oci"
    if os.path.isfile(os.path.expanduser(value)):
        return "local"
    return "hub" if HUB_REF_RE.match(value) else "local"


def oci_checkpoint_problem(value: str) -> str | None:
    """Why the ``oci://HOST/REPO[:TAG]@sha256:HEX`` checkpoint ``value`` cannot be used (None:
    it can): no registry host, or not pinned by digest (a tag is mutable and refused, as for
    container images: :func:`lemonpack.oci.reference.check_pinned`; ``lemonpack models pin``
    resolves one). Raises nothing."""
    from lemonpack.oci.reference import InvalidReferenceError, check_pinned, parse_registry_reference

    rest = value[len(OCI_SCHEME):]
    why = check_pinned(rest)
    if why:
        hint = (f"; resolve the tag with `lemonpack models pin {value}` (or `models add --pin`)"
                if "@" not in rest and "{" not in rest else "")
        return why.replace("image reference", "model reference", 1) + hint
    try:
        parse_registry_reference(rest)  # a registry host is required: nothing is normalised to docker.io
    except InvalidReferenceError as e:
        return f"model reference {rest!r}: {e.reason}"
    return None


def normalize_checkpoint(value: str) -> str:
    """A hub or ``oci://`` reference as is; a local path absolute and normalised (``~``
    expanded, relative to the current directory, symlinks not resolved)."""
    if checkpoint_kind(value) in ("hub", "oci"):
        return value
    return os.path.normpath(os.path.abspath(os.path.expanduser(value)))


def looks_like_path(text: str) -> bool:
    """True when a command-line model argument is meant as a file: it contains a path
    separator or ends with a model file suffix (:data:`MODEL_FILE_SUFFIXES`)."""
    return "/" in text or os.sep in text or text.lower().endswith(MODEL_FILE_SUFFIXES)


def check_model_recipe(recipe: str, *, force: bool = False) -> str | None:
    """Check that a model's ``recipe`` (``models add --recipe``) names a built-in recipe or one
    discovery currently loads (section 10: a model that names a missing recipe would only fail at
    load time, far from the typo). Returns None when it does; with ``force``, the reason it does
    not (for a warning: a descriptor installed later). Raises :class:`ManifestError` (the
    argument ``--recipe``, rule ``unknown-recipe``) listing the known ids, or repeating
    discovery's rejection of that recipe, when it does not and not ``force``."""
    from lemonpack.contract.builtins import BUILTIN_RECIPES
    from lemonpack.runtime.recipes.discovery import Discovery

    if recipe in BUILTIN_RECIPES:
        return None
    result = Discovery().scan()
    if recipe in result.recipes:
        return None
    rejected = [r for r in result.errors if r.recipe == recipe]
    if rejected:
        why = f"recipe {recipe!r} was found but rejected: {rejected[0].file}: {rejected[0].reason}"
    else:
        known = sorted(set(result.recipes) | BUILTIN_RECIPES)
        why = f"recipe {recipe!r} is not a built-in and was not discovered (known: {', '.join(known)})"
    if not force:
        raise ManifestError([Problem("argument --recipe", "", "unknown-recipe",
                                     why + "; use --force to register it anyway")])
    return why


__all__ = [
    "HUB_REF_RE", "MODEL_FILE_SUFFIXES", "OCI_SCHEME", "SCHEMA_FILE", "checkpoint_kind", "oci_checkpoint_problem", "looks_like_path",
    "normalize_checkpoint", "endpoint_problem", "normalize_endpoint", "ModelEntry",
    "ModelRegistry", "check_model_recipe", "default_path", "entry_endpoints", "entry_problems",
    "parse_checkpoint", "parse_option", "parse_registry", "registry_explain", "registry_problems", "schema",
]
