"""A model artifact pulled from a registry into the model store (``lemonpack models pull``,
``models inspect``, and the ``oci://`` checkpoints ``run``/``serve`` pull on first use).

:func:`pull_model`: the reference (``[oci://]HOST[:PORT]/REPO[:TAG][@sha256:...]``) resolved to
its manifest digest (a tag is allowed here; the digest is always reported), the manifest's format
checked before any layer is fetched (:func:`lemonpack.runtime.models.artifact.detect_format`), then
the config and every layer written through :meth:`ModelStore.writer` (hashed as written, bounded
by the descriptor's size, resumed with ``Range`` from a partial blob, one writer per blob), the
manifest stored last, and the model's directory view made. A model already in the store by digest
is answered from it without a request. Through the registry client of :mod:`lemonpack.registry`
(auth, retries, TLS: the same as ``pull``/``publish`` of images).

:func:`fetch_gguf_header`: the GGUF header of the main weight file alone (a ``Range`` read of the
blob's first bytes, grown until the header parses, or the blob in the store when it is there), so
memory admission can estimate before the weights arrive.

Spec: OCI distribution-spec v1.1 ``spec.md`` ("pulling manifests", "pulling blobs"); OCI
image-spec ``descriptor.md`` (verification); RFC 9110 section 14 (range requests).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from lemonpack.errors import FetchError, IntegrityError, NotFoundError
from lemonpack.oci.reference import ImageReference, parse_registry_reference
from lemonpack.oci.descriptor import Descriptor
from lemonpack.runtime.models.artifact import ModelArtifact, ModelArtifactError, ModelFile, detect_format, \
    manifest_config, needs_config, read_artifact
from lemonpack.runtime.models.index import index_manifests, is_index, pick_index_manifest
from lemonpack.runtime.models.store import ModelStore, view_files
from lemonpack.safetree import inside

#: Bytes of the main weight file read first for its GGUF header; doubled until it parses.
HEADER_FIRST_READ = 1 << 20
#: Largest GGUF header prefix fetched (a 150k-token vocabulary is ~10 MiB of header).
HEADER_MAX_READ = 256 << 20


@dataclass(frozen=True)
class PulledModel:
    """A model in the store: ``reference`` (pinned: ``HOST/REPO@sha256:...``, the tag kept when
    one was given), ``manifest_digest``, ``directory`` (its view: every file under its name),
    ``files`` (name -> path in ``directory``), ``artifact`` (:class:`ModelArtifact`),
    ``fetched`` (bytes received for this pull: 0 when everything was in the store)."""

    reference: ImageReference
    manifest_digest: str
    directory: Path
    files: Mapping[str, Path]
    artifact: ModelArtifact
    fetched: int = 0

    @property
    def main(self) -> Path | None:
        """The main weight file's path in the view (``artifact.main_name`` of the view's files; a
        symlink in the view, RamaLama's ``model.file``, resolved to the file it names), or None."""
        name = self.artifact.main_name(self.files)
        if name is None:
            return None
        target = self.files[name].resolve() if self.files[name].is_symlink() else self.files[name]
        return target if inside(target.resolve(), self.directory.resolve()) else None

    def to_json(self) -> dict:
        """``models pull --json``: reference, digest, directory, files, fetched, artifact."""
        return {"reference": str(self.reference), "digest": self.manifest_digest, "directory": str(self.directory),
                "main": str(self.main) if self.main else None,
                "files": {k: str(v) for k, v in self.files.items()}, "fetched": self.fetched,
                "artifact": self.artifact.to_json()}


@dataclass(frozen=True)
class GgufHeader:
    """The GGUF header of an artifact's main weight file: ``identity``
    (:class:`lemonpack.gguf_header.ModelIdentity`), ``path`` (the header prefix on disk, or
    the whole blob when it is in the store: what :func:`lemonpack.gguf_header.read_identity`
    and the memory estimate read), ``file`` (its :class:`ModelFile`: size, name), ``manifest_digest``,
    ``fetched`` bytes received for it, ``artifact`` (the :class:`ModelArtifact` read from the
    manifest and config on the way: every file's name)."""

    identity: object
    path: Path
    file: ModelFile
    manifest_digest: str
    fetched: int = 0
    artifact: ModelArtifact | None = None


