"""Container launches read by the one command-line reader, for real under podman.

- case 06: a model name landing in a container name (``--name lp-{model_name}``, a model file
  ``Qwen3:Q4_K_M.gguf``) does not break the launch: the name is made valid
  (:func:`lemonpack.oci.cmdline.valid_container_name`), and stop and clean-up use that name;
- the forms the old parsers missed (issue 6 section 2): a wrapper in front, global options before
  the subcommand and ``container run`` get the runtime's labels and are removed on stop;
- global options select the store: a container started as ``podman --root R --runroot RR
  --storage-driver vfs run ...`` (a private store under tmp) is inspected, found by label,
  cleared before a start, removed on stop and by the crash sentinel in THAT store, never in
  the default one.

slow: real podman + runc with the suite's busybox image referenced by digest.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from lemonpack.contract.model import HealthProbe
from lemonpack.oci.cmdline import valid_container_name
from lemonpack.runtime.engines.containers import (
    LABEL_ENGINE, LABEL_OWNER, ContainerCLI, container_exists, container_labels,
)
from lemonpack.runtime.engines.handles import Engines
from lemonpack.runtime.launch.plan import LaunchPlan

from support.helpers import RunProcess, free_port, wait_for
from support.recipes import http_probe, recipe_doc, write_recipe

pytestmark = pytest.mark.slow


def argv_recipe(path: Path, image, prefix: list[str], name_template: str) -> Path:
    """A container recipe at ``path`` whose argv is ``prefix`` + ``run ...`` (prefix: wrappers, the
    CLI, global options, the subcommand's group word)."""
    return write_recipe(path, recipe_doc(
        "argv-container", display_name="busybox httpd", command=prefix[0],
        args=[*prefix[1:], "run", "--rm", "--name", name_template, "--network", "host", image.ref,
              *image.shell, image.command("{port}", 0, "{host}")],
        block={"stop_command": "podman", "stop_command_args": ["rm", "-f", "-t", "0", name_template]},
        health_probe=http_probe("/cgi-bin/health", timeout=60, poll_ms=100)))


def run_and_stop(tmp_path: Path, recipe: Path, model: Path, expected_name: str) -> None:
    env = {"LEMONPACK_CACHE_DIR": str(tmp_path / "c"), "LEMONPACK_CONFIG_DIR": str(tmp_path / "f"),
           "LEMONPACK_HOST_FACTS": '{"os":"linux","accelerators":["cpu"]}'}
    run = RunProcess([str(recipe), "--model", str(model), "--quiet"], env)
    try:
        assert run.wait_line("ready: ", timeout=90), "".join(run.stderr)
        assert container_exists("podman", expected_name)
        labels = container_labels("podman", expected_name)
        assert labels and labels.get(LABEL_OWNER), labels  # the runtime's labels reached the container
        os.kill(run.proc.pid, signal.SIGINT)
        rc = run.finish()
        assert rc in (0, 130), "".join(run.stderr)
        assert wait_for(lambda: not container_exists("podman", expected_name), 15, 0.2), "container left behind"
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()
        import subprocess
        subprocess.run(["podman", "rm", "-f", "-t", "0", expected_name], capture_output=True, timeout=60)


def test_case06_model_name_in_container_name(podman_env, tmp_path):
    models = tmp_path / "m"
    models.mkdir()
    model = models / "Qwen3:Q4_K_M.gguf"
    model.write_bytes(b"GGUF")
    recipe = argv_recipe(tmp_path / "r.json", podman_env["image"], ["podman"], "lp-{model_name}")
    name = valid_container_name("lp-Qwen3:Q4_K_M")  # `run --model FILE` names the model by the file's stem
    assert name != "lp-Qwen3:Q4_K_M" and name.startswith("lp-Qwen3-Q4_K_M-")
    run_and_stop(tmp_path, recipe, model, name)


@pytest.mark.parametrize("prefix", [
    ["nice", "-n", "5", "podman"],
    ["podman", "--log-level", "error", "container"],
    # setsid forks when its caller leads a process group (the runtime starts engines in a new
    # session), so it needs --wait to stay the engine process
    ["setsid", "--wait", "/usr/bin/podman", "--log-level=error"],
], ids=["nice", "globals-container-run", "setsid-abs-path"])
def test_wrapped_and_grouped_forms_get_labels_and_clean_up(podman_env, tmp_path, prefix):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    name_template = "lp-argv-{port}"
    recipe = argv_recipe(tmp_path / "r.json", podman_env["image"], prefix, name_template)
    # the port is chosen by `lemonpack run`; find the container by the runtime's label instead
    env = {"LEMONPACK_CACHE_DIR": str(tmp_path / "c"), "LEMONPACK_CONFIG_DIR": str(tmp_path / "f"),
           "LEMONPACK_HOST_FACTS": '{"os":"linux","accelerators":["cpu"]}'}
    from support.helpers import free_port
    port = free_port()
    run = RunProcess([str(recipe), "--model", str(model), "--port", str(port), "--quiet"], env)
    name = f"lp-argv-{port}"
    try:
        assert run.wait_line("ready: ", timeout=90), "".join(run.stderr)
        labels = container_labels("podman", name)
        assert labels and labels.get(LABEL_OWNER), labels
        os.kill(run.proc.pid, signal.SIGINT)
        assert run.finish() in (0, 130), "".join(run.stderr)
        assert wait_for(lambda: not container_exists("podman", name), 15, 0.2), "container left behind"
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()
        import subprocess
        subprocess.run(["podman", "rm", "-f", "-t", "0", name], capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def private_store(podman_env, tmp_path_factory):
    """A private podman store (``--root``/``--runroot``, vfs) holding the suite's test image.
    Yields the podman argv prefix selecting it; removes its containers, images and directories
    at the end."""
    root = tmp_path_factory.mktemp("lp-store")
    runroot = Path(tempfile.mkdtemp(prefix="lp-run-"))  # podman: runroot must be short
    prefix = ["podman", "--root", str(root), "--runroot", str(runroot), "--storage-driver", "vfs"]
    image = podman_env["image"]
    try:
        # storage to storage keeps the manifest, so `name@digest` resolves in the private store too
        copied = subprocess.run(["skopeo", "copy", f"containers-storage:{image.tag}",
                                 f"containers-storage:[vfs@{root}+{runroot}]{image.tag}"],
                                capture_output=True, text=True, timeout=300)
        assert copied.returncode == 0, copied.stderr
        yield prefix
    finally:
        subprocess.run([*prefix, "rm", "-a", "-f", "-t", "0"], capture_output=True, timeout=120)
        subprocess.run([*prefix, "rmi", "-a", "-f"], capture_output=True, timeout=120)
        shutil.rmtree(runroot, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


def in_store(prefix: list[str], name: str) -> bool:
    """True while the store ``prefix`` selects holds a container named ``name``."""
    r = subprocess.run([*prefix, "ps", "-a", "-q", "--filter", f"name=^{name}$"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return bool(r.stdout.strip())


def test_global_options_select_the_store_of_every_container_command(podman_env, private_store):
    image = podman_env["image"]
    port = free_port()
    name = f"lp-store-{port}-{os.urandom(3).hex()}"
    # a leftover of a dead runtime holds the name in the private store: cleared before the start
    made = subprocess.run([*private_store, "create", "--label", f"{LABEL_OWNER}=1-1", "--name", name, image.tag,
                           "true"], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    argv = (*private_store, "run", "--rm", "--name", name, "--network", "host", image.ref, *image.shell,
            image.command(port, 0.5))
    probe = HealthProbe(type="http", endpoint="/cgi-bin/health", expected_status=200, timeout_seconds=30,
                        poll_interval_ms=100)
    # no stop command: the runtime removes the container itself, through the same global options
    plan = LaunchPlan(recipe="store", model="none", executable="podman", argv=argv, port=port, health_probe=probe,
                      container_name=name, container_runtime="podman")
    engines = Engines(grace=1.0)
    try:
        eng = engines.start(plan)  # ready only when `inspect` in the private store says it runs
        assert eng.container_cli == ContainerCLI(tuple(private_store))
        assert engines.owns_port(eng) is True
        labels = container_labels(eng.container_cli, name)
        assert labels and labels[LABEL_OWNER] == engines.runtime_id and labels[LABEL_ENGINE] == eng.tag
        assert not container_exists("podman", name)  # the default store does not hold it
        engines.stop(eng)
        assert not in_store(private_store, name), "container left in the private store"
    finally:
        engines.close()
        subprocess.run([*private_store, "rm", "-f", "-t", "0", name], capture_output=True, timeout=60)


def test_sentinel_removes_a_container_of_a_killed_runtime_from_its_store(podman_env, private_store, tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    # the recipe's stop command (`podman rm` without the global options) misses the private store
    recipe = argv_recipe(tmp_path / "r.json", podman_env["image"], [*private_store, "container"], "lp-store-{port}")
    env = {"LEMONPACK_CACHE_DIR": str(tmp_path / "c"), "LEMONPACK_CONFIG_DIR": str(tmp_path / "f"),
           "LEMONPACK_HOST_FACTS": '{"os":"linux","accelerators":["cpu"]}'}
    port = free_port()
    name = f"lp-store-{port}"
    run = RunProcess([str(recipe), "--model", str(model), "--port", str(port), "--quiet"], env)
    try:
        assert run.wait_line("ready: ", timeout=90), "".join(run.stderr)
        assert in_store(private_store, name)
        os.kill(run.proc.pid, signal.SIGKILL)
        run.finish()
        assert wait_for(lambda: not in_store(private_store, name), 20, 0.2), "the sentinel left the container"
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()
        subprocess.run([*private_store, "rm", "-f", "-t", "0", name], capture_output=True, timeout=60)
