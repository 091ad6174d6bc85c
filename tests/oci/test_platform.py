"""The one mapping of machine names to OCI platforms (lemonpack/oci/platform.py): GOARCH names and
the host's platform."""

from __future__ import annotations

from lemonpack.oci.platform import goarch, host_arch, host_platform


def test_host_platform_is_one_mapping():
    assert goarch("x86_64") == "amd64" and goarch("aarch64") == "arm64" and goarch("amd64") == "amd64"
    assert host_platform()[1] == host_arch()
