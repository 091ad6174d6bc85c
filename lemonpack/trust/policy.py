"""containers-policy.json(5) read strictly into typed requirements.

The reference is containers/image: ``docs/containers-policy.json.5.md`` (containers/image) and
``signature/policy_config.go`` / ``policy_config_sigstore.go`` (read at commit df7e80d2 of
github.com/containers/image). What they say, and what this module does:

- The file is found as podman finds it (:func:`find_policy_file`):
  ``$HOME/.config/containers/policy.json`` if it exists, else ``/etc/containers/policy.json``;
  ``--policy FILE`` overrides both.
- Parsing is strict: an unknown, duplicated or otherwise invalid field rejects the whole
  file. Here that is a :class:`~lemonpack.errors.PolicyFileError` naming the file and the JSON
  path (``transports.docker["127.0.0.1:5000/x"][0].keyPaths``), read through the one strict
  JSON reader (:mod:`lemonpack.strictjson`: duplicate keys, I-JSON numbers, a size bound).
- ``default`` is required; ``transports`` and each transport are optional. Every requirement
  list must be non-empty. Every transport's lists are parsed (a bad ``dir`` scope rejects the
  file, as in containers/image), only ``docker`` is evaluated (lemonpack's images and models
  live in registries).
- Requirement types: ``insecureAcceptAnything``, ``reject``, ``sigstoreSigned`` (exactly one
  of ``keyPath``, ``keyPaths``, ``keyData``, ``keyDatas``, ``fulcio``, ``pki``; at most one
  ``rekorPublicKey*``; ``signedIdentity``, default ``matchRepoDigestOrExact``), ``signedBy``
  (GPG) and ``signedBaseLayer``. Requirements lemonpack cannot check (``signedBy``,
  ``signedBaseLayer``, ``sigstoreSigned`` with ``fulcio``, ``pki`` or a Rekor key) are read and
  kept as :class:`Unsupported`: a scope that uses one rejects every image with "not supported
  here" naming the scope (fail closed, never skipped); other scopes of the file still work.
- ``signedIdentity``: ``matchExact``, ``matchRepoDigestOrExact``, ``matchRepository``,
  ``exactReference`` (``dockerReference`` with a tag or digest), ``exactRepository``
  (``dockerRepository``), ``remapIdentity`` (``prefix``, ``signedPrefix``: a host[:port], a
  namespace or a repository).
- ``keyData``/``keyDatas`` are base64 (Go's ``[]byte`` in JSON) of a PEM public key; the keys
  themselves are read when a requirement is evaluated (:mod:`lemonpack.trust.check`), as
  containers/image's ``prepareTrustRoot`` does.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Union

from lemonpack.digest import is_sha256_digest
from lemonpack.errors import PolicyFileError
from lemonpack.strictjson import parse_json_strict, read_json_text

#: podman's and skopeo's default policy files, in the order they are tried.
USER_POLICY = Path(".config/containers/policy.json")
SYSTEM_POLICY = Path("/etc/containers/policy.json")

#: The transports containers/image knows (transports/transports.go); others are read too.
DOCKER = "docker"

_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?))*"
_DOMAIN_RE = re.compile(rf"^(?:{_DOMAIN}|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?$")
_WILDCARD_RE = re.compile(rf"^\*\.{_DOMAIN}$")
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
#: A remapIdentity prefix: a host[:port] followed by repository components.
_NAME_RE = re.compile(rf"^(?:{_DOMAIN}|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?(?:/{_COMPONENT})+$")


# --- identities (signedIdentity) -------------------------------------------------------------

@dataclass(frozen=True)
class Identity:
    """A ``signedIdentity``: ``type`` (``matchExact``, ``matchRepoDigestOrExact``,
    ``matchRepository``, ``exactReference``, ``exactRepository``, ``remapIdentity``) and its
    value: ``reference`` (exactReference's ``dockerReference``, exactRepository's
    ``dockerRepository``), ``prefix``/``signed_prefix`` (remapIdentity)."""

    type: str = "matchRepoDigestOrExact"
    reference: str | None = None
    prefix: str | None = None
    signed_prefix: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The policy's own JSON for this identity."""
        out: dict[str, Any] = {"type": self.type}
        if self.type == "exactReference":
            out["dockerReference"] = self.reference
        elif self.type == "exactRepository":
            out["dockerRepository"] = self.reference
        elif self.type == "remapIdentity":
            out["prefix"], out["signedPrefix"] = self.prefix, self.signed_prefix
        return out


