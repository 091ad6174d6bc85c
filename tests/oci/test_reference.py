import json
from pathlib import Path

import pytest

from lemonpack.oci.cmdline import read_container_argv
from lemonpack.oci.reference import (ImageReference, InvalidReferenceError, check_pinned, is_tag, parse_reference,
                                     parse_registry_reference, split_ref_name)

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
    inv = read_container_argv([block["command"], *block["args"]])
    assert (inv.image_index, inv.image) == (19, block["args"][18])
    assert inv.image.startswith("ghcr.io/luce-org/lucebox-hub:rocm-7.2@sha256:")
    assert "digest has 62 hex digits, needs 64" in check_pinned(inv.image)


def test_toolbox_example_has_token_in_image():
    block = _block("toolbox_arch_alias.json")
    inv = read_container_argv([block["command"], *block["args"]])
    assert (inv.image_index, inv.image) == (18, "docker.io/kyuz0/amd-{arch_alias}-toolboxes:vulkan-radv")
    assert "token" in check_pinned(inv.image)


def test_non_container_examples_have_no_run_image():
    block = _block("llamacpp_vulkan_custom.json")
    assert read_container_argv([block["command"], *block["args"]]) is None
    # the stop commands are podman, but not `run`
    for name in ("dflash_rocm.json", "toolbox_arch_alias.json"):
        b = _block(name)
        inv = read_container_argv([b["stop_command"], *b["stop_command_args"]])
        assert inv.engine == "podman" and inv.image is None


def test_split_ref_name_gives_the_name_a_full_name_tag_carries():
    assert split_ref_name("v1") == (None, "v1")
    assert split_ref_name("docker.io/x/a:1") == ("docker.io/x/a", "1")
    assert split_ref_name("ghcr.io/y/b") == ("ghcr.io/y/b", "latest")
    assert is_tag("hello-engine.linux-cpu") and not is_tag("docker.io/x/a:1") and not is_tag("a:1")
    with pytest.raises(InvalidReferenceError):
        split_ref_name("docker.io/x/a@sha256:" + "0" * 64)
    with pytest.raises(InvalidReferenceError):
        split_ref_name("Not A Name")


# -- the registry form (formerly ``registry.reference.Reference``): the same type, a stricter parser --

@pytest.mark.parametrize("text, host, repository, tag, digest", [
    ("127.0.0.1:5000/engines/llamacpp:v1", "127.0.0.1:5000", "engines/llamacpp", "v1", None),
    (f"oci://ghcr.io/org/img@sha256:{HEX}", "ghcr.io", "org/img", None, f"sha256:{HEX}"),
    (f"localhost/x:t@sha256:{HEX}", "localhost", "x", "t", f"sha256:{HEX}"),
    ("[::1]:5000/a", "[::1]:5000", "a", None, None),
    ("docker:5000/a:v1", "docker:5000", "a", "v1", None),  # a host named like a transport, with a port
])
def test_parse_registry_reference(text, host, repository, tag, digest):
    ref = parse_registry_reference(text)
    assert (ref.host, ref.repository, ref.tag, ref.digest) == (host, repository, tag, digest)
    assert ref == parse_reference(text.removeprefix("oci://"))  # one type: the grammar's answer
    assert str(ref) == text.removeprefix("oci://")
    assert ref.ref == (digest or tag)


@pytest.mark.parametrize("text, fragment", [
    ("library/ubuntu:24.04", "no registry host"),
    ("ubuntu", "no registry host"),
    ("oci://ubuntu", "no registry host"),
    ("oci:/tmp/example-oci:hello-engine", "'oci:' is a containers-transports(5) prefix, not a registry host"),
    ("oci:example-oci", "a local layout or store is not a registry"),
    ("docker://127.0.0.1:5000/a:v1", "drop the docker:// prefix"),
    ("containers-storage:localhost/hello:run", "'containers-storage:' is a containers-transports(5) prefix"),
    (f"ghcr.io/org/img@sha512:{HEX}{HEX}", "only sha256"),
    ("ghcr.io/Org/img", "lowercase"),
    ("", "empty"),
])
def test_parse_registry_reference_rejects(text, fragment):
    with pytest.raises(InvalidReferenceError) as info:
        parse_registry_reference(text)
    assert fragment in str(info.value) and info.value.exit_code == 1


