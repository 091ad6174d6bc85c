import json
from pathlib import Path

import pytest

from lemonpack.oci.reference import (
    ImageReference, InvalidReferenceError, check_pinned, find_run_images, parse_reference,
)

EXAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "lemonade-examples"
HEX = "0123456789abcdef" * 4


def _block(name: str) -> dict:
    doc = json.loads((EXAMPLES / name).read_text())
    (block,) = [b for accs in doc["platforms"].values() for b in accs.values()]
    return block


@pytest.mark.parametrize("text, expected", [
    ("ubuntu", ImageReference("ubuntu", None, "ubuntu", None, None)),
    ("library/ubuntu:24.04", ImageReference("library/ubuntu", None, "library/ubuntu", "24.04", None)),
    ("localhost:5000/a/b:1.0", ImageReference("localhost:5000/a/b", "localhost:5000", "a/b", "1.0", None)),
    ("localhost/x", ImageReference("localhost/x", "localhost", "x", None, None)),
    (f"ghcr.io/org/img:v1@sha256:{HEX}",
     ImageReference("ghcr.io/org/img", "ghcr.io", "org/img", "v1", f"sha256:{HEX}")),
    (f"ghcr.io/org/img@sha256:{HEX}", ImageReference("ghcr.io/org/img", "ghcr.io", "org/img", None, f"sha256:{HEX}")),
    ("[::1]:5000/x__y.z-w:t", ImageReference("[::1]:5000/x__y.z-w", "[::1]:5000", "x__y.z-w", "t", None)),
])
def test_parse_reference(text, expected):
    ref = parse_reference(text)
    assert ref == expected
    assert str(ref) == text


@pytest.mark.parametrize("text", [
    "", "upper/Case", "ghcr.io/Org/img", "img:", "img:-bad", "img@sha256:abc",
    f"img@sha256:{HEX[:62]}", f"img@sha256:{HEX.upper()}", "a//b", "/a", "a/", "img:tag:x",
    "docker.io/kyuz0/amd-{arch_alias}-toolboxes:vulkan-radv", "img:" + "t" * 129,
])
def test_parse_reference_rejects(text):
    with pytest.raises(InvalidReferenceError) as info:
        parse_reference(text)
    assert isinstance(info.value, ValueError)


def test_check_pinned_accepts_digest_with_or_without_tag():
    assert check_pinned(f"ghcr.io/org/img@sha256:{HEX}") is None
    assert check_pinned(f"ghcr.io/org/img:rocm-7.2@sha256:{HEX}") is None


@pytest.mark.parametrize("text, fragment", [
    ("ghcr.io/org/img:latest", "no digest"),
    ("ghcr.io/org/img", "no digest"),
    (f"ghcr.io/org/img@sha256:{HEX[:63]}", "digest has 63 hex digits, needs 64"),
    (f"ghcr.io/org/img@sha256:{HEX}ab", "digest has 66 hex digits, needs 64"),
    (f"ghcr.io/org/img@sha256:{HEX.upper()}", "lowercase"),
    (f"ghcr.io/org/img@sha512:{HEX}{HEX}", "sha512"),
    ("ghcr.io/org/img@sha256:zz", "non-hex"),
    (f"ghcr.io/Org/img@sha256:{HEX}", "lowercase"),
    ("ghcr.io/{org}/img@sha256:" + HEX, "token"),
])
def test_check_pinned_messages(text, fragment):
    message = check_pinned(text)
    assert message is not None and fragment in message


def test_dflash_example_has_62_digit_digest():
    block = _block("dflash_rocm.json")
    found = find_run_images(block["command"], block["args"])
    assert found == [(18, block["args"][18])]
    assert found[0][1].startswith("ghcr.io/luce-org/lucebox-hub:rocm-7.2@sha256:")
    assert "digest has 62 hex digits, needs 64" in check_pinned(found[0][1])


def test_toolbox_example_has_token_in_image():
    block = _block("toolbox_arch_alias.json")
    found = find_run_images(block["command"], block["args"])
    assert found == [(17, "docker.io/kyuz0/amd-{arch_alias}-toolboxes:vulkan-radv")]
    assert "token" in check_pinned(found[0][1])


def test_non_container_examples_have_no_run_image():
    block = _block("llamacpp_vulkan_custom.json")
    assert find_run_images(block["command"], block["args"]) == []
    # the stop commands are podman, but not `run`
    for name in ("dflash_rocm.json", "toolbox_arch_alias.json"):
        b = _block(name)
        assert find_run_images(b["stop_command"], b["stop_command_args"]) == []


@pytest.mark.parametrize("command, args, expected", [
    ("podman", ["run", "img"], [(1, "img")]),
    ("/usr/bin/docker", ["run", "-it", "--rm", "img", "sh"], [(3, "img")]),
    ("podman", ["run", "-dit", "img"], [(2, "img")]),
    ("podman", ["--root", "/x", "run", "-v", "a:b", "img"], [(5, "img")]),
    ("podman", ["--log-level=debug", "container", "run", "--name=x", "img"], [(4, "img")]),
    ("podman", ["run", "--name", "x", "--sig-proxy", "img", "--rm"], [(4, "img")]),
    ("podman", ["run", "-p8080:80", "img"], [(2, "img")]),
    ("podman", ["run", "-itv", "a:b", "img"], [(3, "img")]),
    ("podman", ["run", "--rm", "--", "img", "-x"], [(3, "img")]),
    ("podman", ["run", "--rm"], []),
    ("podman", ["run", "--name"], []),
    ("podman", ["pull", "img"], [(1, "img")]),
    ("podman", ["create", "--name", "x", "img@sha256:" + "a" * 64], [(3, "img@sha256:" + "a" * 64)]),
    ("docker", ["container", "create", "img"], [(2, "img")]),
    ("podman", ["image", "pull", "-q", "img"], [(3, "img")]),
    ("podman", ["rm", "-f", "name"], []),
    ("podman", ["container", "ls"], []),
    ("podmanx", ["run", "img"], []),
    ("docker", [], []),
])
def test_find_run_images(command, args, expected):
    assert find_run_images(command, args) == expected
