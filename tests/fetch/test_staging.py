"""The file-system primitives of the artifact store and extraction (lemonpack/fetch/staging.py)
against the kernel's own answers: only regular files are opened, removal never follows a
symlink, directories are made inside their base only."""

from __future__ import annotations

import errno
import os

import pytest

from lemonpack.fetch.staging import clear_non_regular, ensure_dir, open_regular, remove_entry, remove_tree


def test_open_regular_refuses_every_other_kind(tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    (tmp_path / "d").mkdir()
    (tmp_path / "l").symlink_to(tmp_path / "f")
    os.mkfifo(tmp_path / "p")
    with open_regular(tmp_path / "f") as f:
        assert f.read() == b"x"
    for name, code in (("d", errno.EISDIR), ("l", errno.ELOOP), ("p", errno.EINVAL)):
        with pytest.raises(OSError) as exc:
            open_regular(tmp_path / name)
        assert exc.value.errno == code, name


def test_removal_never_follows_a_symlink(tmp_path):
    target = tmp_path / "target"
    (target / "sub").mkdir(parents=True)
    (target / "sub").chmod(0o500)
    link = tmp_path / "link"
    link.symlink_to(target)
    remove_tree(link)
    assert not os.path.lexists(link) and (target / "sub").stat().st_mode & 0o777 == 0o500
    link.symlink_to(target)
    remove_entry(link)
    assert not os.path.lexists(link) and target.is_dir()
    link.symlink_to(target)
    assert clear_non_regular(link) == "symlink" and target.is_dir()
    (tmp_path / "base" / "a").mkdir(parents=True)
    (tmp_path / "base" / "a" / "b").write_text("file where a directory belongs")
    assert ensure_dir(tmp_path / "base" / "a" / "b" / "c", tmp_path / "base") == [tmp_path / "base" / "a" / "b"]
    assert (tmp_path / "base" / "a" / "b" / "c").is_dir()
