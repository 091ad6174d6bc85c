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

Rules (every violation is reported, each naming the file and the JSON path of the
entry, as a :class:`~lemonpack.errors.ManifestError`):

- a name is ``user.`` followed by ``[A-Za-z0-9][A-Za-z0-9._-]*`` (at most 128 characters);
- an entry has exactly the fields ``recipe`` (required, a recipe id
  ``^[a-z0-9][a-z0-9_-]{1,63}$``), ``checkpoints`` (required), ``recipe_options``
  and ``backend`` (optional); unknown fields are rejected, as in the recipe contract;
- checkpoint names match ``[A-Za-z0-9_.-]+`` (the ``{checkpoint:NAME}`` token grammar),
  ``main`` is required, values are non-empty strings without NUL or line breaks: a local
  file path, or a hub reference ``org/repo:file`` kept as text (nothing is downloaded);
- ``recipe_options`` keys match ``[A-Za-z0-9_][A-Za-z0-9_.-]*`` and values are JSON
  scalars (string, finite number, boolean, null);
- ``endpoints`` (optional): a non-empty list of engine URLs (``"endpoint"``: one URL, the
  same as a list of one) for a model served by engines lemonpack does not spawn (a
  Kubernetes Service ...; ``lemonpack serve`` is then its gateway). Each is
  ``http://HOST:PORT`` or ``https://HOST:PORT`` (:func:`endpoint_problem`: an explicit
  port, no user or password, no query or fragment, no path but ``/``), given at most
  once. ``checkpoints`` may then be left out (the engine has its model already);
- ``backend`` (optional) is the model's hard backend override for the selector
  (:mod:`lemonpack.runtime.selection.selector`; ``LEMONPACK_BACKEND`` wins over it): a recipe id or a
  name of the built-in default (``llama.cpp``), matching ``[A-Za-z0-9][A-Za-z0-9._-]*``.

Local path or hub reference (:func:`checkpoint_kind`, used by ``models add``): a value
that names an existing file is a local path; otherwise a value of the form
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
from pathlib import Path
from types import MappingProxyType
from typing import Any

from lemonpack.files import replace_file
from lemonpack import paths
from lemonpack import jsonpath
from lemonpack.strictjson import parse_json_strict
from lemonpack.errors import InputError, ManifestError, NotFoundError, Problem, StorageError

try:  # POSIX advisory locks; on other systems updates are atomic but not serialised
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

MODEL_NAME_RE = re.compile(r"^user\.[A-Za-z0-9][A-Za-z0-9._-]*$")
MODEL_NAME_MAX = 128
CHECKPOINT_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
RECIPE_ID_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{1,63}$")
OPTION_KEY_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
BACKEND_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
ENTRY_FIELDS = ("recipe", "checkpoints", "recipe_options", "backend", "endpoint", "endpoints")

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


def _text_problem(value: Any) -> str | None:
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    if any(c in value for c in "\x00\r\n"):
        return "must not contain NUL or line breaks"
    return None


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
    out: list = []
    if "endpoint" in value:
        out.append(value["endpoint"])
    eps = value.get("endpoints")
    if isinstance(eps, list):
        out.extend(eps)
    return out


