"""Container launches read by the one command-line reader, for real under podman.

- case 06: a model name landing in a container name (``--name lp-{model_name}``, a model file
  ``Qwen3:Q4_K_M.gguf``) does not break the launch: the name is made valid
  (:func:`lemonpack.oci.cmdline.valid_container_name`), and stop and clean-up use that name;
- the forms the old parsers missed (issue 6 section 2): a wrapper in front, global options before
  the subcommand and ``container run`` get the runtime's labels and are removed on stop.

slow: real podman + runc with the suite's busybox image referenced by digest.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.helpers import RunProcess, wait_for  # noqa: E402

from lemonpack.oci.cmdline import valid_container_name  # noqa: E402
from lemonpack.runtime.containers import LABEL_OWNER, container_exists, container_labels  # noqa: E402

pytestmark = pytest.mark.slow


def write_recipe(path: Path, image, prefix: list[str], name_template: str) -> Path:
    """A container recipe whose argv is ``prefix`` + ``run ...`` (prefix: wrappers, the CLI,
    global options, the subcommand's group word)."""
    doc = {
        "recipe": "argv-container", "display_name": "busybox httpd", "api_contract_version": "1",
        "capabilities": ["chat_completion"],
        "health_probe": {"type": "http", "endpoint": "/cgi-bin/health", "expected_status": 200,
                         "timeout_seconds": 60, "poll_interval_ms": 100},
        "platforms": {"linux": {"cpu": {
            "command": prefix[0],
            "args": [*prefix[1:], "run", "--rm", "--name", name_template, "--network", "host", image.ref,
                     *image.shell, image.command("{port}", 0, "{host}")],
            "stop_command": "podman", "stop_command_args": ["rm", "-f", "-t", "0", name_template],
        }}},
    }
    path.write_text(json.dumps(doc))
    return path


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
    recipe = write_recipe(tmp_path / "r.json", podman_env["image"], ["podman"], "lp-{model_name}")
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
    recipe = write_recipe(tmp_path / "r.json", podman_env["image"], prefix, name_template)
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
