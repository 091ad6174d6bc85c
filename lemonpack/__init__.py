"""lemonpack: reproducible, verifiable, runnable out-of-tree inference engines.

Rooms (see DESIGN.md): ``contract`` (recipe contract major 1), ``oci`` (deterministic
OCI layouts), ``nix`` (Nix emitter), ``fetch`` (verified downloads and safe archives),
``build`` (the build pipeline), ``runtime`` (discovery, supervisor, probes).
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lemonpack.errors import LemonpackError

__all__ = ["LemonpackError", "__version__"]
__version__ = "0.1.0"


def __getattr__(name: str):
    """``lemonpack.LemonpackError``, imported on first use (``lemonpack --version`` and
    ``--help`` need no error types: docs/architecture.md, "Start-up")."""
    if name == "LemonpackError":
        from lemonpack.errors import LemonpackError

        return LemonpackError
    raise AttributeError(f"module 'lemonpack' has no attribute {name!r}")