def as_model_reference(reference: str | ImageReference) -> ImageReference:
    """``[oci://]HOST[:PORT]/REPO[:TAG][@sha256:...]`` as an :class:`ImageReference`
    (:func:`lemonpack.oci.reference.parse_registry_reference`; an ImageReference as it is).
    Raises ``InvalidReferenceError``."""
    return reference if isinstance(reference, ImageReference) else parse_registry_reference(reference)


def _client(ref: ImageReference, insecure: bool, registry_config, client):
    if client is not None:
        return client, False
    from lemonpack.registry import RegistryClient

    return RegistryClient(ref.host, insecure=insecure, registry_config=registry_config), True


def _stored_digest(ref: ImageReference, store: ModelStore) -> str | None:
    """The manifest digest ``ref`` names in the store: its digest (or, for the digest of an image
    index, the model manifest an earlier pull took from it), else what a pull of the tag recorded."""
    recorded = store.refs().get(str(ref))
    if ref.digest:
        return recorded or ref.digest
    return recorded


def _from_store(ref: ImageReference, digest: str, store: ModelStore) -> PulledModel | None:
    manifest = store.read(digest)
    if manifest is None:
        return None
    config = store.read(manifest_config(manifest).digest)
    if config is None:
        return None
    artifact = read_artifact(manifest, config)
    directory = store.view(digest)
    if directory is None:
        return None
    return _pulled(ref, digest, directory, artifact, 0)


def _pulled(ref: ImageReference, digest: str, directory: Path, artifact: ModelArtifact, fetched: int) -> PulledModel:
    files = {f.name: directory.joinpath(*f.name.split("/")) for f in artifact.layers if f.archive is None}
    if any(f.archive for f in artifact.layers):  # the files of tar layers, as extracted
        for name, path in view_files(directory).items():
            files.setdefault(name, path)
    return PulledModel(ref.with_ref(tag=ref.tag, digest=digest), digest, directory, files, artifact, fetched)


def resolve_model(reference: str | ImageReference, *, insecure: bool = False, registry_config=None,
                  client=None) -> ImageReference:
    """The reference pinned to its manifest digest (a tag resolved in the registry; a digest
    checked to exist). Raises :class:`FetchError` (missing, network), :class:`IntegrityError`."""
    ref = as_model_reference(reference)
    c, own = _client(ref, insecure, registry_config, client)
    try:
        got = c.get_manifest(ref.repository, ref.ref or "latest")
    finally:
        if own:
            c.close()
    return ref.with_ref(tag=ref.tag, digest=got[2])


def pull_model(reference: str | ImageReference, *, store: ModelStore | None = None, offline: bool = False,
               progress: bool | Callable[[int, int], None] = False, insecure: bool = False,
               registry_config: str | os.PathLike[str] | None = None, client=None, trust=None,
               use: str = "models pull") -> PulledModel:
    """Pull the model ``reference`` into ``store`` (default :class:`ModelStore`) and return it
    (module docstring). ``offline``: never contact the registry (a model not in the store is a
    :class:`NotFoundError`; a tag is looked up in the store's record of earlier pulls).
    ``progress``: True for a progress bar on stderr, or ``callback(done, total)`` in bytes.
    ``client``: a :class:`~lemonpack.registry.RegistryClient` to use (else one is made for the
    reference's host with ``insecure`` and ``registry_config``). ``trust``: a
    :class:`lemonpack.trust.check.Trust` the reference is judged by first (unless ``offline``),
    through the same client as the pull (one token cache: a tag resolved once, its digest judged
    and then pulled, also from the store); ``use`` names what was refused.

    Raises :class:`~lemonpack.errors.TrustError` (exit 3: the policy rejects it; nothing
    fetched), :class:`ModelArtifactError` (not a model format lemonpack reads: nothing fetched but
    the manifest), :class:`IntegrityError` (exit 3: a byte not what its digest says; that blob
    is not kept), :class:`FetchError` (network, registry), :class:`NotFoundError` (offline),
    :class:`~lemonpack.errors.StorageError`."""
    ref = as_model_reference(reference)
    store = store or ModelStore()
    remote = _Remote(ref, offline, insecure, registry_config, client)
    try:
        if trust is not None and not offline:  # no policy: nothing asked of the registry, no client made
            checker = remote.get("the trust check") if trust.policy is not None else None
            ref = as_model_reference(trust.enforce(str(ref), use=use, client=checker))
            remote.ref = ref
        known = _stored_digest(ref, store)
        if known is not None and (ref.digest or offline):
            got = _from_store(ref, known, store)
            if got is not None:
                return got
        if offline:
            raise NotFoundError(f"{ref}: not in the model store {store.root} and --offline forbids fetching it")
        return _pull(ref, store, remote, progress)
    finally:
        remote.close()


