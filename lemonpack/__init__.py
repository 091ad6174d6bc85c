"""lemonpack: reproducible, verifiable, runnable out-of-tree inference engines.

Rooms (see DESIGN.md): ``contract`` (recipe contract major 1), ``oci`` (deterministic
OCI layouts), ``nix`` (Nix emitter), ``fetch`` (verified downloads and safe archives),
``build`` (the build pipeline), ``runtime`` (discovery, supervisor, probes).
"""

from lemonpack.errors import LemonpackError

__all__ = ["LemonpackError", "__version__"]
__version__ = "0.1.0"
