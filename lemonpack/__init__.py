"""lemonpack: reproducible, verifiable, runnable out-of-tree inference engines.

Rooms, from the top (each imports only rooms below it; docs/architecture.md, "Rooms", says
what each holds and may import): ``cli`` (the command line: parsing and printing), ``kube``
(Kubernetes objects and systemd units), ``server`` (``lemonpack serve``: the HTTP front and
the proxy), ``catalogue`` (community recipes and extensions: the signed index, search, the
site), ``release`` (release images from the release lock), ``builder`` (builds, installs,
loads, publishes), ``runtime`` (engines and models on this machine, in seven sub-rooms), ``trust``
(the containers-policy.json trust policy checked before an image or model is used),
``signing`` (cosign-format keys and signatures), ``registry`` (OCI registries: transport,
auth, operations, publish and pull), ``extensions`` (Gufo extensions, seed 002), ``examples`` (the
shipped example), ``nix`` (the Nix emitter), ``fetch`` (verified downloads, mirrors, safe
archives), ``oci`` (image references, deterministic layers, OCI layouts), ``contract`` (the
recipe contract, major 1). Below them the primitives, one module each: errors, atomic files,
paths, digests, canonical JSON, strict JSON and schema checks ...
"""

from typing import TYPE_CHECKING, Any

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


class _UnusedByHttpx:
    """A ``sys.meta_path`` finder that answers "not installed" for the optional packages httpx
    and httpcore import when they can but lemonpack never uses through them: httpcore's trio
    backend (``trio``, for code on a trio event loop: lemonpack's async code runs on asyncio),
    httpx's command-line client (``click``, ``pygments``, then ``rich``: typer has its own click)
    and httpcore's HTTP/2 (``h2``: no client of lemonpack asks for ``http2=True``; measured slower
    than HTTP/1.1 for blobs, docs/registries-and-signatures.md; ~12 ms of every registry command's
    start-up). Only an import made from
    httpx's or httpcore's own modules is refused; any other ``import trio`` works as usual.
    Measured here (bench/publish.py): ~9 MiB of peak RSS and ~0.1 s off every registry
    command. Both libraries catch the ImportError (httpx: ``from ._main import main``;
    httpcore: ``_synchronization``, ``_sync/__init__``'s ``from .http2 import ...``)."""

    HIDDEN = frozenset({"trio", "click", "pygments", "h2"})

    @classmethod
    def find_spec(cls, name: str, path: object = None, target: object = None) -> None:
        """None (let the next finder look) except for :attr:`HIDDEN` imported by httpx or
        httpcore: then ``ModuleNotFoundError``."""
        if name in cls.HIDDEN:
            import sys

            frame: Any = sys._getframe(1)
            while frame is not None:
                caller = frame.f_globals.get("__name__", "")
                if caller.startswith(("httpx.", "httpcore.")):
                    raise ModuleNotFoundError(f"No module named {name!r} (not used by lemonpack through {caller})",
                                              name=name)
                frame = frame.f_back
        return None


def _install_finder() -> None:
    import sys

    if not any(f is _UnusedByHttpx for f in sys.meta_path):
        sys.meta_path.insert(0, _UnusedByHttpx)


_install_finder()