def progress_lines(label: str, write: Callable[[str], None]) -> Callable[[int, int], None]:
    """A ``progress`` for :func:`pull_model` (and ``fetch_checkpoints``) that writes progress
    lines to ``write`` (a logger's ``info``: ``serve``'s log when stderr is no terminal), a line
    per 10% and at least one every 10 s while bytes arrive: the downloads' own
    (:class:`lemonpack.registry.transfer.ProgressLines`)."""
    from lemonpack.registry.transfer import ProgressLines

    return ProgressLines(label, write)


def _progress(progress, total: int, label: str):
    if callable(progress):
        done = [0]

        def tick(n: int) -> None:
            done[0] += n
            progress(done[0], total)
        return None, tick
    if not progress:
        return None, None
    from lemonpack.registry.transfer import byte_progress

    cm = byte_progress(total, label, True)
    return cm, None


def _pull(ref: ImageReference, store: ModelStore, remote: "_Remote", progress) -> PulledModel:
    client = remote.get("the model")
    before = client.stats.bytes_received
    digest, data, config = _described(ref, store, remote, keep_manifest=False)
    artifact = read_artifact(data, config)
    missing = [f for f in artifact.layers if not store.has(f.digest, f.size)]
    total = sum(f.size for f in missing)
    cm, tick = _progress(progress, total, f"pulling {ref.repository}")
    if cm is not None:
        with cm as bar:
            for f in missing:
                fetch_blob(client, ref.repository, f.digest, f.size, store, on_bytes=bar)
    else:
        for f in missing:
            fetch_blob(client, ref.repository, f.digest, f.size, store, on_bytes=tick)
    store.put_bytes(digest, data)
    directory = store.view(digest)
    if directory is None:
        raise FetchError(f"{ref}: a blob went missing from the model store {store.root} while pulling")
    store.record(str(ref), digest)
    return _pulled(ref, digest, directory, artifact, client.stats.bytes_received - before)


class _Remote:
    """The registry client of one call, made on first use (a call answered from the store sends
    nothing), closed at the end when it was made here."""

    def __init__(self, ref: ImageReference, offline: bool, insecure: bool, registry_config, client):
        self.ref, self.offline, self.insecure, self.registry_config = ref, offline, insecure, registry_config
        self.client, self.own = client, False

    def get(self, what: str):
        if self.offline:
            raise NotFoundError(f"{self.ref}: {what} is not in the model store and --offline forbids fetching it")
        if self.client is None:
            self.client, self.own = _client(self.ref, self.insecure, self.registry_config, None)
        return self.client

    def close(self) -> None:
        if self.own and self.client is not None:
            self.client.close()


