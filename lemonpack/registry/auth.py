"""Registry credentials: where they come from (the keychains), not how they are sent
(that is :mod:`.authn`).

A :class:`Keychain` answers ``resolve(host) -> Credentials | None`` and ``describe()`` (where it
looked, for a message); after go-containerregistry's ``authn.Keychain``. :class:`FileKeychain`
is the default, reading the usual container auth files; :class:`StaticKeychain` holds
credentials given by the caller.

Where they are looked up (containers-auth.json(5), then Docker's client config), the first
file that has credentials for the host wins:

1. the file given explicitly (``--registry-config``);
2. ``$REGISTRY_AUTH_FILE`` (what ``podman login``/``skopeo login`` write when it is set);
3. ``${XDG_RUNTIME_DIR}/containers/auth.json`` (their default; ``/run/containers/$UID/auth.json``
   when ``XDG_RUNTIME_DIR`` is unset);
4. ``$XDG_CONFIG_HOME/containers/auth.json`` (default ``~/.config/containers/auth.json``);
5. ``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json`` (``docker login``);
6. ``~/.dockercfg`` (Docker's legacy file: the ``auths`` map at its top level).

The format is the same in all of them: ``{"auths": {"HOST[:PORT]": {"auth": base64("user:pass")}}}``
(keys for a host: :func:`lemonpack.oci.reference.credential_keys`, so Docker Hub is found
under ``docker.io``, ``https://index.docker.io/v1/``, ``index.docker.io`` or
``registry-1.docker.io``)
(``username``/``password`` fields are accepted too; an ``identitytoken`` is used as the
refresh token of the bearer flow). Credential helpers (``credHelpers``/``credsStore``) are run
as Docker does (``docker-credential-<name> get``, the host on stdin, the answer
``{"Username", "Secret"}`` on stdout, nothing secret on a command line; a ``Username`` of
``<token>`` makes the secret an identity token). Keys may be written with a scheme (``https://host``) or a path
(``host/v1/``), as old Docker configs do: such a key names the host. A key ``host/NAMESPACE`` without a
scheme (``podman login host/ns`` writes one) holds the credentials of the repositories under
``NAMESPACE``; for a repository the most specific key wins (``host/a/b`` before ``host/a``
before ``host``), as containers-auth.json(5) says and containers/image does; a namespace's
credentials are never sent for a repository outside it. Secrets are never logged: :class:`Credentials`
prints as ``Credentials(user=..., secret=***)``.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from lemonpack.errors import ConfigError
from lemonpack.files import read_user_file
from lemonpack.oci.reference import DOCKER_HUB, DOCKER_HUB_LOGIN_KEY, credential_keys


@dataclass(frozen=True)
class Credentials:
    """A user name and a secret (password or token) for one registry host.

    ``identity_token``: an OAuth2 refresh token (Docker's ``identitytoken``), or ``None``.
    ``source``: the file they came from (for messages). ``repr`` hides the secrets.
    """

    username: str
    password: str = field(repr=False)
    identity_token: str | None = field(default=None, repr=False)
    source: str = ""

    @property
    def basic(self) -> str:
        """``base64(user:password)``, the value after ``Basic `` (RFC 7617)."""
        return base64.b64encode(f"{self.username}:{self.password}".encode()).decode()


def _places(explicit: str | os.PathLike[str] | None = None) -> list[tuple[str, Path]]:
    """``[(label, path)]`` of every auth file looked at, in order (the module docstring)."""
    out: list[tuple[str, Path]] = []
    if explicit is not None:
        out.append(("--registry-config", Path(explicit)))
    env = os.environ.get("REGISTRY_AUTH_FILE")
    if env:
        out.append(("$REGISTRY_AUTH_FILE", Path(env)))
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    out.append(("", Path(runtime) / "containers" / "auth.json" if runtime
                else Path(f"/run/containers/{os.getuid()}/auth.json")))
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    out.append(("", Path(config_home) / "containers" / "auth.json"))
    docker = os.environ.get("DOCKER_CONFIG")
    out.append(("", Path(docker) / "config.json" if docker else Path.home() / ".docker" / "config.json"))
    out.append(("", Path.home() / ".dockercfg"))
    seen: set[Path] = set()
    unique = []
    for label, p in out:
        if p not in seen:
            seen.add(p)
            unique.append((label, p))
    return unique


def auth_files(explicit: str | os.PathLike[str] | None = None) -> list[Path]:
    """The auth files to read, in order (see the module docstring); missing ones are kept out.
    Raises :class:`ConfigError` when the ``explicit`` file is missing or not a file."""
    if explicit is not None:
        p = Path(explicit)
        if not p.exists():
            raise ConfigError(f"registry config {p} not found")
        read_user_file(p, "registry config")  # a directory or fifo: refused by name, never blocked on
    return [p for _label, p in _places(explicit) if p.is_file()]


def describe_sources(explicit: str | os.PathLike[str] | None = None, helpers: list[str] | None = None) -> str:
    """Where :func:`load_credentials` looked, for a message: every auth file by its real path
    (``--registry-config FILE`` and ``$REGISTRY_AUTH_FILE FILE`` labelled), each marked
    ``(absent)`` when no file is there, then the credential helpers asked (``helpers``)."""
    parts = []
    for label, p in _places(explicit):
        parts.append((f"{label} " if label else "") + str(p) + ("" if p.is_file() else " (absent)"))
    parts += [f"credential helper docker-credential-{h}" for h in helpers or ()]
    return ", ".join(parts)


def _host_key(key: str) -> str:
    if key == DOCKER_HUB_LOGIN_KEY:
        return key
    key = key.split("://", 1)[-1]
    return key.split("/", 1)[0]


_API_PATHS = ("", "v1", "v2")  # ``host/v1/``: an old Docker key naming the host, not a namespace


def _entry_key(key: str, legacy: bool) -> str:
    """An ``auths`` key as looked up: ``host`` (lowercase) or ``host/NAMESPACE``. A key with a
    scheme or from a legacy file names its host only (containers/image ``normalizeAuthFileKey``)."""
    if key == DOCKER_HUB_LOGIN_KEY:
        return key
    host, _, path = key.partition("/")
    if "://" in key or legacy or path.strip("/") in _API_PATHS:
        return _host_key(key).lower()
    return f"{host.lower()}/{path.strip('/')}"


def _lookup_names(keys: list[str], repository: str | None) -> list[str]:
    """The ``auths`` keys to try for a repository of the host spelled ``keys``, most specific
    first: ``host/a/b``, ``host/a``, then the host's keys."""
    if not repository:
        return keys
    parts = repository.strip("/").split("/")
    scoped = [f"{k}/{'/'.join(parts[:n])}" for n in range(len(parts), 0, -1)
              for k in keys if k != DOCKER_HUB_LOGIN_KEY]
    return scoped + keys


def _read_doc(path: Path) -> dict:
    data = read_user_file(path, "registry credentials file")
    try:
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: registry credentials file is not UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: line {exc.lineno} column {exc.colno}: registry credentials file "
                          f"is not valid JSON: {exc.msg}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: not a JSON object")
    if path.name == ".dockercfg" and "auths" not in doc:
        return {"auths": doc}  # the legacy format: the auths map at the top level
    return doc


