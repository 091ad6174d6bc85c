"""Policy checks a user found missing: images in create/pull and stop commands, shell strings."""

import json

import pytest

from lemonpack.builder.checks import lint_problems

PINNED = "docker.io/library/busybox@sha256:" + "a" * 64


def recipe(tmp_path, block):
    doc = {"recipe": "policy-test", "display_name": "x", "api_contract_version": "1",
           "capabilities": ["completion"], "platforms": {"linux": {"cpu": block}}}
    p = tmp_path / "r.json"
    p.write_text(json.dumps(doc))
    return p


def rules(tmp_path, block):
    return [(p.path, p.rule) for p in lint_problems(recipe(tmp_path, block))]


def test_create_is_checked(tmp_path):
    assert rules(tmp_path, {"command": "podman", "args": ["create", "busybox:1.36"]}) == [
        ("platforms.linux.cpu.args[1]", "digest-pinning")]


def test_stop_command_is_checked(tmp_path):
    block = {"command": "podman", "args": ["run", PINNED], "stop_command": "podman",
             "stop_command_args": ["run", "--rm", "busybox:1.36", "true"]}
    assert rules(tmp_path, block) == [("platforms.linux.cpu.stop_command_args[2]", "digest-pinning")]


def test_arch_override_args_checked_with_the_block_command(tmp_path):
    doc = {"command": "podman", "args": ["run", PINNED],
           "arch": {"gfx1151": {"args": ["run", "--rm", "img:latest"]}}}
    assert rules(tmp_path, doc) == [("platforms.linux.cpu.arch.gfx1151.args[2]", "digest-pinning")]


@pytest.mark.parametrize("command, args", [
    ("sh", ["-c", "podman run busybox:1.36"]), ("/bin/bash", ["-lc", "x"]), ("busybox", ["sh", "-c", "x"]),
])
def test_shell_strings_refused(tmp_path, command, args):
    assert rules(tmp_path, {"command": command, "args": args}) == [("platforms.linux.cpu.args", "shell-string")]


def test_plain_commands_pass(tmp_path):
    assert rules(tmp_path, {"command": "podman", "args": ["run", "--rm", PINNED, "sh", "-c", "x"],
                            "stop_command": "podman", "stop_command_args": ["rm", "-f", "n"]}) == []
    assert rules(tmp_path, {"command": "busybox", "args": ["httpd", "-f", "-p", "{port}"]}) == []
    assert rules(tmp_path, {"command": "/usr/bin/python3", "args": ["-c", "print(1)"]}) == []


@pytest.mark.parametrize("command, args, index", [
    ("/usr/bin/env", ["podman", "run", "--rm", "alpine:3", "true"], 3),
    ("env", ["-u", "X", "A=1", "docker", "run", "alpine:3"], 5),
    ("podman-remote", ["run", "alpine:3"], 1),
    ("nerdctl", ["run", "alpine:3"], 1),
])
def test_wrappers_and_other_engines_are_checked(tmp_path, command, args, index):
    assert rules(tmp_path, {"command": command, "args": args}) == [
        (f"platforms.linux.cpu.args[{index}]", "digest-pinning")]


def test_env_split_string_is_a_shell_string(tmp_path):
    assert rules(tmp_path, {"command": "env", "args": ["-S", "podman run alpine:3"]}) == [
        ("platforms.linux.cpu.args", "shell-string")]
