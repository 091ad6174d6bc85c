"""From directories of ``extension.json`` manifests to the selection a build compiles in
(seed 002 section 8, steps 1 to 5; step 6 is :mod:`lemonpack.extensions.generate`).

1. **Discover** every manifest under ``<tree>/catalogue/extensions/*/``, then the given
   directories (``--extension-dir``) and ``GUFO_EXTENSION_DIRS`` (``:``-separated), each
   either an extension directory or a directory of them. A directory reached twice (a
   symlink, or named twice) counts once: the first way it was reached wins.
2. **Validate** every manifest (:mod:`lemonpack.extensions.manifest`), even those that
   will not be built, keeping every reason; a community ``extension.json`` that is a symlink
   leaving its directory is refused unread; each extension's ``api_version`` is checked
   against the host API (``0.MINOR.REVISION`` from ``<tree>/api/``, seed 002 section 7) and
   its entry symbols against its sources (:func:`lemonpack.extensions.includes.entry_problems`);
   a community extension's directory must hold no symlink leaving it and no fifo
   (:func:`~lemonpack.extensions.includes.tree_problems`), and the compiler's preprocessor
   decides whether its sources keep to the include allowlist
   (:class:`~lemonpack.extensions.includes.IncludeCheck`, seed 002 sections 5 and 8 step 5).
   An extension with any reason is *rejected* (``Selection.rejected``), filed under its
   manifest's ``name`` (when it has a readable one) and its directory's, so selecting it by
   either says why.
3. **Collisions** (seed 002 section 4, :mod:`lemonpack.extensions.collisions`): a community
   extension claiming an extension name, artifact key, option name, contributed option value
   or provider id that an official extension owns is rejected, the reason naming both
   manifests. Official = named in the release lock and found in the tree's
   ``catalogue/extensions``; community = every other.
4. **Select**: ``"lock"`` (the release lock's names), ``"all"`` (every valid extension with
   at least one target the features can build), or a list of names and directories;
   always closed over ``dependencies``. A missing, rejected or cyclic dependency of what
   was asked for is an :class:`ExtensionError` naming the chain ``a -> b -> c``; the lock
   is validated in every mode (a stale name is an error).
5. **Order and availability**: the lock's extensions in the lock's order, then the others
   by name (byte-wise); providers per extension in manifest order, each available when all
   its target's ``requires`` are in the build's features, else unavailable with reason
   ``target <name> not built: needs <missing, sorted, ", "-separated>``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from lemonpack import jsonpath
from lemonpack.strictjson import parse_json_strict, read_json_text
from lemonpack.errors import LemonpackError, Problem
from lemonpack.safetree import symlink_problem
from lemonpack.extensions import templates
from lemonpack.extensions.apilock import record_names
from lemonpack.extensions.collisions import claim_owners, collision_problems
from lemonpack.extensions.includes import IncludeCheck, entry_problems, symlink_reason, tree_problems
from lemonpack.extensions.manifest import MANIFEST_NAME, Extension, Provider, build_extension, check_manifest
from lemonpack.safetree import inside

#: Environment variable naming extra extension directories, ``:``-separated (seed 002 section 6).
ENV_DIRS = "GUFO_EXTENSION_DIRS"
#: Where the official (in-tree) extensions live, relative to the tree.
CATALOGUE_DIR = Path("catalogue") / "extensions"
LOCK_NAME = "extensions.lock"

_OS_FEATURE = {"linux": "linux", "darwin": "macos", "windows": "windows"}


class ExtensionError(LemonpackError):
    """The extension set cannot be built as asked: a stale lock name, a selected extension
    that was rejected, a missing or cyclic dependency, a missing API version. Exit 1."""

    kind = "extension"


@dataclass(frozen=True)
class ProviderStatus:
    """One provider of a selected extension: ``available`` when its target is built, else
    ``reason`` (``target gufo_x_hip not built: needs hip``); ``reason`` is None when available."""

    extension: Extension
    provider: Provider
    available: bool
    reason: str | None


@dataclass(frozen=True)
class Selection:
    """What :func:`run_pipeline` decided. ``extensions``: selected, in registry order;
    ``providers``: their providers in registry order; ``rejected``: ``[(manifest path,
    [reasons])]`` of every discovered manifest that failed a rule, in discovery order;
    ``discovered``: every valid extension (selected or not), in registry order;
    ``api_version``: the host's ``0.MINOR.REVISION``; ``features``: the build's features;
    ``lock``: the release lock's names."""

    extensions: tuple[Extension, ...]
    providers: tuple[ProviderStatus, ...]
    rejected: tuple[tuple[Path, tuple[str, ...]], ...]
    api_version: str
    features: frozenset[str]
    discovered: tuple[Extension, ...] = ()
    lock: tuple[str, ...] = ()


