"""Issue 28's catalogue promises, end to end through the CLI against real HTTP servers on
127.0.0.1 (cases 73, 76, 77): a stalled or endless source is rejected with its reason while the
rest of the build goes on, and ``catalogue fetch`` gives up on it; the host fit the catalogue
shows is what ``lemonpack install`` selects (a generic ROCm build with a gfx1151 override runs on
a gfx1100 host); the install command ``catalogue show`` prints for a host installs there (a
recipe with cpu + cuda blocks names ``--accelerator``)."""

from __future__ import annotations

import hashlib
import io
import json
import shlex
import tarfile
import time
import gzip

import pytest
from support.catalogue import CatalogueWorld, run
from support.slowserver import SlowServer

pytestmark = pytest.mark.slow


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def tgz(text: str) -> bytes:
    b = io.BytesIO()
    with gzip.GzipFile(fileobj=b, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tf:
        data = f"#!/bin/sh\necho {text}\n".encode()
        ti = tarfile.TarInfo("llama-server")
        ti.size, ti.mode = len(data), 0o755
        tf.addfile(ti, io.BytesIO(data))
    return b.getvalue()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A source tree with acme's recipes served by a SlowServer: acme-rocm (generic rocm build,
    gfx1151 override), acme-cuda (cpu + cuda), acme-stall (trickles), acme-endless (endless body)."""
    tmp = tmp_path_factory.mktemp("fit-install")
    files: dict[str, bytes] = {}
    server = SlowServer(files, interval=2.0)
    arts = {n: tgz(n) for n in ("cpu", "rocm-generic", "rocm-gfx1151", "cuda")}
    for n, data in arts.items():
        files[f"/example.invalid/a/{n}.tar.gz"] = data
    url = {n: f"https://example.invalid/a/{n}.tar.gz" for n in arts}
    docs = {
        "acme-rocm": {"linux": {"rocm": {"binary": "llama-server", "source": url["rocm-generic"],
                                         "sha256": sha(arts["rocm-generic"]),
                                         "arch": {"gfx1151": {"source": url["rocm-gfx1151"],
                                                              "sha256": sha(arts["rocm-gfx1151"])}}}}},
        "acme-cuda": {"linux": {"cpu": {"binary": "llama-server"},
                                "cuda": {"binary": "llama-server", "source": url["cuda"], "sha256": sha(arts["cuda"])}}},
    }
    w = CatalogueWorld(tmp, community=False)
    w.publisher("acme", w.keys["acme"])
    w.urls = {}
    for name, plats in docs.items():
        doc = {"recipe": name, "display_name": name, "api_contract_version": "1", "variant_of": "llamacpp",
               "capabilities": ["chat_completion"], "source": url["cpu"], "sha256": sha(arts["cpu"]), "platforms": plats}
        data = json.dumps(doc, indent=2).encode()
        files[f"/example.invalid/r/{name}.json"] = data
        w.urls[name] = (f"https://example.invalid/r/{name}.json", sha(data))
    w.urls["acme-stall"] = ("https://example.invalid/trickle/acme-stall.json", "sha256:" + "0" * 64)
    w.urls["acme-endless"] = ("https://example.invalid/endless/acme-endless.json", "sha256:" + "1" * 64)
    for name, (u, digest) in w.urls.items():
        w.entry("acme", name, f'kind = "recipe"\nname = "{name}"\nlicense = "MIT"\ndescription = "test"\n'
                              f'[source]\ntype = "https"\nurl = "{u}"\nsha256 = "{digest}"\n')
    w.slow = server
    w.mirror_env = {"LEMONPACK_MIRROR": server.base}  # every fetch (build, fetch, install) through it
    out = tmp / "out"
    t0 = time.monotonic()
    w.build_result = run(w, "catalogue", "build", "--out", str(out), "--source", str(w.source), "--json",
                         env=w.mirror_env)
    w.build_seconds = time.monotonic() - t0
    w.out = out
    yield w
    server.stop()
    w.stop()


def test_stalled_and_endless_sources_are_rejected_while_the_rest_builds(world):
    """Case 73: the build ends (well inside the 90 s the case allows), the trickling source is
    rejected for its rate, the endless one for its size, the other entries are in the index."""
    r = world.build_result
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    reasons = {x["id"]: " ".join(x["reasons"]) for x in result["rejected"]}
    assert "below the minimum rate" in reasons["recipe:acme-stall"], reasons
    assert "larger than 4194304 bytes" in reasons["recipe:acme-endless"], reasons
    assert {"recipe:acme-rocm", "recipe:acme-cuda"} <= set(result["entries"]), reasons
    assert world.build_seconds < 60
    assert world.slow.bytes_sent < 64 * 1024 * 1024  # the endless body was not read to its "end"


def test_catalogue_fetch_of_a_trickle_fails_with_the_reason(world, tmp_path):
    t0 = time.monotonic()
    r = run(world, "catalogue", "fetch", world.urls["acme-stall"][0], "--sha256", "sha256:" + "0" * 64,
            "--recipe", "--out", str(tmp_path / "r.json"), env=world.mirror_env)
    assert r.returncode == 4, (r.stdout, r.stderr)  # FetchError
    assert "below the minimum rate" in r.stderr and "Traceback" not in r.stderr
    assert time.monotonic() - t0 < 40 and not (tmp_path / "r.json").exists()


def _show(world, ident: str, host: dict, tmp_path) -> dict:
    facts = tmp_path / "host.json"
    facts.write_text(json.dumps(host))
    r = run(world, "catalogue", "show", ident, "--index", str(world.out), "--host-facts", str(facts), "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["host"]


def _run_shown(world, host: dict, commands: dict, tmp_path) -> str:
    """Run the shown fetch and install commands as a user would (install with --yes), on
    ``host`` (LEMONPACK_HOST_FACTS); return the platform install selected."""
    env = {"LEMONPACK_HOST_FACTS": json.dumps(host), **world.mirror_env}
    fetch = shlex.split(commands["fetch"])
    fetch[fetch.index("--out") + 1] = str(tmp_path / fetch[fetch.index("--out") + 1])
    r = run(world, *fetch[1:], env=env)
    assert r.returncode == 0, r.stderr
    install = shlex.split(commands["install"])
    install[2] = str(tmp_path / install[2])
    r = run(world, *install[1:], "--yes", env=env)
    assert r.returncode == 0, (commands["install"], r.stdout, r.stderr)
    return next(line.split()[1] for line in (r.stdout + r.stderr).splitlines() if line.startswith("platform:"))


def test_generic_rocm_build_fits_another_arch_as_install_selects(world, tmp_path):
    """Case 76: gfx1100 gets the generic build (no --arch), gfx1151 the override (named)."""
    host = {"os": "linux", "accelerators": ["cpu", "rocm"], "cuda_arch": None, "rocm_arch": "gfx1100"}
    shown = _show(world, "recipe:acme-rocm", host, tmp_path)
    assert shown["runs_here"] and shown["reason"] == "linux/rocm"
    assert _run_shown(world, host, shown["commands"], tmp_path) == "platforms.linux.rocm"
    tuned = {**host, "rocm_arch": "gfx1151"}
    shown = _show(world, "recipe:acme-rocm", tuned, tmp_path)
    assert shown["reason"] == "linux/rocm gfx1151" and shown["commands"]["install"].endswith(" --arch gfx1151")
    assert _run_shown(world, tuned, shown["commands"], tmp_path) == "platforms.linux.rocm.arch.gfx1151"


def test_shown_install_names_the_accelerator_and_installs(world, tmp_path):
    """Case 77: cpu + cuda on linux; on a CUDA host the shown command installs the cuda block,
    on a CPU-only host the cpu one; both hosts are marked as fitting."""
    cuda = {"os": "linux", "accelerators": ["cpu", "cuda"], "cuda_arch": "sm_89", "rocm_arch": None}
    shown = _show(world, "recipe:acme-cuda", cuda, tmp_path)
    assert shown["runs_here"] and shown["commands"]["install"].endswith(" --accelerator cuda")
    assert _run_shown(world, cuda, shown["commands"], tmp_path) == "platforms.linux.cuda"
    cpu = {"os": "linux", "accelerators": ["cpu"], "cuda_arch": None, "rocm_arch": None}
    shown = _show(world, "recipe:acme-cuda", cpu, tmp_path)
    assert shown["runs_here"] and shown["commands"]["install"].endswith(" --accelerator cpu")
    assert _run_shown(world, cpu, shown["commands"], tmp_path) == "platforms.linux.cpu"
