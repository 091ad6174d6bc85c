"""Cases 58, 61 and 62 with the real parts: ``lemonpack build --example --base`` on the Debian base,
``lemonpack kube generate --publish`` of a model in a "home" directory that also holds ``.ssh``,
``podman kube play``. The engine answers on the published port; no mount of the pod exposes
``.ssh``; the engine runs as uid 65532; no podman healthcheck restarts it. And why the
livenessProbe is left out for podman: forced in with ``--liveness``, podman runs it as ``curl``
inside the image, which has none, and ``podman healthcheck run`` says unhealthy. And what works
instead (issue 23 point 4): ``--probe-exec`` with a tool the image carries (busybox ``wget``
added to the example image): healthy run after run, the engine never restarted, and a probe
that fails is reported unhealthy."""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from lemonpack.cli import main
from support.helpers import free_port, wait_for
from support.kube import BUSYBOX_PROBE, with_busybox
from support.tools import need

pytestmark = pytest.mark.slow
EXAMPLES = Path(__file__).resolve().parents[2] / "lemonpack" / "examples"


def _up(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _podman(env, *args: str, check: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run([need("podman"), *args], env=env, capture_output=True, text=True, timeout=180, check=check)


@pytest.fixture
def example_image(podman_conf, debian_layout, tmp_path, monkeypatch, capsys):
    """``(name@digest, env)``: the shipped example engine built on the Debian base, in podman's storage."""
    env = podman_conf["env"]
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "oci"
    assert main(["build", "--example", "--base", debian_layout, "--out", str(out), "--no-progress", "--json"]) == 0
    target = next(t for t in json.loads(capsys.readouterr().out)["targets"] if t["kind"] == "image")
    name = f"localhost/kube-admitted-{secrets.token_hex(4)}/hello"
    subprocess.run([need("skopeo"), "copy", "-q", f"oci:{out}:{target['tag']}", f"containers-storage:{name}:run"],
                   env=env, check=True, capture_output=True, timeout=300)
    yield f"{name}@{target['digest']}", env
    _podman(env, "rmi", f"{name}:run")  # by our own tag: the storage is shared


def _play(kube_env, image: str, env, tmp_path: Path, *flags: str):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    secret = home / ".ssh" / "id_ed25519"
    secret.write_text(f"PRIVATE-{secrets.token_hex(4)}")
    (home / "hello-model.txt").write_bytes((EXAMPLES / "models" / "hello-model.txt").read_bytes())
    kube_env.descriptor(json.loads((EXAMPLES / "hello-engine.json").read_text()))
    model = f"user.kube-adm-{secrets.token_hex(4)}"
    kube_env.registry.add(model, "hello-engine", {"main": str(home / "hello-model.txt")})
    port = free_port()
    out = tmp_path / "play.yaml"
    assert main(["kube", "generate", model, "--image", f"hello-engine={image}", "--publish", f"127.0.0.1:{port}",
                 "--out", str(out), *flags]) == 0
    play = _podman(env, "kube", "play", str(out))
    assert play.returncode == 0, play.stderr
    return out, f"http://127.0.0.1:{port}", f"{model.removeprefix('user.')}-pod-0-engine", secret


def test_podman_kube_play_exposes_only_the_model_runs_non_root_and_is_not_restarted(kube_env, example_image,
                                                                                   tmp_path):
    image, env = example_image
    out, url, container, secret = _play(kube_env, image, env, tmp_path)
    try:
        assert wait_for(lambda: _up(url), timeout=60), _podman(env, "logs", container).stderr
        # case 58: no mount source holds the secret; the file is not readable in the container
        mounts = json.loads(_podman(env, "inspect", container, "--format", "{{json .Mounts}}", check=True).stdout)
        sources = [m["Source"] for m in mounts]
        assert str(tmp_path / "home" / "hello-model.txt") in sources
        assert not [s for s in sources if str(secret) == s or str(secret).startswith(s.rstrip("/") + "/")], sources
        assert _podman(env, "exec", container, "cat", "/models/.ssh/id_ed25519").returncode != 0
        # case 62: the engine runs as the non-root user of the pod and the image
        def uid() -> str:
            return _podman(env, "exec", container, "id", "-u").stdout.strip()

        assert wait_for(lambda: uid() == "65532", timeout=10), _podman(env, "exec", container, "id", "-u")
        # case 61: no healthcheck from a livenessProbe, so podman restarts nothing
        started = _podman(env, "inspect", container, "--format", "{{.State.StartedAt}}", check=True).stdout
        hc = _podman(env, "healthcheck", "run", container)
        assert hc.returncode != 0 and "unhealthy" not in hc.stdout
        time.sleep(3)
        assert _podman(env, "inspect", container, "--format", "{{.State.StartedAt}}").stdout == started
        assert _up(url)
    finally:
        down = _podman(env, "kube", "down", str(out))
    assert down.returncode == 0, down.stderr


def test_a_forced_liveness_probe_is_what_podman_runs_inside_the_image(kube_env, example_image, tmp_path):
    """The measured reason for leaving it out: podman 4.3 makes it `curl -f http://localhost:PORT/health`
    run in the image, and the engine image has no curl."""
    image, env = example_image
    out, url, container, _ = _play(kube_env, image, env, tmp_path, "--liveness")
    try:
        assert wait_for(lambda: _up(url), timeout=60)
        test = json.loads(_podman(env, "inspect", container, "--format", "{{json .Config.Healthcheck}}",
                                  check=True).stdout)["Test"]
        assert "curl" in test and "http://localhost:8080/health" in test  # the numeric port is resolved
        hc = _podman(env, "healthcheck", "run", container)
        assert "unhealthy" in hc.stdout + hc.stderr  # while /health answers 200 on the published port
        assert _up(url)
    finally:
        down = _podman(env, "kube", "down", str(out))
    assert down.returncode == 0, down.stderr


@pytest.fixture
def busybox_image(example_image, tmp_path):
    """``(name@digest, env)``: the example image plus ``/bin/busybox`` (its ``wget``), as an
    upstream image carries curl; ``/bin/sh`` is the Debian base's own dash."""
    image, env = example_image
    pinned, tagged = with_busybox(image, tmp_path, env)
    yield pinned, env
    _podman(env, "rmi", tagged)


def _health(env, container: str) -> tuple[str, str, int]:
    """``(health status, started at, engine start lines in the log)``."""
    state = json.loads(_podman(env, "inspect", container, "--format", "{{json .State}}", check=True).stdout)
    logs = _podman(env, "logs", container)
    return (state.get("Health") or state.get("Healthcheck") or {}).get("Status", ""), state["StartedAt"], \
        (logs.stdout + logs.stderr).count("hello-engine: serving")


def test_a_probe_exec_with_a_tool_of_the_image_is_healthy_and_restarts_nothing(kube_env, busybox_image, tmp_path):
    image, env = busybox_image
    argv = json.dumps(BUSYBOX_PROBE)
    out, url, container, _ = _play(kube_env, image, env, tmp_path, "--probe-exec", argv)
    try:
        assert wait_for(lambda: _up(url), timeout=60), _podman(env, "logs", container).stderr
        healthcheck = json.loads(_podman(env, "inspect", container, "--format", "{{json .Config.Healthcheck}}",
                                         check=True).stdout)
        # the livenessProbe's period, timeout and failure threshold reach podman's healthcheck (in ns)
        assert (healthcheck["Interval"], healthcheck["Timeout"], healthcheck["Retries"]) == (10 * 10**9, 15 * 10**9, 3)
        test = healthcheck["Test"]
        assert test[0] == "CMD-SHELL" and "http://127.0.0.1:8080/health" in test  # podman: /bin/sh -c, joined
        _, started, _ = _health(env, container)
        for _ in range(4):
            hc = _podman(env, "healthcheck", "run", container)
            assert hc.returncode == 0 and "unhealthy" not in hc.stdout + hc.stderr, hc
            time.sleep(1)
        status, again, starts = _health(env, container)
        assert status == "healthy" and again == started and starts == 1
        r = httpx.post(url + "/v1/chat/completions", timeout=10,
                       json={"model": "hello", "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
    finally:
        down = _podman(env, "kube", "down", str(out))
    assert down.returncode == 0, down.stderr


def test_a_probe_exec_that_fails_is_reported_unhealthy(kube_env, busybox_image, tmp_path):
    image, env = busybox_image
    argv = json.dumps(["/bin/busybox", "wget", "-q", "--spider", "http://127.0.0.1:{port}/no-such-endpoint"])
    out, url, container, _ = _play(kube_env, image, env, tmp_path, "--probe-exec", argv)
    try:
        assert wait_for(lambda: _up(url), timeout=60), _podman(env, "logs", container).stderr
        hc = _podman(env, "healthcheck", "run", container)
        assert hc.returncode != 0 and "unhealthy" in hc.stdout + hc.stderr, hc
        assert _health(env, container)[0] in ("starting", "unhealthy")  # one failure of 3 retries
    finally:
        down = _podman(env, "kube", "down", str(out))
    assert down.returncode == 0, down.stderr
