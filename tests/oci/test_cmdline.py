"""The one reader of container command lines: engines, global options, subcommand forms,
wrappers, flag arities from the tools' own tables, and refusals instead of guesses."""

import json
from importlib import resources

import pytest

from lemonpack.errors import LemonpackError
from lemonpack.oci.cmdline import (
    CLI_TABLES, ContainerInvocation, UnreadableCommandLine, WRAPPERS, read_container_argv, valid_container_name,
)

PIN = "img@sha256:" + "a" * 64


def image_of(argv):
    inv = read_container_argv(argv)
    return None if inv is None else (inv.image_index, inv.image)


@pytest.mark.parametrize("argv, expected", [
    (["podman", "run", "img"], (2, "img")),
    (["/usr/bin/docker", "run", "-it", "--rm", "img", "sh"], (4, "img")),
    (["podman", "run", "-dit", "img"], (3, "img")),
    (["podman", "--root", "/x", "run", "-v", "a:b", "img"], (6, "img")),
    (["podman", "--log-level=debug", "container", "run", "--name=x", "img"], (5, "img")),
    (["podman", "run", "--name", "x", "--sig-proxy", "img", "--rm"], (5, "img")),
    (["podman", "run", "-p8080:80", "img"], (3, "img")),
    (["podman", "run", "-itv", "a:b", "img"], (4, "img")),
    (["podman", "run", "--rm", "--", "img", "-x"], (4, "img")),
    (["podman", "pull", "img"], (2, "img")),
    (["podman", "create", "--name", "x", PIN], (4, PIN)),
    (["docker", "container", "create", "img"], (3, "img")),
    (["podman", "image", "pull", "-q", "img"], (4, "img")),
    # boolean flags never take the next token, with or without =value
    (["podman", "run", "--tls-verify", "docker.io/x:latest", PIN], (3, "docker.io/x:latest")),
    (["podman", "run", "--tls-verify=false", "docker.io/x:latest"], (3, "docker.io/x:latest")),
    (["podman", "run", "--privileged", "--rm=false", "-d=true", "i"], (5, "i")),
    (["docker", "run", "--init", "i"], (3, "i")),
    # value flags in all spellings
    (["podman", "run", "-e", "A=1", "--env=B=2", "-eC=3", "--network", "host", "i"], (8, "i")),
    # podman's global options are persistent flags: also after the subcommand; -v there is --volume
    (["podman", "run", "--log-level", "error", "-v", "/a:/b", "i"], (6, "i")),
    # other CLIs
    (["podman-remote", "--url", "unix:/x", "run", "i"], (4, "i")),
    (["nerdctl", "--namespace", "k8s.io", "run", "-d", "i"], (5, "i")),
    (["nerdctl", "-n", "ns", "container", "run", "i"], (5, "i")),
    # wrappers, nested
    (["nice", "-n", "5", "podman", "run", "i"], (5, "i")),
    (["nice", "-10", "podman", "run", "i"], (4, "i")),
    (["setsid", "-f", "podman", "run", "i"], (4, "i")),
    (["nohup", "setsid", "--wait", "env", "-i", "A=1", "/usr/bin/podman", "run", "i"], (8, "i")),
    (["env", "-u", "X", "A=B", "nerdctl", "run", "i"], (6, "i")),
    (["env", "--chdir=/tmp", "-", "podman", "run", "i"], (5, "i")),
    (["ionice", "-c", "3", "podman", "run", "i"], (5, "i")),
    (["ionice", "-c3", "-t", "podman", "run", "i"], (5, "i")),
    (["taskset", "-c", "0-1", "podman", "run", "i"], (5, "i")),
    (["taskset", "0x3", "podman", "run", "i"], (4, "i")),
    (["stdbuf", "-oL", "-e", "0", "podman", "run", "i"], (6, "i")),
    (["timeout", "-k", "5", "--signal=TERM", "30s", "podman", "run", "i"], (7, "i")),
    (["timeout", "--foreground", "30", "podman", "run", "i"], (5, "i")),
    (["chrt", "-b", "0", "podman", "run", "i"], (5, "i")),
    (["chrt", "--rr", "-T", "100", "5", "podman", "run", "i"], (7, "i")),
    (["prlimit", "--nofile=1024", "-n2048", "podman", "run", "i"], (5, "i")),
    (["env", "--", "podman", "run", "i"], (4, "i")),
])
def test_image(argv, expected):
    assert image_of(argv) == expected
    assert argv[expected[0]] == expected[1]


@pytest.mark.parametrize("argv", [
    ["/opt/llama-server", "--name", "n"], ["nice", "-n", "5", "llama-server", "-m", "x"], ["env"], ["nice"],
    ["podmanx", "run", "img"], ["busybox", "httpd", "-f"],
])
def test_not_a_container_cli(argv):
    assert read_container_argv(argv) is None


