"""Registry credentials from the usual container auth files.

Where they are looked up, first file that names the host wins:

1. the file given explicitly (``--registry-config``);
2. ``$REGISTRY_AUTH_FILE`` (containers-auth.json(5), what podman and skopeo read);
3. ``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json`` (Docker's client config).

The format is the same in all of them: ``{"auths": {"HOST[:PORT]": {"auth": base64("user:pass")}}}``
(``username``/``password`` fields are accepted too; an ``identitytoken`` is used as the
refresh token of the bearer flow). Credential helpers (``credHelpers``/``credsStore``) run
through oras' reader (``docker-credential-<name> get``, the secret passed on stdin, never
on a command line). Keys may be written with a scheme (``https://host``) or a path
(``host/v1/``), as old Docker configs do. Secrets are never logged: :class:`Credentials`
prints as ``Credentials(user=..., secret=***)``.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from lemonpack.errors import LemonpackError
from lemonpack.files import read_user_file


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


def auth_files(explicit: str | os.PathLike[str] | None = None) -> list[Path]:
    """The auth files to read, in order (see the module docstring); missing ones are kept out."""
    out: list[Path] = []
    if explicit is not None:
        p = Path(explicit)
        if not p.exists():
            raise LemonpackError(f"registry config {p} not found")
        read_user_file(p, "registry config")  # a directory or fifo: refused by name, never blocked on
        out.append(p)
    env = os.environ.get("REGISTRY_AUTH_FILE")
    if env:
        out.append(Path(env))
    docker = os.environ.get("DOCKER_CONFIG")
    out.append(Path(docker) / "config.json" if docker else Path.home() / ".docker" / "config.json")
    return [p for p in out if p.is_file()]


def describe_sources(explicit: str | os.PathLike[str] | None = None) -> str:
    """Where :func:`load_credentials` looked, for a message: only the sources that applied
    (``--registry-config FILE`` when one was given, ``$REGISTRY_AUTH_FILE`` when set), then
    the Docker config by its real path, each marked ``(absent)`` when no file is there."""
    parts = []
    if explicit is not None:
        parts.append(f"--registry-config {explicit}")
    env = os.environ.get("REGISTRY_AUTH_FILE")
    if env:
        parts.append(f"$REGISTRY_AUTH_FILE {env}" + ("" if Path(env).is_file() else " (absent)"))
    docker = os.environ.get("DOCKER_CONFIG")
    p = Path(docker) / "config.json" if docker else Path.home() / ".docker" / "config.json"
    parts.append(str(p) + ("" if p.is_file() else " (absent)"))
    return ", ".join(parts)


def _host_key(key: str) -> str:
    key = key.split("://", 1)[-1]
    return key.split("/", 1)[0]


def _aliases(host: str) -> list[str]:
    names = [host]
    if host.startswith("localhost"):
        names.append("127.0.0.1" + host[len("localhost"):])
    elif host.startswith("127.0.0.1"):
        names.append("localhost" + host[len("127.0.0.1"):])
    return names


def load_credentials(host: str, config: str | os.PathLike[str] | None = None) -> Credentials | None:
    """Credentials for ``host`` (``host[:port]``) from the auth files, or ``None`` (anonymous).

    Raises :class:`LemonpackError` naming the file (never the secret) when a file is not
    valid JSON or its entry for the host cannot be decoded.
    """
    for path in auth_files(config):
        data = read_user_file(path, "registry credentials file")
        try:
            doc = json.loads(data.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise LemonpackError(f"{path}: registry credentials file is not UTF-8 (byte {exc.start})") from None
        except json.JSONDecodeError as exc:
            raise LemonpackError(f"{path}: line {exc.lineno} column {exc.colno}: registry credentials file "
                                 f"is not valid JSON: {exc.msg}") from None
        if not isinstance(doc, dict):
            raise LemonpackError(f"{path}: not a JSON object")
        auths = doc.get("auths") or {}
        entries = {_host_key(k): v for k, v in auths.items() if isinstance(v, dict)}
        for name in _aliases(host):
            entry = entries.get(name)
            if entry is not None:
                creds = _decode(entry, path, name)
                if creds is not None:
                    return creds
            helper = (doc.get("credHelpers") or {}).get(name) or doc.get("credsStore")
            if helper:
                creds = _from_helper(helper, name, path)
                if creds is not None:
                    return creds
    return None


def _decode(entry: dict, path: Path, host: str) -> Credentials | None:
    token = entry.get("identitytoken") or None
    if entry.get("auth"):
        try:
            user, sep, password = base64.b64decode(entry["auth"], validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            raise LemonpackError(f"{path}: auths.{host}.auth is not base64 of user:password") from None
        if not sep:
            raise LemonpackError(f"{path}: auths.{host}.auth is not base64 of user:password")
        return Credentials(user, password, token, str(path))
    if entry.get("username") and entry.get("password"):
        return Credentials(entry["username"], entry["password"], token, str(path))
    if token:
        return Credentials("<token>", "", token, str(path))
    return None


def _from_helper(helper: str, host: str, path: Path) -> Credentials | None:
    """Ask ``docker-credential-<helper>`` through oras' reader (host on stdin)."""
    from oras.auth.base import AuthBackend

    basic = AuthBackend()._get_auth_from_creds_store(helper, host)
    if not basic:
        return None
    user, _, password = base64.b64decode(basic).decode().partition(":")
    return Credentials(user, password, None, f"{path} (docker-credential-{helper})")


__all__ = ["Credentials", "auth_files", "load_credentials"]
