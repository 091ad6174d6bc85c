"""Mirrors: a directory tree of artifacts keyed by origin host and path.

Layout. A mirror serves the file of origin URL ``https://HOST[:PORT]/PATH?QUERY`` at
``<base>/<host>/<PATH>``, where ``<host>`` is the lowercased host name, followed by
``:PORT`` only when the URL names a port that is not its scheme's default (so two origins
on one host never share a directory). ``PATH`` is kept exactly as written in the URL,
percent-encoding included, so ``<base>/<mirror_path>`` is again a valid URL and a plain
static file server over the tree decodes it to the on-disk name.

Query strings and fragments are dropped: a mirror is a plain file tree, and every artifact
is pinned by sha256, so two URLs that differ only in their query and land on one mirror
file cannot silently swap content (a mismatch raises ``IntegrityError``). Scheme and user
info are dropped too. URLs whose path is empty, ends in ``/`` or has a segment the one
path-component rule refuses once decoded (``.``, ``..``, empty, ``%2F``, a backslash, NUL:
:func:`lemonpack.safetree.component_problem`) cannot be mirrored (``FetchError`` /
``UnsafeContentError``).

The same ``mirror_path`` is written into ``sources.json`` (``mirrorPath``) so that the
Nix expression rewrites URLs the same way.
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass

from lemonpack.errors import FetchError, MirrorSettingError, UnsafeContentError
from lemonpack.safetree import component_problem

_DEFAULT_PORTS = {"http": 80, "https": 443}


def mirror_path(url: str) -> str:
    """``"host/path"`` of an http(s) URL in a mirror tree (see the module docstring).

    Raises ``FetchError`` for a non-http(s) URL, no host, or an empty/directory path,
    ``UnsafeContentError`` naming the segment for ``.``/``..``/empty path segments (they
    would step outside, or alias, the host's directory) and any other segment
    :func:`lemonpack.safetree.component_problem` refuses once decoded.
    """
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise FetchError(f"cannot mirror {url}: only http and https URLs")
    host = (parts.hostname or "").lower()
    if not host:
        raise FetchError(f"cannot mirror {url}: no host")
    try:
        port = parts.port
    except ValueError as exc:
        raise FetchError(f"cannot mirror {url}: bad port") from exc
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        host = f"{host}:{port}"
    path = parts.path.lstrip("/")
    if not path or path.endswith("/"):
        raise FetchError(f"cannot mirror {url}: the path does not name a file")
    for segment in path.split("/"):
        why = component_problem(urllib.parse.unquote(segment))  # %2F, %2E%2E, %5C, %00 decoded first
        if why:
            raise UnsafeContentError(f"cannot mirror {url}: path segment {segment!r}: {why}")
    return f"{host}/{path}"


@dataclass(frozen=True)
class Mirror:
    """A mirror at ``base_url`` (http or https; trailing ``/`` ignored).

    ``allow_insecure``: allow a plain ``http://`` base on a non-loopback host (the
    downloader otherwise refuses plain http except to loopback). Raises
    :class:`~lemonpack.errors.MirrorSettingError` (a usage error, exit 2, and a
    ``FetchError``) if ``base_url`` is not an http(s) URL with a host, or has a query or
    fragment: the one mirror check, used by the CLI as by every room.
    """

    base_url: str
    allow_insecure: bool = False

    def __post_init__(self) -> None:
        parts = urllib.parse.urlsplit(self.base_url)
        if parts.scheme.lower() not in _DEFAULT_PORTS or not parts.hostname:
            raise MirrorSettingError(f"mirror must be an http(s) URL with a host, such as http://127.0.0.1:8080: "
                                     f"{self.base_url!r}")
        if parts.query or parts.fragment:
            raise MirrorSettingError(f"mirror URL must not have a query or fragment: {self.base_url!r}")
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))

    def rewrite(self, url: str) -> str:
        """The mirror URL of origin ``url``: ``<base>/<mirror_path(url)>``.

        Raises what :func:`mirror_path` raises.
        """
        return f"{self.base_url}/{mirror_path(url)}"

    @classmethod
    def from_env(cls, cli_value: str | None = None, *, allow_insecure: bool = False) -> Mirror | None:
        """The mirror to use: ``cli_value`` (``--mirror``) if given, else ``$LEMONPACK_MIRROR``
        if set and non-empty, else None. A bad value raises :class:`MirrorSettingError` whose
        ``param`` (and message prefix) is ``--mirror`` or ``$LEMONPACK_MIRROR``."""
        value = cli_value or os.environ.get("LEMONPACK_MIRROR") or None
        try:
            return cls(value, allow_insecure=allow_insecure) if value else None
        except MirrorSettingError as exc:  # name where the value came from
            raise MirrorSettingError(str(exc), param="--mirror" if cli_value else "$LEMONPACK_MIRROR") from None


__all__ = ["Mirror", "mirror_path"]
