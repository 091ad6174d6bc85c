"""Reproducible release images: ``containers/*.json`` definitions and the release
lock into one byte-reproducible OCI image layout per image (``lemonpack release``).

Imports the rooms below it: ``contract``, ``oci``, ``fetch``, ``builder`` (the verified
artifact fetch + unpack), ``extensions`` (the pipeline and the generator) and ``examples``
(the example's mirror, for the example artifact)."""

from lemonpack.release.build import ImageSummary, ReleaseOptions, ReleaseResult, release
from lemonpack.release.definition import ImageDefinition, RecipeRef, load_definition, load_definitions
from lemonpack.release.image import ExtensionTree, ImageInputs, RecipePayload, write_image

__all__ = ["ImageSummary", "ReleaseOptions", "ReleaseResult", "release", "ImageDefinition", "RecipeRef",
           "load_definition", "load_definitions", "ExtensionTree", "ImageInputs", "RecipePayload", "write_image"]
