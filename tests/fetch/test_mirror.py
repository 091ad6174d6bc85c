"""Mirror layout: origin host and path, query dropped."""

from __future__ import annotations

import pytest

from lemonpack.errors import FetchError, UnsafeContentError
from lemonpack.fetch import Mirror, mirror_path


@pytest.mark.parametrize("url,expected", [
    ("https://github.com/o/r/releases/download/v1/a.tar.gz", "github.com/o/r/releases/download/v1/a.tar.gz"),
    ("https://GitHub.com/o/a.zip?x=1#frag", "github.com/o/a.zip"),
    ("https://host:443/a", "host/a"),
    ("http://host:80/a", "host/a"),
    ("https://host:8443/a", "host:8443/a"),
    ("https://user:pw@host/a", "host/a"),
    ("https://[::1]:9000/a%20b", "[::1]:9000/a%20b"),
])
def test_mirror_path(url, expected):
    assert mirror_path(url) == expected


@pytest.mark.parametrize("url,error", [
    ("ftp://host/a", FetchError),
    ("https:///a", FetchError),
    ("https://host/", FetchError),
    ("https://host", FetchError),
    ("https://host/a/../../b", UnsafeContentError),
    ("https://host/a/%2e%2e/b", UnsafeContentError),
    ("https://host/a//b", UnsafeContentError),
    ("https://host/a%2Fb", UnsafeContentError),
])
def test_mirror_path_refuses(url, error):
    with pytest.raises(error):
        mirror_path(url)


def test_rewrite_and_base_normalisation():
    m = Mirror("https://mirror.example/lemon///")
    assert m.base_url == "https://mirror.example/lemon"
    assert m.rewrite("https://a.org/x/y.bin?q") == "https://mirror.example/lemon/a.org/x/y.bin"


@pytest.mark.parametrize("base", ["ftp://m/x", "mirror.example", "https://m/x?y=1"])
def test_bad_mirror_base(base):
    with pytest.raises(FetchError):
        Mirror(base)


def test_mirror_from_env(monkeypatch):
    monkeypatch.delenv("LEMONPACK_MIRROR", raising=False)
    assert Mirror.from_env() is None
    monkeypatch.setenv("LEMONPACK_MIRROR", "https://env.example")
    assert Mirror.from_env() == Mirror("https://env.example")
    assert Mirror.from_env("https://cli.example").base_url == "https://cli.example"
    assert Mirror.from_env(allow_insecure=True).allow_insecure
