"""containers-registries.conf(5), read as podman and skopeo read it: which registries are
spoken to in plain http (``insecure``), which are ``blocked``, where a registry really is
(``location``) and which mirrors to pull from first (``[[registry.mirror]]``).

Files (containers/image ``pkg/sysregistriesv2``, ``newConfigWrapperWithHomeDir``): the main
file is ``$CONTAINERS_REGISTRIES_CONF`` when set, else ``$HOME/.config/containers/registries.conf``
when it exists (then only the user's drop-in directory is read), else
``/etc/containers/registries.conf``; then the drop-ins, ``*.conf`` files in alpha-numerical
order, of ``/etc/containers/registries.conf.d`` and ``$HOME/.config/containers/registries.conf.d``
(containers-registries.conf.d(5)). A later file's ``[[registry]]`` with the same ``prefix``
replaces the earlier one; other entries are added.

Format (version 2, TOML)::

    [[registry]]
    prefix = "example.com/foo"      # default: location
    location = "internal.example/bar"
    insecure = true                 # plain http (and no certificate check: not done here)
    blocked = false
    [[registry.mirror]]
    location = "mirror.example/foo"
    insecure = false
    pull-from-mirror = "all"        # or "digest-only", "tag-only"

An entry applies to a reference whose ``host/repository`` starts with its ``prefix`` followed
by nothing, ``/``, ``:`` or ``@`` (``*.example.com`` prefixes match sub-domains), the longest
prefix winning (``refMatchingPrefix``). Mirrors are for pulls only (a push goes to the
reference's own registry). Version 1 tables (``[registries.insecure] registries = [...]``,
``[registries.block]``) are read for ``insecure`` and ``blocked``. ``unqualified-search-registries``,
``short-name-mode`` and ``[aliases]`` are not used: lemonpack refuses short names (a pin needs
the host it came from).

Raises :class:`~lemonpack.errors.ConfigError` naming the file for a file that is not TOML or
an entry of the wrong shape.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from lemonpack.errors import ConfigError, UsageError
from lemonpack.oci.reference import is_registry_host

SYSTEM_FILE = Path("/etc/containers/registries.conf")
SYSTEM_DIR = Path("/etc/containers/registries.conf.d")
_USER_FILE = Path(".config/containers/registries.conf")
_USER_DIR = Path(".config/containers/registries.conf.d")
_PULL_FROM_MIRROR = ("all", "digest-only", "tag-only")


@dataclass(frozen=True)
class Mirror:
    """A ``[[registry.mirror]]``: ``location`` (``host[:port][/path]``), ``insecure``,
    ``pull_from_mirror`` (``all``, ``digest-only``, ``tag-only``)."""

    location: str
    insecure: bool = False
    pull_from_mirror: str = "all"


@dataclass(frozen=True)
class Registry:
    """A ``[[registry]]``: ``prefix`` it applies to, ``location`` it stands for, ``insecure``,
    ``blocked``, ``mirrors`` (in order), ``source`` (the file)."""

    prefix: str
    location: str
    insecure: bool = False
    blocked: bool = False
    mirrors: tuple[Mirror, ...] = ()
    source: str = ""

    def rewrite(self, name: str) -> str:
        """``name`` (``host/repository``) with this entry's prefix replaced by its location."""
        if self.prefix.startswith("*."):
            return name
        return self.location + name[len(self.prefix):]


@dataclass(frozen=True)
class Source:
    """Where to pull from: ``host`` (``host[:port]``), ``repository``, ``insecure``,
    ``mirror`` (true for a mirror)."""

    host: str
    repository: str
    insecure: bool
    mirror: bool


