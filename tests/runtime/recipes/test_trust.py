"""Trust checks (RFC section 8) against real files, modes, owners and symlinks."""

from __future__ import annotations

import os
import stat
from pathlib import Path


import pytest

from support.tools import need_root

from lemonpack.runtime.recipes import trust

# Only the ownership cases (chown to another uid) need root; they fail, never skip, without it.

NOBODY = 65534


def _rules(violations) -> list[str]:
    return [v.rule for v in violations]


@pytest.fixture
def safe_dir(tmp_path: Path) -> Path:
    d = tmp_path / "backends"
    d.mkdir()
    os.chmod(d, 0o755)
    return d


def _file(directory: Path, name: str = "r.json", mode: int = 0o644) -> Path:
    p = directory / name
    p.write_text("{}")
    os.chmod(p, mode)
    return p


def test_regular_private_file_owned_by_euid_is_trusted(safe_dir):
    assert trust.check_descriptor(_file(safe_dir), "user") == ()


@pytest.mark.parametrize("mode", [0o664, 0o646, 0o666, 0o620])
def test_group_or_world_writable_file_is_rejected(safe_dir, mode):
    v = trust.check_descriptor(_file(safe_dir, mode=mode), "user")
    assert _rules(v) == ["writable-file"]
    assert f"{mode:04o}" in v[0].message


def test_symlinked_file_is_rejected_even_to_a_trusted_target(safe_dir, tmp_path):
    target = _file(safe_dir, "real.json")
    link = safe_dir / "link.json"
    link.symlink_to(target)
    v = trust.check_descriptor(link, "user")
    assert _rules(v) == ["symlink"]
    assert "symbolic link" in v[0].message


def test_directory_named_json_is_not_regular(safe_dir):
    d = safe_dir / "dir.json"
    d.mkdir()
    assert _rules(trust.check_descriptor(d, "user")) == ["not-regular"]


def test_user_file_owned_by_another_uid_is_rejected(safe_dir):
    need_root()
    p = _file(safe_dir)
    os.chown(p, NOBODY, NOBODY)
    v = trust.check_descriptor(p, "user")
    assert _rules(v) == ["owner"]
    assert str(NOBODY) in v[0].message


def test_user_file_owned_by_the_given_euid_is_trusted(safe_dir):
    need_root()
    p = _file(safe_dir)
    os.chown(p, NOBODY, NOBODY)
    assert trust.check_descriptor(p, "user", euid=NOBODY) == ()
    # and root's own file is then someone else's
    q = _file(safe_dir, "q.json")
    assert _rules(trust.check_descriptor(q, "user", euid=NOBODY)) == ["owner"]


def test_system_file_must_be_owned_by_root(safe_dir):
    need_root()
    p = _file(safe_dir)
    assert trust.check_descriptor(p, "system", euid=NOBODY) == ()
    os.chown(p, NOBODY, 0)
    v = trust.check_descriptor(p, "system")
    assert _rules(v) == ["owner"]
    assert "root" in v[0].message


def test_several_violations_are_all_reported(safe_dir):
    need_root()
    p = _file(safe_dir, mode=0o666)
    os.chown(p, NOBODY, NOBODY)
    assert _rules(trust.check_descriptor(p, "user")) == ["writable-file", "owner"]


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757])
def test_writable_ancestor_without_sticky_is_rejected(tmp_path, mode):
    open_dir = tmp_path / "open"
    inner = open_dir / "inner"
    inner.mkdir(parents=True)
    os.chmod(open_dir, mode)
    os.chmod(inner, 0o755)
    v = trust.check_descriptor(_file(inner), "user")
    assert _rules(v) == ["writable-ancestor"]
    assert v[0].path == str(open_dir)


def test_sticky_world_writable_ancestor_is_accepted(tmp_path):
    shared = tmp_path / "shared"
    inner = shared / "inner"
    inner.mkdir(parents=True)
    os.chmod(shared, 0o1777)
    os.chmod(inner, 0o755)
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o1777
    assert trust.check_descriptor(_file(inner), "user") == ()


def test_writable_descriptor_directory_itself_is_rejected(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    os.chmod(d, 0o777)
    assert _rules(trust.check_descriptor(_file(d), "user")) == ["writable-ancestor"]


def test_symlinked_directory_is_judged_by_its_target_and_its_location(tmp_path):
    open_dir = tmp_path / "open"
    real = open_dir / "real"
    real.mkdir(parents=True)
    os.chmod(open_dir, 0o777)
    os.chmod(real, 0o755)
    safe = tmp_path / "safe"
    safe.mkdir()
    os.chmod(safe, 0o755)
    (safe / "via").symlink_to(real)
    _file(real)
    # The path as written looks safe, but the file really lives under a world-writable dir.
    v = trust.check_descriptor(safe / "via" / "r.json", "user")
    assert _rules(v) == ["writable-ancestor"]
    assert v[0].path == str(open_dir)


def test_missing_file_is_a_violation_not_an_exception(tmp_path):
    v = trust.check_descriptor(tmp_path / "gone.json", "user")
    assert _rules(v) == ["unstatable"]


def test_pure_functions_take_stat_results(safe_dir):
    p = _file(safe_dir)
    st = os.lstat(p)
    assert trust.file_problems(str(p), st, "user", os.geteuid()) == []
    assert _rules(trust.file_problems(str(p), st, "user", NOBODY)) == ["owner"]
    assert trust.ancestor_problem(str(safe_dir), os.lstat(safe_dir)) is None
    os.chmod(safe_dir, 0o770)
    assert trust.ancestor_problem(str(safe_dir), os.lstat(safe_dir)).rule == "writable-ancestor"
    os.chmod(safe_dir, 0o755)
    # a symlink ancestor is not judged by its own (meaningless) mode
    link = safe_dir.parent / "lnk"
    link.symlink_to(safe_dir)
    assert trust.ancestor_problem(str(link), os.lstat(link)) is None


def test_ancestors_cover_lexical_and_resolved_paths(tmp_path):
    real = tmp_path / "a" / "b"
    real.mkdir(parents=True)
    (tmp_path / "l").symlink_to(real)
    got = trust.ancestors(tmp_path / "l" / "x.json")
    assert got[0] == str(tmp_path / "l")
    assert str(real) in got and str(tmp_path / "a") in got and "/" in got
    assert len(got) == len(set(got))
