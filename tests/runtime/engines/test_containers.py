"""Which container CLI (program, global options, env) the runtime's own container commands use.

The real thing (a private podman store selected by global options) is exercised in
test_container_argv.py; these are the pure parts: reading the prefix from an engine's argv.
"""

from __future__ import annotations



from lemonpack.runtime.engines.containers import ContainerCLI


def test_for_argv_keeps_the_program_and_global_options_and_the_plans_env():
    argv = ["env", "A=1", "/usr/bin/podman", "--root", "/x", "--runroot", "/y", "container", "run", "--rm",
            "--name", "n", "img"]
    cli = ContainerCLI.for_argv(argv, {"CONTAINER_HOST": "unix:///s", "B": "2"})
    assert cli.argv == ("/usr/bin/podman", "--root", "/x", "--runroot", "/y")
    assert dict(cli.env) == {"CONTAINER_HOST": "unix:///s", "B": "2"}
    assert cli.name == "podman"
    assert cli.command("rm", "-f", "n") == "/usr/bin/podman --root /x --runroot /y rm -f n"
    assert hash(cli) == hash(ContainerCLI.for_argv(argv, {"B": "2", "CONTAINER_HOST": "unix:///s"}))


def test_for_argv_without_a_container_cli_or_unreadable():
    assert ContainerCLI.for_argv(["llama-server", "--port", "1"]) is None
    unreadable = ["podman", "--no-such-global", "run", "img"]
    assert ContainerCLI.for_argv(unreadable) is None
    assert ContainerCLI.for_argv(unreadable, fallback="podman") == ContainerCLI(("podman",))


def test_of_accepts_a_name_a_prefix_or_a_cli():
    cli = ContainerCLI(("podman", "--root", "/x"))
    assert ContainerCLI.of("docker") == ContainerCLI(("docker",))
    assert ContainerCLI.of(["podman", "--root", "/x"]) == cli
    assert ContainerCLI.of(cli) is cli
    assert str(ContainerCLI(("podman", "--root", "/a b"))) == "podman --root '/a b'"
