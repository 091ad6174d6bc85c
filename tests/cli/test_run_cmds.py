"""``lemonpack run`` argument checks, recipe resolution and messages, against real files,
real descriptor directories, real sockets and the real fake engine."""

from __future__ import annotations

import json
import signal
import socket
from pathlib import Path

import pytest

from support.helpers import RunProcess, free_port
from support.recipes import recipe_doc, write_recipe

from lemonpack.cli import main


@pytest.fixture
def backends(home) -> Path:
    """The only descriptor directory of the search path, on a CPU-only host."""
    home.host()
    (directory,) = home.search_path(home.root / "backends")
    return directory


@pytest.fixture
def model(home) -> Path:
    return home.model()


def variant_doc(rid: str = "fake-llama") -> dict:
    """A variant_of recipe for the user's own binary (no source, no sha256: roll_forward)."""
    return recipe_doc(rid, display_name="Fake llama", variant_of="llamacpp", version_policy="roll_forward",
                      binary="llama-server")


# --- 1. a port in use -------------------------------------------------------------------


def test_port_in_use_is_refused_before_spawning(tmp_path, backends, model, capsys):
    pids = tmp_path / "pids"
    recipe = write_recipe(tmp_path / "fake.json", recipe_doc(fake_engine=["--pid-file", str(pids)]))
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        assert main(["run", str(recipe), "-m", str(model), "--port", str(port)]) == 2  # as serve --port
    out, err = capsys.readouterr()
    assert f"port {port} on 127.0.0.1 is already in use" in err and "ready:" not in out
    assert not pids.exists()  # nothing was spawned


# --- 2. digest pinning --------------------------------------------------------------------


