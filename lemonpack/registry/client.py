"""The operations of the OCI distribution API (v2), verified: manifests, blobs, tags, mounts,
uploads (after go-containerregistry's ``remote``). HTTP, retries and bounds are
:mod:`.transport` (httpx); auth is :mod:`.authn` (an ``httpx.Auth`` the operations never see),
fed by a :class:`~lemonpack.registry.auth.Keychain`.

Byte for byte: manifests are sent and received as bytes; every digest the registry answers
(``Docker-Content-Digest``, a manifest body, a blob body) is checked against ours; a body is
never read past its expected size (blobs) or 4 MiB (manifests, distribution's own limit);
downloads go to a temp file renamed into place only once verified.

Transport: ``https`` first everywhere; plain ``http`` with ``insecure=True`` or ``insecure =
true`` for the registry in containers-registries.conf(5) (:mod:`.registries_conf`), or after a
loopback registry answered the TLS attempt in plain http (said on stderr; :mod:`.transport`).
Docker Hub (``docker.io``) is requested from ``registry-1.docker.io``
(:func:`lemonpack.oci.reference.registry_endpoint`). Auth: anonymous, ``Basic`` (RFC 7617) and ``Bearer`` (the distribution
token flow, per-scope token cache, renewal before expiry, refresh-token grant for an
``identitytoken``), credentials from :mod:`lemonpack.registry.auth`. Secrets never appear in a
message or a log line.

Retries (:mod:`.transport`): a dropped connection, a timeout, HTTP 429/500/502/503/504 are
retried ``retries`` times with exponential backoff (``backoff * 2**attempt`` seconds,
``Retry-After`` honoured up to 30 s); a body is re-created for every attempt. A blob upload
that fails half way (a dropped connection, a timeout, 429/5xx on a ``PATCH`` or the closing
``PUT``) resumes from the offset the registry reports for the session (``GET`` on the upload
URL, ``Range``), or starts a new session when the old one is gone (distribution 2.8 forgets a
session whose ``_state`` is behind what it received: then the blob goes again in a new one). A host name that does not resolve is not
retried (the message names the host, port and resolver's reason); a refused connection (nothing
listening on the port) is retried once, then reported the same way.

Spec: OCI distribution-spec v1.1 (``spec.md``: pulling, pushing blobs monolithically and in
chunks, cross-repository mounting, pushing manifests, listing tags); Docker registry token
authentication (distribution ``docs/spec/auth/token.md``).
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal, overload

import httpx

from lemonpack.files import commit
from lemonpack.httpclient import body as _body
from lemonpack.digest import Digest, Hasher, is_sha256_digest, names_sha256
from lemonpack.errors import ConfigError, FetchError, IntegrityError, LayoutError, RegistryError, StorageError
from lemonpack.oci.mediatypes import MANIFEST_MEDIA_TYPES
from lemonpack.oci.reference import normal_host, registry_endpoint
from lemonpack.registry.auth import Credentials, FileKeychain, Keychain, StaticKeychain
from lemonpack.registry.authn import RegistryAuth
from lemonpack.registry.registries_conf import RegistriesConf
from lemonpack.registry.registries_conf import load as load_registries_conf
from lemonpack.registry.transport import Transient as _Transient
from lemonpack.registry.transport import TransferStats, Transport, plain_http_for, short as _short
from lemonpack.registry.upload import UploadDigest, FileSlice

log = logging.getLogger(__name__)

#: Largest manifest read (distribution's own limit for a manifest PUT is 4 MiB).
MAX_MANIFEST_BYTES = 4 << 20
#: Blob files are uploaded in PATCH chunks of at most this size (distribution-spec "pushing a
#: blob in chunks"), then committed by an empty closing PUT once their hash is checked; blobs
#: given as bytes (hashed before sending) up to this size go in a single PUT. One PATCH per GiB,
#: as skopeo sends a whole blob in one: each PATCH costs distribution a round of its own (measured
#: here, 1 GiB blobs, four interleaved pushes each at load 4: 64 MiB chunks 3.54-4.65 s, mean
#: 4.03 s; one PATCH 3.06-3.63 s, mean 3.39 s; the same CPU). Smaller chunks would buy nothing
#: against distribution, which forgets a session interrupted mid-PATCH (the upload restarts), and
#: a registry that keeps what it got says where it stands whatever the chunk size.
DEFAULT_CHUNK_SIZE = 1 << 30


@dataclass(frozen=True)
class MountAnswer:
    """The answer to a cross-repository mount: ``mounted`` (true: nothing to upload), else the
    upload ``session`` URL the registry opened instead (202 + ``Location``), or ``None``.
    Its truth value is ``mounted``."""

    mounted: bool
    session: str | None = None

    def __bool__(self) -> bool:
        return self.mounted


def _check_digest(digest: str) -> str:
    if not isinstance(digest, str) or not is_sha256_digest(digest):
        raise RegistryError(f"not a sha256 digest: {digest!r} (expected sha256:<64 lowercase hex>)")
    return digest


class RegistryClient:
    """One registry (``host`` = ``host[:port]``), verified both ways (see the module docstring).

    ``host``: as references name it (``docker.io``; requests go to :attr:`endpoint`).
    ``insecure``: plain http (also when registries.conf says ``insecure = true`` for ``host``;
    ``registries_conf``: a loaded :class:`~lemonpack.registry.registries_conf.RegistriesConf`
    instead of the user's files; a ``blocked`` registry raises :class:`ConfigError`).
    ``auth``: :class:`Credentials`, or ``None`` to look them up for ``host`` in the auth files
    (:class:`~lemonpack.registry.auth.FileKeychain`: ``registry_config``, containers-auth.json(5),
    Docker's config and helpers; anonymous when none names the host); ``keychain``: another
    :class:`~lemonpack.registry.auth.Keychain` instead. ``retries``/``backoff``:
    transient-failure policy. ``chunk_size``: PATCH size for large blobs. ``timeout``: seconds
    per connect/read. ``stats``: :class:`TransferStats` of this client. ``transport``: the
    :class:`~lemonpack.registry.transport.Transport`; ``auth``: its
    :class:`~lemonpack.registry.authn.RegistryAuth` (token cache, ``token_requests``).

    Raises, from every call: :class:`FetchError` (exit 4: network, HTTP status, auth refused),
    :class:`IntegrityError` (exit 3: a digest or size the registry answered is not ours),
    :class:`StorageError` (the local disk failed).
    """

    def __init__(self, host: str, *, insecure: bool = False, auth: Credentials | None = None,
                 registry_config: str | os.PathLike[str] | None = None, retries: int = 4,
                 backoff: float = 0.5, chunk_size: int = DEFAULT_CHUNK_SIZE, timeout: float = 60.0,
                 keychain: Keychain | None = None, registries_conf: RegistriesConf | None = None):
        self.host = normal_host(host)
        self.endpoint = registry_endpoint(self.host)
        self.registry_config = registry_config
        conf = registries_conf if registries_conf is not None else load_registries_conf()
        entry = conf.find(self.host)
        if entry is not None and entry.blocked:
            raise ConfigError(f"{entry.source}: registry {entry.prefix} is blocked (blocked = true)")
        insecure = insecure or bool(entry and entry.insecure)
        self.insecure = insecure
        if keychain is None:
            keychain = StaticKeychain(auth) if auth is not None else FileKeychain(registry_config)
        self.stats = TransferStats()
        self.chunk_size = chunk_size
        self.chunk_min = 0  # the registry's OCI-Chunk-Min-Length, once it said one
        plain_http = plain_http_for(self.endpoint, insecure)
        self.auth = RegistryAuth(self.host, keychain, scheme="http" if plain_http else "https", plain_http=plain_http,
                                 endpoint=self.endpoint)
        self.creds = self.auth.creds
        self.transport = Transport(self.endpoint, insecure=insecure, auth=self.auth, retries=retries,
                                   backoff=backoff, timeout=timeout, stats=self.stats)
        self.retries = retries

    @property
    def token_requests(self) -> int:
        """Token-service requests made (tokens fetched or renewed), for tests and stats."""
        return self.auth.token_requests

    def close(self) -> None:
        """Close the connections."""
        self.transport.close()

    def __enter__(self) -> "RegistryClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- manifests ---------------------------------------------------------------------
    def head_manifest(self, repo: str, ref: str) -> tuple[str, str, int] | None:
        """``HEAD /v2/<repo>/manifests/<ref>``: ``(digest, media_type, size)`` or ``None`` (404).

        ``digest`` is the ``Docker-Content-Digest`` header; when ``ref`` is a digest it must be
        that digest, else :class:`IntegrityError`. The header is not guaranteed
        (distribution-spec "checking if content exists": registries and caches may leave it
        out): without it a digest ``ref`` is its own answer, and for a tag the manifest is
        fetched and hashed (:meth:`get_manifest`), as containerd and skopeo do.
        """
        resp = self.transport.request("HEAD", f"{repo}/manifests/{ref}", missing_ok=True,
                             headers={"Accept": ", ".join(MANIFEST_MEDIA_TYPES)})
        if resp is None:
            return None
        resp.close()
        media_type = resp.headers.get("Content-Type", "").split(";")[0].strip()
        size = int(resp.headers.get("Content-Length") or -1)
        digest = resp.headers.get("Docker-Content-Digest", "")
        if not is_sha256_digest(digest):
            if is_sha256_digest(ref):
                return ref, media_type, size
            fetched = self.get_manifest(repo, ref, missing_ok=True)
            if fetched is None:
                return None
            data, media_type, digest = fetched
            return digest, media_type, len(data)
        if names_sha256(ref) and digest != ref:
            raise IntegrityError(f"{self.host}/{repo}@{ref} (HEAD)", ref, digest)
        return digest, media_type, size

    @overload
    def get_manifest(self, repo: str, ref: str, *, missing_ok: Literal[False] = False) -> tuple[bytes, str, str]: ...

    @overload
    def get_manifest(self, repo: str, ref: str, *, missing_ok: bool) -> tuple[bytes, str, str] | None: ...

    def get_manifest(self, repo: str, ref: str, *, missing_ok: bool = False) -> tuple[bytes, str, str] | None:
        """``GET /v2/<repo>/manifests/<ref>``: ``(bytes, media_type, digest)``, verified.

        The body is read up to :data:`MAX_MANIFEST_BYTES` (more is refused); ``digest`` is its
        sha256, which must equal ``ref`` when ``ref`` is a digest, and the
        ``Docker-Content-Digest`` header when one is sent (:class:`IntegrityError` otherwise).
        ``media_type`` is the body's ``mediaType`` (else the Content-Type). A missing manifest
        (404) is FetchError, or ``None`` with ``missing_ok``.
        """
        resp = self.transport.request("GET", f"{repo}/manifests/{ref}", stream=True, missing_ok=missing_ok,
                             headers={"Accept": ", ".join(MANIFEST_MEDIA_TYPES)})
        if resp is None:
            return None
        try:
            data = self._read_limited(resp, MAX_MANIFEST_BYTES, f"manifest {repo}:{ref}")
        finally:
            resp.close()
        digest = str(Digest.of_bytes(data))
        what = f"manifest {self.host}/{repo}@{ref}" if names_sha256(ref) else f"manifest {self.host}/{repo}:{ref}"
        if names_sha256(ref) and digest != ref:
            raise IntegrityError(what, ref, digest)
        header = resp.headers.get("Docker-Content-Digest")
        if header and header != digest:
            raise IntegrityError(what + " (Docker-Content-Digest vs body)", header, digest)
        media_type = resp.headers.get("Content-Type", "").split(";")[0].strip()
        try:
            import json

            doc = json.loads(data)
            if isinstance(doc, dict) and isinstance(doc.get("mediaType"), str):
                media_type = doc["mediaType"]
        except ValueError:
            raise FetchError(f"{what}: not JSON") from None
        return data, media_type, digest

    def put_manifest(self, repo: str, ref: str, data: bytes, media_type: str) -> str:
        """``PUT /v2/<repo>/manifests/<ref>`` with ``data`` exactly; returns its digest.

        ``ref``: a tag, or the manifest's own digest. The registry's ``Docker-Content-Digest``
        must be the sha256 of ``data`` (:class:`IntegrityError`). Spec: "pushing manifests".
        """
        digest = str(Digest.of_bytes(data))
        if names_sha256(ref) and ref != digest:
            raise IntegrityError(f"manifest to push as {repo}@{ref}", ref, digest)
        resp = self.transport.request("PUT", f"{repo}/manifests/{ref}", body=data, ok=(201, 200),
                             headers={"Content-Type": media_type})
        resp.close()
        answered = resp.headers.get("Docker-Content-Digest")
        if answered and answered != digest:
            raise IntegrityError(f"manifest {self.host}/{repo}:{ref} (registry's answer)", digest, answered)
        return digest

    # -- blobs -------------------------------------------------------------------------
    def has_blob(self, repo: str, digest: str, size: int | None = None) -> bool:
        """``HEAD /v2/<repo>/blobs/<digest>``: True when present (and of ``size`` when given)."""
        resp = self.transport.request("HEAD", f"{repo}/blobs/{_check_digest(digest)}", missing_ok=True, follow=True)
        if resp is None:
            return False
        resp.close()
        answered = resp.headers.get("Docker-Content-Digest")
        if answered and answered != digest:
            raise IntegrityError(f"blob {self.host}/{repo}@{digest} (HEAD)", digest, answered)
        if size is not None and resp.headers.get("Content-Length", "").isdigit():
            return int(resp.headers["Content-Length"]) == size
        return True

    def mount_blob(self, repo: str, digest: str, from_repo: str) -> "MountAnswer":
        """Cross-repository mount (``POST .../blobs/uploads/?mount=<digest>&from=<repo>``).

        Returns a :class:`MountAnswer`, true when the registry mounted the blob (201). When it
        did not and opened an upload session instead (202 + ``Location``), the answer holds that
        session: distribution-spec "mounting a blob from another repository" lets the client
        upload through it, and :meth:`push_blob` takes it as ``session`` (no second ``POST``;
        :meth:`cancel_upload` it when unused). A refused request (no access to ``from_repo``)
        is a false answer without a session: a mount is only a shortcut, the caller uploads.
        """
        q = urllib.parse.urlencode({"mount": _check_digest(digest), "from": from_repo})
        try:
            resp = self.transport.request("POST", f"{repo}/blobs/uploads/?{q}", ok=(201, 202),
                                 headers={"Content-Length": "0"})
        except FetchError as e:  # e.g. no pull access to ``from_repo``: a mount is only a shortcut
            log.info("mount of %s from %s into %s refused (%s); uploading instead", digest, from_repo, repo, e)
            return MountAnswer(False)
        resp.close()
        self._honour_chunk_minimum(resp)
        if resp.status_code == 201:
            answered = resp.headers.get("Docker-Content-Digest")
            if answered and answered != digest:
                raise IntegrityError(f"blob {self.host}/{repo} mounted from {from_repo}", digest, answered)
            self.stats.blobs_mounted += 1
            return MountAnswer(True)
        location = resp.headers.get("Location")
        if not location:
            return MountAnswer(False)
        return MountAnswer(False, self.transport.check_url(urllib.parse.urljoin(self.transport.url(""), location)))

    def cancel_upload(self, session: str) -> None:
        """``DELETE`` an upload session that will not be used (best effort: a registry that
        refuses or forgets it purges the session itself)."""
        try:
            self.transport.request("DELETE", session, ok=(204, 200, 202, 404), retry=False).close()
        except (FetchError, _Transient):
            pass

    def push_blob(self, repo: str, source: str | os.PathLike[str] | bytes, digest: str | None, size: int,
                  *, on_bytes: Callable[[int], None] | None = None, session: str | None = None) -> str:
        """Upload a blob (a file path or bytes) to ``repo``; returns its digest.

        ``digest`` None (a file only): the digest is not known beforehand; it is the sha256 of
        the bytes as they are sent (the one pass over the file), named by the closing ``PUT
        ?digest=`` and returned, so a file is read and hashed once instead of hashed first and
        read again to send it (nothing is asked about the blob before: a registry that holds it
        already gets it again).

        A file is streamed from disk (flat memory) in ``PATCH`` chunks of up to ``chunk_size``
        bytes, hashed as it goes (:class:`~lemonpack.registry.upload.UploadDigest`); the closing
        ``PUT ?digest=`` that commits the blob is sent only when the bytes sent hash to
        ``digest``, else :class:`IntegrityError` naming the file (the session is cancelled and
        the registry stores nothing, whether or not it re-hashes). Bytes are hashed first and
        sent with one ``PUT`` up to ``chunk_size``. The answered ``Docker-Content-Digest`` must
        be ours. ``session``: an upload session the registry already opened (a 202 mount
        answer) to use instead of a new ``POST``. A transient failure mid-upload resumes where
        the registry's session says it stands, or restarts the upload. ``on_bytes(n)`` is
        called as bytes go out (progress bars).
        """
        if digest is not None or isinstance(source, (bytes, bytearray)):
            _check_digest(digest)  # type: ignore[arg-type]
        on_bytes = on_bytes or (lambda n: None)
        hasher = None
        if isinstance(source, (bytes, bytearray)):
            assert digest is not None
            data = bytes(source)
            actual = str(Digest.of_bytes(data))
            if actual != digest or len(data) != size:
                raise IntegrityError(f"blob to push to {repo}", digest, actual)
            path = None
        else:
            path = Path(source)
            if path.stat().st_size != size:
                raise LayoutError(f"{path}: size {path.stat().st_size} is not the descriptor's {size}")
            hasher = UploadDigest(path, size)
        offset = 0
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                self.transport.sleep(self.transport.delay(attempt, last))
                session, offset = self._resume_point(session)
            try:
                if session is None:
                    session, offset = self._start_upload(repo), 0
                session, sent = self._upload_from(session, offset, path, data if path is None else None, size,
                                                  digest, on_bytes, hasher)
                self.stats.blobs_uploaded += 1
                return sent
            except _Transient as exc:
                last = exc
                if exc.attempts is not None and attempt + 1 >= exc.attempts:
                    raise FetchError(f"uploading {digest or path} to {self.host}/{repo} failed: {exc} "
                                     f"(after {attempt + 1} attempts)") from None
            except FetchError as exc:
                if "HTTP 404" not in str(exc) and "HTTP 416" not in str(exc):
                    raise
                last, session = exc, None  # the session is gone: start again
        raise FetchError(f"uploading {digest or path} to {self.host}/{repo} failed: {last} "
                         f"(after {self.retries + 1} attempts)")

    def _start_upload(self, repo: str) -> str:
        resp = self.transport.request("POST", f"{repo}/blobs/uploads/", ok=(202,), headers={"Content-Length": "0"})
        resp.close()
        self._honour_chunk_minimum(resp)
        location = resp.headers.get("Location")
        if not location:
            raise FetchError(f"registry {self.host} opened an upload for {repo} without a Location")
        return self.transport.check_url(urllib.parse.urljoin(self.transport.url(""), location))

    def _honour_chunk_minimum(self, resp: httpx.Response) -> None:
        """distribution-spec v1.1 "pushing a blob in chunks": a registry may answer the ``POST``
        opening a session with ``OCI-Chunk-Min-Length``, the smallest chunk it takes (but the
        last); chunks are then at least that long."""
        value = resp.headers.get("OCI-Chunk-Min-Length", "")
        if value.isdigit() and int(value) > 0:
            self.chunk_min = max(self.chunk_min, int(value))

    def _resume_point(self, session: str | None) -> tuple[str | None, int]:
        """Where an interrupted upload session stands: ``(session, next offset)``, or
        ``(None, 0)`` when it cannot be resumed (gone, unreachable, unknown)."""
        if session is None:
            return None, 0
        try:
            resp = self.transport.request("GET", session, ok=(204, 200), retry=False)
        except (FetchError, _Transient):
            return None, 0
        resp.close()
        location = resp.headers.get("Location")
        if location:
            session = self.transport.check_url(urllib.parse.urljoin(session, location))
        return session, upload_offset(resp.headers.get("Range", ""))

    def _upload_from(self, session: str, offset: int, path: Path | None, data: bytes | None, size: int,
                     digest: str | None, on_bytes: Callable[[int], None],
                     hasher: UploadDigest | None) -> tuple[str, str]:
        """Send the blob from ``offset`` through ``session`` and commit it; ``(session, digest)``
        (``digest`` None: the hash of the bytes sent)."""
        def sent(n: int) -> None:
            self.stats.bytes_sent += n
            on_bytes(n)

        def body(start: int, length: int):
            if data is not None:
                def chunk():
                    sent(length)
                    return data[start:start + length]
                return chunk
            file = path
            assert file is not None, "a blob is uploaded from bytes or from a file"
            return lambda: FileSlice(file, start, length, sent, hasher)

        octet = {"Content-Type": "application/octet-stream"}
        chunk = max(self.chunk_size, self.chunk_min)
        if data is not None and offset == 0 and size <= chunk:
            final = body(0, size)
        else:
            while offset < size:
                length = min(chunk, size - offset)
                headers = dict(octet, **{"Content-Range": f"{offset}-{offset + length - 1}",
                                         "Content-Length": str(length)})
                resp = self.transport.request("PATCH", session, body=body(offset, length), headers=headers,
                                     ok=(202, 204), retry=False)
                resp.close()
                location = resp.headers.get("Location")
                if location:
                    session = self.transport.check_url(urllib.parse.urljoin(session, location))
                offset += length
            final = b""
        if hasher is not None:
            actual = hasher.digest()
            if digest is None:
                digest = actual
            elif actual != digest:
                self.cancel_upload(session)
                raise IntegrityError(f"{path} (read while uploading it to {self.host}; the upload was not "
                                     "committed: the file is not what its digest says)", digest, actual)
        assert digest is not None, "bytes are pushed with their digest; a file without one was hashed as it went"
        sep = "&" if urllib.parse.urlsplit(session).query else "?"
        url = f"{session}{sep}{urllib.parse.urlencode({'digest': digest})}"
        length = size if final != b"" else 0
        resp = self.transport.request("PUT", url, body=final, ok=(201,), retry=False,
                             headers=dict(octet, **{"Content-Length": str(length)}))
        resp.close()
        answered = resp.headers.get("Docker-Content-Digest")
        if answered and answered != digest:
            raise IntegrityError(f"blob uploaded to {self.host} (registry's answer)", digest, answered)
        return session, digest

    def get_blob(self, repo: str, digest: str, dest_path: str | os.PathLike[str], *,
                 size: int | None = None, on_bytes: Callable[[int], None] | None = None) -> Path:
        """Download a blob into ``dest_path`` atomically (temp file in the same directory,
        renamed once verified); returns the path.

        At most ``size`` bytes are read when it is given (a longer or shorter body is refused);
        the sha256 must be ``digest`` (:class:`IntegrityError`). Nothing is left at
        ``dest_path`` or beside it on failure.
        """
        dest = Path(dest_path)
        tmp = dest.parent / f".{dest.name}.part-{secrets.token_hex(4)}"
        try:
            with open(tmp, "wb") as f:
                self.read_blob(repo, digest, f, size=size, on_bytes=on_bytes)
            commit(tmp, dest, durable=False)  # a layout blob: verified by digest when read
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return dest

    def read_blob(self, repo: str, digest: str, out, *, size: int | None = None,
                  on_bytes: Callable[[int], None] | None = None) -> int:
        """Stream a blob into the binary file object ``out``, verifying size and digest as in
        :meth:`get_blob` (the caller discards ``out`` on error); returns the size.

        A body that stops short (a dropped connection, a read timeout) is resumed with
        ``Range: bytes=<received>-`` (RFC 9110 section 14.2; distribution-spec "pulling blobs"
        allows range requests): the bytes already hashed and written stay, the ``206`` answer's
        ``Content-Range`` must start there, and the hash goes on from where it stood, so each
        byte is still read and hashed once. A registry that answers the range with the whole
        blob (``200``) has it written again from the start (``out`` rewound, when it can be).
        At most ``retries`` resumptions, with the transport's backoff; the size and digest are
        checked at the end, over the whole blob."""
        _check_digest(digest)
        what = f"blob {self.host}/{repo}@{digest}"
        sink = Hasher(out)  # each piece hashed and written as it arrives, before the next read
        got, resumes = 0, 0
        last: Exception | None = None
        try:
            while True:
                headers = {"Accept-Encoding": "identity"}
                if got:
                    headers["Range"] = f"bytes={got}-"
                resp = self.transport.request("GET", f"{repo}/blobs/{digest}", stream=True, follow=True,
                                              headers=headers, ok=(200, 206) if got else (200,))
                try:
                    if got and resp.status_code == 200:
                        sink = self._restart(sink, out, what)
                        got = 0
                    elif got and not resp.headers.get("Content-Range", "").startswith(f"bytes {got}-"):
                        raise FetchError(f"GET {what}: asked for bytes {got}- and the answer is "
                                         f"{resp.headers.get('Content-Range') or 'without a Content-Range'}")
                    declared = resp.headers.get("Content-Length")
                    if size is not None and declared and declared.isdigit() and got + int(declared) != size:
                        raise IntegrityError(what + " (size)", f"{size} bytes", f"{got + int(declared)} bytes")
                    for chunk in _body(resp, self.transport.timeout):
                        got += len(chunk)
                        if size is not None and got > size:
                            raise IntegrityError(what + " (size)", f"{size} bytes", f"more than {size} bytes")
                        sink.write(chunk)
                        self.stats.bytes_received += len(chunk)
                        if on_bytes:
                            on_bytes(len(chunk))
                    if size is None or got >= size:
                        break
                    last = FetchError(f"GET {what}: the body ended after {got} of {size} bytes")
                except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                    last = FetchError(f"GET {what}: {type(exc).__name__}: {_short(exc) or 'connection dropped'} "
                                      f"after {got} bytes")
                finally:
                    resp.close()
                resumes += 1
                if resumes > self.retries:
                    raise FetchError(f"{last} (resumed {resumes - 1} time{'s' if resumes != 2 else ''})")
                log.info("%s; resuming at byte %d", last, got)
                self.transport.sleep(self.transport.delay(resumes, None))
            actual = str(sink.digest())
        except httpx.HTTPError as exc:
            raise FetchError(f"GET {what}: {type(exc).__name__}: {_short(exc) or 'connection dropped'}") from None
        except OSError as exc:
            raise StorageError(f"writing {what}: {exc.strerror or exc}") from None
        finally:
            sink.close()
        if size is not None and got != size:
            raise IntegrityError(what + " (size)", f"{size} bytes", f"{got} bytes")
        if actual != digest:
            raise IntegrityError(what, digest, actual)
        return got

    def read_blob_range(self, repo: str, digest: str, out, *, start: int = 0, length: int | None = None,
                        on_bytes: Callable[[int], None] | None = None) -> int:
        """Stream bytes ``[start, start + length)`` of a blob (``length`` None: to its end) into
        ``out`` with ``Range: bytes=...`` (RFC 9110 section 14), **unverified**: the caller hashes
        the whole blob (a resumed download) or reads only a prefix (a GGUF header). An answer of
        200 (the registry ignores ``Range``) has its first ``start`` bytes skipped; never more
        than ``length`` bytes are written. Returns the bytes written."""
        _check_digest(digest)
        end = "" if length is None else str(start + length - 1)
        headers = {"Accept-Encoding": "identity"} if start == 0 and length is None else \
            {"Accept-Encoding": "identity", "Range": f"bytes={start}-{end}"}
        resp = self.transport.request("GET", f"{repo}/blobs/{digest}", stream=True, follow=True, ok=(200, 206),
                                      headers=headers)
        skip = start if resp.status_code == 200 else 0
        if resp.status_code == 206 and not resp.headers.get("Content-Range", "").startswith(f"bytes {start}-"):
            resp.close()
            raise FetchError(f"blob {self.host}/{repo}@{digest}: asked from byte {start}, got "
                             f"{resp.headers.get('Content-Range')!r}")
        got = 0
        try:
            for chunk in _body(resp, self.transport.timeout):
                self.stats.bytes_received += len(chunk)
                if skip:
                    cut = min(skip, len(chunk))
                    chunk, skip = chunk[cut:], skip - cut
                if length is not None:
                    chunk = chunk[:length - got]
                out.write(chunk)
                got += len(chunk)
                if on_bytes:
                    on_bytes(len(chunk))
                if length is not None and got >= length:
                    break
        except httpx.HTTPError as exc:
            raise FetchError(f"GET blob {self.host}/{repo}@{digest}: {type(exc).__name__}: "
                             f"{_short(exc) or 'connection dropped'}") from None
        finally:
            resp.close()
        return got

    @staticmethod
    def _restart(sink: Hasher, out, what: str) -> Hasher:
        """A registry answered a range request with the whole blob: rewind ``out`` and hash
        from the start (:class:`FetchError` when ``out`` cannot be rewound)."""
        sink.digest()  # drain what was queued
        try:
            out.seek(0)
            out.truncate()
        except (AttributeError, OSError, ValueError):
            raise FetchError(f"GET {what}: the registry ignored the range request and the download "
                             "cannot start over here") from None
        return Hasher(out)

    def _read_limited(self, resp, limit: int, what: str) -> bytes:
        buf = bytearray()
        try:
            for chunk in resp.iter_bytes():
                buf += chunk
                if len(buf) > limit:
                    raise FetchError(f"{self.host}: {what} is larger than {limit} bytes; refusing it")
        except httpx.HTTPError as exc:
            raise FetchError(f"GET {what} from {self.host}: {type(exc).__name__}: "
                             f"{_short(exc) or 'connection dropped'}") from None
        self.stats.bytes_received += len(buf)
        return bytes(buf)

    # -- tags --------------------------------------------------------------------------
    def list_tags(self, repo: str) -> list[str]:
        """``GET /v2/<repo>/tags/list``, following ``Link`` pagination; ``[]`` for an unknown repo."""
        import json

        url: str | None = f"{repo}/tags/list?n=1000"
        tags: list[str] = []
        for _ in range(1000):
            if url is None:
                break
            resp = self.transport.request("GET", url, stream=True, missing_ok=True)
            if resp is None:
                return tags
            try:
                body = self._read_limited(resp, MAX_MANIFEST_BYTES, f"tag list of {repo}")
            finally:
                resp.close()
            try:
                tags += [t for t in (json.loads(body).get("tags") or []) if isinstance(t, str)]
            except (ValueError, AttributeError):
                raise FetchError(f"{self.host}: tag list of {repo} is not JSON") from None
            m = re.search(r"<([^>]+)>\s*;\s*rel=\"?next\"?", resp.headers.get("Link", ""))
            url = urllib.parse.urljoin(self.transport.url(""), m.group(1)) if m else None
        return tags


def upload_offset(range_header: str) -> int:
    """The offset to resume an upload session at, from its status answer's ``Range`` header.

    distribution-spec v1.1 ("pushing a blob in chunks"): ``Range: 0-<end>`` is inclusive, the
    last byte received being ``end``, so the next chunk starts at ``end + 1``. A session that
    holds no byte has no last byte: distribution (``registry/handlers/blobupload.go``: the end
    is ``size - 1`` but never below 0) answers ``0-0`` for it, which is also what one byte
    received would read as. ``0-0`` is taken as offset 0: a registry that really holds one byte
    then answers the ``PATCH`` from 0 with ``416 Range Not Satisfiable`` and the upload starts
    over in a new session, whereas resuming at 1 would silently drop the first byte of the blob
    (the registry then refuses the digest). A missing or malformed header is offset 0 too."""
    m = re.fullmatch(r"\s*(?:bytes=)?0-(\d+)\s*", range_header or "")
    if m is None:
        return 0
    end = int(m.group(1))
    return end + 1 if end > 0 else 0


__all__ = ["RegistryClient", "TransferStats", "MountAnswer", "upload_offset", "MANIFEST_MEDIA_TYPES", "MAX_MANIFEST_BYTES", "Keychain"]