# ---------------------------------------------------------------- features and API version

def default_features(host=None) -> frozenset[str]:
    """The default build features: the host OS (``linux``/``windows``/``macos``) plus ``hip``
    when ROCm is detected (:func:`lemonpack.contract.detect_host`); never ``testing``."""
    if host is None:
        from lemonpack.contract import detect_host
        host = detect_host()
    out = {_OS_FEATURE.get(host.os, host.os)}
    if "rocm" in host.accelerators:
        out.add("hip")
    return frozenset(out)


def host_api(tree: Path) -> tuple[int, int]:
    """``(MINOR, REVISION)`` of the host extension API: MINOR from ``<tree>/api/minor`` (one
    integer), REVISION the number of change records ``<tree>/api/changes/NNNN-<slug>.md``
    (:func:`lemonpack.extensions.apilock.record_names`: a README or any other file there does
    not count).
    Raises :class:`ExtensionError` when ``api/minor`` is missing or not an integer."""
    minor_file = Path(tree) / "api" / "minor"
    try:
        text = minor_file.read_text(encoding="utf-8").strip()
    except OSError as e:
        raise ExtensionError(f"{minor_file}: cannot read the extension API minor number ({e.strerror or e}); "
                             f"{tree} is not an extension tree (pass --tree with a lemonpack checkout's top, or "
                             "leave --tree out to read the tree shipped with lemonpack)") from None
    if not text.isdigit():
        raise ExtensionError(f"{minor_file}: the extension API minor number must be one integer, got {text[:40]!r}")
    return int(text), len(record_names(tree))


def api_problem(ext: Extension, minor: int, revision: int) -> str | None:
    """Why ``ext``'s ``api_version`` does not fit host API ``0.minor.revision`` (None: fits).
    The extension's minor must equal the host's (a minor bump may break extensions) and its
    revision be at most the host's (seed 002 section 7)."""
    want_minor, want_rev = ext.api_minimum()
    host = f"0.{minor}.{revision}"
    if want_minor != minor:
        return (f"needs extension API {ext.api_version.strip()} but the host API is {host}: "
                f"the minor numbers differ ({want_minor} != {minor}), and a minor bump may break extensions")
    if want_rev > revision:
        return (f"needs extension API {ext.api_version.strip()} but the host API is {host}: "
                f"revision {want_rev} is newer than the host's {revision}")
    return None


# ---------------------------------------------------------------- the release lock

