"""containers-registries.d(5): where an image's signatures are, read for ``use-sigstore-attachments``.

The reference is containers/image's ``docker/registries_d.go`` (commit df7e80d2):

- The directory is ``$HOME/.config/containers/registries.d`` if it exists, else
  ``/etc/containers/registries.d``; ``--registries.d DIR`` overrides both. Every ``*.yaml``
  file in it is read (a missing directory is no configuration); ``default-docker`` may be
  defined in one file only, and each ``docker`` namespace in one file only.
- ``use-sigstore-attachments`` is looked up as policy scopes are: the exact reference, the
  repository, each parent namespace, the ``*.`` wildcards (:func:`lemonpack.trust.requirements.scope_candidates`),
  the first entry that *sets* it decides; then ``default-docker``; else it is off.

Stricter than containers/image (whose YAML reader ignores unknown keys): an unknown key, or a
value of the wrong type, rejects the file naming it (:class:`~lemonpack.errors.PolicyFileError`),
so a misspelt ``use-sigstore-attachments`` cannot silently turn signatures off.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from lemonpack.errors import PolicyFileError
from lemonpack.oci.reference import ImageReference

USER_DIR = Path(".config/containers/registries.d")
SYSTEM_DIR = Path("/etc/containers/registries.d")
#: The keys of one namespace entry (registryNamespace in registries_d.go).
NAMESPACE_KEYS = frozenset({"lookaside", "lookaside-staging", "sigstore", "sigstore-staging",
                            "use-sigstore-attachments"})
#: A registries.d file is a few lines; anything larger is refused unread.
MAX_FILE_BYTES = 1 << 20


@dataclass(frozen=True)
class Namespace:
    """One entry: ``use_sigstore_attachments`` (None: not set here) and ``file`` it came from."""

    use_sigstore_attachments: bool | None
    file: str


@dataclass(frozen=True)
class RegistriesD:
    """The merged configuration of a directory: ``directory``, ``default`` (``default-docker``)
    and ``docker`` (``{scope: Namespace}``)."""

    directory: str
    default: Namespace | None = None
    docker: Mapping[str, Namespace] = field(default_factory=dict)

    def attachments(self, ref: ImageReference) -> tuple[bool, str]:
        """``(on, source)`` for ``ref`` (a policy reference): whether sigstore attachments are
        read, and a phrase naming the file and scope that decided (or that none did)."""
        from lemonpack.trust.requirements import scope_candidates

        for key in scope_candidates(ref)[:-1]:
            ns = self.docker.get(key)
            if ns is not None and ns.use_sigstore_attachments is not None:
                return ns.use_sigstore_attachments, (f"use-sigstore-attachments: "
                                                     f"{str(ns.use_sigstore_attachments).lower()} "
                                                     f"for docker {key!r} in {ns.file}")
        if self.default is not None and self.default.use_sigstore_attachments is not None:
            on = self.default.use_sigstore_attachments
            return on, f"use-sigstore-attachments: {str(on).lower()} in default-docker of {self.default.file}"
        return False, f"no use-sigstore-attachments setting for it in {self.directory}"


def find_registries_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """``explicit`` (``--registries.d``), else the user directory if it exists, else the
    system one (which may not exist: no configuration)."""
    if explicit is not None:
        return Path(explicit)
    user = Path(os.path.expanduser("~")) / USER_DIR
    return user if user.exists() else SYSTEM_DIR


def load_registries_dir(directory: str | os.PathLike[str]) -> RegistriesD:
    """Read every ``*.yaml`` file of ``directory`` (sorted by name). Raises
    :class:`PolicyFileError` naming the file and key for a malformed file, a duplicated
    ``default-docker`` or namespace, an ``--registries.d`` that is not a directory."""
    d = Path(directory)
    if not d.exists():
        return RegistriesD(str(d))
    if not d.is_dir():
        raise PolicyFileError(f"{d}: not a directory (registries.d)")
    default: Namespace | None = None
    docker: dict[str, Namespace] = {}
    for f in sorted(p for p in d.iterdir() if p.name.endswith(".yaml")):
        try:
            with open(f, "rb") as fh:
                data = fh.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise PolicyFileError(f"{f}: cannot read: {exc.strerror or exc}") from None
        if len(data) > MAX_FILE_BYTES:
            raise PolicyFileError(f"{f}: larger than {MAX_FILE_BYTES} bytes")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PolicyFileError(f"{f}: not valid YAML: {str(exc).splitlines()[0]}") from None
        if _only_comments(text):
            continue  # no document (what yaml.safe_load answers with None), and no YAML parser imported
        import yaml

        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise PolicyFileError(f"{f}: not valid YAML: {str(exc).splitlines()[0]}") from None
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise PolicyFileError(f"{f}: expected a mapping with default-docker and docker")
        for key in doc:
            if key not in ("default-docker", "docker"):
                raise PolicyFileError(f"{f}: {key}: unknown key (default-docker and docker are the keys)")
        if doc.get("default-docker") is not None:
            if default is not None:
                raise PolicyFileError(f"\"default-docker\" defined both in {default.file} and {f}")
            default = _namespace(doc["default-docker"], f, "default-docker")
        entries = doc.get("docker") or {}
        if not isinstance(entries, dict):
            raise PolicyFileError(f"{f}: docker: expected a mapping of namespaces")
        for scope, value in entries.items():
            if not isinstance(scope, str):
                raise PolicyFileError(f"{f}: docker: namespace {scope!r} is not a string")
            if scope in docker:
                raise PolicyFileError(f"\"docker\" namespace {scope!r} defined both in {docker[scope].file} and {f}")
            docker[scope] = _namespace(value, f, f"docker.{scope}")
    return RegistriesD(str(d), default, docker)


def _only_comments(text: str) -> bool:
    """True when ``text`` holds no YAML document: only blank lines and ``#`` comment lines
    (YAML 1.2 section 6.6), as the files shipped commented out are."""
    return all(not line.strip() or line.lstrip().startswith("#") for line in text.splitlines())


def _namespace(value: Any, file: Path, where: str) -> Namespace:
    if value is None:
        return Namespace(None, str(file))
    if not isinstance(value, dict):
        raise PolicyFileError(f"{file}: {where}: expected a mapping")
    for key, v in value.items():
        if key not in NAMESPACE_KEYS:
            raise PolicyFileError(f"{file}: {where}.{key}: unknown key (known: {', '.join(sorted(NAMESPACE_KEYS))})")
        if key == "use-sigstore-attachments":
            if not isinstance(v, bool):
                raise PolicyFileError(f"{file}: {where}.{key}: expected true or false")
        elif not isinstance(v, str):
            raise PolicyFileError(f"{file}: {where}.{key}: expected a URL string")
    return Namespace(value.get("use-sigstore-attachments"), str(file))


__all__ = ["Namespace", "RegistriesD", "find_registries_dir", "load_registries_dir"]
