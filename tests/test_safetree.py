"""lemonpack.safetree's path-component rule and inside() (the link and whiteout rules are
tested through their users: tests/fetch/test_archive.py, tests/oci/test_layer.py)."""

from __future__ import annotations

import os

import pytest

from lemonpack.safetree import component_problem, inside, path_problem, safe_component, safe_relative_path


@pytest.mark.parametrize("name, why", [
    ("", "empty component"), (".", "'.' component"), ("..", "'..' component"), ("a/b", "'/' in name"),
    ("a\\b", "backslash in name"), ("..\\x", "backslash in name"), ("a\x00b", "NUL in name"),
])
def test_unsafe_components(name, why):
    assert component_problem(name) == why and not safe_component(name)


@pytest.mark.parametrize("name", ["a", "...", "..a", "a..", ".hidden", "llama-server", "a b", "ü", "C:"])
def test_safe_components(name):
    assert component_problem(name) is None and safe_component(name)


@pytest.mark.parametrize("rel, why", [
    ("", "empty path"), ("/etc/passwd", "absolute path"), ("a//b", "empty component"), ("a/", "empty component"),
    ("./a", "'.' component"), ("a/./b", "'.' component"), ("a/../b", "'..' component"), ("..", "'..' component"),
    ("a/b\\..\\c", "backslash in name"), ("a/\x00", "NUL in name"),
])
def test_unsafe_relative_paths(rel, why):
    assert path_problem(rel) == why and not safe_relative_path(rel)


@pytest.mark.parametrize("rel", ["a", "a/b/c", "bin/llama-server", "gufo/ext/api.h", "..a/b..", "host:8080/x/y.tar"])
def test_safe_relative_paths(rel):
    assert path_problem(rel) is None and safe_relative_path(rel)


@pytest.mark.parametrize("path, base, expected", [
    ("/a/b", "/a", True), ("/a", "/a", True), ("/a/", "/a", True), ("/a", "/a/", True),
    ("/ab", "/a", False),  # the string-prefix mistake
    ("/a/b/../c", "/a", True), ("/a/b/../../c", "/a", False), ("/a/../a/b", "/a", True),
    ("/x", "/", True), ("/", "/a", False),
    ("a/b", "a", True), ("a/../../b", "a", False), ("x", ".", True), ("../x", ".", False),
    ("a", "/a", False), ("/a", "a", False),  # absolute never inside relative, nor the other way
    ("", "/a", False), ("/a", "", False),
])
def test_inside(path, base, expected):
    assert inside(path, base) is expected


def test_inside_is_lexical_and_touches_no_file(tmp_path):
    """A symlink inside the base that points out is still inside lexically: callers that judge
    where a path resolves pass realpath results (as extensions/manifest.py does)."""
    base = tmp_path / "base"
    base.mkdir()
    (base / "out").symlink_to(tmp_path)
    assert inside(base / "out" / "x", base)
    assert not inside(os.path.realpath(base / "out" / "x"), os.path.realpath(base))
    assert inside(tmp_path / "missing" / "deeper", tmp_path)  # nothing needs to exist