def _described(ref: ImageReference, store: ModelStore, remote: _Remote, *,
               keep_manifest: bool = True) -> tuple[str, bytes, bytes]:
    """``(manifest digest, manifest, config)`` of ``ref``: from the store when it holds them (by
    digest, or by a recorded tag when offline), else from the registry (format checked before the
    config is fetched; the config kept in the store, the manifest too with ``keep_manifest``: a
    pull stores it last, once its layers are in)."""
    digest = _stored_digest(ref, store)
    manifest = store.read(digest) if digest and (ref.digest or remote.offline) else None
    if manifest is None:
        manifest, _, digest = remote.get("the manifest").get_manifest(ref.repository, ref.ref or "latest")
        if ref.digest and digest != ref.digest:
            raise IntegrityError(f"manifest {ref}", ref.digest, digest)
        if is_index(manifest):  # the one model artifact of an image index (pick_index_manifest)
            digest, manifest = _from_index(ref, manifest, store, remote)
        if not needs_config(manifest):
            detect_format(manifest)  # refuse an unknown format before fetching anything else
    assert digest is not None
    cfg = manifest_config(manifest)
    config = store.read(cfg.digest)
    if config is None:
        fetch_blob(remote.get("the config"), ref.repository, cfg.digest, cfg.size, store)
        config = store.read(cfg.digest)
        assert config is not None
    if keep_manifest:
        store.put_bytes(digest, manifest)
    return digest, manifest, config


#: Largest image config read to tell whether an index's image manifest is a model (a RamaLama
#: model image's label); configs are a few KiB.
INDEX_CONFIG_MAX = 4 << 20


def _from_index(ref: ImageReference, index: bytes, store: ModelStore, remote: _Remote) -> tuple[str, bytes]:
    """``(digest, manifest)`` of the model artifact the image index ``index`` names
    (:func:`lemonpack.runtime.models.index.pick_index_manifest` for this machine's platform):
    each image manifest it names is fetched (checked against its descriptor) and its format read,
    an image config read too when the format depends on it (a RamaLama model image)."""
    from lemonpack.oci.platform import host_platform

    client = remote.get("the index's manifests")
    formats: list[tuple[Descriptor, str | None]] = []
    bodies: dict[str, bytes] = {}
    for desc in index_manifests(index):
        body, _, got = client.get_manifest(ref.repository, desc.digest)  # verified against the digest
        if len(body) != desc.size:
            raise IntegrityError(f"manifest {ref.host}/{ref.repository}@{desc.digest} (size)", f"{desc.size} bytes",
                                 f"{len(body)} bytes")
        bodies[desc.digest] = body
        config = None
        try:
            if needs_config(body):
                cfg = manifest_config(body)
                if cfg.size <= INDEX_CONFIG_MAX:
                    fetch_blob(client, ref.repository, cfg.digest, cfg.size, store)
                    config = store.read(cfg.digest)
            formats.append((desc, detect_format(body, config)))
        except ModelArtifactError:
            formats.append((desc, None))  # a runtime image, a build attestation: no model
    chosen = pick_index_manifest(str(ref), formats, host_platform())
    return chosen.digest, bodies[chosen.digest]


@dataclass(frozen=True)
class InspectedModel:
    """A model artifact's description (``models inspect``): ``reference`` (pinned),
    ``manifest_digest``, ``artifact``, ``stored`` (every layer is in the store), ``directory``
    (its view when stored, else None)."""

    reference: ImageReference
    manifest_digest: str
    artifact: ModelArtifact
    stored: bool
    directory: Path | None = None

    def to_json(self) -> dict:
        """``models inspect --json``: reference, digest, stored, directory, artifact."""
        return {"reference": str(self.reference), "digest": self.manifest_digest, "stored": self.stored,
                "directory": str(self.directory) if self.directory else None, "artifact": self.artifact.to_json()}


def inspect_model(reference: str | ImageReference, *, store: ModelStore | None = None, offline: bool = False,
                  insecure: bool = False, registry_config: str | os.PathLike[str] | None = None,
                  client=None) -> InspectedModel:
    """What the model ``reference`` is (format, facts, files) from its manifest and config only:
    read from the store when it has them (by digest, or ``offline`` by a recorded tag), else
    fetched from the registry (and kept in the store: they are small); no layer is fetched.
    Raises the errors of :func:`pull_model`."""
    ref = as_model_reference(reference)
    store = store or ModelStore()
    remote = _Remote(ref, offline, insecure, registry_config, client)
    try:
        digest, manifest, config = _described(ref, store, remote)
    finally:
        remote.close()
    artifact = read_artifact(manifest, config)
    stored = all(store.has(f.digest, f.size) for f in artifact.layers)
    return InspectedModel(ref.with_ref(tag=ref.tag, digest=digest), digest, artifact, stored,
                          store.view(digest) if stored else None)


