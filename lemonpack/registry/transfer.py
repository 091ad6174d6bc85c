"""Publish an OCI image layout to a registry and pull one back, byte for byte.

:func:`publish_layout` pushes tagged manifests of a layout (images, image indexes, recipe
artifact manifests) exactly as they are stored: every manifest is sent as its blob's bytes,
so the registry's digest is the local one (checked on every answer). Order is depth first,
children before parents: blobs (config, layers) before their manifest, child manifests (and a
``subject``) before the index that names them, and the tag last. A blob already in the target
repository (``HEAD``) is skipped; one that is in another repository of ``mount_from`` is mounted
(no bytes sent; a mount answered with an upload session continues in it); the rest are streamed
from disk and hashed as they go, committed only when they are what their name says
(:meth:`RegistryClient.push_blob`). A manifest already present by digest is not sent again.
Destination tags are checked before anything is sent (a layout tag that is a full name, such as
``docker.io/x/a:1``, is no registry tag).

:func:`pull_layout` reads a reference (tag or digest) and writes everything it reaches through
:class:`~lemonpack.oci.layout.LayoutWriter` (a temp directory first; a new layout renamed into
place, an existing one added to): every manifest is checked against the digest and size its
parent descriptor names, every blob streamed with its size bounded and its sha256 computed once
as it arrives. On any failure nothing is written at ``out``.

Ctrl-C in either raises :class:`~lemonpack.errors.Interrupted` saying what was under way and
what was (not) tagged or written.

Spec: OCI distribution-spec v1.1 ("push", "pull"); image-spec v1.1 ``image-layout.md``,
``descriptor.md``, ``manifest.md`` (``subject``), ``image-index.md``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO, Callable, Iterator, Sequence

from lemonpack.digest import file_digest
from lemonpack.errors import FetchError, IntegrityError, Interrupted, LayoutError, RegistryError
from lemonpack.fetch.download import ProgressLines
from lemonpack.oci.descriptor import Descriptor
from lemonpack.oci.layout import LayoutWriter
from lemonpack.oci.layout_reader import read_blob, read_layout
from lemonpack.oci.mediatypes import IMAGE_INDEX_TYPES, IMAGE_MANIFEST_TYPES
from lemonpack.oci.reference import ImageReference, is_tag, normal_host
from lemonpack.registry.answers import ImageNotFoundError, RegistryAnswerError
from lemonpack.registry.blobinfo import BlobLocations
from lemonpack.registry.client import RegistryClient
from lemonpack.registry.partials import DirLock as _DirLock, remove_leftovers
from lemonpack.registry.registries_conf import RegistriesConf


#: Repositories a blob was seen in that a publish tries to mount it from, besides --mount-from.
AUTO_MOUNTS = 3




@dataclass(frozen=True)
class Pushed:
    """One tag pushed: ``tag`` (in the target repository), ``digest``, ``media_type``, ``size``,
    and the ``source`` tag of the layout."""

    tag: str
    digest: str
    media_type: str
    size: int
    source: str

    def to_json(self) -> dict:
        """``{"tag", "digest", "mediaType", "size", "source"}``."""
        return {"tag": self.tag, "digest": self.digest, "mediaType": self.media_type,
                "size": self.size, "source": self.source}


@dataclass
class PublishResult:
    """What :func:`publish_layout` did: ``reference`` (``host/repo``), ``pushed`` tags, and
    byte/blob counters (see :class:`~lemonpack.registry.client.TransferStats`)."""

    reference: str
    pushed: list[Pushed] = field(default_factory=list)
    bytes_sent: int = 0
    blobs_uploaded: int = 0
    blobs_skipped: int = 0
    blobs_mounted: int = 0
    manifests_sent: int = 0

    def to_json(self) -> dict:
        """JSON form for ``lemonpack publish --json``."""
        return {"reference": self.reference, "pushed": [p.to_json() for p in self.pushed],
                "bytes_sent": self.bytes_sent, "blobs_uploaded": self.blobs_uploaded,
                "blobs_skipped": self.blobs_skipped, "blobs_mounted": self.blobs_mounted,
                "manifests_sent": self.manifests_sent}


@contextlib.contextmanager
def byte_progress(total: int, label: str, enabled: bool, *,
                  lines: Callable[[str], None] | None = None) -> Iterator[Callable[[int], None] | None]:
    """The progress of ``total`` bytes, as a context manager yielding the ``on_bytes(n)``
    callback to advance it (None, nothing shown, when not ``enabled``): a rich bar on stderr
    when it is a terminal, progress lines otherwise (to ``lines`` when given: a log), the
    downloads' own (:func:`lemonpack.fetch.download.byte_meter`). Shared by publish (uploads)
    and pull (downloads), of images and of models."""
    from lemonpack.fetch.download import byte_meter

    with byte_meter(total, label, enabled, lines=lines) as on_bytes:
        yield on_bytes


def _children(doc: dict, media_type: str) -> tuple[list[Descriptor], list[Descriptor], Descriptor | None]:
    """(manifests, blobs, subject) a manifest or index names."""
    subject = Descriptor.from_json(doc["subject"]) if isinstance(doc.get("subject"), dict) else None
    if media_type in IMAGE_INDEX_TYPES:
        return [Descriptor.from_json(m) for m in doc.get("manifests") or []], [], subject
    blobs = [Descriptor.from_json(doc["config"])] if isinstance(doc.get("config"), dict) else []
    blobs += [Descriptor.from_json(layer) for layer in doc.get("layers") or []]
    return [], blobs, subject


def _media_type_of(data: bytes, declared: str, what: str) -> tuple[dict, str]:
    try:
        doc = json.loads(data)
    except ValueError:
        raise LayoutError(f"{what}: not JSON") from None
    if not isinstance(doc, dict):
        raise LayoutError(f"{what}: not a JSON object")
    media_type = doc.get("mediaType") or declared
    if media_type not in IMAGE_MANIFEST_TYPES + IMAGE_INDEX_TYPES:
        raise LayoutError(f"{what}: media type {media_type!r} is not an image manifest or index")
    return doc, media_type


def select_tags(layout: Path, tag: str | None, dest_tag: str | None) -> list[tuple[str, Descriptor, str]]:
    """The layout tags to publish: ``[(source tag, descriptor, target tag)]``.

    ``tag``: only this layout tag (else all of them). ``dest_tag``: push under this tag, which
    needs exactly one source tag. Raises :class:`LayoutError` naming the layout's tags.
    """
    tags = read_layout(layout)
    if not tags:
        raise LayoutError(f"{layout}: the layout has no tagged manifests to publish")
    if tag is not None:
        if tag not in tags:
            raise LayoutError(f"{layout}: no tag {tag!r} (tags: {', '.join(sorted(tags))})")
        tags = {tag: tags[tag]}
    if dest_tag is not None:
        if len(tags) != 1:
            raise LayoutError(f"{layout} has {len(tags)} tags ({', '.join(sorted(tags))}); name one as "
                              f"DIR:TAG to publish it as :{dest_tag}, or leave the destination tag out "
                              "to publish every tag under its own name")
        (src, desc), = tags.items()
        return [(src, desc, dest_tag)]
    return [(t, d, t) for t, d in sorted(tags.items())]


def check_destination_tags(layout: Path, selected: list[tuple[str, Descriptor, str]], dest: ImageReference) -> None:
    """Refuse, before anything is sent, a destination tag the registry cannot take: a layout
    tag written as a full name (``docker.io/x/a:1``, as skopeo and podman write
    ``ref.name``) is a valid layout tag but no registry tag (distribution answers the
    manifest PUT with 404 or ``TAG_INVALID`` only after every blob was uploaded). Raises
    :class:`RegistryError` naming the tags and how to publish them (``DIR:TAG --to
    HOST/REPO:NEWTAG``)."""
    bad = [src for src, _desc, dst in selected if not is_tag(dst)]
    if not bad:
        return
    names = ", ".join(repr(b) for b in bad)
    raise RegistryError(f"{layout}: layout tag{'s' if len(bad) > 1 else ''} {names} cannot be a tag of "
                        f"{dest.host}/{dest.repository} (a registry tag is [A-Za-z0-9_][A-Za-z0-9._-]{{0,127}}, with no '/' or ':'); "
                        f"nothing was sent. Publish each under a tag of its own: "
                        f"lemonpack publish {layout}:{bad[0]} --to {dest.host}/{dest.repository}:TAG")


def publish_layout(layout: str | os.PathLike[str], dest: ImageReference, client: RegistryClient, *,
                   tag: str | None = None, mount_from: Sequence[str] = (),
                   progress: bool = False, remember: bool = True) -> PublishResult:
    """Push tags of the OCI layout at ``layout`` to ``dest.host/dest.repository``.

    ``tag``: the layout tag to push (default every tag); ``dest.tag``: the tag to push it as
    (default its own name, which must then be a registry tag: checked before anything is sent);
    ``dest.digest`` must not be set. ``mount_from``: repositories of the same registry to mount
    missing blobs from (a mount the registry answers with an upload session continues in that
    session). ``remember``: also mount from the repositories of the same registry a blob was
    last seen in (pushed, found, mounted or pulled there: :class:`~lemonpack.registry.blobinfo.BlobLocations`,
    at most :data:`AUTO_MOUNTS` tries per blob), and record where each blob now is.
    ``progress``: a rich progress bar of the blob bytes to send, on stderr. Every blob
    file is hashed as it is uploaded and committed only when it is what its name says. Returns
    :class:`PublishResult`.

    Raises :class:`LayoutError` (not a layout, unknown tag, a manifest of the layout that is not
    what its name says), :class:`RegistryError` (a tag the registry cannot take, a destination
    naming a digest), :class:`IntegrityError` (a blob
    file that does not hash to its name: nothing is tagged), ``FetchError`` (from the client),
    :class:`Interrupted` on Ctrl-C (the message says what was under way and which tags, if any,
    were set).
    """
    root = Path(layout)
    if dest.digest is not None:
        raise RegistryError(f"publish destination {dest} names a digest; give HOST/REPO[:TAG]")
    selected = select_tags(root, tag, dest.tag)
    check_destination_tags(root, selected, dest)
    state = _PublishState(f"{dest.host}/{dest.repository}", [dst for _s, _d, dst in selected])
    try:
        return _publish(root, dest, client, selected, mount_from, progress, state, remember)
    except KeyboardInterrupt:
        raise Interrupted(state.interrupted()) from None


@dataclass
class _PublishState:
    """Where a publish stands, for the message of an interrupted one."""

    target: str
    tags: list[str]
    stage: str = "reading the layout"
    tagged: list[str] = field(default_factory=list)
    tagging: str | None = None

    def interrupted(self) -> str:
        msg = f"publish to {self.target} interrupted while {self.stage}; "
        if not self.tagged and self.tagging is None:
            msg += "nothing was tagged"
        else:
            msg += f"tagged: {', '.join(self.tagged) or 'none'}"
            if self.tagging is not None:
                msg += f"; the PUT of tag {self.tagging} was under way (it may or may not be set)"
            rest = [t for t in self.tags if t not in self.tagged and t != self.tagging]
            if rest:
                msg += f"; not tagged: {', '.join(rest)}"
        return msg + " (blobs sent so far stay in the registry untagged; publishing again skips them)"


def _publish(root: Path, dest: ImageReference, client: RegistryClient, selected: list[tuple[str, Descriptor, str]],
             mount_from: Sequence[str], progress: bool, state: _PublishState, remember: bool) -> PublishResult:
    repo = dest.repository
    blobs_dir = root / "blobs" / "sha256"
    result = PublishResult(reference=f"{dest.host}/{repo}")
    start = (client.stats.bytes_sent, client.stats.blobs_uploaded, client.stats.blobs_mounted)
    done: set[str] = set()
    todo_blobs: list[Descriptor] = []
    manifests: list[tuple[Descriptor, bytes, str]] = []  # in push order

    def load(desc: Descriptor) -> tuple[bytes, dict, str]:
        path = blobs_dir / desc.hex
        data = read_blob(root, desc, f"{root}: manifest blob")
        doc, media_type = _media_type_of(data, desc.media_type, str(path))
        return data, doc, media_type

    def enter(desc: Descriptor, required: bool) -> list | None:
        """Load ``desc`` once: its frame ``[desc, data, media_type, blobs, pending children]``,
        or None (seen already, or an optional subject that lives elsewhere)."""
        if desc.digest in done:
            return None
        if not (blobs_dir / desc.hex).is_file():
            if required:
                raise LayoutError(f"{root}: blob {desc.digest} ({desc.media_type}) is missing")
            return None  # a subject that lives elsewhere
        done.add(desc.digest)
        data, doc, media_type = load(desc)
        children, blobs, subject = _children(doc, media_type)
        pending = ([(subject, False)] if subject is not None else []) + [(c, True) for c in children]
        return [desc, data, media_type, blobs, iter(pending)]

    def visit(first: Descriptor) -> None:
        """Children (subject first) before their parent, iteratively: an index chain of any
        depth costs memory in proportion, never a RecursionError."""
        frame = enter(first, True)
        stack = [frame] if frame is not None else []
        while stack:
            nxt = next(stack[-1][4], None)
            if nxt is not None:
                frame = enter(*nxt)
                if frame is not None:
                    stack.append(frame)
                continue
            desc, data, media_type, blobs, _ = stack.pop()
            for blob in blobs:
                if blob.digest not in done:
                    done.add(blob.digest)
                    if not (blobs_dir / blob.hex).is_file():
                        raise LayoutError(f"{root}: blob {blob.digest} ({blob.media_type}) is missing")
                    todo_blobs.append(blob)
            manifests.append((desc, data, media_type))

    for _src, desc, _dst in selected:
        visit(desc)

    # Blobs: skip what is there, mount what another repository has, upload the rest (through
    # the session a refused mount opened, when it opened one).
    state.stage = "checking which blobs the registry has"
    known = BlobLocations(client.host) if remember else None
    missing: list[tuple[Descriptor, str | None]] = []
    try:
        for blob in todo_blobs:
            if client.has_blob(repo, blob.digest, blob.size):
                result.blobs_skipped += 1
                if known is not None:
                    known.record(blob.digest, repo)
                continue
            hinted = known.candidates(blob.digest, repo)[:AUTO_MOUNTS] if known is not None else []
            mounted, session = _mount(client, repo, blob.digest, list(dict.fromkeys([*mount_from, *hinted])))
            if mounted and known is not None:
                known.record(blob.digest, repo)
            if not mounted:
                missing.append((blob, session))
        with byte_progress(sum(b.size for b, _ in missing), f"publish {dest.host}/{repo}",
                           progress and bool(missing)) as on_bytes:
            for n, (blob, session) in enumerate(missing, 1):
                state.stage = f"uploading blob {n} of {len(missing)} ({blob.digest})"
                client.push_blob(repo, blobs_dir / blob.hex, blob.digest, blob.size, on_bytes=on_bytes,
                                 session=session)
                if known is not None:
                    known.record(blob.digest, repo)
    finally:
        if known is not None:
            known.save()

    # Manifests, children first; then the tags.
    state.stage = "sending manifests by digest"
    for desc, data, media_type in manifests:
        if client.head_manifest(repo, desc.digest) is None:
            client.put_manifest(repo, desc.digest, data, media_type)
            result.manifests_sent += 1
    by_digest = {d.digest: (data, mt) for d, data, mt in manifests}
    state.stage = "setting tags"
    for src, desc, dst in selected:
        data, media_type = by_digest[desc.digest]
        head = client.head_manifest(repo, dst)
        if head is None or head[0] != desc.digest:
            state.tagging = dst
            client.put_manifest(repo, dst, data, media_type)
            result.manifests_sent += 1
        state.tagging = None
        state.tagged.append(dst)
        result.pushed.append(Pushed(dst, desc.digest, media_type, desc.size, src))
    result.bytes_sent = client.stats.bytes_sent - start[0]
    result.blobs_uploaded = client.stats.blobs_uploaded - start[1]
    result.blobs_mounted = client.stats.blobs_mounted - start[2]
    return result


def _mount(client: RegistryClient, repo: str, digest: str, mount_from: Sequence[str]) -> tuple[bool, str | None]:
    """Try to mount ``digest`` into ``repo`` from each of ``mount_from`` in turn: ``(True,
    None)`` once one mounts; else ``(False, session)`` with the first upload session a 202
    answer opened (later ones, and the kept one when a later mount succeeds, are cancelled),
    or ``None`` when none opened one."""
    kept: str | None = None
    for other in mount_from:
        if other == repo:
            continue
        answer = client.mount_blob(repo, digest, other)
        if answer.mounted:
            if kept is not None:
                client.cancel_upload(kept)
            return True, None
        if answer.session is not None:
            if kept is None:
                kept = answer.session
            else:
                client.cancel_upload(answer.session)
    return False, kept


@dataclass(frozen=True)
class Pulled:
    """What :func:`pull_layout` wrote: ``out``, ``tag`` (in the layout), ``digest``,
    ``media_type``, ``blobs`` (count) and ``bytes`` (blob bytes downloaded); ``reused``: blobs
    the existing layout at ``out`` held already (checked: size and sha256), not downloaded. ``merged``: ``out``
    was an existing layout the tag was added to (its other tags and files kept: ``kept`` other
    tags; ``replaced``: the digest the tag named before, when it existed)."""

    out: Path
    tag: str
    digest: str
    media_type: str
    blobs: int
    bytes: int
    merged: bool = False
    kept: int = 0
    replaced: str | None = None
    reused: int = 0

    def to_json(self) -> dict:
        """JSON form for ``lemonpack pull --json``."""
        return {"out": str(self.out), "tag": self.tag, "digest": self.digest, "mediaType": self.media_type,
                "blobs": self.blobs, "bytes": self.bytes, "merged": self.merged, "kept_tags": self.kept,
                "replaced": self.replaced, "blobs_reused": self.reused}


def pull_layout(ref: ImageReference, out: str | os.PathLike[str], client: RegistryClient, *,
                tag: str | None = None, progress: bool = False) -> Pulled:
    """Fetch ``ref`` (by tag or digest) and all it reaches into the OCI layout at ``out``.

    The layout's tag is ``tag``, else the reference's tag, else ``latest``. Manifests are
    checked against their parents' descriptors (digest and size), then the blobs they name are
    streamed, hashed once as they arrive and verified (:meth:`RegistryClient.read_blob`), under
    a progress bar of their total size on stderr when ``progress``. A new ``out`` appears
    atomically; an existing layout at ``out`` is added to, as ``skopeo copy ... oci:DIR:TAG``
    does (:class:`~lemonpack.oci.layout.LayoutWriter` ``merge``: its other tags, blobs and
    files kept, a same-named tag replaced); a blob that layout holds already, of the right
    size and sha256 (hashed), is not downloaded again; a non-empty directory that is no layout
    is refused. Leftovers of a killed pull (``OUT.tmp-*`` siblings, :func:`remove_leftovers`)
    are removed first.
    Everything is downloaded and verified into a temporary sibling first, so ``out`` is
    untouched on any failure (:class:`IntegrityError`, ``FetchError``, :class:`LayoutError`, :class:`RegistryError`,
    :class:`Interrupted` on Ctrl-C). A ``subject`` is not followed (it is the artifact's
    referent, not part of it).
    """
    if ref.ref is None:
        raise RegistryError(f"{ref}: give a tag or a digest to pull")
    name = tag or ref.tag or "latest"
    stage = ["fetching manifests"]
    try:
        return _pull(ref, ref.ref, Path(out), client, name, progress, stage)
    except KeyboardInterrupt:
        raise Interrupted(f"pull of {ref} interrupted while {stage[0]}; nothing was written at {out} "
                          "(what was downloaded so far is removed)") from None


def pull_image(ref: ImageReference, out: str | os.PathLike[str], *, insecure: bool = False,
               registry_config: str | os.PathLike[str] | None = None, tag: str | None = None,
               progress: bool = False, conf: RegistriesConf | None = None,
               notice: Callable[[str], None] | None = None, client: RegistryClient | None = None) -> Pulled:
    """:func:`pull_layout` from where containers-registries.conf(5) says ``ref`` is: its
    mirrors first (those whose ``pull-from-mirror`` fits a tag or a digest), then the registry
    itself (its ``location`` when the entry rewrites it), as podman and skopeo pull. A source
    that fails (unreachable, refused, missing, or not what the digest says) is passed over for
    the next, said through ``notice`` (one line each); the last one's error is raised.
    ``insecure``: plain http to the registry named (a mirror's own ``insecure`` decides for
    it). The layout's tag defaults to ``ref``'s, as :func:`pull_layout`'s. ``client``: an open
    client of ``ref``'s registry (the one the command's trust check used): the source that is
    the registry itself is pulled through it, so its connections and token cache serve both
    (it is not closed here); mirrors and a rewritten ``location`` get clients of their own. Raises what
    :func:`pull_layout` raises, and :class:`~lemonpack.errors.ConfigError` for a ``blocked``
    registry or a broken registries.conf."""
    from lemonpack.registry.registries_conf import load as load_conf

    conf = conf if conf is not None else load_conf()
    sources = conf.pull_sources(ref.host, ref.repository, by_digest=ref.digest is not None)
    name = tag or ref.tag or "latest"
    for n, src in enumerate(sources, 1):
        here = replace(ref, name=f"{src.host}/{src.repository}", domain=src.host, path=src.repository)
        try:
            if client is not None and not src.mirror and normal_host(src.host) == client.host:
                return pull_layout(here, out, client, tag=name, progress=progress)
            with RegistryClient(src.host, insecure=src.insecure or (insecure and not src.mirror),
                                registry_config=registry_config, registries_conf=conf) as own:
                return pull_layout(here, out, own, tag=name, progress=progress)
        except (FetchError, IntegrityError) as exc:
            if n == len(sources):
                raise
            if notice is not None:
                notice(f"{'mirror' if src.mirror else 'registry'} {src.host}/{src.repository} failed ({exc}); "
                       "trying the next source")
    raise AssertionError("pull_sources always names the registry itself")  # pragma: no cover


def _pull(ref: ImageReference, reference: str, out: Path, client: RegistryClient, name: str, progress: bool,
          stage: list[str]) -> Pulled:
    repo = ref.repository
    counters = {"blobs": 0, "bytes": 0, "reused": 0}
    seen: set[str] = set()
    blobs_todo: list[Descriptor] = []
    manifests: list[tuple[str, bytes]] = []  # (media type, bytes), children before parents

    existing = out / "blobs" / "sha256" if (out / "oci-layout").is_file() else None
    known = BlobLocations(client.host)  # where the blobs are, for a later publish's mounts
    checked = _Checked(out)  # blobs of this layout hashed before, unchanged since: not hashed again

    def enter(desc: Descriptor | None, reference: str) -> list:
        """Fetch and check one manifest: its frame ``[data, media_type, digest, blobs,
        pending children]``."""
        try:
            data, declared, digest = client.get_manifest(repo, reference)
        except RegistryAnswerError as exc:
            if desc is not None or exc.status != 404:
                raise
            raise ImageNotFoundError.of(str(ref), exc) from None
        what = f"manifest {ref.host}/{repo}@{digest}"
        if desc is not None:
            if digest != desc.digest:
                raise IntegrityError(what, desc.digest, digest)
            if len(data) != desc.size:
                raise IntegrityError(what + " (size)", f"{desc.size} bytes", f"{len(data)} bytes")
        doc, media_type = _media_type_of(data, declared, what)
        children, blobs, _subject = _children(doc, media_type)
        return [data, media_type, digest, blobs, iter(children)]

    def fetch_manifest(desc: Descriptor | None, reference: str) -> Descriptor:
        """Fetch ``reference`` and every manifest it names, children before parents,
        iteratively: a registry serving an index chain of any depth costs memory in
        proportion, never a RecursionError. Returns the root's descriptor."""
        stack = [enter(desc, reference)]
        top: Descriptor | None = None
        while stack:
            child = next((c for c in stack[-1][4] if c.digest not in seen), None)
            if child is not None:
                seen.add(child.digest)
                stack.append(enter(child, child.digest))
                continue
            data, media_type, digest, blobs, _ = stack.pop()
            for blob in blobs:
                if blob.digest not in seen:
                    seen.add(blob.digest)
                    blobs_todo.append(blob)
            manifests.append((media_type, data))
            counters["blobs"] += 1
            top = Descriptor(media_type, digest, len(data))
        assert top is not None, "the stack held the root"
        return top

    root = fetch_manifest(None, reference)
    if ref.digest and root.digest != ref.digest:  # get_manifest checked it; keep the invariant visible
        raise IntegrityError(str(ref), ref.digest, root.digest)
    for blob in blobs_todo:
        known.record(blob.digest, repo)
    remove_leftovers(out)
    held = [b for b in blobs_todo if existing is not None and _holds(existing / b.hex, b, checked)]
    if existing is not None and len(held) == len(blobs_todo):
        done = _already_there(out, name, root, manifests)
        if done is not None:  # every byte there, checked, and the tag names the root: nothing to write
            known.save()
            checked.save([])  # what _holds hashed is recorded; nothing was downloaded
            counters["blobs"] += len(blobs_todo)
            return replace(done, blobs=counters["blobs"], reused=len(held))
    with _DirLock() as hold, LayoutWriter(out, merge=True) as lw:
        hold.lock(lw.staging_dir)  # held until the layout is installed (hold exits after lw)
        hold.record(lw.staging_dir)  # `cache clean --partial` finds it if this process is killed
        for media_type, data in manifests:
            lw.add_blob_bytes(media_type, data)
        held_digests = {b.digest for b in held}
        with byte_progress(sum(b.size for b in blobs_todo if b.digest not in held_digests),
                           f"pull {ref.host}/{repo}", progress and bool(blobs_todo)) as on_bytes:
            for n, blob in enumerate(blobs_todo, 1):
                counters["blobs"] += 1
                if blob.digest in held_digests:
                    counters["reused"] += 1  # the layout we add to has it, checked: not downloaded again
                    continue
                stage[0] = f"downloading blob {n} of {len(blobs_todo)} ({blob.digest})"
                # read_blob hashes the bytes as they arrive and raises unless they are blob's
                lw.receive_blob(blob, functools.partial(_read_into, client, repo, blob, on_bytes))
                counters["bytes"] += blob.size
        lw.set_tags({name: root})
        stage[0] = f"writing the layout at {out}"
    known.save()
    checked.save([b for b in blobs_todo if b.digest not in held_digests])
    return Pulled(out, name, root.digest, root.media_type, counters["blobs"], counters["bytes"],
                  merged=lw.merged, kept=lw.kept, replaced=lw.replaced.get(name), reused=counters["reused"])


