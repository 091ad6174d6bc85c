"""lemonpack: reproducible, verifiable, runnable out-of-tree inference engines.

Rooms, from the top (each imports only rooms below it; docs/architecture.md, "Rooms", says
what each holds and may import): ``cli`` (the command line: parsing and printing), ``kube``
(Kubernetes objects and systemd units), ``server`` (``lemonpack serve``: the HTTP front and
the proxy), ``catalogue`` (community recipes and extensions: the signed index, search, the
site), ``release`` (release images from the release lock), ``builder`` (builds, installs,
loads, publishes), ``runtime`` (engines and models on this machine, in seven sub-rooms),
``signing`` (cosign-format keys and signatures), ``registry`` (OCI registries: transport, auth,
operations, publish and pull), ``extensions`` (Gufo extensions, seed 002), ``examples`` (the
shipped example), ``nix`` (the Nix emitter), ``fetch`` (verified downloads, mirrors, safe
archives), ``oci`` (image references, deterministic layers, OCI layouts), ``contract`` (the
recipe contract, major 1). Below them the primitives, one module each: errors, atomic files,
paths, digests, canonical JSON, strict JSON and schema checks ...
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