# --- requirements ----------------------------------------------------------------------------

@dataclass(frozen=True)
class InsecureAcceptAnything:
    """``{"type":"insecureAcceptAnything"}``: accepts any image."""

    type = "insecureAcceptAnything"

    def to_json(self) -> dict[str, Any]:
        """``{"type": "insecureAcceptAnything"}``."""
        return {"type": self.type}


@dataclass(frozen=True)
class Reject:
    """``{"type":"reject"}``: rejects every image."""

    type = "reject"

    def to_json(self) -> dict[str, Any]:
        """``{"type": "reject"}``."""
        return {"type": self.type}


@dataclass(frozen=True)
class KeySource:
    """One public key a ``sigstoreSigned`` requirement names: ``field`` as the file spells it
    (``keyPath``, ``keyPaths[1]``, ``keyDatas[2]``), ``path`` (a file) or ``data`` (PEM bytes,
    decoded from base64)."""

    field: str
    path: str | None = None
    data: bytes | None = None


@dataclass(frozen=True)
class SigstoreSigned:
    """``{"type":"sigstoreSigned", ...}`` with public keys: at least one signature in
    cosign's format, made by one of ``keys`` over this image's digest, whose identity
    ``identity`` accepts."""

    keys: tuple[KeySource, ...]
    identity: Identity
    type = "sigstoreSigned"

    def to_json(self) -> dict[str, Any]:
        """The requirement as the file says it (key sources by field name)."""
        return {"type": self.type, "keys": [k.field for k in self.keys], "signedIdentity": self.identity.to_json()}


@dataclass(frozen=True)
class Unsupported:
    """A requirement lemonpack reads but cannot check (``signedBy``, ``signedBaseLayer``,
    ``sigstoreSigned`` with ``fulcio``/``pki``/Rekor keys): ``type`` and ``what`` (the part
    not supported). Evaluating it rejects (fail closed)."""

    type: str
    what: str

    def to_json(self) -> dict[str, Any]:
        """``{"type", "unsupported"}``."""
        return {"type": self.type, "unsupported": self.what}


Requirement = Union[InsecureAcceptAnything, Reject, SigstoreSigned, Unsupported]


@dataclass(frozen=True)
class Policy:
    """A parsed policy: ``file`` (as read), ``default`` (the global default requirements),
    ``docker`` (``{scope: requirements}`` of ``transports.docker``; ``""`` is the transport's
    default) and ``transports`` (every transport named, for the record)."""

    file: str
    default: tuple[Requirement, ...]
    docker: Mapping[str, tuple[Requirement, ...]]
    transports: tuple[str, ...] = ()


# --- finding and reading ---------------------------------------------------------------------

def policy_candidates() -> tuple[Path, Path]:
    """The two default places, in order: ``$HOME/.config/containers/policy.json`` and
    ``/etc/containers/policy.json`` (containers-policy.json(5), "DESCRIPTION")."""
    return Path(os.path.expanduser("~")) / USER_POLICY, SYSTEM_POLICY


