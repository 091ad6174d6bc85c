"""A small OCI image layout written by lemonpack's own writer, and the three ways a blob of it
is tampered with (other bytes of the same size, another size, a symlink in its place): what
the tests of every layout blob reader use to show a tampered blob is refused."""

from __future__ import annotations

import json
import os
from pathlib import Path

from lemonpack.oci import MEDIA_TYPE_LAYER_TAR_GZIP, Descriptor, LayoutWriter, write_files_layer

#: The ways :func:`tamper` spoils a blob.
TAMPERINGS = ("bytes", "size", "symlink")
EXAMPLE_RECIPE = Path(__file__).resolve().parents[2] / "lemonpack" / "examples" / "hello-engine.json"


def small_image(out: Path, *, annotations: dict[str, str] | None = None, tag: str = "img") -> dict[str, Descriptor]:
    """Write an image layout at ``out`` with one tagged image manifest (``tag``, annotated with
    ``annotations``): layer 0 an artifact tree ``opt/lemonpack/hello-engine/``, layer 1 the
    example recipe at ``etc/lemonpack/recipes/hello-engine.json`` (the shape ``lemonpack
    build`` writes). Returns ``{"manifest", "config", "artifact", "recipe"}`` descriptors."""
    recipe = EXAMPLE_RECIPE.read_bytes()
    with LayoutWriter(out) as lw:
        artifact = lw.add_blob_file(MEDIA_TYPE_LAYER_TAR_GZIP, lambda f: write_files_layer(
            [("opt/lemonpack/hello-engine/hello-engine", b"#!/bin/sh\necho hi\n", 0o755)], f, mtime=0))
        recipe_layer = lw.add_blob_file(MEDIA_TYPE_LAYER_TAR_GZIP, lambda f: write_files_layer(
            [("etc/lemonpack/recipes/hello-engine.json", recipe, 0o644)], f, mtime=0))
        manifest = lw.add_image_manifest({"architecture": "amd64", "os": "linux"}, [artifact, recipe_layer],
                                         annotations, created=0)
        lw.set_tags({tag: manifest})
    doc = json.loads((out / "blobs" / "sha256" / manifest.hex).read_bytes())
    return {"manifest": manifest, "config": Descriptor.from_json(doc["config"]), "artifact": artifact,
            "recipe": recipe_layer}


def tamper(layout: Path, desc: Descriptor, how: str) -> None:
    """Spoil the blob ``desc`` of ``layout``: ``bytes`` (its first byte changed, same size),
    ``size`` (a byte appended), ``symlink`` (replaced by a symlink to an intact copy of itself,
    so only the link is wrong)."""
    path = layout / "blobs" / "sha256" / desc.hex
    data = path.read_bytes()
    path.chmod(0o644)
    if how == "bytes":
        path.write_bytes(bytes([data[0] ^ 0xFF]) + data[1:])
    elif how == "size":
        path.write_bytes(data + b"\0")
    elif how == "symlink":
        copy = layout / f"copy-{desc.hex}"
        copy.write_bytes(data)
        path.unlink()
        os.symlink(copy, path)
    else:
        raise ValueError(f"unknown tampering {how!r}")
