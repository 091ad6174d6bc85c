"""``lemonpack kube generate`` on the command line: real discovery, a real model registry, model
files; bad input is one line naming the model and the field, exit 1, nothing written."""

from __future__ import annotations

import configparser
import json
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import yaml

from lemonpack.cli import main
from support.kube import GPU_FORK, IMAGE, TOOLBOX
from support.recipes import recipe_doc

K8S = "1.37.0"


def _run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["kube", "generate", *args])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_registered_models_and_a_model_file(kube_env, capsys, tmp_path):
    kube_env.descriptor(GPU_FORK)
    kube_env.register("user.qwen", "llamacpp-gpu", "qwen.gguf", ctx_size=2048)
    file = kube_env.model_file("phi-2.Q4.gguf")  # the selector picks llamacpp-gpu (serves *.gguf)
    out = tmp_path / "engines.yaml"
    code, _, err = _run(capsys, "user.qwen", str(file), "--image", f"llamacpp-gpu={IMAGE}",
                        "--accelerator", "cuda:sm_89", "--publish", "127.0.0.1:18080", "--namespace", "ai",
                        "--out", str(out))
    assert code == 0, err
    docs = list(yaml.safe_load_all(out.read_text()))
    for d in docs:
        kubernetes_validate.validate(d, K8S, strict=True)
    names = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert names == [("Deployment", "phi-2-q4"), ("Service", "phi-2-q4"), ("Deployment", "qwen"), ("Service", "qwen")]
    qwen = docs[2]["spec"]["template"]["spec"]
    args = qwen["containers"][0]["args"]
    assert args[args.index("--ctx-size") + 1] == "2048"  # the registered model's option
    assert qwen["volumes"][0]["hostPath"] == {"path": str(kube_env.models / "qwen.gguf"), "type": "File"}
    assert [d["spec"]["template"]["spec"]["containers"][0]["ports"][0]["hostPort"] for d in docs[::2]] == [18080, 18081]
    assert all(d["metadata"]["namespace"] == "ai" for d in docs)
    assert "wrote" in err
    # Same input, same bytes (to stdout this time).
    code, again, _ = _run(capsys, "user.qwen", str(file), "--image", f"llamacpp-gpu={IMAGE}",
                          "--accelerator", "cuda:sm_89", "--publish", "127.0.0.1:18080", "--namespace", "ai",
                          "--out", "-")
    assert code == 0 and again.encode() == out.read_bytes()


def test_container_run_recipe_needs_no_image_option(kube_env, capsys):
    kube_env.descriptor(TOOLBOX)
    kube_env.register("user.tb", "toolbox")
    code, out, err = _run(capsys, "user.tb", "--accelerator", "vulkan:sm_86", "--out", "-")
    assert code == 0, err
    dep = next(yaml.safe_load_all(out))
    res = dep["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert res["limits"] == {"nvidia.com/gpu": "1", "memory": "1025Mi"}  # a 4-byte model: 1 MiB + 1 GiB headroom
    assert res["requests"] == {"cpu": "1", "memory": "1Mi"}


def _bad(capsys, out: Path, *args: str) -> str:
    """Run, expect exit 1 with one error line, and ``out`` unchanged (absent or as it was)."""
    before = out.read_bytes() if out.exists() else None
    code, stdout, err = _run(capsys, *args, "--out", str(out))
    assert code == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert (out.read_bytes() if out.exists() else None) == before
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]  # no temporary left
    return lines[0]


