"""Per-registry TLS files as podman, skopeo and buildah keep them: containers-certs.d(5).

A directory named after the registry's ``host[:port]`` (``my-registry.com:5000``) under the
first of :data:`ROOTS` that has one (``$HOME/.config/containers/certs.d``, then
``/etc/containers/certs.d``, then Docker's ``/etc/docker/certs.d``, the order of
containers/image's ``dockerCertDir``) holds, read in alphanumerical order:

- ``*.crt``: CA certificates, trusted *in addition to* the usual bundle (``$SSL_CERT_FILE`` /
  ``$SSL_CERT_DIR`` when set, else certifi's: what httpx trusts without this directory);
- ``*.cert`` with a ``*.key`` of the same name: a client certificate and its key (mutual TLS);
  a ``.cert`` without its ``.key``, or a ``.key`` without its ``.cert``, is an error, as in
  containers/image's ``tlsclientconfig.SetupCertificates``.

A registry without such a directory gets httpx's default verification (``verify=True``).
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from lemonpack.errors import ConfigError


def roots() -> tuple[Path, ...]:
    """The certs.d directories searched, in order (``$HOME`` read now, so a test's or a
    service's own home counts)."""
    return (Path.home() / ".config" / "containers" / "certs.d", Path("/etc/containers/certs.d"),
            Path("/etc/docker/certs.d"))


@dataclass(frozen=True)
class CertsDir:
    """One registry's certs.d directory: ``path``, its CA files ``cas`` and its client
    ``(certificate, key)`` pairs, each in alphanumerical order."""

    path: Path
    cas: tuple[Path, ...]
    pairs: tuple[tuple[Path, Path], ...]


def find_certs_dir(host: str, search: tuple[Path, ...] | None = None) -> Path | None:
    """The certs.d directory of ``host`` (``host[:port]`` as the registry is named): the first
    ``ROOT/host`` that exists among ``search`` (default :func:`roots`); None when none does. A
    root that cannot be read (permissions) is passed over, as containers/image does."""
    for root in search if search is not None else roots():
        candidate = root / host
        try:
            if candidate.is_dir():
                return candidate
        except PermissionError:
            continue
    return None


def load_certs_dir(path: Path) -> CertsDir:
    """The files of the certs.d directory ``path`` (module docstring). Raises
    :class:`~lemonpack.errors.ConfigError` naming the file for a client certificate without its
    key or a key without its certificate, or when the directory cannot be listed."""
    try:
        names = sorted(os.listdir(path))
    except OSError as e:
        raise ConfigError(f"containers-certs.d directory {path}: cannot list it ({e.strerror or e})") from None
    cas, pairs = [], []
    for name in names:
        stem, ext = os.path.splitext(name)
        if ext == ".crt":
            cas.append(path / name)
        elif ext == ".cert":
            if f"{stem}.key" not in names:
                raise ConfigError(f"containers-certs.d: client certificate {path / name} has no key "
                                  f"{path / (stem + '.key')}")
            pairs.append((path / name, path / f"{stem}.key"))
        elif ext == ".key" and f"{stem}.cert" not in names:
            raise ConfigError(f"containers-certs.d: key {path / name} has no client certificate "
                              f"{path / (stem + '.cert')}")
    return CertsDir(path, tuple(cas), tuple(pairs))


def default_verify_locations() -> dict[str, str]:
    """What httpx trusts by default with ``trust_env``, as ``load_verify_locations`` keywords:
    ``$SSL_CERT_FILE`` (``cafile``) or ``$SSL_CERT_DIR`` (``capath``) when set, else certifi's
    bundle."""
    if os.environ.get("SSL_CERT_FILE"):
        return {"cafile": os.environ["SSL_CERT_FILE"]}
    if os.environ.get("SSL_CERT_DIR"):
        return {"capath": os.environ["SSL_CERT_DIR"]}
    import certifi

    return {"cafile": certifi.where()}


def tls_context(host: str, search: tuple[Path, ...] | None = None) -> ssl.SSLContext | None:
    """The verifying TLS context for registry ``host``: the usual bundle
    (:func:`default_verify_locations`) plus its certs.d CAs and client pairs; None (httpx's own
    default) when ``host`` has no certs.d directory. Raises
    :class:`~lemonpack.errors.ConfigError` naming the file that cannot be loaded."""
    where = find_certs_dir(host, search)
    if where is None:
        return None
    found = load_certs_dir(where)
    ctx = ssl.create_default_context(**default_verify_locations())  # type: ignore[arg-type]
    for ca in found.cas:
        try:
            ctx.load_verify_locations(cafile=str(ca))
        except (ssl.SSLError, OSError) as e:
            raise ConfigError(f"containers-certs.d: CA file {ca} cannot be loaded ({e})") from None
    for cert, key in found.pairs:
        try:
            ctx.load_cert_chain(str(cert), str(key))
        except (ssl.SSLError, OSError) as e:
            raise ConfigError(f"containers-certs.d: client certificate {cert} with key {key} cannot be "
                              f"loaded ({e})") from None
    return ctx


__all__ = ["CertsDir", "default_verify_locations", "find_certs_dir", "load_certs_dir", "roots", "tls_context"]
