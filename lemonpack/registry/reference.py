"""Registry references: ``HOST[:PORT]/REPO[:TAG][@sha256:HEX]``.

The grammar is the distribution/reference one (:func:`lemonpack.oci.reference.parse_reference`);
a registry reference additionally needs an explicit registry host (no implicit ``docker.io``),
since lemonpack talks to the registry named, never to a default one.
"""

from __future__ import annotations

from dataclasses import dataclass

from lemonpack.oci.layout_reader import split_layout_arg  # noqa: F401  (re-exported: DIR[:TAG] arguments)
from lemonpack.oci.reference import InvalidReferenceError
from lemonpack.oci.reference import parse_reference as _parse_image_reference


@dataclass(frozen=True)
class Reference:
    """A registry reference: ``host`` (``host[:port]``), ``repository`` (path, lowercase),
    ``tag`` and ``digest`` (``sha256:<hex>``), either may be ``None``.

    ``ref`` is what a manifest URL takes: the digest when there is one, else the tag.
    """

    host: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def ref(self) -> str | None:
        """The manifest reference to request: digest (preferred) or tag, ``None`` when neither."""
        return self.digest or self.tag

    def with_ref(self, *, tag: str | None = None, digest: str | None = None) -> "Reference":
        """A copy naming ``tag`` / ``digest`` instead."""
        return Reference(self.host, self.repository, tag, digest)

    def __str__(self) -> str:
        text = f"{self.host}/{self.repository}"
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


def parse_reference(s: str) -> Reference:
    """Parse ``HOST[:PORT]/REPO[:TAG][@sha256:HEX]`` (an ``oci://`` prefix is accepted and dropped).

    Raises :class:`~lemonpack.oci.reference.InvalidReferenceError` (a ``LemonpackError``, exit 1)
    for a malformed reference, a reference without a registry host (``library/x``: the first
    component must look like a host: contain ``.`` or ``:`` or be ``localhost``), or a digest
    that is not sha256.

    Spec: distribution/reference grammar; OCI distribution-spec v1.1 ("pulling manifests":
    ``<reference>`` is a tag or a digest).
    """
    text = s[len("oci://"):] if s.startswith("oci://") else s
    img = _parse_image_reference(text)
    if img.domain is None:
        raise InvalidReferenceError(s, "no registry host: write HOST[:PORT]/REPOSITORY[:TAG] "
                                       "(e.g. 127.0.0.1:5000/engines/llamacpp:v1)")
    if img.digest is not None and not img.digest.startswith("sha256:"):
        raise InvalidReferenceError(s, "only sha256 digests are supported")
    return Reference(img.domain, img.path, img.tag, img.digest)


__all__ = ["Reference", "parse_reference", "split_layout_arg"]