def load_credentials(host: str, config: str | os.PathLike[str] | None = None,
                     helpers_asked: list[str] | None = None, repository: str | None = None) -> Credentials | None:
    """Credentials for ``host`` (``host[:port]``) from the auth files, or ``None`` (anonymous).

    ``repository``: the repository they are for (``a/b``): an ``auths`` key ``host/a/b`` or
    ``host/a`` is then preferred to ``host`` and a key of another namespace is not used
    (containers-auth.json(5)); ``None``: the host's credentials, a namespaced key of the host
    counting when the file has no key for the host itself. In each file, in order: a
    ``credHelpers`` entry for one of the host's keys
    (:func:`lemonpack.oci.reference.credential_keys`), then an ``auths`` entry (most specific
    first), then the file's ``credsStore`` (Docker's priority). ``helpers_asked``: a list the helpers run are appended
    to (for the "looked in" message). Raises :class:`ConfigError` naming the file (never the
    secret) when a file is not valid JSON, its entry for the host cannot be decoded or its
    helper fails.
    """
    keys = credential_keys(host)
    for path in auth_files(config):
        doc = _read_doc(path)
        auths = doc.get("auths") or {}
        legacy = path.name == ".dockercfg"
        entries: dict[str, dict] = {}
        for k, v in (auths.items() if isinstance(auths, dict) else ()):
            if isinstance(k, str) and isinstance(v, dict):
                entries.setdefault(_entry_key(k, legacy), v)
        namespaced: dict[str, dict] = {}  # no repository: a host's first namespace, after its own keys
        if repository is None:
            for k, v in entries.items():
                if k != DOCKER_HUB_LOGIN_KEY and "/" in k:
                    namespaced.setdefault(k.split("/", 1)[0], v)
        helpers = doc.get("credHelpers") or {}
        names = _lookup_names(keys, repository)
        for name in names:
            helper = helpers.get(name) if isinstance(helpers, dict) and name in keys else None
            if isinstance(helper, str) and helper:
                if helpers_asked is not None:
                    helpers_asked.append(helper)
                creds = _from_helper(helper, name, path)
                if creds is not None:
                    return creds
            entry = entries.get(name if name == DOCKER_HUB_LOGIN_KEY else name.lower())
            if entry is not None:
                creds = _decode(entry, path, name)
                if creds is not None:
                    return creds
        for name in names:
            entry = namespaced.get(name.lower())
            if entry is not None:
                creds = _decode(entry, path, name)
                if creds is not None:
                    return creds
        store = doc.get("credsStore")
        if isinstance(store, str) and store:
            if helpers_asked is not None:
                helpers_asked.append(store)
            server = DOCKER_HUB_LOGIN_KEY if keys[0] == DOCKER_HUB else keys[0]
            creds = _from_helper(store, server, path)
            if creds is not None:
                return creds
    return None


