"""lemonpack.oci: image references, deterministic layers, OCI image layouts (the standard library,
``zlib-ng`` for gzip layers and ``zstandard`` for zstd layers).

Follows OCI image-spec v1.1 (image-layout.md, manifest.md, image-index.md, descriptor.md,
layer.md, config.md, annotations.md) and the distribution/reference grammar.

- :mod:`~lemonpack.oci.mediatypes`: every media type (OCI, Docker, cosign, lemonpack), the empty descriptor, annotation keys (canonical JSON is :mod:`lemonpack.canonical`).
- :mod:`~lemonpack.oci.reference`: ``parse_reference``, ``check_pinned``.
- :mod:`~lemonpack.oci.cmdline`: ``read_container_argv`` -> ``ContainerInvocation`` (one reader of container CLIs).
- :mod:`~lemonpack.oci.policy`: digest pinning and shell strings in recipe argvs.
- :mod:`~lemonpack.oci.layer`: ``write_dir_layer``, ``write_files_layer`` -> ``LayerInfo``.
- :mod:`~lemonpack.oci.layout`: ``LayoutWriter``; :mod:`~lemonpack.oci.layout_reader`: ``read_layout``,
  ``verify_layout``; :mod:`~lemonpack.oci.descriptor`: ``Descriptor``.
- :mod:`~lemonpack.oci.base`: base images read from a layout; :mod:`~lemonpack.oci.layerscan`: one read
  of a base layer's tar.
- :mod:`~lemonpack.oci.platform`: this machine's OCI platform names.
"""

from typing import TYPE_CHECKING

from lemonpack.oci.mediatypes import *  # noqa: F401,F403
from lemonpack.oci.mediatypes import __all__ as _mediatypes_all
from lemonpack.oci.descriptor import Descriptor
from lemonpack.oci.reference import ImageReference, InvalidReferenceError, check_pinned, parse_reference

if TYPE_CHECKING:
    from lemonpack.oci.cmdline import ContainerInvocation, UnreadableCommandLine, read_container_argv
    from lemonpack.oci.layer import DEFAULT_COMPRESSLEVEL, LayerInfo, write_dir_layer, write_files_layer
    from lemonpack.oci.layout import LayoutWriter, rfc3339
    from lemonpack.oci.layout_reader import read_layout, verify_layout

#: Names imported from their module when first asked for (PEP 562): a command that only parses a
#: reference (``models pull REF@sha256:...`` answered from the store) does not load the layer
#: writer, the layout writer and the container command-line reader (~10 ms of start-up).
_LAZY = {
    "DEFAULT_COMPRESSLEVEL": "layer", "LayerInfo": "layer", "write_dir_layer": "layer", "write_files_layer": "layer",
    "LayoutWriter": "layout", "rfc3339": "layout", "read_layout": "layout_reader", "verify_layout": "layout_reader",
    "ContainerInvocation": "cmdline", "UnreadableCommandLine": "cmdline", "read_container_argv": "cmdline",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'lemonpack.oci' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"lemonpack.oci.{module}"), name)


__all__ = [
    *_mediatypes_all, "DEFAULT_COMPRESSLEVEL", "LayerInfo", "write_dir_layer", "write_files_layer",
    "Descriptor", "LayoutWriter", "read_layout", "rfc3339", "verify_layout",
    "ImageReference", "InvalidReferenceError", "check_pinned", "parse_reference",
    "ContainerInvocation", "UnreadableCommandLine", "read_container_argv",
]
