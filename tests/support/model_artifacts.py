"""Model artifacts in other tools' formats, pushed to a test registry byte by byte as those tools
write them (none of those tools runs here), for ``models pull`` to read.

- :func:`push_docker_v01`: Docker Model Runner, config ``application/vnd.docker.ai.model.config.v0.1+json``
  (docker/model-runner ``pkg/distribution/types/config.go``: ``ConfigFile{config, descriptor,
  rootfs}``), GGUF layers ``application/vnd.docker.ai.gguf.v3`` and a license
  ``application/vnd.docker.ai.license``, the manifest as ``internal/partial/partial.go``'s
  ``ManifestForLayers`` makes it (OCI manifest, no ``artifactType``). ``annotated=False`` leaves
  out the ``org.cncf.model.filepath`` annotations, as artifacts pushed before Docker added them.
  With ``v02=True``: Docker's v0.2 (``builder/from_directory.go``: config
  ``application/vnd.docker.ai.model.config.v0.2+json``, one layer per file of a directory, named
  by its relative path, other files ``application/vnd.docker.ai.model.file``: ``extra``).
- :func:`push_kitops`: a KitOps ModelKit (kitops-ml/kitops ``pkg/artifact/spec.md``;
  ``pkg/lib/constants/mediaType.go``: config ``application/vnd.kitops.modelkit.config.v1+json``,
  the Kitfile as JSON; ``pkg/lib/kitfile/layer.go``: one tar+gzip layer per Kitfile entry, the
  files under their relative paths, ``application/vnd.kitops.modelkit.model.v1.tar+gzip``); the
  manifest carries ``ml.kitops.modelkit.cli-version`` as ``local-storage.go``'s
  ``createManifest`` does.
- :func:`push_ramalama`: what RamaLama's ``podman artifact add --type
  application/vnd.cncf.model.manifest.v1+json --annotation org.cncf.model.filepath=...`` makes
  (containers/ramalama ``ramalama/transports/oci/oci.py``): the ModelPack artifact type, podman's
  empty config, the file as an ``application/octet-stream`` layer titled by its name.
- :func:`push_ramalama_image`: RamaLama's model image (containers/ramalama ``docs/ramalama-oci.5.md``;
  ``ramalama/transports/oci/oci.py`` ``build_image``/``_gguf_containerfile``: ``FROM scratch``,
  ``LABEL org.containers.type=ai.image.model.raw``, ``COPY --from=build /data/ /`` of
  ``/data/models/<name>`` and the symlink ``/data/models/model.file -> <name>``), as buildah
  writes it: an OCI image config with the label and one tar+gzip layer.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

from lemonpack.digest import Digest, file_digest
from lemonpack.registry import RegistryClient

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _blob(client: RegistryClient, repo: str, data: bytes) -> dict:
    d = str(Digest.of_bytes(data))
    client.push_blob(repo, data, d, len(data))
    return {"digest": d, "size": len(data)}


def _file(client: RegistryClient, repo: str, path: Path) -> dict:
    d, size = file_digest(path)
    client.push_blob(repo, path, str(d), size)
    return {"digest": str(d), "size": size}


def _manifest(client: RegistryClient, repo: str, tag: str, doc: dict) -> str:
    return client.put_manifest(repo, tag, json.dumps(doc, separators=(",", ":")).encode(), OCI_MANIFEST)


def push_docker_v01(host: str, repo: str, tag: str, ggufs: list[Path], *, license_text: bytes | None = b"MIT",
                    annotated: bool = True, v02: bool = False, extra: dict[str, bytes] | None = None) -> str:
    """Docker Model Runner v0.1 (or v0.2) (module docstring); returns the manifest digest."""
    with RegistryClient(host) as client:
        layers = []
        for rel, data in (extra or {}).items():
            layers.append({"mediaType": "application/vnd.docker.ai.model.file", **_blob(client, repo, data),
                           "annotations": {"org.cncf.model.filepath": rel}})
        for p in ggufs:
            desc = {"mediaType": "application/vnd.docker.ai.gguf.v3", **_file(client, repo, p)}
            if annotated:
                desc["annotations"] = {"org.cncf.model.filepath": p.name, "org.cncf.model.file.mediatype.untested": "false"}
            layers.append(desc)
        if license_text is not None:
            layers.append({"mediaType": "application/vnd.docker.ai.license", **_blob(client, repo, license_text)})
        config = json.dumps({"config": {"format": "gguf", "quantization": "F32", "parameters": "192",
                                        "architecture": "llama", "size": "1.12 KiB", "context_size": 2048},
                             "descriptor": {"created": "2025-01-01T00:00:00Z"},
                             "rootfs": {"type": "layers", "diff_ids": [x["digest"] for x in layers]}}).encode()
        cfg = {"mediaType": f"application/vnd.docker.ai.model.config.{'v0.2' if v02 else 'v0.1'}+json",
               **_blob(client, repo, config)}
        return _manifest(client, repo, tag, {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": cfg,
                                             "layers": layers})


def _tar_gz(files: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as t:
        dirs = sorted({"/".join(n.split("/")[:i]) for n in files for i in range(1, n.count("/") + 1)})
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            t.addfile(info)
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            t.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
            t.addfile(info)
    return gzip.compress(raw.getvalue(), mtime=0)


def push_kitops(host: str, repo: str, tag: str, model: Path, *, docs: dict[str, bytes] | None = None) -> str:
    """A KitOps ModelKit (module docstring) holding ``model`` at ``models/<name>`` and ``docs``
    (name -> bytes) in a docs layer; returns the manifest digest."""
    with RegistryClient(host) as client:
        path = f"models/{model.name}"
        model_layer = _tar_gz({path: model.read_bytes()})
        layers = [{"mediaType": "application/vnd.kitops.modelkit.model.v1.tar+gzip",
                   **_blob(client, repo, model_layer)}]
        kitfile: dict = {"manifestVersion": "1.0.0", "package": {"name": "tiny-kit", "version": "1.0.0"},
                         "model": {"name": "tiny", "path": path, "format": "gguf",
                                   "digest": layers[0]["digest"]}}
        if docs:
            layers.append({"mediaType": "application/vnd.kitops.modelkit.docs.v1.tar+gzip",
                           **_blob(client, repo, _tar_gz(docs))})
            kitfile["docs"] = [{"path": n} for n in docs]
        cfg = {"mediaType": "application/vnd.kitops.modelkit.config.v1+json",
               **_blob(client, repo, json.dumps(kitfile).encode())}
        return _manifest(client, repo, tag, {"schemaVersion": 2, "config": cfg, "layers": layers,
                                             "annotations": {"ml.kitops.modelkit.cli-version": "1.7.0"}})


def push_ramalama(host: str, repo: str, tag: str, model: Path) -> str:
    """A RamaLama artifact as ``podman artifact add`` writes it (module docstring)."""
    with RegistryClient(host) as client:
        cfg = {"mediaType": "application/vnd.oci.empty.v1+json", **_blob(client, repo, b"{}")}
        layer = {"mediaType": "application/octet-stream", **_file(client, repo, model),
                 "annotations": {"org.opencontainers.image.title": model.name,
                                 "org.cncf.model.filepath": model.name,
                                 "org.cncf.model.file.mediatype.untested": "true"}}
        return _manifest(client, repo, tag, {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                                             "artifactType": "application/vnd.cncf.model.manifest.v1+json",
                                             "config": cfg, "layers": [layer]})


def push_ramalama_image(host: str, repo: str, tag: str, model: Path) -> str:
    """RamaLama's raw model image (module docstring); returns the manifest digest."""
    import hashlib

    with RegistryClient(host) as client:
        layer = _tar_gz({f"models/{model.name}": model.read_bytes()}, {"models/model.file": model.name})
        diff_id = "sha256:" + hashlib.sha256(gzip.decompress(layer)).hexdigest()
        layer_desc = {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **_blob(client, repo, layer)}
        config = json.dumps({"created": "2025-01-01T00:00:00Z", "architecture": "amd64", "os": "linux",
                             "config": {"Labels": {"org.containers.type": "ai.image.model.raw",
                                                   "io.buildah.version": "1.33.7"}},
                             "rootfs": {"type": "layers", "diff_ids": [diff_id]},
                             "history": [{"created_by": "/bin/sh -c #(nop) LABEL org.containers.type=ai.image.model.raw"}]
                             }).encode()
        cfg = {"mediaType": "application/vnd.oci.image.config.v1+json", **_blob(client, repo, config)}
        return _manifest(client, repo, tag, {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": cfg,
                                             "layers": [layer_desc]})


__all__ = ["push_docker_v01", "push_kitops", "push_ramalama", "push_ramalama_image"]