def test_with_ref_names_another_tag_or_digest():
    ref = parse_registry_reference("127.0.0.1:5000/a/b:v1")
    pinned = ref.with_ref(digest=f"sha256:{HEX}")
    assert str(pinned) == f"127.0.0.1:5000/a/b@sha256:{HEX}" and pinned.ref == f"sha256:{HEX}"
    assert str(pinned.with_ref(tag="v2")) == "127.0.0.1:5000/a/b:v2"
    assert ref.with_ref().ref is None


def test_a_reference_without_a_host_has_no_registry_host():
    with pytest.raises(ValueError, match="no registry host"):
        parse_reference("ubuntu").host


@pytest.mark.parametrize("text, host, repository, endpoint", [
    ("docker.io/busybox:latest", "docker.io", "library/busybox", "registry-1.docker.io"),
    ("docker.io/library/busybox", "docker.io", "library/busybox", "registry-1.docker.io"),
    ("index.docker.io/busybox", "docker.io", "library/busybox", "registry-1.docker.io"),
    ("docker.io/kyuz0/amd-strix-halo-toolboxes:rocm", "docker.io", "kyuz0/amd-strix-halo-toolboxes",
     "registry-1.docker.io"),
    # variants of case 53: every spelling of Docker Hub reaches its API host with library/
    ("registry-1.docker.io/busybox:latest", "docker.io", "library/busybox", "registry-1.docker.io"),
    ("DOCKER.IO/library/busybox:latest", "docker.io", "library/busybox", "registry-1.docker.io"),
    ("Index.Docker.io/busybox", "docker.io", "library/busybox", "registry-1.docker.io"),
    ("docker.io:443/busybox", "docker.io", "library/busybox", "registry-1.docker.io"),
    ("LOCALHOST:5000/busybox", "localhost:5000", "busybox", "localhost:5000"),
    ("quay.io/busybox", "quay.io", "busybox", "quay.io"),
    ("127.0.0.1:5000/busybox", "127.0.0.1:5000", "busybox", "127.0.0.1:5000"),
])
def test_docker_hub_is_normalised_as_docker_does(text, host, repository, endpoint):
    ref = parse_registry_reference(text)
    assert (ref.host, ref.repository, ref.endpoint) == (host, repository, endpoint)
    assert str(ref) == text  # the name as written is kept (a pinned recipe keeps the user's spelling)


def test_a_short_name_is_refused_saying_no_registry_is_searched():
    with pytest.raises(InvalidReferenceError) as e:
        parse_registry_reference("busybox:latest")
    assert "unqualified-search-registries is not used" in str(e.value) and "docker.io/library/busybox" in str(e.value)


@pytest.mark.parametrize("text, host", [("docker.io", "docker.io"), ("localhost:5000", "localhost:5000"),
                                        ("oci://reg.example:latest", "reg.example"), ("localhost", "localhost")])
def test_a_registry_host_alone_is_refused_as_a_host_without_a_repository(text, host):
    with pytest.raises(InvalidReferenceError) as e:
        parse_registry_reference(text)
    assert str(e.value) == f"'{host}' is a registry host with no repository; write {host}/NAMESPACE/REPO[:TAG]"
    assert e.value.reason.startswith("a registry host with no repository")  # a clause callers prefix
    assert "library/" not in str(e.value)


def test_credential_keys_of_docker_hub_and_loopback():
    from lemonpack.oci.reference import credential_keys

    assert credential_keys("index.docker.io") == ["docker.io", "https://index.docker.io/v1/", "index.docker.io",
                                                  "registry-1.docker.io"]
    assert credential_keys("localhost:5000") == ["localhost:5000", "127.0.0.1:5000"]


@pytest.mark.parametrize("text, host", [
    ("127.0.0.1:5000", True), ("reg.example", True), ("localhost", True), ("localhost:5000", True),
    ("[::1]:5000", True), ("layout:v1", False), ("mylayout", False), ("127.0.0.1:5000/app", False),
    ("host:", False), ("-x", False),
])
def test_a_registry_host_on_its_own_is_told_from_references_and_paths(text, host):
    from lemonpack.oci.reference import is_registry_host

    assert is_registry_host(text) is host
