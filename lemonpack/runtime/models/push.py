"""Model files pushed to a registry as one model artifact (``lemonpack models push FILE... --to
HOST/REPO[:TAG]``).

Each file is read and hashed once (never loaded whole), its GGUF header read through
:mod:`lemonpack.gguf_header` for the config's facts; the manifest and config are
:func:`~lemonpack.runtime.models.artifact.write_modelpack` (default) or
:func:`~lemonpack.runtime.models.artifact.write_docker` (``--format docker``), both pure, so the
same files, names and ``SOURCE_DATE_EPOCH`` give the same manifest digest on every machine.
The manifest needs every file's digest, which comes, per file, from one of two places:

- the **digest record** (:func:`digest_record`, ``<cache>/file-digests.json``, a
  :class:`lemonpack.digest.FileDigests`): the digest of a file hashed before, kept with its
  ``[size, mtime_ns, ctime_ns, inode, device]`` taken before that hash read it (and unchanged
  after). It is used only while the file still has exactly those facts: any write,
  truncation, ``touch``, ``chmod``, copy or rename in its place changes one of them (ctime
  cannot be set from user space), and such a file is hashed again. With a recorded digest the registry is asked first (``HEAD``): a blob it has is
  not sent; one it lacks is uploaded and hashed as it is sent, and committed only when the
  bytes sent hash to the recorded digest (else the record is dropped, the file hashed anew and
  sent again): a record can cost a retry, never a wrong blob in the registry;
- else the **upload itself**: the file is sent through a new upload session and hashed as it
  goes; the closing ``PUT ?digest=`` names the hash of exactly the bytes sent. One pass, but
  the registry is not asked beforehand (without a digest there is nothing to ask about): a
  file it already holds, from another machine, is sent again.

Either way the record is written after the push for every file (so the next push of the same
files asks the registry and sends nothing it has). A file is uploaded by the registry client of
:mod:`lemonpack.registry` (chunked, resumed on a transient failure: what ``publish`` uses); the
config follows the layers (it names their digests), the manifest goes last, under the tag. Signing is the caller's
``sign`` callback (the CLI passes :func:`lemonpack.signing.remote.sign_image`, as ``publish
--sign`` does), called with ``HOST/REPO@sha256:...`` once the manifest is in.

Spec: OCI distribution-spec v1.1 ``spec.md`` ("pushing blobs", "pushing manifests");
modelpack/model-spec ``docs/spec.md``; docker/model-runner ``pkg/distribution/types/config.go``.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from lemonpack.digest import FileDigests
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


#: Files remembered in the digest record (the oldest dropped first).
MAX_RECORDED = 10000


def digest_record(path: Path | None = None) -> FileDigests:
    """The digest record of pushed files (module docstring): ``path``, default
    ``<cache>/file-digests.json``, at most :data:`MAX_RECORDED` files."""
    from lemonpack.paths import cache_root

    return FileDigests(path if path is not None else cache_root() / "file-digests.json", limit=MAX_RECORDED)


@dataclass(frozen=True)
class _File:
    """A model file to push: ``path``, ``name`` (its base name), ``size``, ``role``, ``facts``
    (:meth:`FileDigests.facts` when it was looked at, before any read), ``digest`` (recorded,
    or None)."""

    path: Path
    name: str
    size: int
    role: str
    facts: list[int] | None
    digest: str | None


def _files(files: Sequence[str | os.PathLike[str]], record: FileDigests | None) -> list[_File]:
    if not files:
        raise UsageError("give at least one model file to push")
    out = []
    for given in files:
        path = Path(given)
        try:
            facts = FileDigests.facts(path)
            if not stat.S_ISREG(os.stat(path).st_mode):
                raise UnreadableFileError(f"model file {path}: not a regular file")
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise UnreadableFileError(f"model file {path}: {exc.strerror or exc}") from None
        out.append(_File(path, path.name, os.stat(path).st_size, role_of(path.name), facts,
                         record.known(path) if record is not None else None))
    return out


def _pack(files: Sequence[tuple[Path, PackFile]], fmt: str, name: str | None, version: str | None,
          environ: Mapping[str, str] | None) -> tuple[Packed, ModelFacts]:
    from lemonpack.gguf_header import read_identity
    from lemonpack.sourcedate import source_date_epoch

    main = _main(files)
    facts = facts_from_gguf(read_identity(main)) if main is not None else ModelFacts()
    created = source_date_epoch(environ)
    specs = [f for _, f in files]
    if fmt == "docker":
        return write_docker(specs, facts, created=created), facts
    stem = re.sub(r"-0*1-of-\d+$", "", main.name[:-len(".gguf")]) if main is not None else specs[0].name
    return write_modelpack(specs, facts, created=created, name=name or stem, version=version), facts


def _check_format(fmt: str) -> None:
    if fmt not in PUSH_FORMATS:
        raise UsageError(f"--format {fmt!r}: use one of {', '.join(PUSH_FORMATS)}")


def pack_model(files: Sequence[str | os.PathLike[str]], *, fmt: str = "modelpack", name: str | None = None,
               version: str | None = None, environ: Mapping[str, str] | None = None,
               record: FileDigests | None = None) -> tuple[Packed, list[tuple[Path, PackFile]], ModelFacts]:
    """The manifest and config ``files`` make (no network): ``(packed, [(path, PackFile)],
    facts)``. Each file is named by its base name (two files of one name are refused); the
    main weight file (the first GGUF weight, of splits the ``-00001-of-`` one) gives the facts;
    ``name`` defaults to its stem (without the split suffix); the date is ``SOURCE_DATE_EPOCH``
    (0 when unset). Each file is hashed, unless ``record`` (:func:`digest_record`) holds its
    digest for its present facts; what was hashed is added to ``record`` (the caller saves it).
    Raises :class:`UsageError` (no file, an unknown ``fmt``), :class:`UnreadableFileError` (a
    file missing, not regular), ``ModelFileError`` (a ``.gguf`` that is not one),
    ``ConfigError`` (a bad ``SOURCE_DATE_EPOCH``)."""
    from lemonpack.digest import file_digest

    _check_format(fmt)
    packed_files: list[tuple[Path, PackFile]] = []
    for f in _files(files, record):
        digest, size = f.digest, f.size
        if digest is None:
            try:
                hashed, size = file_digest(f.path)
                digest = str(hashed)
                if record is not None:
                    record.record(f.path, digest, f.facts)  # facts taken before the hash read it
            except OSError as exc:
                raise UnreadableFileError(f"model file {f.path}: {exc.strerror or exc}") from None
        packed_files.append((f.path, PackFile(f.name, digest, size, f.role)))
    _unique(packed_files)
    packed, facts = _pack(packed_files, fmt, name, version, environ)
    return packed, packed_files, facts


def _unique(files: Sequence[tuple[Path, PackFile]]) -> None:
    seen: dict[str, Path] = {}
    for path, f in files:
        if f.name in seen:
            raise UsageError(f"two model files are named {f.name}: {seen[f.name]} and {path} (a file is pushed "
                             "under its base name)")
        seen[f.name] = path


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
    _check_format(fmt)
    record = digest_record()
    wanted = _files(files, record)
    _unique([(f.path, PackFile(f.name, "", f.size, f.role)) for f in wanted])
    own = client is None
    if client is None:
        from lemonpack.registry import RegistryClient

        client = RegistryClient(dest.host, insecure=insecure, registry_config=registry_config)
    try:
        before = client.stats.bytes_sent
        repo = dest.repository
        todo = [f for f in wanted if f.digest is None or not client.has_blob(repo, f.digest, f.size)]
        from lemonpack.registry.transfer import byte_progress

        digests = {f.path: f.digest for f in wanted}
        with byte_progress(sum(f.size for f in todo), f"pushing {repo}", progress) as on_bytes:
            for f in todo:
                digests[f.path] = _upload(client, repo, f, record, on_bytes)
        packed_files = [(f.path, PackFile(f.name, cast(str, digests[f.path]), f.size, f.role)) for f in wanted]
        for f in wanted:
            if f.digest is not None:
                record.record(f.path, cast(str, digests[f.path]), f.facts)  # refreshed: the newest last
        packed, facts = _pack(packed_files, fmt, name, version, environ)
        if not client.has_blob(repo, packed.config_digest, len(packed.config)):
            client.push_blob(repo, packed.config, packed.config_digest, len(packed.config))
        digest = client.put_manifest(repo, tag, packed.manifest, packed.media_type)
        uploaded = client.stats.bytes_sent - before
    finally:
        record.save()
        if own:
            client.close()
    pinned = dest.with_ref(tag=tag, digest=digest)
    signature = sign(str(dest.with_ref(digest=digest))) if sign is not None else None
    return PushedModel(pinned, digest, fmt, tuple(f for _, f in packed_files), facts, uploaded, signature)


def _upload(client, repo: str, f: _File, record: FileDigests, on_bytes) -> str:
    """Send ``f`` (module docstring: with its recorded digest, checked as it is sent, or hashed
    as it is sent); returns its digest, recorded with the facts the file had before it was
    read (a file changed while it was sent is not recorded: its facts differ now)."""
    from lemonpack.errors import IntegrityError

    if f.digest is not None:
        try:
            return client.push_blob(repo, f.path, f.digest, f.size, on_bytes=on_bytes)
        except IntegrityError:
            record.forget(f.path)  # the file is not what its record says: hash what is there now
            if on_bytes is not None:
                on_bytes(-f.size)  # the bar goes back for the second sending
    digest = client.push_blob(repo, f.path, None, f.size, on_bytes=on_bytes)
    record.record(f.path, digest, f.facts)
    return digest


__all__ = ["PUSH_FORMATS", "digest_record", "PushedModel", "pack_model", "push_model"]
