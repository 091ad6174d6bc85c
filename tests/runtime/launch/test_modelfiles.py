"""``runtime.modelfiles.check_installed_pin``: the install record's sha256 (written
``sha256:<hex>``; a bare hex is read too) against the recipe's pin now."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lemonpack.contract import load_recipe, targets
from lemonpack.paths import install_record
from lemonpack.runtime.launch.modelfiles import MissingBinaryError, check_installed_pin

EXAMPLE = Path(__file__).resolve().parents[3] / "lemonpack" / "examples" / "hello-engine.json"


@pytest.fixture
def eff():
    (block,) = targets(load_recipe(EXAMPLE))
    return block


def _record(tmp_path: Path, sha256: str) -> Path:
    external = tmp_path / "external" / "hello-engine"
    external.mkdir(parents=True)
    install_record(external).write_text(json.dumps({"sha256": sha256}))
    return external


@pytest.mark.parametrize("form", ["sha256:{}", "{}"])
def test_the_pinned_artifact_passes_in_either_form(tmp_path, eff, form):
    check_installed_pin("hello-engine", _record(tmp_path, form.format(eff.provenance.sha256)), eff)


def test_another_artifact_is_refused_naming_both_digests(tmp_path, eff):
    other = "sha256:" + "0" * 64
    with pytest.raises(MissingBinaryError) as info:
        check_installed_pin("hello-engine", _record(tmp_path, other), eff)
    assert other in str(info.value) and f"now pins sha256:{eff.provenance.sha256}" in str(info.value)
