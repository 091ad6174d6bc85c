"""The one loopback test (lemonpack.hosts.is_loopback), used by fetch, the registry client,
serve's listen address and its local-only routes."""

import pytest

from lemonpack.hosts import is_loopback


@pytest.mark.parametrize("host", ["127.0.0.1", "127.9.8.7", "::1", "[::1]", "localhost", "LOCALHOST",
                                  "localhost.", "LocalHost.", "::1%lo", "[::1%lo]", "::ffff:127.0.0.1", " 127.0.0.1 "])
def test_loopback(host):
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["10.0.0.1", "128.0.0.1", "0.0.0.0", "::", "::2", "192.168.1.5", "192.0.2.7",
                                  "localhost.example", "example.org", "::ffff:10.0.0.1", "", None, "[]", "127.0.0.1.evil"])
def test_not_loopback(host):
    assert not is_loopback(host)
