"""Model files pushed to a registry as one model artifact (``lemonpack models push FILE... --to
HOST/REPO[:TAG]``).

Each file is hashed once, from disk (never loaded whole), its GGUF header read through
:mod:`lemonpack.gguf_header` for the config's facts; the manifest and config are
:func:`~lemonpack.runtime.models.artifact.write_modelpack` (default) or
:func:`~lemonpack.runtime.models.artifact.write_docker` (``--format docker``), both pure, so the
same files, names and ``SOURCE_DATE_EPOCH`` give the same manifest digest on every machine.
Blobs the registry already has (``HEAD``) are not sent again; a file is uploaded by the registry
client of :mod:`lemonpack.registry` (hashed as it is sent, chunked, resumed on a transient failure:
what ``publish`` uses); the manifest goes last, under the tag. Signing is the caller's
``sign`` callback (the CLI passes :func:`lemonpack.signing.remote.sign_image`, as ``publish
--sign`` does), called with ``HOST/REPO@sha256:...`` once the manifest is in.

Spec: OCI distribution-spec v1.1 ``spec.md`` ("pushing blobs", "pushing manifests");
modelpack/model-spec ``docs/spec.md``; docker/model-runner ``pkg/distribution/types/config.go``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lemonpack.errors import UnreadableFileError, UsageError
from lemonpack.oci.reference import ImageReference
from lemonpack.runtime.models.artifact import ModelFacts, PackFile, Packed, facts_from_gguf, role_of, write_docker, \
    write_modelpack
from lemonpack.runtime.models.pull import as_model_reference

#: ``--format`` values.
PUSH_FORMATS = ("modelpack", "docker")


@dataclass(frozen=True)
class PushedModel:
    """What :func:`push_model` pushed: ``reference`` (``HOST/REPO:TAG@sha256:...``), ``digest``
    (the manifest's), ``format``, ``files`` (:class:`PackFile` in layer order), ``facts`` (of the
    main weight file), ``uploaded`` (bytes sent: 0 for blobs the registry had), ``signature``
    (what the ``sign`` callback answered, or None)."""

    reference: ImageReference
    digest: str
    format: str
    files: tuple[PackFile, ...]
    facts: ModelFacts
    uploaded: int = 0
    signature: Mapping[str, Any] | None = field(default=None)

    def to_json(self) -> dict:
        """``models push --json``."""
        out: dict[str, Any] = {"reference": str(self.reference), "digest": self.digest, "format": self.format,
                               "uploaded": self.uploaded,
                               "files": [{"name": f.name, "digest": f.digest, "size": f.size, "role": f.role}
                                         for f in self.files],
                               "facts": {"architecture": self.facts.architecture, "parameters": self.facts.parameters,
                                         "quantization": self.facts.quantization,
                                         "contextLength": self.facts.context_length}}
        if self.signature is not None:
            out["signature"] = dict(self.signature)
        return out


def _main(files: Sequence[tuple[Path, PackFile]]) -> Path | None:
    weights = [(p, f) for p, f in files if f.role == "weight" and f.name.lower().endswith(".gguf")]
    for p, f in weights:
        if re.search(r"-0*1-of-\d+\.gguf$", f.name, re.IGNORECASE):
            return p
    return weights[0][0] if weights else None


def pack_model(files: Sequence[str | os.PathLike[str]], *, fmt: str = "modelpack", name: str | None = None,
               version: str | None = None, environ: Mapping[str, str] | None = None
               ) -> tuple[Packed, list[tuple[Path, PackFile]], ModelFacts]:
    """The manifest and config ``files`` make (no network): ``(packed, [(path, PackFile)],
    facts)``. Each file is named by its base name (two files of one name are refused); the
    main weight file (the first GGUF weight, of splits the ``-00001-of-`` one) gives the facts;
    ``name`` defaults to its stem (without the split suffix); the date is ``SOURCE_DATE_EPOCH`` (0 when unset). Raises
    :class:`UsageError` (no file, an unknown ``fmt``), :class:`UnreadableFileError` (a file
    missing, not regular), ``ModelFileError`` (a ``.gguf`` that is not one), ``ConfigError``
    (a bad ``SOURCE_DATE_EPOCH``)."""
    from lemonpack.digest import file_digest
    from lemonpack.gguf_header import read_identity
    from lemonpack.sourcedate import source_date_epoch

    if fmt not in PUSH_FORMATS:
        raise UsageError(f"--format {fmt!r}: use one of {', '.join(PUSH_FORMATS)}")
    if not files:
        raise UsageError("give at least one model file to push")
    packed_files: list[tuple[Path, PackFile]] = []
    for given in files:
        path = Path(given)
        try:
            digest, size = file_digest(path)
        except OSError as exc:
            raise UnreadableFileError(f"model file {path}: {exc.strerror or exc}") from None
        packed_files.append((path, PackFile(path.name, str(digest), size, role_of(path.name))))
    main = _main(packed_files)
    facts = facts_from_gguf(read_identity(main)) if main is not None else ModelFacts()
    created = source_date_epoch(environ)
    specs = [f for _, f in packed_files]
    if fmt == "docker":
        packed = write_docker(specs, facts, created=created)
    else:
        stem = re.sub(r"-0*1-of-\d+$", "", main.name[:-len(".gguf")]) if main is not None else specs[0].name
        packed = write_modelpack(specs, facts, created=created, name=name or stem, version=version)
    return packed, packed_files, facts


def push_model(files: Sequence[str | os.PathLike[str]], to: str | ImageReference, *, fmt: str = "modelpack",
               sign: Callable[[str], Mapping[str, Any]] | None = None, name: str | None = None,
               version: str | None = None, insecure: bool = False,
               registry_config: str | os.PathLike[str] | None = None, client=None, progress: bool = False,
               environ: Mapping[str, str] | None = None) -> PushedModel:
    """Push ``files`` as one model artifact to ``to`` (``[oci://]HOST[:PORT]/REPO[:TAG]``, tag
    default ``latest``; a digest is refused: the digest is what the push makes) and return
    :class:`PushedModel`. ``fmt``: ``modelpack`` or ``docker``; ``sign``: called with the pushed
    ``HOST/REPO@DIGEST`` (its answer is ``signature``); ``client``: a
    :class:`~lemonpack.registry.RegistryClient` (else one for the host, ``insecure``,
    ``registry_config``); ``progress``: a byte progress bar on stderr.

    Raises the errors of :func:`pack_model` (before anything is sent), :class:`UsageError` for a
    destination with a digest, and the registry client's (``FetchError``, ``IntegrityError``)."""
    dest = as_model_reference(to)
    if dest.digest:
        raise UsageError(f"--to {to}: push to a tag or a repository, not a digest (the push makes the digest)")
    tag = dest.tag or "latest"
    packed, packed_files, facts = pack_model(files, fmt=fmt, name=name, version=version, environ=environ)
    own = client is None
    if client is None:
        from lemonpack.registry import RegistryClient

        client = RegistryClient(dest.host, insecure=insecure, registry_config=registry_config)
    try:
        before = client.stats.bytes_sent
        repo = dest.repository
        todo = [(p, f) for p, f in packed_files if not client.has_blob(repo, f.digest, f.size)]
        from lemonpack.registry.transfer import byte_progress

        with byte_progress(sum(f.size for _, f in todo), f"pushing {repo}", progress) as on_bytes:
            for p, f in todo:
                client.push_blob(repo, p, f.digest, f.size, on_bytes=on_bytes)
        if not client.has_blob(repo, packed.config_digest, len(packed.config)):
            client.push_blob(repo, packed.config, packed.config_digest, len(packed.config))
        digest = client.put_manifest(repo, tag, packed.manifest, packed.media_type)
        uploaded = client.stats.bytes_sent - before
    finally:
        if own:
            client.close()
    pinned = dest.with_ref(tag=tag, digest=digest)
    signature = sign(str(dest.with_ref(digest=digest))) if sign is not None else None
    return PushedModel(pinned, digest, fmt, tuple(f for _, f in packed_files), facts, uploaded, signature)


__all__ = ["PUSH_FORMATS", "PushedModel", "pack_model", "push_model"]
