"""``lemonpack run`` end to end with the fake engine (real subprocesses, loopback)."""

from __future__ import annotations

import signal

import httpx
import pytest

from support.helpers import RunProcess, all_gone, read_pids, wait_for
from support.recipes import recipe_doc, write_recipe


@pytest.fixture
def model(home):
    """A model file in the test's sandboxed lemonpack home (the runs below inherit its variables)."""
    return home.model()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_run_ready_serves_and_stops_everything_on_signal(tmp_path, model, sig):
    pids = tmp_path / "pids"
    recipe = write_recipe(tmp_path / "fake.json", recipe_doc(fake_engine=[
        "--health-delay", "0.3", "--fork-child", "--grandchild", "--pid-file", str(pids)]))
    run = RunProcess([str(recipe), "--model", str(model)])
    ready = run.wait_line("ready: ")
    assert ready, run.err
    url = ready.split()[1]
    argv = run.wait_line("argv: ")
    assert argv and "fake_engine.py" in argv and "--model tiny" in argv
    r = httpx.post(url + "/v1/chat/completions", json={"messages": []}, trust_env=False)
    assert r.status_code == 200
    procs = read_pids(pids)
    assert len(procs) == 3
    run.proc.send_signal(sig)
    assert run.finish() == 128 + sig, run.err  # 130 after SIGINT, 143 after SIGTERM, as shells say
    assert all_gone(procs.values())
    assert "listening on" in run.err and f"stopped fake-engine ({sig.name})" in run.err


def test_run_engine_failing_at_start_exits_7_with_code_and_logs(tmp_path, model):
    recipe = write_recipe(tmp_path / "fake.json", recipe_doc(fake_engine=["--exit-now", "--exit-code", "4"]))
    run = RunProcess([str(recipe), "--model", str(model), "--quiet"])
    assert run.finish() == 7
    assert "exited with code 4" in run.err and "cannot load model: giving up with code 4" in run.err


def test_run_engine_crashing_after_ready_exits_7(tmp_path, model):
    recipe = write_recipe(tmp_path / "fake.json", recipe_doc(fake_engine=["--crash-after-ready", "1.0", "--exit-code", "11"]))
    run = RunProcess([str(recipe), "--model", str(model)])
    assert run.wait_line("ready: ")
    assert run.finish() == 7
    assert "engine exited with code 11" in run.err and "crashing with code 11" in run.err


def test_run_bad_recipe_is_a_clear_error(tmp_path, model):
    bad = tmp_path / "bad.json"
    bad.write_text('{"recipe": "x"}')
    run = RunProcess([str(bad), "--model", str(model)])
    assert run.finish() == 1
    assert "error:" in run.err and "Traceback" not in run.err


def test_run_options_reach_the_argv_and_sigint_during_the_probe_stops_it(tmp_path, model):
    pids = tmp_path / "pids"
    recipe = write_recipe(tmp_path / "fake.json", recipe_doc(fake_engine=["--health-delay", "{custom:delay:-0}", "--pid-file", str(pids)]))
    run = RunProcess([str(recipe), "--model", str(model), "--option", "delay=60", "--device", "cpu"])
    assert wait_for(lambda: read_pids(pids), 20)
    assert wait_for(lambda: "listening on" in run.err, 20)
    assert "--health-delay 60" in run.err  # the "starting ..." line shows the resolved argv
    run.proc.send_signal(signal.SIGINT)
    assert run.finish() == 130, run.err
    assert all_gone(read_pids(pids).values())
    assert not [line for line in run.stdout if line.startswith("ready: ")]


def test_run_json_prints_one_ready_event(tmp_path, model):
    recipe = write_recipe(tmp_path / "fake.json", recipe_doc(fake_engine=["--health-delay", "0.2"]))
    run = RunProcess([str(recipe), "--model", str(model), "--json", "--quiet"])
    line = run.wait_line('{"event": "ready"')
    assert line, run.err
    import json

    event = json.loads(line)
    assert event["recipe"] == "fake-engine" and event["model"] == "tiny"
    assert event["url"].startswith("http://127.0.0.1:") and event["pid"] > 0
    assert "fake_engine.py" in " ".join(event["argv"])
    assert httpx.get(event["url"] + "/health", trust_env=False).status_code == 200
    run.proc.send_signal(signal.SIGINT)
    assert run.finish() == 130, run.err