def _read_into(client: RegistryClient, repo: str, blob: Descriptor, on_bytes: Callable[[int], None] | None,
               f: BinaryIO) -> int:
    return client.read_blob(repo, blob.digest, f, size=blob.size, on_bytes=on_bytes)


def _already_there(out: Path, name: str, root: Descriptor, manifests: Sequence[tuple[str, bytes]]) -> Pulled | None:
    """The answer of a pull that finds everything in the layout at ``out`` already: its tag
    ``name`` names ``root`` (same digest, size and media type) and every manifest blob holds
    exactly the bytes fetched (compared; the blobs they name were checked by the caller). None
    when anything differs (then the layout is written as usual)."""
    from lemonpack.digest import Digest
    from lemonpack.oci.layout_reader import read_layout

    try:
        tags = read_layout(out)
        for _media_type, data in manifests:
            path = out / "blobs" / "sha256" / Digest.of_bytes(data).hex
            if path.is_symlink() or not path.is_file() or path.read_bytes() != data:
                return None
    except (OSError, LayoutError):
        return None
    tagged = tags.get(name)
    if tagged is None or (tagged.digest, tagged.size, tagged.media_type) != (root.digest, root.size, root.media_type):
        return None
    return Pulled(out, name, root.digest, root.media_type, len(manifests), 0, merged=True,
                  kept=len(tags) - 1, replaced=root.digest)