@pytest.mark.parametrize("argv, expected", [
    (["podman", "rm", "-f", "x"], ("rm", 1)),
    (["podman", "image", "rm", "x"], ("rmi", 2)),
    (["podman", "container", "ls"], ("ps", 2)),
    (["docker", "container", "stop", "x"], ("stop", 2)),
    (["podman", "--root", "/r", "stop", "x"], ("stop", 3)),
    (["podman", "--version"], ("", 1)),
    (["docker"], ("", 0)),
])
def test_subcommands(argv, expected):
    inv = read_container_argv(argv)
    assert (inv.subcommand, inv.subcommand_index) == expected
    assert inv.image is None and inv.name is None


@pytest.mark.parametrize("argv, fragment, index", [
    (["podman", "run", "--bogus", "x"], "unknown podman run option --bogus", 2),
    (["podman", "run", "-Z", "x"], "unknown podman run option -Z", 2),
    (["podman", "pull", "--name", "n"], "unknown podman pull option --name", 2),
    (["docker", "--bogus", "run", "x"], "unknown docker global option --bogus", 1),
    # docker's global options are not accepted after the subcommand
    (["docker", "run", "--tlsverify", "x"], "unknown docker run option --tlsverify", 2),
    (["podman", "frob", "x"], "unknown podman subcommand 'frob'", 1),
    (["podman", "container", "frob"], "unknown subcommand form podman container 'frob'", 2),
    (["podman", "run", "--rm"], "names no image", 2),
    (["podman", "run", "--name"], "--name has no value", 2),
    (["podman", "--", "run", "x"], "'--' before", 1),
    (["podman", "run", "--rootfs", "/r", "sh"], "--rootfs", 2),
    (["foo", "podman", "run", "x"], "podman appears after 'foo'", 1),
    (["sh", "/usr/bin/docker", "run", "x"], "docker appears after 'sh'", 1),
    (["env", "A=1", "-u", "X", "podman", "run", "x"], "podman appears after '-u'", 4),
    (["env", "-S", "podman run x"], "env -S", 1),
    (["env", "--split-string=podman run x"], "--split-string", 1),
    (["env", "-iS", "podman run x"], "env -S", 1),
    (["taskset", "-p", "1", "podman", "run", "x"], "taskset -p", 1),
    (["ionice", "-p", "1"], "ionice -p", 1),
    (["chrt", "-m"], "chrt -m", 1),
    (["nice", "--adj=5", "podman", "run", "x"], "unknown option '--adj=5'", 1),
    (["setsid", "-x", "podman", "run", "x"], "unknown option -x", 1),
])
def test_unreadable_is_refused_with_a_reason(argv, fragment, index):
    with pytest.raises(UnreadableCommandLine) as info:
        read_container_argv(argv)
    assert fragment in str(info.value)
    assert info.value.index == index
    assert isinstance(info.value, LemonpackError) and info.value.reason


@pytest.mark.parametrize("argv, name, index", [
    (["podman", "run", "--name", "a", "i"], "a", 3),
    (["podman", "run", "--name=b", "i"], "b", 2),
    (["podman", "run", "--name", "a", "--name=c", "i"], "c", 4),
    (["podman", "create", "--name", "a", "i"], "a", 3),
    (["nice", "podman", "container", "run", "--name", "a", "i"], "a", 5),
    (["podman", "run", "i", "--name", "x"], None, None),  # after the image: the container's own argv
])
def test_name(argv, name, index):
    inv = read_container_argv(argv)
    assert (inv.name, inv.name_index) == (name, index)


@pytest.mark.parametrize("argv, at", [
    (["podman", "run", "i"], 2),
    (["podman", "--root", "/r", "container", "run", "i"], 5),
    (["nice", "nerdctl", "-n", "ns", "create", "i"], 5),
    (["podman-remote", "run", "i"], 2),
])
def test_with_labels_after_the_subcommand(argv, at):
    inv = read_container_argv(argv)
    out = inv.with_labels(argv, {"a": "1", "b": "2"})
    assert out == tuple(argv[:at]) + ("--label", "a=1", "--label", "b=2") + tuple(argv[at:])
    # the labelled argv reads the same image
    again = read_container_argv(out)
    assert again.image == inv.image and again.subcommand == inv.subcommand


def test_with_labels_leaves_other_subcommands():
    argv = ["podman", "pull", "i"]
    assert read_container_argv(argv).with_labels(argv, {"a": "1"}) == tuple(argv)


def test_invocation_is_frozen():
    inv = read_container_argv(["podman", "run", "i"])
    assert isinstance(inv, ContainerInvocation)
    with pytest.raises(AttributeError):
        inv.image = "x"


