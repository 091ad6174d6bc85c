"""``oci.base.built_without_base`` reads the manifest through the verified layout reader."""

from __future__ import annotations

import pytest

from lemonpack.errors import LayoutError
from lemonpack.oci.base import ANNOTATION_BASE_DIGEST, built_without_base
from support.oci_layout import TAMPERINGS, small_image, tamper

RECIPE_ANNOTATION = {"dev.lemonpack.recipe": "hello-engine"}


def test_an_intact_engine_only_image_is_told_apart(tmp_path):
    small_image(tmp_path / "plain", annotations=RECIPE_ANNOTATION)
    small_image(tmp_path / "based", annotations={**RECIPE_ANNOTATION, ANNOTATION_BASE_DIGEST: "sha256:" + "0" * 64})
    assert built_without_base(tmp_path / "plain", "img") is True
    assert built_without_base(tmp_path / "based", "img") is False
    assert built_without_base(tmp_path / "plain", "no-such-tag") is False
    assert built_without_base(tmp_path / "missing", "img") is False


@pytest.mark.parametrize("how", TAMPERINGS)
def test_a_tampered_manifest_is_refused_not_judged(tmp_path, how):
    descs = small_image(tmp_path / "plain", annotations=RECIPE_ANNOTATION)
    tamper(tmp_path / "plain", descs["manifest"], how)
    with pytest.raises(LayoutError) as info:
        built_without_base(tmp_path / "plain", "img")
    assert descs["manifest"].digest in str(info.value)
