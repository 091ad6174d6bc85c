"""Policy checks a user found missing: images in create/pull and stop commands, shell strings."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lemonpack.builder.checks import lint_problems
from support.recipes import recipe_doc, write_recipe

pytestmark = pytest.mark.usefixtures("home")  # a private cache and config for every test

PINNED = "docker.io/library/busybox@sha256:" + "a" * 64


def recipe(tmp_path, block):
    """``r.json``: a recipe whose only block (linux/cpu) is ``block``."""
    return write_recipe(tmp_path / "r.json", recipe_doc("policy-test", display_name="x", capabilities=["completion"],
                                                        platforms={"linux": {"cpu": block}}))


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


# --- issue 6 section 2: one reader; pinning whatever is in front and whatever flags come first

CASE01 = Path("/work/shared/cases/01-unpinned-image-behind-a-wrapper")
CASE11 = Path("/work/shared/cases/11-lint-crashes-and-leniency")


@pytest.mark.parametrize("name", ["nice.json", "setsid.json", "boolflag.json"])
def test_case01_unpinned_image_behind_a_wrapper_or_a_boolean_flag(name):
    """Case 01: the tag podman would run is what lint reports, behind nice/setsid and after a
    boolean flag written without =value."""
    problems = lint_problems(CASE01 / name)
    pins = [p for p in problems if p.rule == "digest-pinning"]
    assert pins, problems
    doc = json.loads((CASE01 / name).read_text())
    for p in pins:
        block = doc["platforms"]["linux"]["cpu"]
        index = int(p.path.rsplit("[", 1)[1].rstrip("]"))
        assert p.path.startswith("platforms.linux.cpu.args[")
        image = block["args"][index]
        assert "@sha256:" not in image and image in p.message


def test_case01_is_refused_by_the_cli():
    for name in ("nice.json", "setsid.json", "boolflag.json"):
        r = subprocess.run([sys.executable, "-m", "lemonpack.cli", "lint", str(CASE01 / name)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 1 and "[digest-pinning]" in r.stdout, r.stdout + r.stderr


def test_case01_is_refused_by_build(tmp_path):
    for name in ("nice.json", "setsid.json", "boolflag.json"):
        out = tmp_path / name
        r = subprocess.run([sys.executable, "-m", "lemonpack.cli", "build", str(CASE01 / name), "--out", str(out)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 1 and "[digest-pinning]" in r.stdout + r.stderr, r.stdout + r.stderr
        assert not out.exists()


@pytest.mark.parametrize("block, path", [
    ({"command": "nice", "args": ["-n", "5", "podman", "run", "--tls-verify", "alpine:3", PINNED]},
     "platforms.linux.cpu.args[5]"),
    ({"command": "podman", "args": ["--log-level", "debug", "container", "run", "alpine:3"]},
     "platforms.linux.cpu.args[4]"),
    ({"command": "timeout", "args": ["30", "podman", "pull", "alpine:3"]}, "platforms.linux.cpu.args[3]"),
    ({"command": "podman", "args": ["run", PINNED], "stop_command": "setsid",
      "stop_command_args": ["-f", "docker", "run", "--rm", "alpine:3"]}, "platforms.linux.cpu.stop_command_args[4]"),
])
def test_pinning_through_every_form(tmp_path, block, path):
    assert rules(tmp_path, block) == [(path, "digest-pinning")]


@pytest.mark.parametrize("block, path", [
    ({"command": "podman", "args": ["run", "--unknown-flag", "x", PINNED]}, "platforms.linux.cpu.args[1]"),
    ({"command": "foo", "args": ["podman", "run", PINNED]}, "platforms.linux.cpu.args[0]"),
    ({"command": "podman", "args": ["frobnicate", PINNED]}, "platforms.linux.cpu.args[0]"),
    ({"command": "/usr/bin/podman", "args": ["run", PINNED],
      "arch": {"gfx1151": {"command": "nice", "args": ["--bogus", "podman", "run", PINNED]}}},
     "platforms.linux.cpu.arch.gfx1151.args[0]"),
])
def test_unreadable_argv_is_a_problem_naming_the_path(tmp_path, block, path):
    problems = lint_problems(recipe(tmp_path, block))
    assert [(p.path, p.rule) for p in problems] == [(path, "container-argv")]
    assert "cannot read the container command line" in problems[0].message


def test_policy_problems_are_reported_beside_contract_problems():
    """Case 11 (quality-policy-problem-hidden-by-contract-problem): an unknown field must not hide
    the unpinned image."""
    problems = lint_problems(CASE11 / "quality-policy-problem-hidden-by-contract-problem.json")
    rules_ = {(p.path, p.rule) for p in problems}
    assert ("platforms.linux.cpu.args[1]", "digest-pinning") in rules_
    assert any(p.rule != "digest-pinning" for p in problems)


def test_ill_typed_argvs_are_left_to_the_contract(tmp_path):
    doc = {"recipe": "x", "display_name": "x", "api_contract_version": "1", "capabilities": ["completion"],
           "platforms": {"linux": {"cpu": {"command": "podman", "args": ["run", 3, "alpine:3"]},
                                   "vulkan": {"command": 7}, "rocm": [], "cuda": {"command": "podman",
                                                                                  "args": ["run", "alpine:3"]}},
                         "windows": None}}
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc))
    problems = lint_problems(p)
    assert ("platforms.linux.cuda.args[1]", "digest-pinning") in {(x.path, x.rule) for x in problems}
    assert not any(x.rule == "digest-pinning" and ".cpu." in x.path for x in problems)


def test_runtime_and_builder_share_the_policy():
    import lemonpack.builder.checks as checks
    import lemonpack.runtime.recipes.discovery as discovery
    from lemonpack.oci import policy
    assert checks.require_pinned is policy.require_pinned
    assert discovery.recipe_policy_problems is policy.recipe_policy_problems


# --- every image an argv names, trial k1-argv (pull-multi, mount-type-image, build-from, kube-play)

UNPINNED = "docker.io/example/engine:latest"


@pytest.mark.parametrize("block, paths", [
    ({"command": "podman", "args": ["pull", PINNED, UNPINNED]}, ["platforms.linux.cpu.args[2]"]),
    ({"command": "podman", "args": ["pull", UNPINNED, "-q", "busybox:1.36"]},
     ["platforms.linux.cpu.args[1]", "platforms.linux.cpu.args[3]"]),
    ({"command": "podman", "args": ["run", "--mount", f"type=image,source={UNPINNED},destination=/m", PINNED]},
     ["platforms.linux.cpu.args[2]"]),
    ({"command": "nice", "args": ["podman", "create", f"--mount=type=image,src={UNPINNED},dst=/m", PINNED]},
     ["platforms.linux.cpu.args[2]"]),
    ({"command": "podman", "args": ["run", PINNED], "stop_command": "podman",
      "stop_command_args": ["pull", PINNED, UNPINNED]}, ["platforms.linux.cpu.stop_command_args[2]"]),
])
def test_every_image_of_the_argv_must_be_pinned(tmp_path, block, paths):
    problems = lint_problems(recipe(tmp_path, block))
    assert [(p.path, p.rule) for p in problems] == [(path, "digest-pinning") for path in paths]
    assert all("not pinned by digest" in p.message for p in problems)


def test_pinned_mount_images_and_pulls_pass(tmp_path):
    assert rules(tmp_path, {"command": "podman", "args": [
        "run", "--mount", f"type=image,source={PINNED},destination=/m", "--mount", "type=bind,src=/tmp,dst=/t",
        PINNED]}) == []
    assert rules(tmp_path, {"command": "podman", "args": ["pull", PINNED, PINNED]}) == []


@pytest.mark.parametrize("block, path, fragment", [
    ({"command": "podman", "args": ["build", "--from", UNPINNED, "."]}, "platforms.linux.cpu.args[0]", "Containerfile"),
    ({"command": "podman", "args": ["kube", "play", "x.yaml"]}, "platforms.linux.cpu.args[1]", "Kubernetes YAML"),
    ({"command": "docker", "args": ["pull", PINNED, UNPINNED]}, "platforms.linux.cpu.args[2]", "exactly one image"),
    ({"command": "podman", "args": ["run", PINNED], "stop_command": "podman",
      "stop_command_args": ["image", "load", "-i", "x.tar"]}, "platforms.linux.cpu.stop_command_args[1]", "archive"),
])
def test_hidden_or_extra_images_are_container_argv_problems(tmp_path, block, path, fragment):
    problems = lint_problems(recipe(tmp_path, block))
    assert [(p.path, p.rule) for p in problems] == [(path, "container-argv")]
    assert fragment in problems[0].message


def test_subcommands_naming_no_image_pass(tmp_path):
    for args in (["start", "-a", "x"], ["exec", "x", "sh"], ["logs", "-f", "x"]):
        assert rules(tmp_path, {"command": "podman", "args": args}) == []


def test_build_records_every_image_once():
    from lemonpack.oci.policy import container_images
    assert container_images("podman", ["run", "--mount", f"type=image,source={PINNED},dst=/m", "x@sha256:" + "b" * 64]) == (
        PINNED, "x@sha256:" + "b" * 64)
    assert container_images("podman", ["pull", PINNED, "-q", PINNED]) == (PINNED,)


def test_policy_paths_name_odd_keys_as_the_contract_does():
    """An arch override key that is not a plain word is written ``["..."]`` by the pinning
    policy exactly as the contract's messages write it (one joiner: lemonpack.jsonpath)."""
    from lemonpack import jsonpath
    from lemonpack.oci.policy import document_policy_problems

    key = "x86.ü\n"
    doc = {"platforms": {"linux": {"cpu": {"command": "podman", "args": ["run", "img:tag"],
                                           "arch": {key: {"args": ["run", "other:tag"]}}}}}}
    paths = {p.path for p in document_policy_problems("r.json", doc)}
    assert paths == {"platforms.linux.cpu.args[1]",
                     jsonpath.join(["platforms", "linux", "cpu", "arch", key]) + ".args[1]"}
    assert 'arch["x86.ü\\n"].args[1]' in "".join(paths)