def read_lock(path: Path) -> tuple[str, ...]:
    """The names of the release lock ``{"schema": 1, "extensions": [names]}`` (seed 002
    section 6), in order. Raises :class:`ExtensionError` naming the file and JSON path."""
    file = str(path)
    text, problems = read_json_text(path)
    doc = None
    if text is not None:
        doc, problems = parse_json_strict(text, file)
    if not problems:
        name = re.compile(r"[a-z][a-z0-9_]*\Z")
        if not isinstance(doc, dict):
            problems = [Problem(file, "", "lock", "the release lock must be a JSON object")]
        else:
            for key in doc:
                if key not in ("schema", "extensions"):
                    problems.append(Problem(file, jsonpath.join([key]), "unknown-field", f"unknown field {key!r}"))
            if doc.get("schema") != 1 or isinstance(doc.get("schema"), bool):
                problems.append(Problem(file, "schema", "lock", "'schema' must be 1"))
            names = doc.get("extensions")
            if not isinstance(names, list):
                problems.append(Problem(file, "extensions", "lock", "'extensions' must be a list of extension names"))
            else:
                seen = set()
                for i, n in enumerate(names):
                    if not isinstance(n, str) or not name.match(n):
                        problems.append(Problem(file, f"extensions[{i}]", "lock",
                                                f"{n!r} is not an extension name (^[a-z][a-z0-9_]*$)"))
                    elif n in seen:
                        problems.append(Problem(file, f"extensions[{i}]", "lock", f"{n!r} is listed twice"))
                    seen.add(n if isinstance(n, str) else None)
    if problems:
        raise ExtensionError("\n".join(str(p) for p in problems))
    assert isinstance(doc, dict), "a lock without problems is an object"
    return tuple(doc["extensions"])


# ---------------------------------------------------------------- discovery

def _candidates(directory: Path) -> list[Path]:
    """``directory`` itself when it holds a manifest, else its subdirectories holding one
    (sorted by name). A manifest name that is not a regular file (a directory, a fifo, a
    dangling link) still makes a candidate: validation then rejects it saying why, rather
    than the extension silently missing."""
    if os.path.lexists(directory / MANIFEST_NAME):
        return [directory]
    try:
        subs = sorted((p for p in directory.iterdir() if os.path.lexists(p / MANIFEST_NAME)), key=lambda p: p.name)
    except OSError:
        return []
    return subs


def env_dirs(environ=None) -> list[Path]:
    """The directories of ``GUFO_EXTENSION_DIRS`` (``:``-separated, empty parts ignored)."""
    value = (os.environ if environ is None else environ).get(ENV_DIRS, "")
    return [Path(p) for p in value.split(":") if p]


def discover(tree: Path, extra_dirs: Iterable[Path] = (), environ=None) -> list[tuple[Path, bool]]:
    """Every extension directory: ``[(directory, in_tree)]`` in discovery order (the tree's
    catalogue by name, then ``extra_dirs`` in order, then ``GUFO_EXTENSION_DIRS``). A
    directory whose real path was already found is skipped. Raises :class:`ExtensionError`
    for a given directory that does not exist."""
    out: list[tuple[Path, bool]] = []
    seen: set[object] = set()
    catalogue = Path(tree) / CATALOGUE_DIR
    roots: list[tuple[Path, bool]] = [(catalogue, True)] if catalogue.is_dir() else []
    for d in list(extra_dirs) + env_dirs(environ):
        if not Path(d).is_dir():
            raise ExtensionError(f"extension directory {d} does not exist or is not a directory")
        roots.append((Path(d), False))
    for root, in_tree in roots:
        for d in _candidates(root):
            try:
                st = os.stat(d)
                real: object = (st.st_dev, st.st_ino)  # the same directory however it was reached
            except OSError:
                real = os.path.realpath(d)
            if real in seen:
                continue
            seen.add(real)
            out.append((Path(os.path.abspath(d)), in_tree))
    return out


# ---------------------------------------------------------------- selection

def registry_order(extensions: Iterable[Extension], lock: Sequence[str]) -> list[Extension]:
    """Extensions named in the lock in the lock's order, then the others by name (byte-wise)."""
    pos = {n: i for i, n in enumerate(lock)}
    return sorted(extensions, key=lambda e: (0, pos[e.name], b"") if e.name in pos and e.official
                  else (1, 0, e.name.encode()))


def supported(ext: Extension, features: frozenset[str]) -> bool:
    """True when the features build at least one of ``ext``'s targets (``select="all"``)."""
    return any(not t.missing(features) for t in ext.targets)


def provider_status(ext: Extension, features: frozenset[str]) -> list[ProviderStatus]:
    """Availability of each provider of ``ext`` (manifest order) under ``features``."""
    out = []
    for p in ext.providers:
        missing = ext.target(p.target).missing(features)
        reason = templates.UNAVAILABLE_REASON.format(target=p.target, missing=", ".join(missing)) if missing else None
        out.append(ProviderStatus(ext, p, not missing, reason))
    return out


