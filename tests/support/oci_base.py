"""Small synthetic base images for tests: OCI image layouts written with ``tarfile`` +
``gzip`` and hand-written JSON (not lemonpack's writer, so what lemonpack reads does not
depend on what it writes). :func:`make_base` is the one entry point; the real Debian base
is :mod:`support.debian_base`. (:func:`tagged_layout` is the exception: a layout lemonpack's own
writer made, for tests of what reads or merges into one.)"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

BASE_ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"]


def _tar(members: list[tuple[str, str, bytes]]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, kind, data in members:
            ti = tarfile.TarInfo(name)
            ti.mtime = 1_700_000_000
            if kind == "dir":
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(ti)
            elif kind == "symlink":
                ti.type, ti.linkname = tarfile.SYMTYPE, data.decode()
                tf.addfile(ti)
            else:
                ti.size, ti.mode = len(data), 0o755
                tf.addfile(ti, io.BytesIO(data))
    return raw.getvalue()


def put_blob(root: Path, data: bytes) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    (root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / "sha256" / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def make_base(root: Path, *, layers=None, arch="amd64", os_name="linux", index_archs=None,
              tag="base", user: str | None = None) -> dict:
    """An OCI layout at ``root`` with one image per arch (an index when ``index_archs``), its
    config's ``User`` ``user`` (None: none); returns ``{"manifests": {arch: digest}, "layers": [layer digests of the first arch]}``."""
    layers = layers if layers is not None else [
        [("bin", "dir", b""), ("bin/sh", "file", b"#!fake\n"), ("etc", "dir", b""), ("etc/os-release", "file", b"x\n")],
        [("usr", "dir", b""), ("usr/lib", "dir", b""), ("usr/lib/libfake.so", "file", b"\x7fELF fake")],
    ]
    out = {"manifests": {}, "layers": []}
    descs = []
    for a in index_archs or [arch]:
        lds, diffs = [], []
        for members in layers:
            tar = _tar(members)
            diffs.append("sha256:" + hashlib.sha256(tar).hexdigest())
            lds.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                        **put_blob(root, gzip.compress(tar, mtime=0))})
        config = {"architecture": a, "os": os_name, "config": {"Env": BASE_ENV, "Cmd": ["/bin/sh"],
                                                               **({"User": user} if user else {})},
                  "rootfs": {"type": "layers", "diff_ids": diffs},
                  "history": [{"created_by": f"layer {i}"} for i in range(len(lds))]}
        cdesc = {"mediaType": "application/vnd.oci.image.config.v1+json", **put_blob(root, json.dumps(config).encode())}
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": cdesc, "layers": lds}
        mdesc = {"mediaType": "application/vnd.oci.image.manifest.v1+json", **put_blob(root, json.dumps(manifest).encode()),
                 "platform": {"architecture": a, "os": os_name}}
        descs.append(mdesc)
        out["manifests"][a] = mdesc["digest"]
        if not out["layers"]:
            out["layers"] = [l["digest"] for l in lds]
    if index_archs:
        index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": descs}
        top = {"mediaType": "application/vnd.oci.image.index.v1+json", **put_blob(root, json.dumps(index).encode())}
    else:
        top = {k: v for k, v in descs[0].items() if k != "platform"}
    top["annotations"] = {"org.opencontainers.image.ref.name": tag}
    (root / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [top]}))
    return out


def busybox_base(root: Path, tag: str = "base") -> str:
    """A linux/amd64 base layout holding the host's static busybox (``/bin/busybox``, package
    busybox-static) and links to it for ``sh``, ``cp``, ``ln``, ``sleep``, ``sha256sum``, ``id``,
    ``ls``: what a runnable modelcar needs (KServe's sidecar runs ``sh``/``ln``/``sleep``,
    lemonpack's init container ``cp``). Returns ``oci:DIR:TAG``."""
    busybox = Path("/bin/busybox").read_bytes()
    tools = ("sh", "cp", "ln", "sleep", "sha256sum", "id", "ls")
    make_base(root, tag=tag, layers=[[("bin", "dir", b""), ("bin/busybox", "file", busybox),
                                      *((f"bin/{t}", "symlink", b"busybox") for t in tools)]])
    return f"oci:{root}:{tag}"


def tagged_layout(path: Path, tags: dict[str, bytes]) -> dict[str, str]:
    """A layout at ``path`` written by lemonpack's own ``LayoutWriter`` (for tests of what reads or adds
    to what lemonpack wrote), one tiny image per tag (the layer's content given); ``{tag: digest}``."""
    from lemonpack.oci.mediatypes import MEDIA_TYPE_LAYER_TAR
    from lemonpack.oci.layout import LayoutWriter

    out = {}
    with LayoutWriter(path) as lw:
        for tag, content in tags.items():
            layer = lw.add_blob_bytes(MEDIA_TYPE_LAYER_TAR, content)
            image = lw.add_image_manifest({"architecture": "amd64", "os": "linux"}, [layer], created=0)
            lw.set_tags({tag: image})
            out[tag] = image.digest
    return out