def test_tables_name_their_source_and_hold_known_arities():
    raw = json.loads(resources.files("lemonpack.oci").joinpath("cmdline_flags.json").read_text())
    assert "podman version 4.3.1" in raw["podman"]["source"]
    assert "Docker version 28.2.2" in raw["docker"]["source"]
    assert "nerdctl" in raw["nerdctl"]["source"]
    run = CLI_TABLES["podman"].subcommands["run"]
    assert run.arity("rm") == run.arity("tls-verify") == run.arity("privileged") == "boolean"
    assert run.arity("name") == run.arity("network") == run.arity("volume") == "value"
    assert CLI_TABLES["docker"].subcommands["run"].arity("sig-proxy") == "boolean"
    assert all(w.source for w in WRAPPERS.values())


@pytest.mark.parametrize("name, expected", [
    ("lp-model", "lp-model"),
    ("a_b.c-1", "a_b.c-1"),
])
def test_valid_names_are_kept(name, expected):
    assert valid_container_name(name) == expected


def test_invalid_names_are_mapped_stably_and_distinctly():
    a = valid_container_name("lp-Qwen3:Q4_K_M.gguf")
    assert a.startswith("lp-Qwen3-Q4_K_M.gguf-") and len(a) == len("lp-Qwen3-Q4_K_M.gguf-") + 8
    assert a == valid_container_name("lp-Qwen3:Q4_K_M.gguf")
    b = valid_container_name("lp-Qwen3/Q4_K_M.gguf")
    assert a != b and a != valid_container_name("lp-Qwen3-Q4_K_M.gguf")
    for odd in ("-x", "_x", ".x", "é", "a b", "", "x\ny"):
        out = valid_container_name(odd)
        assert out[0].isascii() and out[0].isalnum()
        assert all(c.isascii() and (c.isalnum() or c in "_.-") for c in out)


@pytest.mark.parametrize("argv, prefix", [
    (["podman", "run", "i"], ("podman",)),
    (["podman", "--root", "/r", "--runroot", "/rr", "run", "i"], ("podman", "--root", "/r", "--runroot", "/rr")),
    (["podman", "--url", "unix:///s", "container", "run", "i"], ("podman", "--url", "unix:///s")),
    # a global option's value that is spelled like the group word is still a value
    (["podman", "--connection", "container", "container", "run", "i"], ("podman", "--connection", "container")),
    (["nice", "-n", "5", "/usr/bin/podman-remote", "--connection", "c", "run", "i"],
     ("/usr/bin/podman-remote", "--connection", "c")),
    (["docker", "-H", "tcp://h:2375", "ps"], ("docker", "-H", "tcp://h:2375")),
    (["nerdctl", "-n", "ns", "container", "rm", "x"], ("nerdctl", "-n", "ns")),
    (["podman", "--log-level=error"], ("podman", "--log-level=error")),  # no subcommand
    (["podman", "--root", "/r", "container"], ("podman", "--root", "/r")),  # a group word alone
])
def test_cli_prefix_is_the_program_and_its_global_options(argv, prefix):
    assert read_container_argv(argv).cli_prefix(argv) == prefix


# --- every image an argv names (issue 6 section 2, trial k1-argv: pull-multi, mount-type-image, build-from)

U = "docker.io/example/engine:latest"


@pytest.mark.parametrize("argv, images", [
    (["podman", "pull", PIN, U], ((2, PIN), (3, U))),  # trial pull-multi
    (["podman", "pull", "a", "-q", "--tls-verify", "b", "--", "-c"], ((2, "a"), (5, "b"), (7, "-c"))),
    (["podman", "image", "pull", "--all-tags", "docker.io/example/engine"], ((4, "docker.io/example/engine"),)),
    (["podman", "run", "--mount", f"type=image,source={U},destination=/m", PIN],  # trial mount-type-image
     ((3, U), (4, PIN))),
    (["podman", "run", f"--mount=type=image,src={U},dst=/m", PIN, "--mount", "type=image,source=x"],
     ((2, U), (3, PIN))),  # after the image: the container's own argv
    (["podman", "create", "--mount", f"dst=/m, Type = IMAGE ,SOURCE={U}", PIN], ((3, U), (4, PIN))),
    (["podman", "run", "--mount", f'"type=image","source={U}",target=/m', PIN], ((3, U), (4, PIN))),
    (["podman", "run", "--mount", "type=image,source=a,source=b,target=/m", PIN], ((3, "a"), (3, "b"), (4, PIN))),
    (["docker", "run", "--mount", f"type=image,source={U},target=/m", PIN], ((3, U), (4, PIN))),
    (["podman", "run", "--mount", "type=bind,source=/tmp,destination=/m", "--mount=type=volume,src=v,dst=/v", PIN],
     ((5, PIN),)),
    # not images: --image-volume is a mode, --volumes-from names containers, --pod new: uses podman's pause image
    (["podman", "run", "--image-volume", "bind", "--volumes-from", "c", "--pod", "new:x", PIN], ((8, PIN),)),
    (["podman", "run", "-v", f"{U}:/m", PIN], ((4, PIN),)),
])
def test_every_image_the_argv_names(argv, images):
    inv = read_container_argv(argv)
    assert inv.images == images
    assert (inv.image_index, inv.image) in images  # the positional one is among them


