"""``lemonpack load``: an image of a built OCI layout into podman or Docker, digest kept.

The tagged image manifest of the layout and every blob it names are re-hashed first
(nothing unverified reaches the engine), then packed as an ``oci-archive`` tarball
(image-layout.md: ``oci-layout``, ``index.json`` naming only that manifest, ``blobs/``) and
streamed from disk to the engine's image-load endpoint through its Python SDK:

- podman: podman-py (``POST /libpod/images/load``) against a ``podman system service``
  socket; without ``url`` the service is started for the call on a private socket and
  stopped afterwards (it inherits the environment, so ``CONTAINERS_CONF`` is honoured).
- docker: the Docker SDK (``POST /images/load``) against ``url`` or ``$DOCKER_HOST``; any
  Docker-API socket, including podman's compatible API.

The engine must then report the image ID equal to the layout's config digest (an engine
that converted the image would change it); the image is tagged ``NAME:TAG``. The manifest
is loaded unchanged, so ``NAME@<manifest digest>`` runs it by digest.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from lemonpack.digest import Digest
from lemonpack.errors import (ConfigError, InputError, IntegrityError, LayoutError, LemonpackError, ToolError)
from lemonpack.files import open_regular
from lemonpack.oci.descriptor import Descriptor
from lemonpack.oci.mediatypes import (ANNOTATION_REF_NAME, IMAGE_INDEX_TYPES, IMAGE_MANIFEST_TYPES,
                                      MEDIA_TYPE_IMAGE_INDEX, OCI_LAYOUT_VERSION)
from lemonpack.canonical import canonical_json
from lemonpack.oci.layout_reader import blob_path, read_json_blob, read_layout, verify_blob
from lemonpack.oci.reference import split_ref_name


ENGINES = ("podman", "docker")


def image_blobs(layout: Path, tag: str) -> tuple[dict, list[dict]]:
    """The image ``tag`` of ``layout``: ``(manifest_descriptor, [descriptors of manifest,
    config and layers])``, each blob checked through the layout reader
    (:func:`~lemonpack.oci.layout_reader.read_json_blob` for the manifest,
    :func:`~lemonpack.oci.layout_reader.verify_blob` for the config and layers: a regular
    file of the descriptor's size and digest). Raises LayoutError for an unknown tag (naming
    the tags there), a tag that is not an image manifest, or a blob that is missing, a
    symlink, or not what its descriptor says (:class:`~lemonpack.errors.LayoutBlobError`,
    also an IntegrityError: exit 3)."""
    tags = read_layout(layout)
    if tag not in tags:
        raise LayoutError(f"{layout}: no tag {tag!r} (tags: {', '.join(sorted(tags)) or 'none'})")
    root = tags[tag]
    if root.media_type in IMAGE_INDEX_TYPES:
        index = read_json_blob(layout, root, f"{layout}:{tag}: image index")
        children = {m.get("digest") for m in index.get("manifests") or [] if isinstance(m, dict)}
        per_platform = sorted(t for t, d in tags.items() if d.digest in children)
        raise LayoutError(f"{layout}:{tag} is an image index; load one of its per-platform tags: "
                         + (", ".join(per_platform) or "none is tagged in this layout"))
    if root.media_type not in IMAGE_MANIFEST_TYPES:
        raise LayoutError(f"{layout}:{tag} is a {root.media_type}, not an image manifest")
    manifest = read_json_blob(layout, root, f"{layout}:{tag}: manifest")
    try:
        descs = [root.to_json(), manifest["config"], *manifest.get("layers", [])]
    except (KeyError, TypeError, AttributeError):
        raise LayoutError(f"{layout}: manifest {root.digest} names no config and layers") from None
    for d in descs[1:]:
        verify_blob(layout, Descriptor.from_json(d), f"{layout}:{tag}: blob")
    return descs[0], descs


def write_oci_archive(layout: Path, tag: str, dest: Path, ref_name: str) -> tuple[str, str]:
    """Write ``dest``: an oci-archive tar of image ``tag`` of ``layout`` alone, its index
    entry annotated ``org.opencontainers.image.ref.name = ref_name``. Returns
    ``(manifest_digest, config_digest)``. Blobs are verified (:func:`image_blobs`)."""
    desc, descs = image_blobs(layout, tag)
    entry = {k: v for k, v in desc.items() if k != "annotations"}
    entry["annotations"] = {ANNOTATION_REF_NAME: ref_name}
    index = canonical_json({"schemaVersion": 2, "mediaType": MEDIA_TYPE_IMAGE_INDEX, "manifests": [entry]})
    layout_header = canonical_json({"imageLayoutVersion": OCI_LAYOUT_VERSION})
    import io

    with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in (("oci-layout", layout_header), ("index.json", index)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tf.addfile(info, io.BytesIO(data))
        seen = set()
        for d in descs:
            if d["digest"] in seen:
                continue
            seen.add(d["digest"])
            blob = Descriptor.from_json(d)
            path = blob_path(layout, blob)
            info = tf.gettarinfo(str(path), f"blobs/sha256/{blob.hex}")
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with open_regular(path) as f:
                tf.addfile(info, f)
    return desc["digest"], descs[1]["digest"]


@contextmanager
def podman_service(timeout: float = 30.0) -> Iterator[str]:
    """Start ``podman system service --time=0`` on a private unix socket; yield its URL
    (``unix:///...``); stop it (SIGTERM, then SIGKILL) on exit. Raises ToolError when
    podman is missing or the socket does not answer within ``timeout`` seconds."""
    podman = shutil.which("podman")
    if not podman:
        raise ToolError("podman is not installed (needed for --engine podman)")
    tmp = tempfile.mkdtemp(prefix="lemonpack-podman-")
    sock = os.path.join(tmp, "podman.sock")
    log = open(os.path.join(tmp, "service.log"), "w+b")
    proc = subprocess.Popen([podman, "system", "service", "--time=0", f"unix://{sock}"],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        import podman as podman_sdk

        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise ToolError(f"podman system service exited with {proc.returncode}: "
                                f"{log.read().decode(errors='replace')[-1000:]}")
            if os.path.exists(sock):
                try:
                    with podman_sdk.PodmanClient(base_url=f"unix://{sock}") as c:
                        if c.ping():
                            break
                except Exception:  # noqa: BLE001  (not answering yet)
                    pass
            if time.monotonic() > deadline:
                raise ToolError(f"podman system service did not answer on {sock} within {timeout:.0f} s")
            time.sleep(0.1)
        yield f"unix://{sock}"
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _image_digest(image_id: str) -> str:
    """An engine's image ID as digest text (podman answers the bare hex, Docker
    ``sha256:<hex>``); anything else as given, for the mismatch message."""
    try:
        return str(Digest.parse(image_id, bare=True))
    except ValueError:
        return image_id


def _load_podman(url: str, archive: Path) -> tuple[Any, str]:
    import podman as podman_sdk

    with podman_sdk.PodmanClient(base_url=url) as client:
        with open(archive, "rb") as f:  # streamed from disk (podman-py's load() reads it whole)
            resp = client.api.post("/images/load", data=f, headers={"Content-type": "application/x-tar"})
        resp.raise_for_status()
        names = resp.json().get("Names") or []
        if not names:
            raise ToolError("podman loaded no image from the archive")
        image = client.images.get(names[0])
        return image, str(image.id)


def _load_docker(url: str, archive: Path) -> tuple[Any, str]:
    import docker

    client = docker.DockerClient(base_url=url)
    try:
        with open(archive, "rb") as f:
            images = client.images.load(f)
        if not images:
            raise ToolError("the Docker engine loaded no image from the archive")
        return images[0], str(images[0].id)
    finally:
        client.close()


def load_image(layout: str | os.PathLike[str], tag: str, *, engine: str = "podman", url: str | None = None,
               name: str | None = None) -> dict:
    """Load image ``tag`` of the OCI layout ``layout`` into ``engine`` (see the module doc).

    ``url``: the engine's API socket (``unix:///...`` or ``tcp://``); podman default: a
    service started for the call; docker default: ``$DOCKER_HOST``. ``tag``: the layout tag
    (``ref.name``), a plain tag (``v1``) or a full name as skopeo and podman write it
    (``docker.io/x/a:1``: the image is named ``docker.io/x/a:1``;
    :func:`lemonpack.oci.reference.split_ref_name`). ``name``: the repository to tag it as
    (default: the full name's, else ``localhost/lemonpack/<layout dir name>``).
    Returns ``{"engine", "name", "tag", "image_id", "config_digest", "manifest_digest",
    "reference"}`` where ``tag`` is the image's tag and ``reference`` is
    ``NAME@<manifest digest>``. Raises
    IntegrityError when a blob or the engine's image ID does not match the layout,
    ToolError when the engine fails, LemonpackError for a bad layout / tag / engine.
    """
    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r} (choices: {', '.join(ENGINES)})")
    root = Path(layout)
    layout_tag = tag
    full_name, tag = split_ref_name(layout_tag)
    repo = name or full_name or f"localhost/lemonpack/{root.resolve().name.lower()}"
    if engine == "docker" and not url:
        url = os.environ.get("DOCKER_HOST")
        if not url:
            raise ConfigError("--engine docker needs --url or $DOCKER_HOST (a Docker-API socket)")
    with tempfile.TemporaryDirectory(prefix="lemonpack-load-") as tmp:
        archive = Path(tmp) / "image.tar"
        manifest_digest, config_digest = write_oci_archive(root, layout_tag, archive, f"{repo}:{tag}")
        try:
            if not url:  # podman's own service: docker without one was refused above
                with podman_service() as service_url:
                    image, image_id = _load_podman(service_url, archive)
                    image.tag(repo, tag)
            elif engine == "podman":
                image, image_id = _load_podman(url, archive)
                image.tag(repo, tag)
            else:
                image, image_id = _load_docker(url, archive)
                image.tag(repo, tag)
        except (LemonpackError, OSError):
            raise
        except Exception as exc:  # noqa: BLE001  (the SDKs' own API / connection errors)
            raise ToolError(f"{engine}: loading {root}:{layout_tag} failed: {exc}") from None
    loaded = _image_digest(image_id)
    if loaded != config_digest:
        raise IntegrityError(f"image ID {engine} reports for {root}:{layout_tag}", config_digest, loaded)
    return {"engine": engine, "name": repo, "tag": tag, "image_id": loaded,
            "config_digest": config_digest, "manifest_digest": manifest_digest,
            "reference": f"{repo}@{manifest_digest}"}