def test_bad_input_is_one_line_naming_model_and_field(kube_env, capsys, tmp_path):
    out = tmp_path / "out.yaml"
    out.write_bytes(b"# the previous file\n")
    kube_env.descriptor(GPU_FORK)
    kube_env.register("user.qwen", "llamacpp-gpu")

    # no block for the target accelerator
    line = _bad(capsys, out, "user.qwen", "--image", f"llamacpp-gpu={IMAGE}", "--accelerator", "vulkan:gfx1100")
    assert "model user.qwen" in line and "platforms.linux.vulkan" in line and "no block" in line

    # extends something unknown: discovery drops the recipe; the model names it
    kube_env.descriptor(recipe_doc("child", command="/bin/true", args=[], extends="no-such-base"))
    kube_env.register("user.child", "child")
    line = _bad(capsys, out, "user.child", "--image", f"child={IMAGE}")
    assert "model user.child" in line and ".recipe" in line and "no-such-base" in line

    # variant_of something unknown: the contract rejects it at load
    kube_env.descriptor(recipe_doc("forky", binary="x", variant_of="vllm-fork",
                                   source="https://example.invalid/x.tar", sha256="sha256:" + "0" * 64))
    kube_env.register("user.forky", "forky")
    line = _bad(capsys, out, "user.forky", "--image", f"forky={IMAGE}")
    assert "model user.forky" in line and "variant_of" in line

    # an argv that resolves to a shell script ({custom:launcher} is `sh`)
    kube_env.descriptor(recipe_doc("shelly", command="{custom:launcher:-sh}",
                                   args=["-c", "exec llama-server --port {port}"]))
    kube_env.register("user.shelly", "shelly")
    line = _bad(capsys, out, "user.shelly", "--image", f"shelly={IMAGE}")
    assert "model user.shelly" in line and "platforms.linux.cpu.args" in line and "shell script" in line

    # a model file whose name has a character no Kubernetes name can carry
    odd = kube_env.model_file("modèle.gguf")
    line = _bad(capsys, out, str(odd), "--image", f"llamacpp-gpu={IMAGE}")
    assert "model modèle" in line and "name:" in line and "U+00E8" in line

    # an image by tag
    line = _bad(capsys, out, "user.qwen", "--image", "llamacpp-gpu=registry.example.test/engines/llamacpp:v1")
    assert "--image llamacpp-gpu=" in line and "tag is mutable" in line

    # a container run whose command in the image resolves to a shell script ({custom:bin} is `sh`)
    kube_env.descriptor(recipe_doc("boxed", command="podman", args=[
        "run", "--rm", "--network", "host", "registry.example.test/x@sha256:" + "1" * 64, "{custom:bin:-srv}",
        "-c", "exec srv --port {port}"]))
    kube_env.register("user.boxed", "boxed", bin="sh")
    line = _bad(capsys, out, "user.boxed")
    assert "model user.boxed" in line and "the container's command" in line and "shell script" in line

    # a --publish that is not loopback, without --publish-any
    line = _bad(capsys, out, "user.qwen", "--image", f"llamacpp-gpu={IMAGE}", "--publish", "0.0.0.0:8080")
    assert "--publish 0.0.0.0:8080" in line and "not a loopback address" in line and "--publish-any" in line
    code, _, err = _run(capsys, "user.qwen", "--image", f"llamacpp-gpu={IMAGE}", "--publish", "0.0.0.0:8080",
                        "--publish-any", "--out", str(out))
    assert code == 0, err

    # two models that map to one Kubernetes name
    out.write_bytes(b"# again\n")
    kube_env.register("user.Qwen", "llamacpp-gpu")
    line = _bad(capsys, out, "user.qwen", "user.Qwen", "--image", f"llamacpp-gpu={IMAGE}")
    assert "model user." in line and "maps to the Kubernetes name 'qwen'" in line

    # no image for a recipe that runs a program
    line = _bad(capsys, out, "user.qwen")
    assert "model user.qwen" in line and "--image" in line

    # an unknown model, a missing file
    line = _bad(capsys, out, "user.nope")  # the model named once: no prefix repeating it
    assert line.startswith("error: no model file or registered model named 'user.nope' in ") and line.count("user.nope") == 1
    assert "model file not found" in _bad(capsys, out, "/nowhere/x.gguf")