def _decode(entry: dict, path: Path, host: str) -> Credentials | None:
    token = entry.get("identitytoken") or None
    if entry.get("auth"):
        try:
            user, sep, password = base64.b64decode(entry["auth"], validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            raise ConfigError(f"{path}: auths.{host}.auth is not base64 of user:password") from None
        if not sep:
            raise ConfigError(f"{path}: auths.{host}.auth is not base64 of user:password")
        return Credentials(user, password, token, str(path))
    if entry.get("username") and entry.get("password"):
        return Credentials(entry["username"], entry["password"], token, str(path))
    if token:
        return Credentials("<token>", "", token, str(path))
    return None


def _from_helper(helper: str, host: str, path: Path) -> Credentials | None:
    """Ask ``docker-credential-<helper> get`` for ``host`` (host on stdin; docker-credential-helpers
    protocol). ``None`` when the helper knows no credentials for the host (it says "credentials
    not found"); :class:`ConfigError` naming the helper and the file when it is missing, fails
    or answers something else than its JSON (its output is never quoted: it may hold the secret)."""
    name = f"docker-credential-{helper}"
    exe = shutil.which(name)
    where = f"{path}: credential helper {name}"
    if exe is None:
        raise ConfigError(f"{where} is not on PATH")
    try:
        proc = subprocess.run([exe, "get"], input=host.encode(), capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"{where} could not run: {type(exc).__name__}") from None
    if proc.returncode != 0:
        if b"credentials not found" in proc.stdout.lower() + proc.stderr.lower():
            return None
        raise ConfigError(f"{where} failed for {host} (exit {proc.returncode})")
    try:
        doc = json.loads(proc.stdout)
        user, secret = doc["Username"], doc["Secret"]
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"{where} answered something else than {{\"Username\", \"Secret\"}} JSON") from None
    if not isinstance(user, str) or not isinstance(secret, str) or not secret:
        return None
    source = f"{path} ({name})"
    if user == "<token>":
        return Credentials("<token>", "", secret, source)
    return Credentials(user, secret, None, source)


class Keychain(Protocol):
    """A source of registry credentials (after go-containerregistry's ``authn.Keychain``):
    ``resolve(host, repository)`` gives the credentials for ``host`` (``host[:port]``), for its
    repository ``repository`` when one is given, or ``None`` (anonymous), raising :class:`ConfigError` for a broken source; ``describe()`` says where
    it looked, for the message when a registry wants credentials and none were found."""

    def resolve(self, host: str, repository: str | None = None) -> Credentials | None: ...

    def describe(self) -> str: ...


class FileKeychain:
    """The auth files and their credential helpers (see the module docstring); ``config``:
    the file given with ``--registry-config``, read first."""

    def __init__(self, config: str | os.PathLike[str] | None = None):
        self.config = config
        self.helpers: list[str] = []  # the credential helpers run by resolve()

    def resolve(self, host: str, repository: str | None = None) -> Credentials | None:
        return load_credentials(host, self.config, self.helpers, repository)

    def describe(self) -> str:
        hint = "" if self.config is not None else "; give an auth file with --registry-config FILE"
        return f"looked in: {describe_sources(self.config, self.helpers)}{hint}"


class StaticKeychain:
    """Credentials given by the caller (``None``: anonymous)."""

    def __init__(self, creds: Credentials | None):
        self.creds = creds

    def resolve(self, host: str, repository: str | None = None) -> Credentials | None:
        return self.creds

    def describe(self) -> str:
        return "the credentials given hold no password" if self.creds else "anonymous by request"


__all__ = ["Credentials", "Keychain", "FileKeychain", "StaticKeychain", "auth_files", "load_credentials",
           "describe_sources"]
