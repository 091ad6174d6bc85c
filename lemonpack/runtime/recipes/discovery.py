"""Discovery of external recipe descriptors (RFC section 8) and the discovery watcher.

Search path, highest priority first (:func:`search_path`):

1. user config: ``paths.config_root()/backends`` (``$XDG_CONFIG_HOME/lemonpack/backends``),
   then ``$XDG_CONFIG_HOME/lemonade/backends``;
2. user cache: ``paths.cache_root()/backends``, then ``$XDG_CACHE_HOME/lemonade/backends``
   (``~/.cache/lemonade/backends``);
3. system: ``/usr/share/lemonpack/backends``, ``/etc/lemonpack/backends``,
   ``/usr/share/lemonade-server/backends``, ``/usr/local/share/lemonade-server/backends``,
   ``/etc/lemonade/backends`` (lemonpack's own first, then lemonade's in RFC order).

``LEMONPACK_BACKENDS_PATH`` replaces the whole list: ``os.pathsep``-separated entries,
each ``user:DIR``, ``system:DIR`` or a bare ``DIR`` (user scope). Because ``:`` is also
the POSIX separator, an entry that is exactly ``user`` or ``system`` takes the next entry
as its directory (``user:/a:system:/b`` is two directories). An empty value means no
directories at all.

In each existing directory, every ``*.json`` entry (not starting with ``.``, in name
order) is a descriptor. Each is first checked by :mod:`lemonpack.runtime.recipes.trust`
(POSIX mode/owner/symlink/ancestor rules), then read without following symlinks and
loaded with the contract loader (:func:`lemonpack.contract.check_text` then ``build_model``,
the two halves of ``load_recipe_text``, so an invalid file still names its recipe id). Then:

- a recipe found in a higher-priority directory shadows the same id lower down (the
  shadowed descriptor is recorded with kind ``shadowed``);
- two descriptors with the same id in *one* directory are ambiguous: both are rejected
  (kind ``duplicate``) and the id stays claimed at that priority, so lower descriptors
  with that id are shadowed rather than silently promoted;
- a collision with a built-in id is rejected by the contract loader (rule
  ``builtin-collision``); that rule is kept as the reason (kind ``builtin-collision``);
- a valid recipe that runs a container image not pinned by digest is rejected with kind
  ``unpinned`` and every ``digest-pinning`` problem: the same policy ``lint``/``build``
  and ``run`` enforce (:func:`lemonpack.oci.policy.recipe_policy_problems`; the runtime
  imports this one function of the build room, which depends on contract and oci only);
- ``extends`` is resolved among the winners (:mod:`lemonpack.contract.extends`);
  recipes dropped there are rejected with kind ``extends``.

Every rejected or shadowed descriptor is kept as a :class:`Rejected` (file, kind, reason,
problems) and logged once, at WARNING (INFO for ``shadowed``), on the logger
``lemonpack.runtime.recipes.discovery`` when first seen. A rejected descriptor never blocks a
lower-priority one: an untrusted file cannot take an id away from a trusted one.

:class:`Discovery` caches parsed files by their ``lstat`` signature (device, inode,
size, mtime, ctime, mode, owner), so a re-scan only re-parses files that changed; trust
checks (a few ``lstat`` calls) run on every scan; re-scanning every 2 s is
:class:`lemonpack.runtime.recipes.watch.DiscoveryWatcher`.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType


from lemonpack import paths
from lemonpack.contract.loader import build_model, check_text
from lemonpack.contract.model import Recipe
from lemonpack.errors import InputError, NotFoundError, Problem, UnreadableFileError
from lemonpack.files import open_regular
from lemonpack.oci.policy import recipe_policy_problems
from lemonpack.runtime.recipes import trust
from lemonpack.contract.extends import resolve_extends
from lemonpack.runtime.recipes.trust import Scope

log = logging.getLogger("lemonpack.runtime.recipes.discovery")

#: ``errno`` values that say "no file descriptor free now" (the process's or the system's):
#: the directory is there, this scan cannot look at it.
_NO_FDS = frozenset({errno.EMFILE, errno.ENFILE})


class CannotLook(OSError):
    """A scan could not look now (the process is out of file descriptors: ``EMFILE``,
    ``ENFILE``). Not a result: the caller keeps the last one (nothing found is "gone")."""
log.addHandler(logging.NullHandler())

#: The environment variable that replaces the search path (see the module docstring).
BACKENDS_PATH_ENV = "LEMONPACK_BACKENDS_PATH"

#: System descriptor directories, highest priority first.
SYSTEM_DIRS: tuple[str, ...] = (
    "/usr/share/lemonpack/backends",
    "/etc/lemonpack/backends",
    "/usr/share/lemonade-server/backends",
    "/usr/local/share/lemonade-server/backends",
    "/etc/lemonade/backends",
)

#: Kinds of :class:`Rejected` records.
REJECT_KINDS = ("untrusted", "unreadable", "invalid", "unpinned", "builtin-collision", "duplicate", "shadowed",
                "extends")


@dataclass(frozen=True)
class SearchDir:
    """One descriptor directory: ``path`` and its ``scope`` (``user`` or ``system``,
    which decides the required owner of its files)."""

    path: Path
    scope: Scope


@dataclass(frozen=True)
class DiscoveredRecipe:
    """A loaded, trusted, winning recipe.

    ``recipe`` is the frozen :class:`Recipe` with ``extends`` already resolved (its
    ``recipe_options``/``custom_options`` include inherited entries); ``file`` the
    descriptor path; ``directory`` the search directory it was found in; ``scope``
    ``user`` or ``system``; ``priority`` the index of that directory in the search path
    (0 is highest); ``extends_chain`` the resolved base ids, nearest first.
    """

    recipe: Recipe
    file: Path
    directory: Path
    scope: Scope
    priority: int
    extends_chain: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        """The recipe id."""
        return self.recipe.recipe

    @property
    def kind(self) -> str:
        """``passthrough`` or ``variant_of:<builtin>``."""
        return "passthrough" if self.recipe.variant_of is None else f"variant_of:{self.recipe.variant_of}"

    def to_json(self) -> dict:
        """JSON-serialisable summary (for ``backends list --json``)."""
        return {
            "recipe": self.id, "display_name": self.recipe.display_name, "kind": self.kind,
            "variant_of": self.recipe.variant_of, "extends": self.recipe.extends,
            "extends_chain": list(self.extends_chain), "scope": self.scope, "file": str(self.file),
            "directory": str(self.directory), "priority": self.priority,
            "capabilities": list(self.recipe.capabilities),
        }


@dataclass(frozen=True)
class Rejected:
    """A descriptor that was not loaded, and why.

    ``file``/``directory``/``scope`` locate it; ``kind`` is one of :data:`REJECT_KINDS`;
    ``reason`` a one-line sentence; ``problems`` every :class:`Problem` found (for
    ``invalid`` files, the contract loader's full list); ``recipe`` the id when known.
    """

    file: Path
    directory: Path
    scope: Scope
    kind: str
    reason: str
    problems: tuple[Problem, ...] = ()
    recipe: str | None = None

    def to_json(self) -> dict:
        """JSON-serialisable form (for ``backends list --json``)."""
        return {
            "file": str(self.file), "directory": str(self.directory), "scope": self.scope, "kind": self.kind,
            "reason": self.reason, "recipe": self.recipe, "problems": [p.to_json() for p in self.problems],
        }


@dataclass(frozen=True)
class DiscoveryResult:
    """The outcome of one scan.

    ``recipes`` maps recipe id to the winning :class:`DiscoveredRecipe` (sorted by id);
    ``rejected`` holds every descriptor not loaded, shadowed ones included, in search
    order (directory priority, then file name, then the later passes).
    """

    recipes: Mapping[str, DiscoveredRecipe]
    rejected: tuple[Rejected, ...]

    @property
    def shadowed(self) -> tuple[Rejected, ...]:
        """The rejected records of kind ``shadowed``."""
        return tuple(r for r in self.rejected if r.kind == "shadowed")

    @property
    def errors(self) -> tuple[Rejected, ...]:
        """The rejected records other than ``shadowed`` (real problems)."""
        return tuple(r for r in self.rejected if r.kind != "shadowed")

    def get(self, recipe: str) -> DiscoveredRecipe | None:
        """The discovered recipe with id ``recipe`` or None."""
        return self.recipes.get(recipe)

    def to_json(self) -> dict:
        """``{"recipes": [...], "rejected": [...]}``."""
        return {"recipes": [r.to_json() for r in self.recipes.values()],
                "rejected": [r.to_json() for r in self.rejected]}


EMPTY_RESULT = DiscoveryResult(MappingProxyType({}), ())


def parse_search_path(value: str) -> tuple[SearchDir, ...]:
    """Parse a ``LEMONPACK_BACKENDS_PATH`` value into search directories, in order.

    Entries are separated by ``os.pathsep``; each is ``user:DIR``, ``system:DIR`` or
    ``DIR`` (user). On POSIX an entry that is exactly ``user``/``system`` takes the next
    entry as its directory. Empty entries are skipped. Raises nothing.
    """
    parts = value.split(os.pathsep) if value else []
    out: list[SearchDir] = []
    i = 0
    while i < len(parts):
        entry = parts[i]
        i += 1
        scope: Scope = "user"
        if entry in ("user", "system") and i < len(parts):
            scope, entry = entry, parts[i]  # type: ignore[assignment]
            i += 1
        elif entry.startswith("user:"):
            entry = entry[len("user:"):]
        elif entry.startswith("system:"):
            scope, entry = "system", entry[len("system:"):]
        if entry:
            out.append(SearchDir(Path(entry), scope))
    return tuple(out)


def default_search_path() -> tuple[SearchDir, ...]:
    """The built-in search path (module docstring), from the current environment."""
    user = (
        paths.config_root() / "backends",
        paths.lemonade_config_dir() / "backends",
        paths.cache_root() / "backends",
        paths.lemonade_cache_dir() / "backends",
    )
    return tuple(SearchDir(p, "user") for p in user) + tuple(SearchDir(Path(p), "system") for p in SYSTEM_DIRS)


def search_path(environ: Mapping[str, str] | None = None) -> tuple[SearchDir, ...]:
    """The effective search path: ``LEMONPACK_BACKENDS_PATH`` when set, else the default."""
    env = os.environ if environ is None else environ
    if BACKENDS_PATH_ENV in env:
        return parse_search_path(env[BACKENDS_PATH_ENV])
    return default_search_path()


# --- one file -----------------------------------------------------------------------

_Signature = tuple[int, int, int, int, int, int, int, int]


def _signature(st: os.stat_result) -> _Signature:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode, st.st_uid, st.st_gid)


@dataclass(frozen=True)
class _Parsed:
    """What loading one file produced: a recipe, or the problems and the reject kind."""

    recipe: Recipe | None
    kind: str = ""
    problems: tuple[Problem, ...] = ()
    recipe_id: str | None = None


def _read_nofollow(file: str, expected: os.stat_result) -> str:
    """Read ``file`` as a regular file itself (:func:`lemonpack.files.open_regular`: no
    symlink followed, no fifo blocked on), checking it is the inode we lstat'ed.

    Raises ``OSError`` (including when the file was swapped between lstat and open) and
    ``UnicodeDecodeError``.
    """
    with open_regular(file) as f:
        st = os.fstat(f.fileno())
        if (st.st_dev, st.st_ino) != (expected.st_dev, expected.st_ino):
            raise OSError(errno.ESTALE, "file changed while being opened")
        return f.read().decode("utf-8")


def _parse(file: str, st: os.stat_result) -> _Parsed:
    try:
        text = _read_nofollow(file, st)
    except OSError as e:
        if e.errno in _NO_FDS:
            raise CannotLook(f"cannot read {file}: {e.strerror}") from None
        return _Parsed(None, "unreadable", (Problem(file, "", "unreadable", f"cannot read file: {e.strerror or e}"),))
    except UnicodeDecodeError as e:
        msg = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        return _Parsed(None, "unreadable", (Problem(file, "", "unreadable", f"cannot read file: {msg}"),))
    doc, problems = check_text(text, file)
    if not problems:
        recipe = build_model(doc, file)
        unpinned = recipe_policy_problems(recipe)
        if unpinned:
            return _Parsed(None, "unpinned", tuple(unpinned), recipe.recipe)
        return _Parsed(recipe)
    kind = "builtin-collision" if any(p.rule == "builtin-collision" for p in problems) else "invalid"
    rid = doc.get("recipe") if isinstance(doc, dict) and isinstance(doc.get("recipe"), str) else None
    return _Parsed(None, kind, tuple(problems), rid)


def _summary(kind: str, problems: Sequence[Problem]) -> str:
    if kind == "builtin-collision":
        first = next(p for p in problems if p.rule == "builtin-collision")
    else:
        first = problems[0]
    more = f" (and {len(problems) - 1} more problem{'s' if len(problems) > 2 else ''})" if len(problems) > 1 else ""
    return f"{first.message} [{first.rule}]{more}"


# --- the scanner ----------------------------------------------------------------------


def recipe_file_ref(ref: str) -> Path | None:
    """The file half of the file-or-id rule of a RECIPE argument (:meth:`Discovery.resolve`):
    ``ref`` as a :class:`Path` when it names an existing file; None when it is a recipe id
    (no such file, no ``.json`` suffix, no path separator). Raises
    :class:`~lemonpack.errors.LemonpackError` "recipe file not found: REF" (or "... is not a
    regular file") when it looks like a path but is no file."""
    path = Path(ref)
    if path.is_file():
        return path
    if ref.endswith(".json") or "/" in ref or os.sep in ref:
        if path.exists():
            raise UnreadableFileError(f"recipe file {ref} is not a regular file")
        raise UnreadableFileError(f"recipe file not found: {ref}")
    return None


def recipe_id(ref: str) -> str:
    """The recipe id a RECIPE argument names without consulting discovery (``uninstall``:
    an installed recipe need not be discovered any more): a file's ``recipe`` field (loaded
    and validated), else ``ref`` itself. Same file-or-id rule and errors as
    :meth:`Discovery.resolve`."""
    from lemonpack.contract import load_recipe

    path = recipe_file_ref(ref)
    return load_recipe(path).recipe if path is not None else ref


class Discovery:
    """The recipe registry's scanner (RFC section 8). Thread-safe; cheap to re-scan.

    ``directories`` is the search path, highest priority first (default:
    :func:`search_path` evaluated now); ``euid`` the uid user descriptors must belong
    to (default ``os.geteuid()``). :meth:`scan` returns a fresh :class:`DiscoveryResult`
    and never raises for anything found on disk; it raises :class:`CannotLook` when it runs
    out of file descriptors (a result then would call every recipe gone).
    """

    def __init__(self, directories: Iterable[SearchDir] | None = None, *, euid: int | None = None):
        self.directories: tuple[SearchDir, ...] = tuple(search_path() if directories is None else directories)
        self.euid = os.geteuid() if euid is None and os.name == "posix" else (euid or 0)
        self._cache: dict[str, tuple[_Signature, _Parsed]] = {}
        self._logged: set[tuple[str, str, str]] = set()
        self._lock = threading.Lock()
        self.parse_count = 0  # how many files were (re)parsed: lets tests check the cache

    def _entries(self, directory: Path) -> list[str]:
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            log.warning("descriptor directory %s is not a directory; skipped", directory)
            return []
        except OSError as e:
            if e.errno in _NO_FDS:
                raise CannotLook(f"cannot list {directory}: {e.strerror}") from None
            log.warning("cannot list descriptor directory %s: %s", directory, e.strerror)
            return []
        return sorted(n for n in names if n.endswith(".json") and not n.startswith("."))

    def _load(self, file: str, st: os.stat_result) -> _Parsed:
        sig = _signature(st)
        cached = self._cache.get(file)
        if cached is not None and cached[0] == sig:
            return cached[1]
        parsed = _parse(file, st)
        self.parse_count += 1
        self._cache[file] = (sig, parsed)
        return parsed

    def scan(self) -> DiscoveryResult:
        """Scan every directory and return the current :class:`DiscoveryResult`.

        Only files whose ``lstat`` signature changed since the last scan are re-parsed.
        Each rejected/shadowed descriptor is logged the first time it is seen.
        """
        with self._lock:
            result, seen_files = self._scan_locked()
            for stale in set(self._cache) - seen_files:
                del self._cache[stale]
            self._log_new(result.rejected)
        return result

    def resolve(self, ref: str) -> Recipe:
        """The recipe a command argument names: a path to a recipe JSON file, or the id of
        a recipe this discovery finds (``lemonpack backends list``). The one file-or-id rule
        of every command taking a RECIPE (``run``, ``install``, ``serve``'s models).

        ``ref`` is a file when it names an existing file (loaded with
        :func:`lemonpack.contract.load_recipe`: a :class:`~lemonpack.errors.ManifestError`
        when invalid). When it does not and looks like a path (ends with ``.json`` or holds a
        path separator) the error is "recipe file not found: REF" ("... is not a regular
        file" for a directory). Otherwise it is a recipe id, looked up with a fresh
        :meth:`scan`; an id that only rejected descriptors carry (their recipe id or, for
        descriptors never parsed such as untrusted ones, their file name
        ``ID.json``/``ID_WITH_UNDERSCORES.json``) is an error saying where it was found and
        why it was rejected; an unknown id lists what was discovered and where it looked.
        Raises :class:`~lemonpack.errors.LemonpackError` (exit 1); never returns None.
        """
        from lemonpack.contract import load_recipe

        path = recipe_file_ref(ref)
        if path is not None:
            return load_recipe(path)
        result = self.scan()
        found = result.recipes.get(ref)
        if found is not None:
            return found.recipe
        for r in result.errors:
            if r.recipe == ref or (r.recipe is None and r.file.stem in (ref, ref.replace("-", "_"))):
                raise InputError(f"{ref} was found at {r.file} but rejected: {r.kind}: {r.reason} "
                                 f"— see lemonpack backends list --all")
        known = ", ".join(result.recipes) or "none"
        dirs = ", ".join(str(d.path) for d in self.directories) or "no directories"
        raise NotFoundError(f"no recipe file or discovered recipe named {ref!r} (discovered: {known}; "
                            f"searched: {dirs})")

    def _scan_locked(self) -> tuple[DiscoveryResult, set[str]]:
        rejected: list[Rejected] = []
        winners: dict[str, DiscoveredRecipe] = {}
        claimed: dict[str, str] = {}  # id -> description of who claimed it (for shadow reasons)
        seen_files: set[str] = set()
        for priority, sd in enumerate(self.directories):
            found: dict[str, list[tuple[Path, Recipe]]] = {}
            for name in self._entries(sd.path):
                path = sd.path / name
                file = str(path)
                seen_files.add(file)
                try:
                    st = os.lstat(file)
                except FileNotFoundError:
                    continue  # removed while scanning
                except OSError as e:
                    if e.errno in _NO_FDS:
                        raise CannotLook(f"cannot stat {file}: {e.strerror}") from None
                    rejected.append(Rejected(path, sd.path, sd.scope, "unreadable", f"cannot stat: {e.strerror}",
                                             (Problem(file, "", "unreadable", f"cannot stat: {e.strerror}"),)))
                    continue
                violations = trust.check_descriptor(file, sd.scope, euid=self.euid, st=st)
                if violations:
                    problems = tuple(Problem(file, "", f"trust-{v.rule}", v.message) for v in violations)
                    reason = violations[0].message + (
                        f" (and {len(violations) - 1} more)" if len(violations) > 1 else "")
                    rejected.append(Rejected(path, sd.path, sd.scope, "untrusted", reason, problems))
                    continue
                parsed = self._load(file, st)
                if parsed.recipe is None:
                    rejected.append(Rejected(path, sd.path, sd.scope, parsed.kind,
                                             _summary(parsed.kind, parsed.problems), parsed.problems,
                                             parsed.recipe_id))
                    continue
                found.setdefault(parsed.recipe.recipe, []).append((path, parsed.recipe))
            for rid in sorted(found, key=lambda r: str(found[r][0][0])):
                entries = found[rid]
                if len(entries) > 1:
                    names = ", ".join(p.name for p, _ in entries)
                    for p, _ in entries:
                        reason = (f"recipe id {rid!r} is declared by several descriptors in {sd.path} ({names}); "
                                  f"ambiguous, none is loaded")
                        rejected.append(Rejected(p, sd.path, sd.scope, "duplicate", reason,
                                                 (Problem(str(p), "recipe", "duplicate-recipe", reason),), rid))
                    claimed.setdefault(rid, f"the ambiguous descriptors in {sd.path}")
                    continue
                path, recipe = entries[0]
                if rid in claimed:
                    reason = f"recipe {rid!r} is shadowed by {claimed[rid]} (higher priority)"
                    rejected.append(Rejected(path, sd.path, sd.scope, "shadowed", reason,
                                             (Problem(str(path), "recipe", "shadowed", reason),), rid))
                    continue
                claimed[rid] = str(path)
                winners[rid] = DiscoveredRecipe(recipe, path, sd.path, sd.scope, priority)

        resolved = resolve_extends({rid: d.recipe for rid, d in winners.items()})
        for drop in resolved.dropped:
            d = winners.pop(drop.recipe)
            rejected.append(Rejected(d.file, d.directory, d.scope, "extends", drop.reason,
                                     (Problem(str(d.file), "extends", drop.rule, drop.reason),), drop.recipe))
        recipes = {
            rid: DiscoveredRecipe(resolved.recipes[rid], d.file, d.directory, d.scope, d.priority,
                                  resolved.chains.get(rid, ()))
            for rid, d in sorted(winners.items())
        }
        return DiscoveryResult(MappingProxyType(recipes), tuple(rejected)), seen_files

    def _log_new(self, rejected: Iterable[Rejected]) -> None:
        for r in rejected:
            key = (str(r.file), r.kind, r.reason)
            if key in self._logged:
                continue
            self._logged.add(key)
            level = logging.INFO if r.kind == "shadowed" else logging.WARNING
            # ``listed``: the CLI commands report rejections themselves (``backends list --all``,
            # ``run ID``), so their log handler skips these records; a server logs them.
            log.log(level, "descriptor %s %s: %s", r.file, "shadowed" if r.kind == "shadowed" else "rejected",
                    r.reason, extra={"listed": True})


def discovered_recipes() -> dict[str, Recipe]:
    """The recipes discovery finds now on the default search path (id -> resolved recipe):
    what a build looks ``extends`` bases up in when they are not given
    (:func:`lemonpack.builder.plan.plan_build`'s ``known``)."""
    return {rid: d.recipe for rid, d in Discovery().scan().recipes.items()}


def discover(directories: Iterable[SearchDir] | None = None) -> DiscoveryResult:
    """One-shot convenience: ``Discovery(directories).scan()``."""
    return Discovery(directories).scan()


def refuse_system_descriptor(recipe_id: str) -> None:
    """Raise :class:`InputError` when discovery finds ``recipe_id`` in a system descriptor
    directory (installed by the system's package manager: not ours to remove)."""
    found = Discovery().scan().recipes.get(recipe_id)
    if found is not None and found.scope == "system":
        raise InputError(f"{recipe_id} comes from the system descriptor {found.file}; "
                         "refusing to uninstall it (remove it with the system's package manager)")


__all__ = [
    "BACKENDS_PATH_ENV", "Discovery", "DiscoveredRecipe", "DiscoveryResult", "EMPTY_RESULT",
    "REJECT_KINDS", "Rejected", "SYSTEM_DIRS", "SearchDir", "default_search_path",
    "discover", "parse_search_path", "recipe_file_ref", "recipe_id", "refuse_system_descriptor", "search_path",
]
