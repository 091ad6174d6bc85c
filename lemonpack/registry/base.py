"""Base images named by ``--base`` for ``build``, ``publish RECIPE.json`` and ``release``.

:func:`open_base_ref` opens ``oci:DIR[:TAG]`` in place and pulls ``HOST/REPO@sha256:<hex>``
(every blob verified, :func:`lemonpack.registry.transfer.pull_layout`) into a temporary
layout first; the builder then reads either as a :class:`lemonpack.oci.base.BaseSource`.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import overload

from lemonpack.errors import RegistryError
from lemonpack.oci.base import BaseSource, open_base


@overload
def open_base_ref(spec: str, stack: contextlib.ExitStack, *, insecure: bool = False,
                  registry_config: Path | None = None) -> BaseSource: ...


@overload
def open_base_ref(spec: None, stack: contextlib.ExitStack, *, insecure: bool = False,
                  registry_config: Path | None = None) -> None: ...


def open_base_ref(spec: str | None, stack: contextlib.ExitStack, *, insecure: bool = False,
                  registry_config: Path | None = None) -> BaseSource | None:
    """The :class:`~lemonpack.oci.base.BaseSource` named by ``spec`` (None when None).
    ``oci:DIR[:TAG]`` is read in place; ``HOST/REPO@sha256:<hex>`` is pulled into a
    temporary layout that ``stack`` removes when it closes. Raises :class:`RegistryError` (exit 1)
    naming the base: a tag without a digest, a malformed reference, not a layout; the
    registry client's errors (exit 3/4)."""
    if spec is None:
        return None
    if spec.startswith("oci:"):
        return open_base(spec)
    from lemonpack.oci.reference import InvalidReferenceError
    from lemonpack.registry import RegistryClient
    from lemonpack.oci.reference import parse_registry_reference
    from lemonpack.registry.transfer import pull_layout

    try:
        ref = parse_registry_reference(spec)
    except InvalidReferenceError as exc:
        raise RegistryError(f"base {spec}: not oci:DIR[:TAG] (a local OCI image layout) or HOST/REPO@sha256:<hex> "
                            f"(a registry image pinned by digest): {exc}") from None
    if ref.digest is None:
        raise RegistryError(f"base {spec}: not pinned: a tag can move; give HOST/REPO@sha256:<hex> "
                            "(lemonpack pin, skopeo inspect, or the digest `lemonpack publish` printed)")
    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lemonpack-base-")))
    with RegistryClient(ref.host, insecure=insecure, registry_config=registry_config) as client:
        pull_layout(ref, tmp / "base", client, tag="base")
    return open_base(spec, layout=tmp / "base", tag="base", reference=f"{ref.host}/{ref.repository}@{ref.digest}")


__all__ = ["open_base_ref"]