def fetch_blob(client, repo: str, digest: str, size: int, store: ModelStore, *,
               on_bytes: Callable[[int], None] | None = None) -> Path:
    """Blob ``digest`` of ``size`` bytes (descriptor values) from ``repo`` into ``store``
    (nothing fetched when it is there; a partial resumed from its length); returns its path.
    Raises :class:`IntegrityError` (exit 3; the partial is dropped), :class:`FetchError`."""
    with store.writer(digest, size) as w:
        if not w.complete and w.offset < size:
            client.read_blob_range(repo, digest, w, start=w.offset, on_bytes=on_bytes)
        return w.commit()


def fetch_gguf_header(reference: str | ImageReference, *, store: ModelStore | None = None, offline: bool = False,
                      insecure: bool = False, registry_config: str | os.PathLike[str] | None = None,
                      client=None) -> GgufHeader:
    """The GGUF header of the artifact's main weight file (:class:`GgufHeader`), fetched alone:
    from the store when the blob is there, else the blob's first :data:`HEADER_FIRST_READ`
    bytes (``Range``), doubled until :func:`lemonpack.gguf_header.read_identity` parses them
    (at most :data:`HEADER_MAX_READ`, or the whole blob), kept in the store's ``headers/``.
    The manifest and config are stored as a pull stores them. Raises :class:`ModelArtifactError`
    (no GGUF weight file), ``ModelFileError`` (not a GGUF), the errors of :func:`pull_model`."""
    from lemonpack.gguf_header import ModelFileError, TruncatedGGUFError, read_identity

    ref = as_model_reference(reference)
    store = store or ModelStore()
    remote = _Remote(ref, offline, insecure, registry_config, client)
    try:
        digest, manifest, config = _described(ref, store, remote)
        artifact = read_artifact(manifest, config)
        main = artifact.main
        if main is None or not main.is_gguf:
            raise ModelArtifactError(f"{ref}: no GGUF weight file in the artifact "
                                     f"(files: {', '.join(f.name for f in artifact.layers)})")
        if store.has(main.digest, main.size):
            path = store.blob_path(main.digest)
            return GgufHeader(read_identity(path), path, main, digest, 0, artifact)
        path = store.header_path(main.digest)
        if path.is_file():
            try:
                return GgufHeader(read_identity(path), path, main, digest, 0, artifact)
            except TruncatedGGUFError:
                pass
        got = _header_by_range(remote.get(f"the header of {main.name}"), ref, main, digest, path, read_identity,
                               TruncatedGGUFError, ModelFileError)
        return replace(got, artifact=artifact)
    finally:
        remote.close()


def _header_by_range(client, ref, main: ModelFile, digest: str, path: Path, read_identity, truncated, bad):
    import secrets

    from lemonpack.files import commit

    want = min(HEADER_FIRST_READ, main.size)
    fetched = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        tmp = path.parent / f".{path.name}.tmp-{secrets.token_hex(4)}"
        try:
            with open(tmp, "wb") as f:
                fetched += client.read_blob_range(ref.repository, main.digest, f, start=0, length=want)
            try:
                identity = read_identity(tmp)
            except truncated:
                if want >= main.size or want >= HEADER_MAX_READ:
                    raise bad(f"{ref}: {main.name}: the GGUF header is longer than {want} bytes") from None
                want = min(want * 4, main.size, HEADER_MAX_READ)
                continue
            commit(tmp, path, durable=False)
            return GgufHeader(identity, path, main, digest, fetched)
        finally:
            tmp.unlink(missing_ok=True)


__all__ = ["GgufHeader", "InspectedModel", "PulledModel", "inspect_model", "fetch_blob", "fetch_gguf_header", "as_model_reference",
           "progress_lines", "pull_model", "resolve_model"]