@pytest.mark.parametrize("argv, fragment, index", [
    (["docker", "pull", "a", "b"], "docker pull takes exactly one image", 3),
    (["nerdctl", "image", "pull", "a", "-q", "b"], "nerdctl pull takes exactly one image", 5),
    (["podman", "run", "--mount", "type=image,destination=/m", PIN], "image mount without a source", 3),
    (["podman", "run", "--mount", "type=image,type=bind,src=x,dst=/m", PIN], "more than one type", 3),
    (["podman", "run", "--mount", 'type=image,"src=x', PIN], "not one comma-separated record", 3),
    (["podman", "run", "--mount", "type=image,source=x\ntype=bind", PIN], "not one comma-separated record", 3),
])
def test_unreadable_image_sources_are_refused(argv, fragment, index):
    with pytest.raises(UnreadableCommandLine) as info:
        read_container_argv(argv)
    assert fragment in str(info.value) and info.value.index == index


@pytest.mark.parametrize("argv, fragment, index", [
    (["podman", "build", "--from", U, "."], "podman build builds from a Containerfile", 1),  # trial build-from
    (["podman", "build", "--from", PIN, "."], "FROM lines", 1),  # pinned --from: other stages still hidden
    (["podman", "image", "build", "."], "podman build", 2),
    (["docker", "builder", "build", "."], "docker builder build", 2),
    (["docker", "buildx", "build", "."], "unknown docker subcommand 'buildx'", 1),  # a plugin, not in docker's table
    (["podman", "kube", "play", "x.yaml"], "Kubernetes YAML", 2),  # trial kube-play
    (["podman", "play", "kube", "x.yaml"], "unknown podman subcommand 'play'", 1),
    (["nerdctl", "compose", "up"], "compose file", 1),
    (["podman", "load", "-i", "x.tar"], "archive file", 1),
    (["docker", "image", "import", "x.tar", "i"], "tarball", 2),
    (["podman", "container", "commit", "c", "i"], "container's current state", 2),
    (["podman", "container", "runlabel", "RUN", PIN], "label", 2),
    (["podman", "container", "clone", "c"], "copies a container", 2),
    (["podman", "auto-update"], "tags name", 1),
    (["podman", "unshare", "podman", "run", U], "user namespace", 1),
    (["podman", "pod", "create", "--infra-image", U], "--infra-image", 2),
    (["podman", "pod", "--log-level=debug", "create"], "before the pod subcommand word", 2),
    (["podman", "volume", "create", "--driver", "image", "--opt", f"image={U}", "v"], "--driver image", 2),
    (["docker", "service", "create", U], "swarm service", 2),
    (["docker", "plugin", "install", U], "plugin", 2),
    (["nice", "podman", "--root", "/r", "build", "."], "podman build", 4),
])
def test_subcommands_whose_images_the_argv_does_not_show_are_refused(argv, fragment, index):
    with pytest.raises(UnreadableCommandLine) as info:
        read_container_argv(argv)
    assert fragment in str(info.value) and info.value.index == index


@pytest.mark.parametrize("argv", [
    ["podman", "start", "-a", "x"], ["podman", "exec", "x", "sh"], ["podman", "stop", "x"], ["podman", "rm", "-f", "x"],
    ["podman", "logs", "x"], ["podman", "ps"], ["podman", "inspect", "x"], ["podman", "pod", "rm", "-f", "p"],
    ["podman", "kube", "down", "x.yaml"], ["podman", "volume", "rm", "v"], ["docker", "container", "stop", "x"],
])
def test_subcommands_naming_no_image_stay_allowed(argv):
    inv = read_container_argv(argv)
    assert inv is not None and inv.image is None and inv.images == ()


def test_run_options_are_recorded_in_order_under_their_long_names():
    inv = read_container_argv(["podman", "run", "--rm", "-v", "/m:/models:ro", "--env=A=1", "-e", "B=2",
                               "--network", "host", "-itp", "8080:80", "img@sha256:" + "a" * 64, "srv", "-v"])
    assert inv.options == (("rm", None), ("volume", "/m:/models:ro"), ("env", "A=1"), ("env", "B=2"),
                           ("network", "host"), ("publish", "8080:80"))