def test_bad_input_as_json(kube_env, capsys, tmp_path):
    code = main(["kube", "generate", "user.nope", "--out", str(tmp_path / "o.yaml"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["error"] == "kube" and "user.nope" in doc["message"]
    assert not (tmp_path / "o.yaml").exists()


def test_systemd_units_are_well_formed(kube_env, capsys, tmp_path):
    kube_env.descriptor(GPU_FORK)
    kube_env.register("user.qwen", "llamacpp-gpu")
    out, units = tmp_path / "my engines.yaml", tmp_path / "units"
    code, stdout, err = _run(capsys, "user.qwen", "--image", f"llamacpp-gpu={IMAGE}", "--out", str(out),
                             "--systemd", str(units), "--json")
    assert code == 0, err
    doc = json.loads(stdout)
    escaped = subprocess.run(["systemd-escape", "--path", str(out)], capture_output=True, text=True,
                             check=True).stdout.strip()
    instance = f"podman-kube@{escaped}.service"
    assert doc["systemd"]["instance"] == instance
    dropin = units / f"{instance}.d" / "lemonpack.conf"
    quadlet = units / "lemonpack-qwen.kube"  # named after the model set it holds
    assert doc["systemd"]["quadlet"] == quadlet.name
    assert dropin.is_file() and quadlet.is_file()

    # The quadlet file: sections and keys podman-systemd.unit(5) reads.
    cp = configparser.ConfigParser(strict=True, interpolation=None)
    cp.optionxform = str
    cp.read_string(quadlet.read_text())
    assert cp["Kube"]["Yaml"] == str(out)
    assert cp["Install"]["WantedBy"] == "default.target"
    assert int(cp["Service"]["TimeoutStartSec"]) == 300 + 120  # the recipe's startup budget + margin

    # The drop-in: sections and keys systemd.unit(5)/systemd.service(5) know ...
    cp = configparser.ConfigParser(strict=True, interpolation=None)
    cp.optionxform = str
    cp.read_string(dropin.read_text())
    assert set(cp.sections()) == {"Unit", "Service"}
    assert cp["Unit"]["Description"] == f"lemonpack engines from {out}"
    assert int(cp["Service"]["TimeoutStartSec"]) == 420
    # ... and verified by systemd itself on the podman-kube@ instance it extends, where it runs.
    template = Path("/usr/lib/systemd/system/podman-kube@.service")
    analyze = shutil.which("systemd-analyze")
    if analyze is None or not template.is_file():
        return  # systemd is not on every machine; podman's template unit comes with podman
    unit_dir = tmp_path / "unitdir"
    unit_dir.mkdir()
    shutil.copy(template, unit_dir)
    shutil.copytree(units / f"{instance}.d", unit_dir / f"{instance}.d")
    r = subprocess.run([analyze, "verify", "--man=no", str(unit_dir / instance)], capture_output=True, text=True,
                       env={"SYSTEMD_UNIT_PATH": f"{unit_dir}:", "PATH": "/usr/bin:/bin"}, timeout=60)
    assert r.returncode == 0 and "lemonpack.conf" not in r.stderr, r.stderr
    # ... and the check is live: a broken drop-in is reported.
    (unit_dir / f"{instance}.d" / "lemonpack.conf").write_text("[Service]\nTimeoutStartSec=soon\n")
    r = subprocess.run([analyze, "verify", "--man=no", str(unit_dir / instance)], capture_output=True, text=True,
                       env={"SYSTEMD_UNIT_PATH": f"{unit_dir}:", "PATH": "/usr/bin:/bin"}, timeout=60)
    assert "TimeoutStartSec" in r.stderr


def test_systemd_needs_a_file(kube_env, capsys, tmp_path):
    code, _, err = _run(capsys, "user.x", "--systemd", str(tmp_path / "u"), "--out", "-")
    assert code == 1 and "--systemd" in err and not (tmp_path / "u").exists()


def test_a_model_registered_by_oci_is_an_image_volume_of_its_artifact_by_default(kube_env, registry, capsys, tmp_path):
    """Issue 23, point 4: no hostPath, the artifact's file names, the memory request from the GGUF
    header read from the real registry (the weights are never fetched), PSS "restricted"."""
    import math

    from lemonpack.runtime.models.memory import estimate_model
    from lemonpack.runtime.models.push import push_model
    from support.gguf_files import write_gguf
    from support.pss import pod_specs, violations

    kube_env.descriptor(GPU_FORK)
    gguf = write_gguf(tmp_path / "big.gguf", "llama", {"llama.block_count": 2, "llama.embedding_length": 64,
                                                        "llama.attention.head_count": 4},
                      {"token_embd.weight": [64, 32768]})
    digest = push_model([gguf], f"{registry.host}/models/big:v1").digest
    art = f"{registry.host}/models/big@{digest}"
    kube_env.registry.add("user.big", "llamacpp-gpu", {"main": f"oci://{art}"})
    code, out, err = _run(capsys, "user.big", "--image", f"llamacpp-gpu={IMAGE}", "--out", "-")
    assert code == 0, err
    docs = list(yaml.safe_load_all(out))
    for d in docs:
        kubernetes_validate.validate(d, K8S, strict=True)
    pod = docs[0]["spec"]["template"]["spec"]
    assert pod["volumes"][0] == {"name": "model", "image": {"reference": art, "pullPolicy": "IfNotPresent"}}
    assert "hostPath" not in out and "warning" not in err
    c = pod["containers"][0]
    assert "/models/big.gguf" in c["command"] + c["args"]
    mib = math.ceil(estimate_model(str(gguf), 8192).total / (1 << 20))  # GPU_FORK's ctx_size 8192
    assert c["resources"]["requests"]["memory"] == f"{mib}Mi"
    assert [violations(p) for _w, p in pod_specs(docs)] == [[]]
    cached = [p for p in (kube_env.root).rglob("*") if p.is_file() and p.stat().st_size >= gguf.stat().st_size]
    assert cached == [gguf], cached  # the header, manifest and config were fetched; the weights never
    code, _, err = _run(capsys, "user.big", "--image", f"llamacpp-gpu={IMAGE}", "--models", "hostpath", "--out", "-")
    assert code == 1 and "registered by oci:// and has no file on this machine" in err
    code, _, err = _run(capsys, "user.big", "--image", f"llamacpp-gpu={IMAGE}", "--publish", "127.0.0.1:18080",
                        "--out", str(tmp_path / "one-host.yaml"))
    assert code == 0 and "podman kube play (4.x) does not support" in err and "modelcar:" in err
