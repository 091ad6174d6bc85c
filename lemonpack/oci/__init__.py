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

from lemonpack.oci.mediatypes import *  # noqa: F401,F403
from lemonpack.oci.mediatypes import __all__ as _mediatypes_all
from lemonpack.oci.layer import DEFAULT_COMPRESSLEVEL, LayerInfo, write_dir_layer, write_files_layer
from lemonpack.oci.descriptor import Descriptor
from lemonpack.oci.layout import LayoutWriter, rfc3339
from lemonpack.oci.layout_reader import read_layout, verify_layout
from lemonpack.oci.cmdline import ContainerInvocation, UnreadableCommandLine, read_container_argv
from lemonpack.oci.reference import ImageReference, InvalidReferenceError, check_pinned, parse_reference

__all__ = [
    *_mediatypes_all, "DEFAULT_COMPRESSLEVEL", "LayerInfo", "write_dir_layer", "write_files_layer",
    "Descriptor", "LayoutWriter", "read_layout", "rfc3339", "verify_layout",
    "ImageReference", "InvalidReferenceError", "check_pinned", "parse_reference",
    "ContainerInvocation", "UnreadableCommandLine", "read_container_argv",
]