@dataclass
class RegistriesConf:
    """The merged configuration: ``registries`` (the entries) and ``files`` (the files read,
    in order)."""

    registries: list[Registry] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)

    def find(self, name: str) -> Registry | None:
        """The entry for ``name`` (``host[/repository]``): longest matching prefix, or None."""
        best, best_len = None, -1
        for reg in self.registries:
            n = _match(name, reg.prefix)
            if n > best_len:
                best, best_len = reg, n
        return best

    def insecure(self, host: str, repository: str = "") -> bool:
        """True when ``insecure = true`` applies to ``host`` (and ``repository``)."""
        reg = self.find(f"{host}/{repository}" if repository else host)
        return bool(reg and reg.insecure)

    def pull_sources(self, host: str, repository: str, *, by_digest: bool) -> list[Source]:
        """Where to pull ``host/repository`` from, in order: the entry's mirrors that apply
        (``pull-from-mirror``: ``digest-only`` mirrors only for a digest, ``tag-only`` only
        for a tag), then the registry itself (its ``location`` when it has one). Raises
        :class:`ConfigError` when the entry is ``blocked``."""
        name = f"{host}/{repository}"
        reg = self.find(name)
        if reg is None:
            return [Source(host, repository, False, False)]
        if reg.blocked:
            raise ConfigError(f"{reg.source}: registry {reg.prefix} is blocked (blocked = true); not pulling {name}")
        rest = name[len(reg.prefix):] if not reg.prefix.startswith("*.") else name[len(host):]
        out = []
        for m in reg.mirrors:
            if (m.pull_from_mirror == "digest-only" and not by_digest) or \
                    (m.pull_from_mirror == "tag-only" and by_digest):
                continue
            out.append(_source(m.location + rest, m.insecure, True))
        primary = reg.rewrite(name)
        out.append(_source(primary, reg.insecure, False))
        return out


def _source(name: str, insecure: bool, mirror: bool) -> Source:
    host, _, repo = name.partition("/")
    return Source(host, repo, insecure, mirror)


def _match(name: str, prefix: str) -> int:
    """containers/image ``refMatchingPrefix``: the prefix's length when it applies, else -1."""
    if prefix.startswith("*."):
        host = name.split("/", 1)[0]
        return len(prefix) if host.endswith(prefix[1:]) else -1
    if len(name) < len(prefix) or not name.startswith(prefix):
        return -1
    if len(name) == len(prefix) or name[len(prefix)] in "/:@":
        return len(prefix)
    return -1


def conf_files(environ: dict[str, str] | None = None, home: Path | None = None) -> list[Path]:
    """The files read, in order (module docstring); missing ones left out."""
    env = os.environ if environ is None else environ
    home = home if home is not None else Path(env.get("HOME") or Path.home())
    user_file, user_dir = home / _USER_FILE, home / _USER_DIR
    dirs: list[Path]
    if env.get("CONTAINERS_REGISTRIES_CONF"):
        main, dirs = Path(env["CONTAINERS_REGISTRIES_CONF"]), [SYSTEM_DIR, user_dir]
    elif user_file.is_file():
        main, dirs = user_file, [user_dir]
    else:
        main, dirs = SYSTEM_FILE, [SYSTEM_DIR, user_dir]
    out = [main] if main.is_file() else []
    for d in dirs:
        if d.is_dir():
            out += sorted(p for p in d.iterdir() if p.suffix == ".conf" and p.is_file())
    return out


#: Registries the command line names with ``--insecure REGISTRY`` (:func:`insecure_on_command_line`).
_COMMAND_LINE_INSECURE: list[str] = []


def insecure_on_command_line(hosts: list[str]) -> None:
    """Registries (``host[:port]``) given as ``--insecure REGISTRY``: every :func:`load` of this
    process then has ``insecure = true`` for each, as a ``[[registry]] location = REGISTRY
    insecure = true`` entry would say (an entry the files have for it keeps its other settings:
    mirrors, ``blocked``, a ``location`` it rewrites to). Replaces the list given before."""
    _COMMAND_LINE_INSECURE[:] = [h.rstrip("/") for h in hosts]