class _Checked:
    """The blobs of pulled layouts hashed before (downloaded and verified, or found there and
    hashed) with their stat facts then (:class:`lemonpack.digest.FileDigests`, its rule): a
    re-pull into the same layout does not hash a blob again whose facts are unchanged (any
    write, ``touch``, copy or rename in its place changes them; ctime cannot be set from user
    space), as the download cache does (:mod:`lemonpack.fetch.cache`). One record under the
    cache root, ``pulled-blobs.json`` (at most :data:`PULLED_RECORDED` blobs); a record that is
    missing, unreadable or not ours means "hash it"."""

    def __init__(self, out: Path):
        from lemonpack.digest import FileDigests
        from lemonpack.paths import cache_root

        self.out = out
        self.digests = FileDigests(cache_root() / "pulled-blobs.json", limit=PULLED_RECORDED)

    def unchanged(self, path: Path, desc: Descriptor) -> bool:
        """True when ``path`` (a blob of ``out``) has the facts recorded after it hashed to
        ``desc``'s digest."""
        return self.digests.known(path) == desc.digest

    def hashed(self, path: Path, desc: Descriptor, before: list[int] | None) -> None:
        """``path`` hashed to ``desc``'s digest, read after its facts were ``before``."""
        self.digests.record(path, desc.digest, before)

    def save(self, downloaded: Sequence[Descriptor]) -> None:
        """Record the blobs this pull ``downloaded`` (hashed as they arrived, written by it) as
        the installed layout holds them, then write the record with what :meth:`hashed` noted.
        Blobs found in the layout are never recorded here: only when hashed, under the facts
        they had before (a blob changed since is hashed again next time). A failure to write the
        record is ignored (the next pull hashes them)."""
        for desc in downloaded:
            path = self.out / "blobs" / "sha256" / desc.hex
            self.digests.record(path, desc.digest, self.digests.facts(path))
        self.digests.save()


#: Blobs of pulled layouts whose digest ``<cache>/pulled-blobs.json`` remembers.
PULLED_RECORDED = 10000


def _holds(path: Path, desc: Descriptor, checked: _Checked | None = None) -> bool:
    """True when ``path`` is a regular file of ``desc``'s size and sha256 (read once, hashed in
    large pieces; not again when ``checked`` says it was hashed before and is unchanged since,
    and recorded there when it is hashed here): a blob a pull need not download again. A
    symlink, a wrong size or a wrong hash is not (the blob is downloaded and replaces it)."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size != desc.size:
            return False
        if checked is not None and checked.unchanged(path, desc):
            return True
        before = checked.digests.facts(path) if checked is not None else None
        digest, size = file_digest(path)
    except OSError:
        return False
    if size == desc.size and str(digest) == desc.digest:
        if checked is not None:
            checked.hashed(path, desc, before)
        return True
    return False


__all__ = ["ImageNotFoundError", "publish_layout", "pull_layout", "pull_image", "remove_leftovers", "select_tags", "byte_progress", "ProgressLines",
           "PublishResult", "Pushed", "Pulled"]
