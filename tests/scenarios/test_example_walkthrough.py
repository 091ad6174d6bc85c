"""The README's newcomer path, run as written: the shipped example is built, installed,
run to a ready engine that answers a chat completion, and stopped with Ctrl-C (SIGINT);
its Nix expression builds offline and skopeo reads its layout. Commands are read from
README.md itself (only the port is swapped for a free one), run through the real CLI in
subprocesses, with a private cache and config directory and an unreachable
``LEMONPACK_MIRROR`` (the example must not need it; it still checks that it is a URL). Also: the example artifact is exactly the engine source,
packed deterministically and pinned; the engine itself speaks the API it claims; the
README's podman settings are the suite's own; the ``--example`` flags' usage errors."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tarfile
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from lemonpack.examples import (ENGINE_SOURCE, EXAMPLE_ARCHIVE, EXAMPLE_MODEL, EXAMPLE_RECIPE, EXAMPLES_DIR,
                                engine_archive)
from support.helpers import free_port
from support.interrupt import popen_interruptible
from support.tools import need

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
LEMONPACK = [sys.executable, "-m", "lemonpack.cli"]


# ---------------------------------------------------------------- reading the README

def section(title: str) -> str:
    """The README text under ``## title`` up to the next ``## `` heading."""
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.S | re.M)
    assert m, f"README.md has no section {title!r}"
    return m.group(1)


def blocks(text: str, lang: str = "sh") -> list[str]:
    """The fenced code blocks of ``lang`` in ``text``."""
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)


def commands(text: str) -> list[str]:
    """The command lines of the ``sh`` blocks in ``text`` (comments and blanks dropped)."""
    return [line.strip() for b in blocks(text) for line in b.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def one(lines: list[str], prefix: str) -> str:
    found = [line for line in lines if line.startswith(prefix)]
    assert len(found) == 1, f"README: expected one line starting {prefix!r}, found {found}"
    return found[0]


def readme_build_line() -> str:
    """Command 1's lemonpack part (after ``pip install -e . &&``)."""
    line = one(commands(section("Two commands")), "python3 -m pip install -e . && ")
    return line.split(" && ", 1)[1]


def cli(line: str) -> list[str]:
    """A README ``lemonpack ...`` line as the argv of this tree's CLI."""
    argv = shlex.split(line)
    assert argv[0] == "lemonpack", line
    return [*LEMONPACK, *argv[1:]]


@pytest.fixture
def newcomer(tmp_path):
    """``(cwd, env)``: an empty working directory and a private cache/config; the default
    mirror is a well-formed URL where nothing listens, so anything fetched through it would fail
    (a non-URL one is exit 2 from every command, the example's too: tests/builder/test_plan.py)."""
    cwd = tmp_path / "work"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEMONPACK_")}
    env.update(LEMONPACK_CACHE_DIR=str(tmp_path / "cache"), LEMONPACK_CONFIG_DIR=str(tmp_path / "config"),
               LEMONPACK_MIRROR="http://127.0.0.1:9/no-such-mirror", COLUMNS="250")
    return cwd, env


def run_cli(line: str, cwd: Path, env: dict, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cli(line), cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, **kw)


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def post_as_curl(curl_line: str, readme_port: str, port: int, timeout: float) -> dict:
    """The JSON answer to the README's ``curl`` line, sent as curl would (its URL, ``-H``
    headers and ``-d`` body) to ``port`` instead of the README's."""
    argv = shlex.split(curl_line.replace(readme_port, str(port)))
    url = next(a for a in argv if a.startswith("http"))
    headers = dict(h.split(": ", 1) for h in (argv[i + 1] for i, a in enumerate(argv) if a == "-H"))
    data = argv[argv.index("-d") + 1].encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=timeout) as r:
        return json.load(r)


def stopped(proc: subprocess.Popen, sig: int, timeout: float) -> tuple[int, str]:
    """``(exit code, stderr)`` of ``proc`` after ``sig``; killed if it outlives ``timeout``."""
    try:
        proc.send_signal(sig)
        rc = proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return rc, proc.stderr.read()


# ---------------------------------------------------------------- the walkthrough

