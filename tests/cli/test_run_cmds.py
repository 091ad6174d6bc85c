"""``lemonpack run`` argument checks, recipe resolution and messages, against real files,
real descriptor directories, real sockets and the real fake engine."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.helpers import RunProcess, fake_recipe, free_port  # noqa: E402

from lemonpack.cli import main  # noqa: E402

CPU_HOST = json.dumps({"os": "linux", "accelerators": ["cpu"]})


@pytest.fixture
def env(tmp_path, monkeypatch):
    backends = tmp_path / "backends"
    backends.mkdir()
    os.chmod(backends, 0o755)
    values = {"LEMONPACK_CACHE_DIR": str(tmp_path / "cache"), "LEMONPACK_CONFIG_DIR": str(tmp_path / "config"),
              "LEMONPACK_BACKENDS_PATH": str(backends), "LEMONPACK_HOST_FACTS": CPU_HOST, "COLUMNS": "250"}
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    return values


@pytest.fixture
def model(tmp_path):
    m = tmp_path / "tiny.gguf"
    m.write_bytes(b"GGUF")
    return m


def descriptor(env, name: str, doc: dict, mode: int = 0o644) -> Path:
    p = Path(env["LEMONPACK_BACKENDS_PATH"]) / name
    p.write_text(json.dumps(doc))
    os.chmod(p, mode)
    return p


def variant_doc(rid: str = "fake-llama") -> dict:
    return {"recipe": rid, "display_name": "Fake llama", "api_contract_version": "1", "variant_of": "llamacpp",
            "version_policy": "roll_forward",  # the user's own binary: no source, no sha256
            "capabilities": ["chat_completion"], "platforms": {"linux": {"cpu": {"binary": "llama-server"}}}}


# --- 1. a port in use -------------------------------------------------------------------


def test_port_in_use_is_refused_before_spawning(tmp_path, env, model, capsys):
    pids = tmp_path / "pids"
    recipe = fake_recipe(tmp_path / "fake.json", "--pid-file", str(pids))
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        assert main(["run", str(recipe), "-m", str(model), "--port", str(port)]) == 2  # as serve --port
    out, err = capsys.readouterr()
    assert f"port {port} on 127.0.0.1 is already in use" in err and "ready:" not in out
    assert not pids.exists()  # nothing was spawned


# --- 2. digest pinning --------------------------------------------------------------------


def test_unpinned_container_recipe_is_refused_with_the_lint_problems(tmp_path, env, model, capsys):
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


def test_recipe_id_rejected_descriptor_says_why(tmp_path, env, model, capsys):
    doc = json.loads(fake_recipe(tmp_path / "x.json", recipe="tcp-web").read_text())
    f = descriptor(env, "tcp-web.json", doc, mode=0o666)
    assert main(["run", "tcp-web", "-m", str(model)]) == 1
    err = capsys.readouterr().err
    assert f"tcp-web was found at {f} but rejected: untrusted" in err and "(mode 0666)" in err
    assert "lemonpack backends list --all" in err


def test_missing_recipe_file_and_unknown_id(env, model, capsys):
    assert main(["run", "nope.json", "-m", str(model)]) == 1
    assert "recipe file not found: nope.json" in capsys.readouterr().err
    assert main(["run", "no-such-id", "-m", str(model)]) == 1
    err = capsys.readouterr().err
    assert "no recipe file or discovered recipe named 'no-such-id'" in err and env["LEMONPACK_BACKENDS_PATH"] in err


def test_missing_binary_hint_names_the_recipe_as_given(tmp_path, env, model, capsys):
    descriptor(env, "fake-llama.json", variant_doc())
    assert main(["run", "fake-llama", "-m", str(model)]) == 1
    assert "run `lemonpack install fake-llama`" in capsys.readouterr().err
    f = tmp_path / "my recipes" / "other.json"
    f.parent.mkdir()
    f.write_text(json.dumps(variant_doc("other-llama")))
    assert main(["run", str(f), "-m", str(model)]) == 1
    assert f"run `lemonpack install '{f}'`" in capsys.readouterr().err


def test_recipe_id_runs_the_discovered_descriptor(tmp_path, env, model):
    doc = json.loads(fake_recipe(tmp_path / "x.json", recipe="disc-engine").read_text())
    descriptor(env, "disc.json", doc)
    run = RunProcess(["disc-engine", "-m", str(model), "--quiet"], env)
    assert run.wait_line("ready: "), run.err
    run.proc.send_signal(signal.SIGINT)
    assert run.finish() == 130, run.err


# --- 5. --device and --port ----------------------------------------------------------------


def test_unknown_device_is_a_usage_error_naming_the_offered_blocks(tmp_path, env, model, capsys):
    recipe = fake_recipe(tmp_path / "fake.json")
    assert main(["run", str(recipe), "-m", str(model), "--device", "rocm"]) == 2
    err = capsys.readouterr().err
    assert "--device" in err and "no 'rocm' block for linux" in err and "it offers: cpu" in err


@pytest.mark.parametrize("port", ["0", "99999", "-1"])
def test_port_out_of_range_is_a_usage_error(tmp_path, env, model, capsys, port):
    recipe = fake_recipe(tmp_path / "fake.json")
    assert main(["run", str(recipe), "-m", str(model), "--port", port]) == 2
    assert "--port" in capsys.readouterr().err


def test_given_port_is_the_printed_url(tmp_path, env, model):
    port = free_port()
    recipe = fake_recipe(tmp_path / "fake.json")
    run = RunProcess([str(recipe), "-m", str(model), "--port", str(port), "--quiet"], env)
    ready = run.wait_line("ready: ")
    assert ready and ready.split()[1] == f"http://127.0.0.1:{port}", run.err
    run.proc.send_signal(signal.SIGINT)
    assert run.finish() == 130, run.err


# --- 6. a model path that does not exist -----------------------------------------------------


@pytest.mark.parametrize("ref", ["/path/missing.gguf", "missing.safetensors", "sub/model"])
def test_missing_model_path_says_file_not_found(tmp_path, env, ref, capsys):
    recipe = fake_recipe(tmp_path / "fake.json")
    assert main(["run", str(recipe), "-m", ref]) == 1
    err = capsys.readouterr().err
    assert f"model file not found: {ref}" in err and "user_models.json" not in err


def test_unknown_model_name_still_names_the_registry(tmp_path, env, capsys):
    recipe = fake_recipe(tmp_path / "fake.json")
    assert main(["run", str(recipe), "-m", "user.nope"]) == 1
    assert "no model named 'user.nope'" in capsys.readouterr().err


# --- 7. the probe it waits for -----------------------------------------------------------------


def test_starting_line_names_the_default_probe_even_with_quiet(tmp_path, env, model):
    doc = json.loads(fake_recipe(tmp_path / "x.json").read_text())
    del doc["health_probe"]
    f = tmp_path / "noprobe.json"
    f.write_text(json.dumps(doc))
    port = free_port()
    run = RunProcess([str(f), "-m", str(model), "--port", str(port), "--quiet"], env)
    assert run.wait_line("ready: "), run.err
    run.proc.send_signal(signal.SIGINT)
    assert run.finish() == 130, run.err
    starting = next(line for line in run.err.splitlines() if line.startswith("starting "))
    assert f"http GET http://127.0.0.1:{port}/health -> 200 (timeout 60s, every 500 ms)" in starting
    assert "the default probe: the recipe sets no health_probe" in starting


def test_engine_exiting_before_the_probe_answers_reads_well(tmp_path, env, model):
    recipe = fake_recipe(tmp_path / "fake.json", "--exit-now", "--exit-code", "3")
    run = RunProcess([str(recipe), "-m", str(model), "--quiet"], env)
    assert run.finish() == 7
    assert "exited with code 3 before its health probe answered" in run.err or \
        "exited with code 3 during its health probe (last seen: connection refused)" in run.err
    assert "not probed yet" not in run.err


# --- found by a second user trial ------------------------------------------------------------


@pytest.mark.parametrize("args, hint", [
    (["--host", "nohost.invalid"], "--host"), (["--host", "192.0.2.1"], "--host"), (["--host", " "], "--host"),
    (["-o", "nokeyvalue"], "--option"),
])
def test_bad_host_or_option_is_a_usage_error_without_traceback(tmp_path, env, model, capsys, args, hint):
    recipe = fake_recipe(tmp_path / "fake.json")
    code = main(["run", str(recipe), "--model", str(model), *args])
    err = capsys.readouterr().err
    assert code == 2 and hint in err and "Traceback" not in err


def test_model_registered_for_another_recipe_warns(tmp_path, env, model, capsys):
    recipe = fake_recipe(tmp_path / "fake.json", "--health-delay", "0")
    assert main(["models", "add", "user.other", "--recipe", "someone-else", "--force",
                 "-c", f"main={model}"]) == 0
    run = RunProcess([str(recipe), "--model", "user.other", "--quiet"], env)
    assert run.wait_line("ready: "), run.err
    run.proc.send_signal(signal.SIGINT)
    assert run.finish() == 130
    assert "registered for recipe 'someone-else'" in run.err


def test_json_errors_are_one_line(tmp_path, env, model, capsys):
    code = main(["run", str(tmp_path / "missing.json"), "--model", str(model), "--json"])
    out = capsys.readouterr().out
    assert code == 1 and len(out.strip().splitlines()) == 1
    assert json.loads(out)["message"].startswith("recipe file not found")
