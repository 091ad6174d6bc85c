"""The OCI content descriptor (image-spec v1.1 ``descriptor.md``): what a layout's writer
(:mod:`lemonpack.oci.layout`), its reader (:mod:`lemonpack.oci.layout_reader`) and the
registry hand each other."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from lemonpack.digest import hex_of, is_sha256_digest
from lemonpack.errors import LayoutError


def _frozen_map(value: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    if value is None:
        return None
    return MappingProxyType(dict(value))


@dataclass(frozen=True)
class Descriptor:
    """A content descriptor (OCI image-spec v1.1 ``descriptor.md``).

    ``media_type``: the blob's media type; ``digest``: ``"sha256:<64 hex>"``; ``size``:
    bytes; ``annotations``: ``{str: str}`` or ``None``; ``platform``: ``{"architecture",
    "os", ["variant", ...]}`` or ``None`` (image-index.md); ``artifact_type``: the
    ``artifactType`` of an artifact manifest or ``None``. Mappings are stored read-only.
    Hash and equality use all fields.
    """

    media_type: str
    digest: str
    size: int
    annotations: Mapping[str, str] | None = None
    platform: Mapping[str, Any] | None = None
    artifact_type: str | None = None

    def __post_init__(self) -> None:
        if not is_sha256_digest(self.digest):
            raise ValueError(f"descriptor digest must be sha256:<64 lowercase hex>, got {self.digest!r}")
        if self.size < 0:
            raise ValueError(f"descriptor size must be >= 0, got {self.size}")
        object.__setattr__(self, "annotations", _frozen_map(self.annotations))
        object.__setattr__(self, "platform", _frozen_map(self.platform))

    def __hash__(self) -> int:
        return hash((self.media_type, self.digest, self.size, self.artifact_type,
                     tuple(sorted((self.annotations or {}).items()))))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Descriptor):
            return NotImplemented
        return self.to_json() == other.to_json()

    @property
    def hex(self) -> str:
        """The hex part of the digest (the blob's file name under ``blobs/sha256/``)."""
        return hex_of(self.digest)

    def with_annotations(self, annotations: Mapping[str, str] | None) -> "Descriptor":
        """A copy with ``annotations`` replaced (``None`` removes them)."""
        return Descriptor(self.media_type, self.digest, self.size, annotations,
                          self.platform, self.artifact_type)

    def to_json(self) -> dict[str, Any]:
        """The descriptor as a JSON object (``mediaType``, ``digest``, ``size`` and the
        optional ``annotations``, ``platform``, ``artifactType`` when set)."""
        out: dict[str, Any] = {"mediaType": self.media_type, "digest": self.digest, "size": self.size}
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        if self.platform:
            out["platform"] = _plain(self.platform)
        if self.artifact_type:
            out["artifactType"] = self.artifact_type
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "Descriptor":
        """Build from a descriptor JSON object; raises :class:`LayoutError` if a field is missing."""
        try:
            return cls(media_type=obj["mediaType"], digest=obj["digest"], size=int(obj["size"]),
                       annotations=obj.get("annotations"), platform=obj.get("platform"),
                       artifact_type=obj.get("artifactType"))
        except (KeyError, TypeError, ValueError) as exc:
            raise LayoutError(f"malformed descriptor {dict(obj)!r}: {exc}") from None


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


__all__ = ["Descriptor"]