def find_policy_file(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The policy file to use: ``explicit`` (``--policy``; it must exist, else
    :class:`PolicyFileError`), else the first default place that exists, else ``None`` (no
    policy anywhere: images are not checked)."""
    if explicit is not None:
        path = Path(explicit)
        if not path.is_file():
            raise PolicyFileError(f"{path}: policy file not found (--policy)")
        return path
    for path in policy_candidates():
        if path.exists():
            return path
    return None


def load_policy(path: str | os.PathLike[str]) -> Policy:
    """Read and parse the policy file ``path``. Raises :class:`PolicyFileError` naming the
    file (and the field) for anything containers/image would refuse, and for a file that
    cannot be read."""
    text, problems = read_json_text(Path(path))
    if problems or text is None:
        raise PolicyFileError(str(problems[0]) if problems else f"{path}: unreadable")
    return parse_policy(text, str(path))


def parse_policy(text: str, file: str) -> Policy:
    """Parse policy JSON ``text`` (``file`` names it in errors). Raises :class:`PolicyFileError`."""
    doc, problems = parse_json_strict(text, file)
    if problems:
        raise PolicyFileError(f"invalid policy: {problems[0]}")
    p = _Parser(file)
    top = p.obj(doc, "", {"default", "transports"})
    if "default" not in top:
        p.fail("", "the global \"default\" policy is missing (it is required)")
    default = p.requirements(top["default"], "default")
    docker: dict[str, tuple[Requirement, ...]] = {}
    names: list[str] = []
    if "transports" in top:
        transports = p.obj(top["transports"], "transports", None)
        for name, scopes_doc in transports.items():
            names.append(name)
            where = f"transports.{_key(name)}"
            scopes = p.obj(scopes_doc, where, None)
            for scope, reqs in scopes.items():
                swhere = f"{where}[{json.dumps(scope)}]"
                if name == DOCKER and scope != "":
                    p.docker_scope(scope, swhere)
                parsed = p.requirements(reqs, swhere)
                if name == DOCKER:
                    docker[scope] = parsed
    return Policy(file, default, docker, tuple(names))


def _key(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", name) else json.dumps(name)


class _Parser:
    def __init__(self, file: str):
        self.file = file

    def fail(self, path: str, message: str) -> None:
        where = f"{self.file}: {path}: " if path else f"{self.file}: "
        raise PolicyFileError(f"invalid policy {where}{message}")

    def obj(self, value: Any, path: str, fields: set[str] | None) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(path, f"expected a JSON object, got {_kind(value)}")
        if fields is not None:
            for k in value:
                if k not in fields:
                    self.fail(f"{path}.{k}" if path else k, "unknown field")
        return value

    def string(self, value: Any, path: str, *, empty: bool = False) -> str:
        if not isinstance(value, str):
            self.fail(path, f"expected a string, got {_kind(value)}")
        if not empty and value == "":
            self.fail(path, "must not be empty")
        return value

    def strings(self, value: Any, path: str) -> list[str]:
        if not isinstance(value, list):
            self.fail(path, f"expected an array of strings, got {_kind(value)}")
        if not value:
            self.fail(path, "must not be empty")
        return [self.string(v, f"{path}[{i}]") for i, v in enumerate(value)]

    def b64(self, value: Any, path: str) -> bytes:
        text = self.string(value, path)
        try:
            return base64.b64decode(text.encode("ascii"), validate=True)
        except (binascii.Error, ValueError, UnicodeEncodeError):
            self.fail(path, "not valid base64 (keyData holds a base64-encoded PEM public key)")
            raise AssertionError  # unreachable

    def docker_scope(self, scope: str, path: str) -> None:
        if scope.startswith("*."):
            if not _WILDCARD_RE.match(scope):
                self.fail(path, f"scope {scope!r}: a wildcard is \"*.\" followed by a domain, no port "
                                "(*.example.com, not example*.*.com)")
            return
        if "*" in scope:
            self.fail(path, f"scope {scope!r}: a wildcard may only be a leading \"*.\"")
        if "/" in scope:
            from lemonpack.oci.reference import InvalidReferenceError, parse_reference

            try:
                ref = parse_reference(scope)
            except InvalidReferenceError as exc:
                self.fail(path, f"scope {scope!r} is not HOST[:PORT][/NAMESPACE...][/REPO][:TAG|@DIGEST] "
                                f"in the fully expanded form: {exc}")
                raise AssertionError from None  # unreachable
            if ref.domain is None:
                self.fail(path, f"scope {scope!r} names no registry host (write it fully expanded: "
                                "docker.io/library/busybox, not busybox)")
            if ref.tag is not None and ref.digest is not None:
                self.fail(path, f"scope {scope!r}: a tag and a digest together are not a scope")
            if ref.digest is not None and not is_sha256_digest(ref.digest):
                self.fail(path, f"scope {scope!r}: only sha256 digests are supported")
        elif not _DOMAIN_RE.match(scope):
            self.fail(path, f"scope {scope!r} is not a registry host[:port]")

    def requirements(self, value: Any, path: str) -> tuple[Requirement, ...]:
        if not isinstance(value, list):
            self.fail(path, f"expected an array of requirements, got {_kind(value)}")
        if not value:
            self.fail(path, "the list of requirements must not be empty")
        return tuple(self.requirement(v, f"{path}[{i}]") for i, v in enumerate(value))

    def requirement(self, value: Any, path: str) -> Requirement:
        doc = self.obj(value, path, None)
        if "type" not in doc:
            self.fail(f"{path}.type", "missing")
        kind = self.string(doc["type"], f"{path}.type")
        if kind == "insecureAcceptAnything":
            self.obj(doc, path, {"type"})
            return InsecureAcceptAnything()
        if kind == "reject":
            self.obj(doc, path, {"type"})
            return Reject()
        if kind == "sigstoreSigned":
            return self.sigstore(doc, path)
        if kind == "signedBy":
            self.obj(doc, path, {"type", "keyType", "keyPath", "keyPaths", "keyData", "signedIdentity"})
            if doc.get("keyType") != "GPGKeys":
                self.fail(f"{path}.keyType", f"invalid keyType {doc.get('keyType')!r} (GPGKeys is the only one)")
            sources = [k for k in ("keyPath", "keyPaths", "keyData") if k in doc]
            if len(sources) != 1:
                self.fail(path, "exactly one of keyPath, keyPaths and keyData must be specified")
            if "signedIdentity" in doc:
                self.identity(doc["signedIdentity"], f"{path}.signedIdentity")
            return Unsupported(kind, "GPG signatures (signedBy)")
        if kind == "signedBaseLayer":
            self.obj(doc, path, {"type", "baseLayerIdentity"})
            return Unsupported(kind, "base layer signatures (signedBaseLayer)")
        self.fail(f"{path}.type", f"unknown policy requirement type {kind!r}")
        raise AssertionError  # unreachable

    def sigstore(self, doc: dict, path: str) -> Requirement:
        key_fields = ("keyPath", "keyPaths", "keyData", "keyDatas", "fulcio", "pki")
        rekor_fields = ("rekorPublicKeyPath", "rekorPublicKeyPaths", "rekorPublicKeyData", "rekorPublicKeyDatas")
        self.obj(doc, path, {"type", *key_fields, *rekor_fields, "signedIdentity"})
        sources = [k for k in key_fields if k in doc]
        if len(sources) != 1:
            self.fail(path, "exactly one of keyPath, keyPaths, keyData, keyDatas, fulcio, and pki must be specified"
                            + (f" (found {', '.join(sources)})" if sources else ""))
        rekor = [k for k in rekor_fields if k in doc]
        if len(rekor) > 1:
            self.fail(path, "at most one of rekorPublicKeyPath, rekorPublicKeyPaths, rekorPublicKeyData and "
                            "rekorPublicKeyDatas can be used")
        source = sources[0]
        if source == "fulcio" and not rekor:
            self.fail(path, "a rekorPublicKey* field must be specified if fulcio is used")
        if source == "pki" and rekor:
            self.fail(path, "rekorPublicKey* fields are not supported for pki")
        identity = (self.identity(doc["signedIdentity"], f"{path}.signedIdentity") if "signedIdentity" in doc
                    else Identity())
        for r in rekor:
            if r.endswith("s"):
                (self.strings if r.endswith("Paths") else self.b64s)(doc[r], f"{path}.{r}")
            else:
                (self.string if r.endswith("Path") else self.b64)(doc[r], f"{path}.{r}")
        if source == "fulcio":
            self.obj(doc["fulcio"], f"{path}.fulcio", {"caPath", "caData", "oidcIssuer", "subjectEmail"})
            return Unsupported("sigstoreSigned", "Fulcio certificates (fulcio)")
        if source == "pki":
            self.obj(doc["pki"], f"{path}.pki", {"caRootsPath", "caRootsData", "caIntermediatesPath",
                                                   "caIntermediatesData", "subjectHostname", "subjectEmail"})
            return Unsupported("sigstoreSigned", "X.509 certificates (pki)")
        keys: tuple[KeySource, ...]
        if source == "keyPath":
            keys = (KeySource("keyPath", path=self.string(doc[source], f"{path}.keyPath")),)
        elif source == "keyPaths":
            keys = tuple(KeySource(f"keyPaths[{i}]", path=v)
                         for i, v in enumerate(self.strings(doc[source], f"{path}.keyPaths")))
        elif source == "keyData":
            keys = (KeySource("keyData", data=self.b64(doc[source], f"{path}.keyData")),)
        else:
            keys = tuple(KeySource(f"keyDatas[{i}]", data=v)
                         for i, v in enumerate(self.b64s(doc[source], f"{path}.keyDatas")))
        if rekor:
            return Unsupported("sigstoreSigned", f"Rekor transparency-log proofs ({rekor[0]})")
        return SigstoreSigned(keys, identity)

    def b64s(self, value: Any, path: str) -> list[bytes]:
        if not isinstance(value, list):
            self.fail(path, f"expected an array of base64 strings, got {_kind(value)}")
        if not value:
            self.fail(path, "must not be empty")
        return [self.b64(v, f"{path}[{i}]") for i, v in enumerate(value)]

    def identity(self, value: Any, path: str) -> Identity:
        doc = self.obj(value, path, None)
        if "type" not in doc:
            self.fail(f"{path}.type", "missing")
        kind = self.string(doc["type"], f"{path}.type")
        if kind in ("matchExact", "matchRepoDigestOrExact", "matchRepository"):
            self.obj(doc, path, {"type"})
            return Identity(kind)
        if kind == "exactReference":
            self.obj(doc, path, {"type", "dockerReference"})
            ref = self.string(doc.get("dockerReference", ""), f"{path}.dockerReference")
            from lemonpack.trust.requirements import normalize

            parsed = normalize(ref)
            if parsed is None:
                self.fail(f"{path}.dockerReference", f"invalid format of dockerReference {ref!r}")
            elif parsed.tag is None and parsed.digest is None:
                self.fail(f"{path}.dockerReference", f"dockerReference {ref!r} contains neither a tag nor digest")
            return Identity(kind, reference=ref)
        if kind == "exactRepository":
            self.obj(doc, path, {"type", "dockerRepository"})
            ref = self.string(doc.get("dockerRepository", ""), f"{path}.dockerRepository")
            from lemonpack.trust.requirements import normalize

            if normalize(ref) is None:
                self.fail(f"{path}.dockerRepository", f"invalid format of dockerRepository {ref!r}")
            return Identity(kind, reference=ref)
        if kind == "remapIdentity":
            self.obj(doc, path, {"type", "prefix", "signedPrefix"})
            prefixes = []
            for f in ("prefix", "signedPrefix"):
                v = self.string(doc.get(f, ""), f"{path}.{f}")
                if not (_DOMAIN_RE.match(v) or _NAME_RE.match(v)):
                    self.fail(f"{path}.{f}", f"prefix {v!r} is not valid (a host[:port], namespace or repository)")
                prefixes.append(v)
            return Identity(kind, prefix=prefixes[0], signed_prefix=prefixes[1])
        self.fail(f"{path}.type", f"unknown policy reference match type {kind!r}")
        raise AssertionError  # unreachable


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(type(value),
                                                                                         "a number")


__all__ = ["DOCKER", "Identity", "InsecureAcceptAnything", "KeySource", "Policy", "Reject", "Requirement",
           "SigstoreSigned", "Unsupported", "find_policy_file", "load_policy", "parse_policy",
           "policy_candidates"]