def take_insecure_registries(args: list[str]) -> list[str]:
    """``args`` without its ``--insecure REGISTRY`` / ``--insecure=REGISTRY`` pairs, each
    REGISTRY (``host[:port]``, repeatable) declared plain http for the whole command, as
    ``insecure = true`` for it in containers-registries.conf(5) would
    (:func:`insecure_on_command_line`: every registry client of the command reads it). ``--insecure`` followed by anything that is not a registry
    host (:func:`lemonpack.oci.reference.is_registry_host`: ``127.0.0.1:5000``, ``reg.example``,
    ``localhost``; a reference or a path has a ``/`` or no host shape) stays the bare flag of
    before: plain http to the registry the command names. Nothing after ``--`` is looked at.
    Raises :class:`~lemonpack.errors.UsageError` for ``--insecure=`` with no registry host."""
    out: list[str] = []
    hosts: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            out += args[i:]
            break
        if a.startswith("--insecure="):
            value = a[len("--insecure="):]
            if not is_registry_host(value):
                raise UsageError(f"--insecure={value}: give a registry as HOST[:PORT] (e.g. 127.0.0.1:5000)")
            hosts.append(value)
        elif a == "--insecure" and i + 1 < len(args) and not args[i + 1].startswith("-") \
                and is_registry_host(args[i + 1]):
            hosts.append(args[i + 1])
            i += 1
        else:
            out.append(a)
        i += 1
    if hosts:
        insecure_on_command_line(hosts)
    return out


def load(environ: dict[str, str] | None = None, home: Path | None = None) -> RegistriesConf:
    """Read and merge the registries.conf files (:func:`conf_files`), then the registries the
    command line said insecure (:func:`insecure_on_command_line`). Raises
    :class:`ConfigError` naming the file and the entry for a malformed one."""
    conf = RegistriesConf()
    by_prefix: dict[str, Registry] = {}
    for path in conf_files(environ, home):
        try:
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read registries.conf: {exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: registries.conf is not valid TOML: {exc}") from None
        conf.files.append(path)
        for reg in _entries(doc, path):
            by_prefix[reg.prefix] = reg
    for host in _COMMAND_LINE_INSECURE:
        known = by_prefix.get(host)
        by_prefix[host] = replace(known, insecure=True) if known is not None else \
            Registry(prefix=host, location=host, insecure=True, source="--insecure " + host)
    conf.registries = list(by_prefix.values())
    return conf


def _entries(doc: dict, path: Path) -> list[Registry]:
    out: list[Registry] = []
    v1 = doc.get("registries")
    if isinstance(v1, dict):  # version 1: [registries.insecure] / [registries.block]
        for table in ("insecure", "block"):
            for loc in (v1.get(table) or {}).get("registries") or []:
                if isinstance(loc, str) and loc:
                    out.append(Registry(prefix=loc, location=loc, source=str(path),
                                        insecure=table == "insecure", blocked=table == "block"))
    regs = doc.get("registry") or []
    if not isinstance(regs, list):
        raise ConfigError(f"{path}: registry must be an array of tables ([[registry]])")
    for i, r in enumerate(regs):
        where = f"{path}: [[registry]] #{i + 1}"
        if not isinstance(r, dict):
            raise ConfigError(f"{where} is not a table")
        location = r.get("location", "")
        prefix = r.get("prefix") or location
        if not isinstance(prefix, str) or not isinstance(location, str) or not prefix:
            raise ConfigError(f"{where}: needs a prefix or a location (strings)")
        if prefix.startswith("*.") and location:
            raise ConfigError(f"{where}: a wildcard prefix {prefix!r} takes no location")
        mirrors = []
        for j, m in enumerate(r.get("mirror") or []):
            if not isinstance(m, dict) or not isinstance(m.get("location"), str) or not m["location"]:
                raise ConfigError(f"{where}: [[registry.mirror]] #{j + 1} needs a location")
            pfm = m.get("pull-from-mirror") or "all"
            if pfm not in _PULL_FROM_MIRROR:
                raise ConfigError(f"{where}: mirror {m['location']}: pull-from-mirror must be one of "
                                  f"{', '.join(_PULL_FROM_MIRROR)}, not {pfm!r}")
            mirrors.append(Mirror(m["location"].rstrip("/"), bool(m.get("insecure", False)), pfm))
        for key in ("insecure", "blocked"):
            if not isinstance(r.get(key, False), bool):
                raise ConfigError(f"{where}: {key} must be true or false")
        out.append(Registry(prefix=prefix.rstrip("/"), location=(location or prefix).rstrip("/"),
                            insecure=r.get("insecure", False), blocked=r.get("blocked", False),
                            mirrors=tuple(mirrors), source=str(path)))
    return out


__all__ = ["insecure_on_command_line", "take_insecure_registries", "RegistriesConf", "Registry", "Mirror", "Source", "conf_files", "load", "SYSTEM_FILE", "SYSTEM_DIR"]