def test_unpinned_container_recipe_is_refused_with_the_lint_problems(tmp_path, backends, model, capsys):
    doc = {"recipe": "tagged", "display_name": "Tagged", "api_contract_version": "1",
           "capabilities": ["chat_completion"],
           "platforms": {"linux": {"cpu": {"command": "podman", "args": [
               "run", "--rm", "--name", "tagged-{port}", "-p", "{port}:8080", "docker.io/library/engine:latest"]}}}}
    f = tmp_path / "tagged.json"
    f.write_text(json.dumps(doc))
    assert main(["run", str(f), "-m", str(model)]) == 1
    err = capsys.readouterr().err
    assert "platforms.linux.cpu.args[6]: container image not pinned by digest" in err and "[digest-pinning]" in err
    assert "starting" not in err
    assert main(["run", str(f), "-m", str(model), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["problems"][0]["rule"] == "digest-pinning"


# --- 3. recipe by id, rejected ids, missing files, the install hint ------------------------


def test_recipe_id_rejected_descriptor_says_why(tmp_path, backends, model, capsys):
    doc = recipe_doc("tcp-web", fake_engine=[])
    f = write_recipe(backends / "tcp-web.json", doc, mode=0o666)
    assert main(["run", "tcp-web", "-m", str(model)]) == 1
    err = capsys.readouterr().err
    assert f"tcp-web was found at {f} but rejected: untrusted" in err and "(mode 0666)" in err
    assert "lemonpack backends list --all" in err


def test_missing_recipe_file_and_unknown_id(backends, model, capsys):
    assert main(["run", "nope.json", "-m", str(model)]) == 1
    assert "recipe file not found: nope.json" in capsys.readouterr().err
    assert main(["run", "no-such-id", "-m", str(model)]) == 1
    err = capsys.readouterr().err
    assert "no recipe file or discovered recipe named 'no-such-id'" in err and str(backends) in err


def test_missing_binary_hint_names_the_recipe_as_given(tmp_path, backends, model, capsys):
    write_recipe(backends / "fake-llama.json", variant_doc())
    assert main(["run", "fake-llama", "-m", str(model)]) == 1
    assert "run `lemonpack install fake-llama`" in capsys.readouterr().err
    f = tmp_path / "my recipes" / "other.json"
    f.parent.mkdir()
    f.write_text(json.dumps(variant_doc("other-llama")))
    assert main(["run", str(f), "-m", str(model)]) == 1
    assert f"run `lemonpack install '{f}'`" in capsys.readouterr().err


def test_recipe_id_runs_the_discovered_descriptor(tmp_path, backends, model):
    doc = recipe_doc("disc-engine", fake_engine=[])
    write_recipe(backends / "disc.json", doc)
    run = RunProcess(["disc-engine", "-m", str(model), "--quiet"])
    assert run.wait_line("ready: "), run.err
    run.proc.send_signal(signal.SIGINT)
    assert run.finish() == 130, run.err


# --- 5. --device and --port ----------------------------------------------------------------


def test_unknown_device_is_a_usage_error_naming_the_offered_blocks(tmp_path, backends, model, capsys):
    recipe = write_recipe(tmp_path / "fake.json", recipe_doc(fake_engine=[]))
    assert main(["run", str(recipe), "-m", str(model), "--device", "rocm"]) == 2
    err = capsys.readouterr().err
    assert "--device" in err and "no 'rocm' block for linux" in err and "it offers: cpu" in err


@pytest.mark.parametrize("port", ["0", "99999", "-1"])
def test_port_out_of_range_is_a_usage_error(tmp_path, backends, model, capsys, port):
    recipe = write_recipe(tmp_path / "fake.json", recipe_doc(fake_engine=[]))
    assert main(["run", str(recipe), "-m", str(model), "--port", port]) == 2
    assert "--port" in capsys.readouterr().err


def test_given_port_is_the_printed_url(tmp_path, backends, model):
    port = free_port()
    recipe = write_recipe(tmp_path / "fake.json", recipe_doc(fake_engine=[]))
    run = RunProcess([str(recipe), "-m", str(model), "--port", str(port), "--quiet"])
    ready = run.wait_line("ready: ")
    assert ready and ready.split()[1] == f"http://127.0.0.1:{port}", run.err
    run.proc.send_signal(signal.SIGINT)
    assert run.finish() == 130, run.err


# --- 6. a model path that does not exist -----------------------------------------------------


@pytest.mark.parametrize("ref", ["/path/missing.gguf", "missing.safetensors", "sub/model"])
def test_missing_model_path_says_file_not_found(tmp_path, backends, ref, capsys):
    recipe = write_recipe(tmp_path / "fake.json", recipe_doc(fake_engine=[]))
    assert main(["run", str(recipe), "-m", ref]) == 1
    err = capsys.readouterr().err
    assert f"model file not found: {ref}" in err and "user_models.json" not in err


def test_unknown_model_name_still_names_the_registry(tmp_path, backends, capsys):
    recipe = write_recipe(tmp_path / "fake.json", recipe_doc(fake_engine=[]))
    assert main(["run", str(recipe), "-m", "user.nope"]) == 1
    assert "no model file or registered model named 'user.nope' in " in capsys.readouterr().err


# --- 7. the probe it waits for -----------------------------------------------------------------


def test_starting_line_names_the_default_probe_even_with_quiet(tmp_path, backends, model):
    doc = recipe_doc(fake_engine=[])
    del doc["health_probe"]
    f = tmp_path / "noprobe.json"
    f.write_text(json.dumps(doc))
    port = free_port()
    run = RunProcess([str(f), "-m", str(model), "--port", str(port), "--quiet"])
    assert run.wait_line("ready: "), run.err
    run.proc.send_signal(signal.SIGINT)
    assert run.finish() == 130, run.err
    starting = next(line for line in run.err.splitlines() if line.startswith("starting "))
    assert f"http GET http://127.0.0.1:{port}/health -> 200 (timeout 60s, every 500 ms)" in starting
    assert "the default probe: the recipe sets no health_probe" in starting


def test_engine_exiting_before_the_probe_answers_reads_well(tmp_path, backends, model):
    recipe = write_recipe(tmp_path / "fake.json", recipe_doc(fake_engine=["--exit-now", "--exit-code", "3"]))
    run = RunProcess([str(recipe), "-m", str(model), "--quiet"])
    assert run.finish() == 7
    assert "exited with code 3 before its health probe answered" in run.err or \
        "exited with code 3 during its health probe (last seen: connection refused)" in run.err
    assert "not probed yet" not in run.err


# --- found by a second user trial ------------------------------------------------------------


@pytest.mark.parametrize("args, hint", [
    (["--host", "nohost.invalid"], "--host"), (["--host", "192.0.2.1"], "--host"), (["--host", " "], "--host"),
    (["-o", "nokeyvalue"], "--option"),
])
def test_bad_host_or_option_is_a_usage_error_without_traceback(tmp_path, backends, model, capsys, args, hint):
    recipe = write_recipe(tmp_path / "fake.json", recipe_doc(fake_engine=[]))
    code = main(["run", str(recipe), "--model", str(model), *args])
    err = capsys.readouterr().err
    assert code == 2 and hint in err and "Traceback" not in err


def test_model_registered_for_another_recipe_warns(tmp_path, backends, model, capsys):
    recipe = write_recipe(tmp_path / "fake.json", recipe_doc(fake_engine=["--health-delay", "0"]))
    assert main(["models", "add", "user.other", "--recipe", "someone-else", "--force",
                 "-c", f"main={model}"]) == 0
    run = RunProcess([str(recipe), "--model", "user.other", "--quiet"])
    assert run.wait_line("ready: "), run.err
    run.proc.send_signal(signal.SIGINT)
    assert run.finish() == 130
    assert "registered for recipe 'someone-else'" in run.err


def test_json_errors_are_one_line(tmp_path, backends, model, capsys):
    code = main(["run", str(tmp_path / "missing.json"), "--model", str(model), "--json"])
    out = capsys.readouterr().out
    assert code == 1 and len(out.strip().splitlines()) == 1
    assert json.loads(out)["message"].startswith("recipe file not found")


# --- warnings: section 9's selection lands on a block for an accelerator the host lacks --------
# (on stderr, and as ``warnings`` in the ``--json`` ready line)

def _blocks_recipe(home, blocks: tuple[str, ...], default: str | None = None) -> Path:
    doc = recipe_doc(fake_engine=[])
    block = doc["platforms"]["linux"]["cpu"]
    doc["platforms"]["linux"] = {b: block for b in blocks}
    if default:
        doc["default_accelerator"] = default
    return write_recipe(home.root / "fake.json", doc)


def _ready(run: RunProcess) -> dict:
    line = run.wait_line("{")
    assert line, "".join(run.stderr)
    run.proc.send_signal(signal.SIGINT)
    run.finish()
    return json.loads(line)


@pytest.mark.parametrize("blocks, default, args, why", [
    (("rocm",), None, [], "no block of the recipe (rocm) is for an accelerator this host has"),
    (("cpu", "rocm"), "rocm", [], "it is the recipe's default_accelerator"),
    (("cpu", "rocm"), None, ["--device", "rocm"], "it was requested (--device rocm)"),
    (("cpu", "rocm"), None, ["-o", "device=rocm"], "it was requested (the device option rocm)"),
])
def test_run_warns_naming_the_block_and_why(home, blocks, default, args, why):
    home.host()
    model = home.model("m.gguf")
    run = RunProcess([str(_blocks_recipe(home, blocks, default)), "-m", str(model), "--json", "-q", *args])
    ready = _ready(run)
    expected = f"using block platforms.linux.rocm although this host has no rocm (host accelerators: cpu): {why}"
    assert ready["event"] == "ready" and ready["warnings"] == [expected]
    assert f"warning: {expected}" in "".join(run.stderr)


def test_run_on_a_host_with_the_accelerator_does_not_warn(home):
    home.host({"os": "linux", "accelerators": ["rocm"]})
    model = home.model("m.gguf")
    run = RunProcess([str(_blocks_recipe(home, ("cpu", "rocm"))), "-m", str(model), "--json", "-q"])
    assert _ready(run)["warnings"] == []
    assert "warning" not in "".join(run.stderr)


# --- oci:// checkpoints (issue 23, point 3) -------------------------------------------------------

def test_run_offline_refuses_an_oci_model_the_store_lacks_and_pulls_it_otherwise(tmp_path, backends, home, registry,
                                                                                 capsys):
    from lemonpack.runtime.lifecycle.foreground import prepare_run
    from lemonpack.runtime.models.push import push_model
    from lemonpack.runtime.models.registry import ModelRegistry

    from support.llama_server import write_tiny_gguf

    model = write_tiny_gguf(tmp_path / "tiny-llama.gguf")
    ref = f"oci://{registry.host}/models/m@{push_model([model], f'{registry.host}/models/m:v1').digest}"
    pids = tmp_path / "pids"
    doc = recipe_doc(fake_engine=["--pid-file", str(pids), "--main-file", "{checkpoint:main}"])  # argv only: never spawned
    recipe = write_recipe(tmp_path / "fake.json", doc)
    ModelRegistry().add("user.m", "fake-engine", {"main": ref})
    assert main(["run", str(recipe), "-m", "user.m", "--offline"]) == 1
    err = capsys.readouterr().err
    assert "--offline forbids fetching it" in err and f"lemonpack models pull {ref}" in err
    assert not pids.exists()  # nothing spawned
    fg = prepare_run(str(recipe), "user.m")  # online: pulled before the plan, launched from the store
    arg = fg.plan.argv[fg.plan.argv.index("--main-file") + 1]
    assert Path(arg).read_bytes() == model.read_bytes() and "models" in Path(arg).parts and arg != str(model)
    again = prepare_run(str(recipe), "user.m", offline=True).plan.argv  # now from the store
    assert again[again.index("--main-file") + 1] == arg
