"""Where lemonpack keeps things (lemonpack/paths.py): the cache and config roots from their
variables or the XDG defaults, a cache root that cannot be one refused by name before anything is
written, and the install record beside an installed engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from lemonpack import paths
from lemonpack.errors import StorageError


def test_the_roots_are_the_variables_else_the_xdg_directories(home, monkeypatch, tmp_path):
    assert paths.cache_root() == home.cache and paths.config_root() == home.config
    monkeypatch.delenv("LEMONPACK_CACHE_DIR")
    monkeypatch.delenv("LEMONPACK_CONFIG_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xc"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xf"))
    assert paths.cache_root() == tmp_path / "xc" / "lemonpack"
    assert paths.config_root() == tmp_path / "xf" / "lemonpack"


def test_external_dir_and_install_record_of_a_recipe(home):
    ext = paths.external_dir("llamacpp-rocm")
    assert ext == home.cache / "external" / "llamacpp-rocm" and not home.cache.exists()  # nothing created
    assert paths.install_record(ext) == home.cache / "external" / "llamacpp-rocm.install.json"


@pytest.mark.parametrize("below", [False, True])
def test_a_cache_root_that_is_a_file_is_refused_naming_it_and_its_origin(home, below):
    home.root.joinpath("file").write_text("x")
    root = home.root / "file" / "cache" if below else home.root / "file"
    home.monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(root))
    with pytest.raises(StorageError) as e:
        paths.require_cache_root()
    assert str(root) in str(e.value) and "LEMONPACK_CACHE_DIR" in str(e.value)
    assert ("cannot be created" in str(e.value)) == below
    with pytest.raises(StorageError):
        paths.external_dir("x")


def test_a_cache_root_not_made_yet_is_fine(home):
    assert paths.require_cache_root() == home.cache and not Path(home.cache).exists()
