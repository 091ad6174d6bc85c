"""``builder.ociinstall`` reads the pulled layout through the verified layout reader: the
manifests (``image_manifests``), the recipe layer (``recipe_from_image``); a tampered blob is
refused with a LayoutError naming it. (Installing from a real registry: tests/registry.)"""

from __future__ import annotations

import json

import pytest

from lemonpack.builder.ociinstall import image_manifests, recipe_from_image
from lemonpack.errors import LayoutError
from lemonpack.oci.layout_reader import read_layout
from support.oci_layout import TAMPERINGS, small_image, tamper


def test_intact_layout_gives_its_manifest_and_recipe(tmp_path):
    descs = small_image(tmp_path / "l")
    [(digest, manifest)] = image_manifests(tmp_path / "l", read_layout(tmp_path / "l")["img"])
    assert digest == descs["manifest"].digest and manifest["layers"][1]["digest"] == descs["recipe"].digest
    assert recipe_from_image(tmp_path / "l", manifest, "ref").recipe == "hello-engine"


@pytest.mark.parametrize("how", TAMPERINGS)
def test_a_tampered_manifest_is_refused(tmp_path, how):
    descs = small_image(tmp_path / "l")
    tamper(tmp_path / "l", descs["manifest"], how)
    with pytest.raises(LayoutError) as info:
        image_manifests(tmp_path / "l", read_layout(tmp_path / "l")["img"])
    assert descs["manifest"].digest in str(info.value)


@pytest.mark.parametrize("how", TAMPERINGS)
def test_a_tampered_recipe_layer_is_refused(tmp_path, how):
    descs = small_image(tmp_path / "l")
    manifest = json.loads((tmp_path / "l" / "blobs" / "sha256" / descs["manifest"].hex).read_bytes())
    tamper(tmp_path / "l", descs["recipe"], how)
    with pytest.raises(LayoutError) as info:
        recipe_from_image(tmp_path / "l", manifest, "ref")
    assert descs["recipe"].digest in str(info.value)