def registry_candidates(selection: Selection, mode: str) -> list[ProviderStatus]:
    """The providers ``lemonpack probe`` lists, in registry order: the selection's (the
    registry a build compiles in, seed 002 section 4), then those of every other valid
    extension discovered, unavailable with the reason they are not in this build (``mode``:
    how the selection was made: ``lock``, ``all`` or ``list``). Only the former are asked."""
    chosen = {e.name for e in selection.extensions}
    listed = list(selection.providers)
    for ext in registry_order([e for e in selection.discovered if e.name not in chosen], selection.lock):
        for st in provider_status(ext, selection.features):
            why = {"lock": "not named in the release lock",
                   "all": st.reason or "not selected"}.get(mode, "not selected")
            listed.append(ProviderStatus(ext, st.provider, False, f"extension {ext.name} is not in this build: {why}"))
    return listed


def _closure(roots: Sequence[str], valid: dict[str, Extension], rejected_by_name: dict[str, list[str]],
             unnamed: Sequence[str] = ()) -> tuple[list[str], dict[str, str]]:
    """Names reachable from ``roots`` through ``dependencies``, dependencies first; ``(names,
    {root: error})`` with an error per root whose closure hits a missing, rejected or cyclic
    dependency (the first one met, depth first in manifest order), naming the chain. A name
    found nowhere is said with ``unnamed``: the rejected manifests whose name could not be read
    (``"<manifest>: <reason>"``), one of which may be the one meant.

    Iterative (an explicit stack, not recursion): a chain of any length (the Nix library
    evaluates 2,000 links) costs memory in proportion, never a RecursionError."""
    errors: dict[str, str] = {}
    done: set[str] = set()
    order: list[str] = []

    hint = ""
    if unnamed:
        more = f" and {len(unnamed) - 3} more" if len(unnamed) > 3 else ""
        hint = f" (rejected manifests whose name could not be read: {'; '.join(unnamed[:3])}{more})"

    def fail(name: str, chain: list[str], root: str) -> None:
        path = " -> ".join(chain + [name])
        if not chain:
            errors[root] = (f"extension {name!r} was rejected: " + "; ".join(rejected_by_name[name])
                            if name in rejected_by_name else f"no extension named {name!r}{hint}")
        elif name in rejected_by_name:
            errors[root] = f"dependency {path}: extension {name!r} was rejected: " + "; ".join(rejected_by_name[name])
        else:
            errors[root] = f"missing dependency {path}: no extension named {name!r}{hint}"

    def visit(root: str) -> None:
        chain: list[str] = []          # the path from root to the node being expanded
        on_chain: set[str] = set()
        pending: list = []             # per chain node: an iterator over its dependencies
        name: str | None = root
        while True:
            if name is not None:       # enter name
                if name in on_chain:
                    cycle = chain[chain.index(name):] + [name]
                    errors[root] = f"dependency cycle: {' -> '.join(cycle)}"
                    return
                if name not in done:
                    if name not in valid:
                        fail(name, chain, root)
                        return
                    chain.append(name)
                    on_chain.add(name)
                    pending.append(iter(valid[name].dependencies))
            if not pending:
                return
            name = next(pending[-1], None)
            if name is None:           # every dependency of the top node is done: it is done
                pending.pop()
                top = chain.pop()
                on_chain.discard(top)
                done.add(top)
                order.append(top)

    for r in roots:
        visit(r)
    return order, errors


def _jobs() -> int:
    return max(1, min(8, os.cpu_count() or 1))