def entry_problems(name: Any, value: Any, file: str) -> list[Problem]:
    """Every problem of one registry entry ``name: value`` (empty list: valid).

    ``file`` is used in the :class:`Problem` records; paths are JSON paths such as
    ``["user.x"].checkpoints.main``.
    """
    out: list[Problem] = []
    base = [name] if isinstance(name, str) else ["?"]

    def add(rel: list, rule: str, message: str) -> None:
        out.append(Problem(file, jsonpath.join(base + rel), rule, message))

    if not isinstance(name, str) or not MODEL_NAME_RE.match(name) or len(name) > MODEL_NAME_MAX:
        add([], "model-name", f"model name {name!r} must be 'user.' followed by [A-Za-z0-9][A-Za-z0-9._-]* "
                              f"(at most {MODEL_NAME_MAX} characters)")
    if not isinstance(value, dict):
        add([], "schema-type", "a model entry must be an object with 'recipe' and 'checkpoints'")
        return out
    for key in value:
        if key not in ENTRY_FIELDS:
            add([key], "unknown-field", f"unknown field {key!r} (allowed: {', '.join(ENTRY_FIELDS)})")
    recipe = value.get("recipe")
    if recipe is None:
        add(["recipe"], "missing-field", "required field 'recipe' is missing")
    elif not isinstance(recipe, str) or not RECIPE_ID_RE.match(recipe):
        add(["recipe"], "recipe-id", f"recipe {recipe!r} must be a recipe id matching ^[a-z0-9][a-z0-9_-]{{1,63}}$")
    if "endpoints" in value and (not isinstance(value["endpoints"], list) or not value["endpoints"]):
        add(["endpoints"], "schema-type", "'endpoints' must be a non-empty list of http(s)://HOST:PORT URLs")
    seen: set[str] = set()
    for i, url in enumerate(entry_endpoints(value)):
        rel = ["endpoint"] if ("endpoint" in value and i == 0) else \
            ["endpoints", i - (1 if "endpoint" in value else 0)]
        why = endpoint_problem(url)
        if why:
            shown_url = re.sub(r"//[^/@]*@", "//***@", str(url)[:200])  # never echo a password
            add(rel, "endpoint-url", f"endpoint {shown_url!r} {why}")
        elif normalize_endpoint(url) in seen:
            add(rel, "endpoint-url", f"endpoint {url!r} is given twice")
        else:
            seen.add(normalize_endpoint(url))
    remote = bool(entry_endpoints(value))
    checkpoints = value.get("checkpoints")
    if checkpoints is None and remote:
        pass  # an endpoint model needs no checkpoint
    elif checkpoints is None:
        add(["checkpoints"], "missing-field", "required field 'checkpoints' is missing")
    elif not isinstance(checkpoints, dict):
        add(["checkpoints"], "schema-type", "'checkpoints' must be an object of name -> path or hub reference")
    else:
        if "main" not in checkpoints and not remote:
            add(["checkpoints", "main"], "missing-field", "the 'main' checkpoint is required")
        for ck, cv in checkpoints.items():
            if not CHECKPOINT_NAME_RE.match(ck):
                add(["checkpoints", ck], "checkpoint-name", f"checkpoint name {ck!r} must match [A-Za-z0-9_.-]+")
            why = _text_problem(cv)
            if why:
                add(["checkpoints", ck], "checkpoint-value", f"checkpoint {ck!r} {why}")
    options = value.get("recipe_options")
    if options is not None:
        if not isinstance(options, dict):
            add(["recipe_options"], "schema-type", "'recipe_options' must be an object")
        else:
            for ok, ov in options.items():
                if not OPTION_KEY_RE.match(ok):
                    add(["recipe_options", ok], "option-name",
                        f"option name {ok!r} must match [A-Za-z0-9_][A-Za-z0-9_.-]*")
                if not _is_scalar(ov):
                    add(["recipe_options", ok], "option-value",
                        f"option {ok!r} must be a JSON scalar (string, number, boolean or null)")
    backend = value.get("backend")
    if "backend" in value and (not isinstance(backend, str) or not BACKEND_NAME_RE.match(backend)):
        add(["backend"], "backend-name", f"backend {backend!r} must be a recipe id or a default's name "
                                         "matching [A-Za-z0-9][A-Za-z0-9._-]* (at most 64 characters)")
    return out


def _build(name: str, value: dict) -> ModelEntry:
    return ModelEntry(name=name, recipe=value["recipe"],
                      checkpoints=MappingProxyType(dict(value.get("checkpoints") or {})),
                      recipe_options=MappingProxyType(dict(value.get("recipe_options") or {})),
                      backend=value.get("backend"),
                      endpoints=tuple(normalize_endpoint(u) for u in entry_endpoints(value)))


def parse_registry(text: str, file: str) -> dict[str, ModelEntry]:
    """Parse and validate the text of a registry file into entries, by name.

    Raises :class:`ManifestError` with every problem (JSON syntax, duplicate keys, a
    top level that is not an object, and each entry's problems).
    """
    doc, problems = parse_json_strict(text, file)
    if doc is None:
        raise ManifestError(problems)
    if not isinstance(doc, dict):
        raise ManifestError([Problem(file, "", "schema-type",
                            "the model registry must be a JSON object of 'user.NAME' -> entry")])
    for name, value in doc.items():
        problems.extend(entry_problems(name, value, file))
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
        if fcntl is None:  # pragma: no cover
            yield
            return
        lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as e:
            raise StorageError(f"cannot lock {self.path}: {e.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

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


def checkpoint_kind(value: str) -> str:
    """``"local"`` or ``"hub"`` for a checkpoint value (rule in the module docstring)."""
    if os.path.isfile(os.path.expanduser(value)):
        return "local"
    return "hub" if HUB_REF_RE.match(value) else "local"


def normalize_checkpoint(value: str) -> str:
    """A hub reference as is; a local path absolute and normalised (``~`` expanded,
    relative to the current directory, symlinks not resolved)."""
    if checkpoint_kind(value) == "hub":
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
    "CHECKPOINT_NAME_RE", "HUB_REF_RE", "MODEL_FILE_SUFFIXES", "checkpoint_kind", "looks_like_path",
    "normalize_checkpoint", "endpoint_problem", "normalize_endpoint", "MODEL_NAME_RE", "ModelEntry",
    "ModelRegistry", "check_model_recipe", "default_path", "entry_endpoints", "entry_problems",
    "parse_checkpoint", "parse_option", "parse_registry",
]