def test_readme_build_install_run_chat_and_ctrl_c(newcomer):
    cwd, env = newcomer
    walk = commands(section("Try the example"))
    install_line = one(walk, "lemonpack install ")
    run_line = one(walk, "lemonpack run ")
    curl_line = one(commands(section("Try the example").split("From another terminal", 1)[1]
                             .split(SERVE_INTRO, 1)[0]), "curl ")
    readme_port = re.search(r"--port (\d+)", run_line).group(1)
    assert f"127.0.0.1:{readme_port}/" in curl_line
    answer = re.search(r"whose message is\s+`([^`]+)`", section("Try the example")).group(1)

    # 1. build (twice: the same bytes)
    built = run_cli(readme_build_line(), cwd, env)
    assert built.returncode == 0, built.stderr
    out = cwd / "example-oci"
    first = tree(out)
    assert {"oci-layout", "index.json", "nix/hello-engine/default.nix", "nix/hello-engine/sources.json"} <= set(first)
    said = re.search(r"nix/hello-engine/\{([^}]+)\}", README).group(1).split(",")  # the README's list, exactly
    assert {f"nix/hello-engine/{name}" for name in said} == {k for k in first if k.startswith("nix/")}
    index = json.loads(first["index.json"])
    assert {m["annotations"]["org.opencontainers.image.ref.name"] for m in index["manifests"]} == \
        {"hello-engine", "hello-engine.linux-cpu"}
    assert run_cli(readme_build_line(), cwd, env).returncode == 0
    assert tree(out) == first

    # 2. install
    inst = run_cli(install_line, cwd, env)
    assert inst.returncode == 0, inst.stderr
    engine = Path(env["LEMONPACK_CACHE_DIR"]) / "external" / "hello-engine" / "hello-engine"
    assert engine.read_bytes() == ENGINE_SOURCE.read_bytes() and os.access(engine, os.X_OK)
    pin = json.loads(EXAMPLE_RECIPE.read_text())["sha256"]
    assert pin in inst.stderr and "sandbox is enforced" in inst.stderr  # provenance + disclosure, --yes or not

    # 3. run to ready (on a free port instead of the README's), 4. chat, 5. Ctrl-C
    port = free_port()
    proc = popen_interruptible(cli(run_line.replace(f"--port {readme_port}", f"--port {port}")), cwd=cwd, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        ready = proc.stdout.readline()
        assert ready.startswith(f"ready: http://127.0.0.1:{port} "), (ready, proc.stderr.read() if proc.poll() else "")
        pid = int(re.search(r"pid (\d+)", ready).group(1))
        reply = post_as_curl(curl_line, readme_port, port, timeout=10)
        assert reply["object"] == "chat.completion"
        assert reply["choices"][0]["message"] == {"role": "assistant", "content": answer}
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as r:
            assert [m["id"] for m in json.load(r)["data"]] == ["hello-model"]
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    rc, err = stopped(proc, signal.SIGINT, 30)
    assert rc == 130, err  # as shells report Ctrl-C
    assert "stopped hello-engine (SIGINT)" in err and "hello-engine: stopped (SIGTERM)" in err, err
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert port_is_free(port)


#: Where the README's serve walkthrough starts, inside "Try the example".
SERVE_INTRO = "To serve it behind `lemonpack serve`"


def test_readme_serve_block_as_written(newcomer, tmp_path):
    """The README's serve block, line by line through bash as a user pastes it (``lemonpack`` on
    PATH is this tree's CLI; XDG_CONFIG_HOME is the user's config, as the block's paths say; the
    port is swapped for a free one): the request by model name gets the engine's answer, and
    SIGTERM stops serve with exit 0 and the engine gone."""
    cwd, env = newcomer
    text = section("Try the example").split(SERVE_INTRO, 1)[1]
    lines = commands(text)
    serve_line = one(lines, "lemonpack serve ")
    curl_line = one(lines, "curl ")
    readme_port = re.search(r"--port (\d+)", serve_line).group(1)
    assert f"127.0.0.1:{readme_port}/" in curl_line
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "lemonpack").write_text(f"#!{sys.executable}\nimport sys\nfrom lemonpack.cli import main\nsys.exit(main())\n")
    (shim / "lemonpack").chmod(0o755)
    env = {k: v for k, v in env.items() if k != "LEMONPACK_CONFIG_DIR"}
    env.update(XDG_CONFIG_HOME=str(tmp_path / "xdg-config"), PATH=f"{shim}:{env.get('PATH', '')}",
               PYTHONPATH=str(REPO))
    assert run_cli("lemonpack install --example --yes", cwd, env).returncode == 0
    port = free_port()
    for line in lines[:lines.index(serve_line)]:
        done = subprocess.run(["bash", "-c", line], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (line, done.stderr)
    argv = shlex.split(serve_line.split("#", 1)[0].replace(f"--port {readme_port}", f"--port {port}"))
    proc = popen_interruptible(cli(" ".join(argv)), cwd=REPO, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        import time

        deadline = time.monotonic() + 60
        while port_is_free(port) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        reply = post_as_curl(curl_line, readme_port, port, timeout=60)
        assert reply["model"] == "user.hello" and reply["choices"][0]["message"]["content"].startswith(
            "Hello from hello-engine")
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    rc, err = stopped(proc, signal.SIGTERM, 60)
    assert rc == 0, err  # as the block's comment says
    assert "hello-engine: stopped" in err and port_is_free(port)


def test_run_example_before_install_says_how_to_install(newcomer):
    cwd, env = newcomer
    line = one(commands(section("Try the example")), "lemonpack run ")
    r = run_cli(re.sub(r"--port \d+", f"--port {free_port()}", line), cwd, env)  # 8123 may be taken here
    assert r.returncode == 1, r.stderr
    assert "run `lemonpack install --example`" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("line, hint", [
    ("lemonpack build --example tests/fixtures/lemonade-examples/llamacpp_per_platform.json --out o", "--example"),
    ("lemonpack build --example --mirror http://127.0.0.1:1 --out o", "--example"),
    ("lemonpack install --example hello-engine --yes", "--example"),
    ("lemonpack install --example --mirror http://127.0.0.1:1 --yes", "--example"),
    ("lemonpack install --yes", "RECIPE"),
    ("lemonpack run --example lemonpack/examples/hello-engine.json", "--example"),
    ("lemonpack run", "RECIPE"),
    ("lemonpack run lemonpack/examples/hello-engine.json", "--model"),
])
def test_example_flags_usage_errors(newcomer, line, hint):
    _, env = newcomer
    r = run_cli(line, REPO, env)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert hint in r.stderr and "Traceback" not in r.stderr


# ---------------------------------------------------------------- the README's tool lines (slow)

@pytest.fixture
def clone_like(newcomer):
    """A working directory laid out like the clone (``lemonpack/`` is this tree's), with
    command 1 already run in it; ``(cwd, env)``."""
    cwd, env = newcomer
    (cwd / "lemonpack").symlink_to(REPO / "lemonpack")
    assert run_cli(readme_build_line(), cwd, env).returncode == 0
    return cwd, env


@pytest.mark.slow
def test_readme_nix_lines_build_offline(clone_like):
    """The README's two Nix lines, run as written: the shipped artifact added by hand is the
    very store path the expression's fixed-output fetch names, so nothing is fetched (its
    origin, example.invalid, does not resolve: a fetch would fail the build)."""
    need("nix-build")
    need("nix-store")
    cwd, env = clone_like
    walk = commands(section("Try the example"))
    add, build = one(walk, "nix-store --add-fixed "), one(walk, "nix-build ")

    def sh(cmd):
        return subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    added = sh(add)
    assert added.returncode == 0, added.stderr
    built = sh(build)
    assert built.returncode == 0, built.stderr[-3000:]
    store_path = built.stdout.strip().splitlines()[-1]
    assert store_path == added.stdout.strip().splitlines()[-1]
    assert (cwd / "result").resolve() == Path(store_path)
    assert Path(store_path).read_bytes() == EXAMPLE_ARCHIVE.read_bytes()
    assert "example.invalid" in (cwd / "example-oci" / "nix" / "hello-engine" / "sources.json").read_text()


@pytest.mark.slow
def test_readme_skopeo_line_reads_the_layout(clone_like):
    need("skopeo")
    cwd, env = clone_like
    line = one(commands(section("Try the example")), "skopeo inspect ")
    text = section("Try the example")
    assert text.index("apt-get install -y skopeo") < text.index(line)  # how to get it, before using it
    r = subprocess.run(shlex.split(line), cwd=cwd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["Digest"].startswith("sha256:") and info["Os"] == "linux"


# ---------------------------------------------------------------- the shipped artifact and engine

def test_example_artifact_is_the_engine_source_packed_and_pinned():
    shipped = EXAMPLE_ARCHIVE.read_bytes()
    assert engine_archive() == shipped, "the example artifact is stale: run `python -m lemonpack.examples`"
    recipe = json.loads(EXAMPLE_RECIPE.read_text())
    assert recipe["sha256"] == "sha256:" + hashlib.sha256(shipped).hexdigest()
    assert recipe["source"].endswith("/" + "/".join(EXAMPLE_ARCHIVE.relative_to(EXAMPLES_DIR / "mirror").parts[1:]))
    assert shipped[4:8] == b"\0\0\0\0"  # gzip MTIME 0
    with tarfile.open(fileobj=io.BytesIO(shipped)) as tf:
        (member,) = tf.getmembers()
        assert (member.name, member.mode, member.uid, member.gid, member.mtime, member.isreg()) == \
            ("hello-engine", 0o755, 0, 0, 0, True)
        assert tf.extractfile(member).read() == ENGINE_SOURCE.read_bytes()
    assert ENGINE_SOURCE.read_bytes().startswith(b"#!/usr/bin/env python3\n")
    assert EXAMPLE_MODEL.is_file()


@pytest.fixture
def engine(tmp_path):
    """Start the example engine on a free port; yields ``(proc, base_url)``."""
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF")
    port = free_port()
    proc = popen_interruptible([str(ENGINE_SOURCE), "-m", str(model), "--ctx-size", "512", "--port", str(port),
                                "--host", "127.0.0.1", "--jinja", "--metrics", "--threads", "2"],
                               stderr=subprocess.PIPE, text=True)
    assert "serving tiny on" in proc.stderr.readline()
    try:
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def post(url: str, body: dict):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=10)


def test_engine_streams_completions_and_stops_on_sigterm(engine):
    proc, base = engine
    with urllib.request.urlopen(base + "/health", timeout=10) as r:
        assert r.status == 200 and json.load(r) == {"status": "ok"}
    with post(base + "/v1/chat/completions", {"stream": True, "messages": [
            {"role": "system", "content": "be brief"}, {"role": "user", "content": "two words"}]}) as r:
        assert r.headers["Content-Type"] == "text/event-stream"
        events = [line[6:] for line in r.read().decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == "Hello from hello-engine (tiny)! You said: two words"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    with post(base + "/v1/completions", {"prompt": "once"}) as r:
        assert json.load(r)["choices"][0]["text"] == "Hello from hello-engine (tiny)! You said: once"
    with pytest.raises(urllib.error.HTTPError) as e:
        post(base + "/v1/chat/completions", ["not", "an", "object"])
    assert e.value.code == 400
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0  # the timeout is a hang guard only


def test_engine_logs_requests_but_not_the_health_probes(engine):
    # an idle `run --example` printed a "GET /health" 200 line per probe (one a second)
    proc, base = engine
    for _ in range(3):
        with urllib.request.urlopen(base + "/health", timeout=10) as r:
            assert r.status == 200
    with urllib.request.urlopen(base + "/v1/models", timeout=10) as r:
        assert r.status == 200
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    lines = proc.stderr.read().splitlines()
    assert not [line for line in lines if "/health" in line], lines
    assert [line for line in lines if '"GET /v1/models HTTP/1.' in line and " 200 " in line], lines


def test_engine_refuses_a_missing_model_file(tmp_path):
    r = subprocess.run([str(ENGINE_SOURCE), "-m", str(tmp_path / "none.gguf"), "--port", str(free_port())],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "model file not found" in r.stderr


# ---------------------------------------------------------------- container settings

def test_readme_podman_settings_are_the_suites_and_inline():
    text = section("Container engines")
    (toml,) = blocks(text, "toml")
    suite = tomllib.loads((REPO / "tests" / "containers.conf").read_text())
    assert tomllib.loads(toml) == suite
    assert suite == {"containers": {"default_ulimits": ["nofile=20000:20000", "nproc=32768:32768"]},
                     "engine": {"runtime": "runc"}}
    assert "CONTAINERS_CONF" in text
    # nothing outside the repository is pointed at
    for outside in ("/work/", "ENVIRONMENT.md", "../shared"):
        assert outside not in README