def run_pipeline(tree: Path, extra_dirs: Iterable[Path] = (), select: str | Sequence[str] = "lock",
                 lock: Path | None = None, features: frozenset[str] | None = None, environ=None, *,
                 includes: bool = True, cxx: str | None = None, jobs: int | None = None) -> Selection:
    """Run discovery, validation, collisions, API check and selection (module docstring).

    ``tree``: the repository top (``catalogue/extensions``, ``api/``, ``extensions.lock``);
    ``extra_dirs``: extension directories or directories of them; ``select``: ``"lock"``,
    ``"all"`` or a list of extension names and directories (a directory is discovered too);
    ``lock``: the release lock (default ``<tree>/extensions.lock``; absent: no official
    extensions, and ``"lock"`` is an error); ``features``: default :func:`default_features`;
    ``environ``: where ``GUFO_EXTENSION_DIRS`` is read (default ``os.environ``);
    ``includes``: run the compiler's include check on every valid community extension and
    confirm a missing entry symbol on the preprocessed sources (``cxx``: the compiler,
    default ``$CXX`` or ``g++``; ``jobs``: preprocessors run at once, default the CPU count
    up to 8); False leaves both out (validation of metadata and sources as text only, what
    the benchmark of step 2 times). Raises :class:`ExtensionError` (exit 1) when the
    selection cannot be built.
    """
    tree = Path(tree)
    features = default_features() if features is None else frozenset(features)
    minor, revision = host_api(tree)
    api_version = f"0.{minor}.{revision}"
    lock_path = Path(lock) if lock is not None else tree / LOCK_NAME
    lock_names = read_lock(lock_path) if lock_path.exists() else ()
    if lock is not None and not lock_path.exists():
        raise ExtensionError(f"release lock {lock_path} does not exist")

    wanted_names: list[str] | None = None
    extra = list(extra_dirs)
    wanted_dirs: list[str] = []
    if not isinstance(select, str):
        wanted_names = []
        for item in select:
            if "/" in item or os.sep in item or Path(item).is_dir() and not re.fullmatch(r"[a-z][a-z0-9_]*", item):
                if not os.path.lexists(Path(item) / MANIFEST_NAME):  # a dangling link is judged, not missed
                    raise ExtensionError(f"{item} is not an extension directory (no {MANIFEST_NAME})")
                extra.append(Path(item))
                wanted_dirs.append(os.path.realpath(item))
            else:
                wanted_names.append(item)
    elif select not in ("lock", "all"):
        raise ExtensionError(f"unknown selection {select!r}: use 'lock', 'all' or a list of names")

    found = discover(tree, extra, environ)
    rejected: dict[Path, list[str]] = {}
    rejected_names: dict[Path, list[str]] = {}  # the names a rejected manifest is selected by
    valid: list[Extension] = []
    for directory, in_tree in found:
        manifest = directory / MANIFEST_NAME
        rejected_names[manifest] = [directory.name]
        why = None if in_tree or not os.path.islink(manifest) else symlink_problem(directory, MANIFEST_NAME)
        if why:  # judged by the link's text: the same on a copy where it dangles (Nix's store)
            rejected[manifest] = [symlink_reason(manifest, why)]
            continue
        doc, problems = check_manifest(manifest)
        if problems:
            rejected[manifest] = [str(p) for p in problems]
            if isinstance(doc, dict) and isinstance(doc.get("name"), str):
                rejected_names[manifest].insert(0, doc["name"])
            continue
        valid.append(build_extension(doc, directory, official=in_tree and doc["name"] in lock_names))

    officials = [e for e in valid if e.official]
    owners = claim_owners(officials)
    official_names = {e.name for e in officials}
    missing_official = [(i, n) for i, n in enumerate(lock_names) if n not in official_names]
    by_name: dict[str, list[Extension]] = {}
    for e in valid:
        by_name.setdefault(e.name, []).append(e)
    reasons_of: dict[Path, list[str]] = {}
    to_check: list[Extension] = []   # community extensions for the compiler's include check
    with IncludeCheck(cxx=cxx) as check:
        for e in valid:
            reasons: list[str] = []
            unsafe: list[str] = []  # a symlink leaving it, a fifo: its files are not read
            if not e.official:
                reasons += collision_problems(e, officials, owners)
                if not reasons:
                    twins = [o for o in by_name[e.name] if o is not e and not o.official]
                    reasons += [f"extension name {e.name!r} is used by two manifests: {e.manifest} and {o.manifest}"
                                for o in twins]
                unsafe = tree_problems(e.path)
                reasons += unsafe
            elif len([o for o in by_name[e.name] if o.official]) > 1:
                reasons.append(f"official extension name {e.name!r} is used by two manifests in the tree")
            problem = api_problem(e, minor, revision)
            if problem:
                reasons.append(f"{e.manifest}: extension {e.name} {problem}")
            if not unsafe:
                reasons += entry_problems(e, check if includes else None)
                if includes and not e.official:
                    to_check.append(e)
            reasons_of[e.manifest] = reasons
        for e, found_reasons in zip(to_check, check.include_problems_of(to_check, jobs or _jobs())):
            reasons_of[e.manifest] += found_reasons
    kept: list[Extension] = []
    for e in valid:
        if reasons_of[e.manifest]:
            rejected[e.manifest] = reasons_of[e.manifest]
        else:
            kept.append(e)
    for i, n in missing_official:  # stale lock names fail every mode (seed 002 section 6)
        where = [str(m) for m, _ in rejected.items() if m.parent.name == n and inside(m, tree / CATALOGUE_DIR)]
        why = f" (its manifest was rejected: {'; '.join(rejected[Path(where[0])])})" if where else ""
        if not why:
            raise ExtensionError(f"{lock_path}: extensions[{i}]: {n!r} names no extension in {tree / CATALOGUE_DIR}")
        if select == "lock":
            raise ExtensionError(f"{lock_path}: extensions[{i}]: official extension {n!r} cannot be built{why}")

    valid_by_name = {e.name: e for e in kept}
    rejected_by_name: dict[str, list[str]] = {}
    for e in valid:
        if e.manifest in rejected:
            rejected_by_name.setdefault(e.name, rejected[e.manifest])
    for m, reasons in rejected.items():
        for name in rejected_names.get(m, [m.parent.name]):
            rejected_by_name.setdefault(name, reasons)

    if select == "lock":
        if not lock_path.exists():
            raise ExtensionError(f"no release lock at {lock_path}; select 'all' or name the extensions")
        roots = list(lock_names)
    elif select == "all":
        roots = [e.name for e in registry_order(kept, lock_names) if supported(e, features)]
    else:
        roots = list(wanted_names or [])
        for real in wanted_dirs:
            hit = [e for e in kept if os.path.realpath(e.path) == real]
            if not hit:
                m = Path(real) / MANIFEST_NAME
                reasons = next((r for k, r in rejected.items() if os.path.realpath(k.parent) == real),
                               ["not discovered"])
                raise ExtensionError(f"selected extension {m} was rejected:\n  " + "\n  ".join(reasons))
            roots.append(hit[0].name)
    unnamed = [r[0] if r[0].partition(": ")[0] == str(m) else f"{m}: {r[0]}" for m, r in rejected.items()
               if r and len(rejected_names.get(m, ())) < 2]
    names, errors = _closure(roots, valid_by_name, rejected_by_name, unnamed)
    if errors:
        if select == "all":  # an unbuildable community extension is skipped, not fatal
            for root, message in errors.items():
                ext = valid_by_name.get(root)
                if ext is not None:
                    rejected.setdefault(ext.manifest, []).append(message)
            names, _ = _closure([r for r in roots if r not in errors], valid_by_name, rejected_by_name)
        else:
            raise ExtensionError("\n".join(f"cannot select {root}: {msg}" for root, msg in errors.items()))
    selected = registry_order([valid_by_name[n] for n in dict.fromkeys(names)], lock_names)
    providers = tuple(s for e in selected for s in provider_status(e, features))
    discovered = registry_order([e for e in kept if e.manifest not in rejected], lock_names)
    return Selection(tuple(selected), providers, tuple((m, tuple(r)) for m, r in rejected.items()), api_version,
                     features, tuple(discovered), tuple(lock_names))


__all__ = ["ENV_DIRS", "ExtensionError", "ProviderStatus", "Selection", "default_features",
           "discover", "host_api", "read_lock", "registry_order", "run_pipeline"]
