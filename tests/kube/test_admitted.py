"""Pods a cluster admits (issue 23, cases 58-64; issue 29, GPU scheduling): the model's own files
and nothing beside them, cpu/memory requests from the serve estimate, probes podman kube play
runs, Pod Security "restricted" (checked by the table in :mod:`support.pss`), one quadlet per
model set, every AMD arch of the family table, tolerations and ``Recreate`` for GPU pods. The
podman runs are in ``test_kube_admitted_play.py``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from lemonpack.catalogue.archs import ROCM_ARCHS
from lemonpack.cli import main
from lemonpack.contract import load_recipe_text
from lemonpack.contract.host import _gfx_from_target_version
from lemonpack.kube import GenerateOptions, KubeModel, ModelSource, Target, generate, render_yaml
from lemonpack.kube.accelerators import AMD_FAMILIES, TargetError
from lemonpack.kube.systemd import MAX_QUADLET_STEM, quadlet_name
from lemonpack.runtime.launch.modelfiles import ModelSpec
from support import pss
from support.kube import GPU_FORK, IMAGE, TOOLBOX

K8S = "1.37.0"
MiB = 1 << 20


def _recipe(doc=GPU_FORK):
    return load_recipe_text(json.dumps(doc), f"/etc/lemonpack/backends/{doc['recipe']}.json")


def _pod(docs, i=0):
    return docs[i]["spec"]["template"]["spec"]


def _run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["kube", "generate", *args])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


# --- case 58: the model's files, not its directory ------------------------------------------

def test_hostpath_mounts_the_model_file_not_its_directory(tmp_path):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE")
    model = home / "qwen.gguf"
    model.write_bytes(b"GGUF")
    m = KubeModel("user.q", ModelSpec(name="user.q", checkpoints={"main": str(model)}), _recipe())
    pod = _pod(generate([m], GenerateOptions(images={"llamacpp-gpu": IMAGE})))
    host = [v["hostPath"] for v in pod["volumes"] if "hostPath" in v]
    assert host == [{"path": str(model), "type": "File"}]  # the file itself, never $HOME
    mounts = pod["containers"][0]["volumeMounts"]
    assert {"name": "model", "mountPath": "/models/qwen.gguf", "readOnly": True} in mounts
    assert pod["containers"][0]["args"][pod["containers"][0]["args"].index("-m") + 1] == "/models/qwen.gguf"


def test_hostpath_of_a_bundle_split_parts_and_extra_checkpoints(tmp_path):
    d = tmp_path / "models"
    (d / "bundle").mkdir(parents=True)
    (d / "bundle" / "model.onnx").write_bytes(b"x" * 10)
    (d / "secret.txt").write_text("not a checkpoint")
    for i in (1, 2, 3):
        (d / f"big-{i:05d}-of-00003.gguf").write_bytes(b"GGUF")
    (d / "mmproj.gguf").write_bytes(b"GGUF")
    # a directory model: exactly that directory (a file inside it is not mounted twice)
    bundle = KubeModel("user.b", ModelSpec(name="user.b", checkpoints={"main": str(d / "bundle"),
                                                                       "extra": str(d / "bundle" / "model.onnx")},
                                           model_dir=str(d)), _recipe())
    pod = _pod(generate([bundle], GenerateOptions(images={"llamacpp-gpu": IMAGE})))
    assert [v["hostPath"] for v in pod["volumes"] if "hostPath" in v] == [
        {"path": str(d / "bundle"), "type": "Directory"}]
    # a split GGUF brings its other parts; an mmproj checkpoint is its own file; secret.txt stays out
    split = KubeModel("user.s", ModelSpec(name="user.s", checkpoints={"main": str(d / "big-00001-of-00003.gguf"),
                                                                      "mmproj": str(d / "mmproj.gguf")}), _recipe())
    docs = generate([split], GenerateOptions(images={"llamacpp-gpu": IMAGE}))
    kubernetes_validate.validate(docs[0], K8S, strict=True)
    pod = _pod(docs)
    host = [v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v]
    assert host == [str(d / f"big-{i:05d}-of-00003.gguf") for i in (1, 2, 3)] + [str(d / "mmproj.gguf")]
    assert [v["name"] for v in pod["volumes"]] == ["model-1", "model-2", "model-3", "model-4", "tmp"]
    paths = [m["mountPath"] for m in pod["containers"][0]["volumeMounts"]]
    assert paths == [f"/models/big-{i:05d}-of-00003.gguf" for i in (1, 2, 3)] + ["/models/mmproj.gguf", "/tmp"]


# --- case 60: requests and limits from the serve estimate ----------------------------------

def test_memory_request_is_the_serve_estimate_at_the_launch_context(tmp_path):
    from support.llama_server import write_tiny_gguf

    from lemonpack.runtime.launch.options import launch_options, memory_options
    from lemonpack.runtime.models.memory import estimate_model

    gguf = write_tiny_gguf(tmp_path / "tiny.gguf")

    def requested(ctx: int):
        m = KubeModel("user.t", ModelSpec(name="user.t", checkpoints={"main": str(gguf)},
                                          recipe_options={"ctx_size": ctx}), _recipe())
        c = _pod(generate([m], GenerateOptions(images={"llamacpp-gpu": IMAGE})))["containers"][0]
        mem = memory_options(launch_options(m.recipe, m.spec.recipe_options))
        return c["resources"], estimate_model(str(gguf), mem.ctx_size).total

    small, est_small = requested(256)
    big, est_big = requested(262144)
    assert est_big > est_small + 30 * MiB  # the KV cache at 256k tokens
    for res, est in ((small, est_small), (big, est_big)):
        req = int(res["requests"]["memory"].removesuffix("Mi"))
        assert req == -(-est // MiB)  # the estimate, rounded up to MiB
        assert res["limits"]["memory"] == f"{req + 1024}Mi"  # + serve's 1 GiB headroom
        assert res["requests"]["cpu"] == "1" and "cpu" not in res["limits"]


def test_memory_request_covers_a_file_model_and_the_cli_warns_without_one(kube_env, capsys, tmp_path):
    kube_env.descriptor(GPU_FORK)
    big = kube_env.model_file("big.gguf", b"\0" * 64_000_000)
    kube_env.registry.add("user.big", "llamacpp-gpu", {"main": str(big)})
    code, out, err = _run(capsys, "user.big", "--image", f"llamacpp-gpu={IMAGE}", "--models", "pvc:models",
                          "--out", "-")
    assert code == 0, err
    res = next(yaml.safe_load_all(out))["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert res["requests"]["memory"] == "62Mi" and 62 * MiB >= 64_000_000  # size on disk (not a GGUF)
    assert "warning" not in err
    kube_env.registry.add("user.gone", "llamacpp-gpu", {"main": str(tmp_path / "not-here.gguf")})
    code, out, err = _run(capsys, "user.gone", "--image", f"llamacpp-gpu={IMAGE}", "--out", "-")
    assert code == 0 and "not on this machine, so the pod has no memory request" in err
    res = next(yaml.safe_load_all(out))["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert res == {"requests": {"cpu": "1"}}  # Burstable still: never BestEffort


# --- case 61: probes podman kube play runs --------------------------------------------------

def test_liveness_is_left_out_for_podman_kube_play_and_kept_for_a_cluster(kube_env, capsys):
    kube_env.descriptor(GPU_FORK)
    kube_env.register("user.q", "llamacpp-gpu")
    code, one_host, err = _run(capsys, "user.q", "--image", f"llamacpp-gpu={IMAGE}", "--publish", "127.0.0.1:18080",
                               "--out", "-")
    assert code == 0, err
    c = next(yaml.safe_load_all(one_host))["spec"]["template"]["spec"]["containers"][0]
    assert "livenessProbe" not in c and c["startupProbe"]["httpGet"]["port"] == 8080
    code, cluster, _ = _run(capsys, "user.q", "--image", f"llamacpp-gpu={IMAGE}", "--out", "-")
    c = next(yaml.safe_load_all(cluster))["spec"]["template"]["spec"]["containers"][0]
    assert c["livenessProbe"]["httpGet"] == {"path": "/health", "port": 8080}  # numeric: podman resolves it
    assert c["livenessProbe"]["timeoutSeconds"] == 15 and c["readinessProbe"]["timeoutSeconds"] == 15
    code, forced, _ = _run(capsys, "user.q", "--image", f"llamacpp-gpu={IMAGE}", "--publish", "127.0.0.1:18080",
                           "--liveness", "--out", "-")
    assert "livenessProbe" in next(yaml.safe_load_all(forced))["spec"]["template"]["spec"]["containers"][0]


def test_probe_exec_is_the_liveness_probe_of_every_variant(kube_env, capsys):
    """Issue 23 point 4: an exec livenessProbe podman can run in an image that carries the tool."""
    kube_env.descriptor(GPU_FORK)
    kube_env.register("user.q", "llamacpp-gpu")
    argv = '["curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:{port}/health"]'
    want = ["curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:8080/health"]
    for publish in (("--publish", "127.0.0.1:18080"), ()):
        code, out, err = _run(capsys, "user.q", "--image", f"llamacpp-gpu={IMAGE}", *publish, "--probe-exec", argv,
                              "--out", "-")
        assert code == 0, err
        c = next(yaml.safe_load_all(out))["spec"]["template"]["spec"]["containers"][0]
        assert c["livenessProbe"] == {"exec": {"command": want}, "periodSeconds": 10, "failureThreshold": 3,
                                      "timeoutSeconds": 15}, publish
        assert c["startupProbe"]["httpGet"]["port"] == 8080 and c["readinessProbe"]["httpGet"]["path"] == "/health"


@pytest.mark.parametrize("value, message", [
    ('curl -f http://x', "not a JSON list of strings"),
    ('[]', "expected a non-empty JSON list"),
    ('["curl", 1]', "expected a non-empty JSON list"),
    ('{"a": 1}', "expected a non-empty JSON list"),
    ('["sh", "-c", "curl -f http://127.0.0.1:8080/health"]', "word 2 'curl -f http://127.0.0.1:8080/health'"),
    ('["curl", "http://h/$(id)"]', "holds a character a shell would read"),
    ('["curl", "a;reboot"]', "holds a character a shell would read"),
    ('["curl", ""]', "word 1 ''"),
    ('["curl", "{host}"]', "word 1 '{host}'"),
    ('["curl", ' + "[" * 3000, "not nested lists"),  # never the decoder's RecursionError
    ('["w"' + ', "x"' * 40 + "]", "41 words; at most 32"),
])
def test_probe_exec_takes_only_a_shell_inert_argv(kube_env, capsys, value, message):
    """podman 4.3 joins the words and runs /bin/sh -c: a word the shell would read differently is refused."""
    kube_env.descriptor(GPU_FORK)
    kube_env.register("user.q", "llamacpp-gpu")
    code, out, err = _run(capsys, "user.q", "--image", f"llamacpp-gpu={IMAGE}", "--probe-exec", value, "--out", "-")
    assert code == 1 and out == "" and "--probe-exec" in err and message in err, err
    assert "Traceback" not in err


def test_probe_exec_with_no_liveness_is_refused(kube_env, capsys):
    kube_env.descriptor(GPU_FORK)
    kube_env.register("user.q", "llamacpp-gpu")
    code, out, err = _run(capsys, "user.q", "--image", f"llamacpp-gpu={IMAGE}", "--probe-exec", '["true"]',
                          "--no-liveness", "--out", "-")
    assert code == 1 and out == "" and "--probe-exec with --no-liveness" in err


def test_a_process_probe_gets_the_exec_liveness_after_the_startup_budget():
    doc = json.loads(json.dumps(GPU_FORK))
    doc["health_probe"] = {"type": "process", "timeout_seconds": 90}
    m = KubeModel("user.p", ModelSpec(name="user.p", checkpoints={"main": "/srv/m/p.gguf"}), _recipe(doc),
                  ModelSource.parse("pvc:m"))
    c = _pod(generate([m], GenerateOptions(images={"llamacpp-gpu": IMAGE}, probe_exec=("true",))))["containers"][0]
    assert c["livenessProbe"]["exec"] == {"command": ["true"]} and c["livenessProbe"]["initialDelaySeconds"] == 90
    assert not {"startupProbe", "readinessProbe"} & set(c)


# --- case 62: Pod Security "restricted" -----------------------------------------------------

def _variants(tmp_path) -> dict[str, list[dict]]:
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")
    oci = f"registry.example.test/models/m@sha256:{'12' * 32}"
    out = {}
    for target in ("cpu", "cuda:sm_90", "rocm:gfx90a", "rocm:gfx1151"):
        for src in ("pvc:models", f"oci:{oci}", "hostpath"):
            m = KubeModel("user.m", ModelSpec(name="user.m", checkpoints={"main": str(f)}), _recipe(),
                          ModelSource.parse(src))
            out[f"{target} {src.split(':')[0]}"] = generate([m], GenerateOptions(images={"llamacpp-gpu": IMAGE},
                                                                                 target=Target.parse(target)))
    tb = KubeModel("user.tb", ModelSpec(name="user.tb", checkpoints={"main": str(f)}), _recipe(TOOLBOX),
                   ModelSource.parse("pvc:models"))
    out["toolbox pvc"] = generate([tb], GenerateOptions(target=Target.parse("vulkan:gfx1100")))
    m = KubeModel("user.m", ModelSpec(name="user.m", checkpoints={"main": str(f)}), _recipe(), ModelSource.parse("pvc:m"))
    out["cpu pvc publish"] = generate([m], GenerateOptions(images={"llamacpp-gpu": IMAGE},
                                                           publish=("127.0.0.1", 18080), liveness=False))
    wget = ("/bin/busybox", "wget", "-q", "--spider", "http://127.0.0.1:{port}/health")
    out["cpu pvc exec"] = generate([m], GenerateOptions(images={"llamacpp-gpu": IMAGE}, probe_exec=wget))
    out["cpu pvc exec publish"] = generate([m], GenerateOptions(images={"llamacpp-gpu": IMAGE}, probe_exec=wget,
                                                                publish=("127.0.0.1", 18080)))
    return out


def test_every_variant_is_valid_and_passes_pod_security_restricted(tmp_path):
    for name, docs in _variants(tmp_path).items():
        for d in docs:
            kubernetes_validate.validate(d, K8S, strict=True)
        found = [v for _, pod in pss.pod_specs(docs) for v in pss.violations(pod, "restricted")]
        if name.endswith("hostpath"):  # the one-host options are what even "baseline" forbids
            assert found == ["HostPath Volumes: spec.volumes[model].hostPath: must be undefined",
                             "Volume Types: spec.volumes[model]: ['hostPath'] is not an allowed volume type"], name
            assert pss.violations(_pod(docs), "baseline") == found[:1]
        elif name.endswith("publish"):  # "exec publish" too
            assert found == ["Host Ports: spec.containers[engine].ports[http].hostPort: must be undefined or 0"], name
        else:
            assert found == [], f"{name}: {found}"
        pod = _pod(docs)
        assert pod["securityContext"]["runAsUser"] == 65532 and pod["automountServiceAccountToken"] is False
    # and the tool itself, strictly, on one file holding every variant
    path = tmp_path / "all.yaml"
    path.write_bytes(b"".join(render_yaml(docs) for docs in _variants(tmp_path).values()))
    r = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "-k", K8S, str(path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_pss_table_catches_each_planted_violation(tmp_path):
    """The checker is live: each planted change is reported by its control."""
    docs = _variants(tmp_path)["cpu pvc"]
    assert pss.violations(_pod(docs)) == []
    plants = {
        "Running as Non-root user": lambda p: p["securityContext"].update(runAsUser=0),
        "Running as Non-root": lambda p: p["securityContext"].pop("runAsNonRoot"),
        "Privilege Escalation": lambda p: p["containers"][0]["securityContext"].pop("allowPrivilegeEscalation"),
        "Capabilities": lambda p: p["containers"][0]["securityContext"]["capabilities"].update(drop=["NET_RAW"]),
        "Seccomp": lambda p: p["securityContext"].pop("seccompProfile"),
        "Privileged Containers": lambda p: p["containers"][0]["securityContext"].update(privileged=True),
        "Host Namespaces": lambda p: p.update(hostNetwork=True),
        "Volume Types": lambda p: p["volumes"].append({"name": "n", "nfs": {"server": "x", "path": "/"}}),
    }
    for control, plant in plants.items():
        pod = json.loads(json.dumps(_pod(docs)))
        plant(pod)
        found = pss.violations(pod)
        assert found and all(v.startswith(f"{control}: ") for v in found), (control, found)
    # the case's own checker agrees on the generated file
    path = tmp_path / "k.yaml"
    path.write_bytes(render_yaml(docs))
    check = Path("/work/shared/cases/62-kube-pss-restricted-securitycontext/check_pss.py")
    if check.is_file():
        r = subprocess.run([sys.executable, str(check), str(path)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout


# --- case 63: one quadlet per model set -----------------------------------------------------

def test_quadlets_are_named_per_model_set_and_never_replace_another_install(kube_env, capsys, tmp_path):
    kube_env.descriptor(GPU_FORK)
    kube_env.register("user.a", "llamacpp-gpu")
    kube_env.register("user.b", "llamacpp-gpu")
    units = tmp_path / "units"
    code, out, err = _run(capsys, "user.a", "--image", f"llamacpp-gpu={IMAGE}", "--out", str(tmp_path / "a.yaml"),
                          "--systemd", str(units), "--json")
    assert code == 0, err
    assert json.loads(out)["systemd"]["quadlet"] == "lemonpack-a.kube"
    code, out, err = _run(capsys, "user.b", "user.a", "--image", f"llamacpp-gpu={IMAGE}", "--out",
                          str(tmp_path / "ab.yaml"), "--systemd", str(units), "--json")
    assert code == 0, err
    assert sorted(p.name for p in units.glob("*.kube")) == ["lemonpack-a.kube", "lemonpack-a_b.kube"]
    # the same model set from another YAML file: refused, nothing written
    before = (units / "lemonpack-a.kube").read_bytes()
    code, _, err = _run(capsys, "user.a", "--image", f"llamacpp-gpu={IMAGE}", "--out", str(tmp_path / "a2.yaml"),
                        "--systemd", str(units))
    assert code == 1 and "lemonpack-a.kube already exists and starts" in err and str(tmp_path / "a.yaml") in err
    assert (units / "lemonpack-a.kube").read_bytes() == before and not (tmp_path / "a2.yaml").exists()
    # a re-run of the same install replaces its own file
    code, _, err = _run(capsys, "user.a", "--image", f"llamacpp-gpu={IMAGE}", "--out", str(tmp_path / "a.yaml"),
                        "--systemd", str(units))
    assert code == 0, err


def test_quadlet_names_are_deterministic_and_bounded():
    assert quadlet_name(["qwen", "llama-3b", "qwen"]) == "lemonpack-llama-3b_qwen"
    assert quadlet_name(["a-b", "c"]) != quadlet_name(["a", "b-c"])  # "_" keeps sets apart
    many = [f"model-number-{i}" for i in range(40)]
    long = quadlet_name(many)
    assert len(long) <= MAX_QUADLET_STEM and long.startswith("lemonpack-model-number-0_and-39-more-")
    assert quadlet_name(reversed(many)) == long and quadlet_name(many[:-1]) != long


# --- case 64: every AMD arch of the table ---------------------------------------------------

def test_every_amd_arch_lemonpack_knows_is_accepted():
    assert set(AMD_FAMILIES) == set(ROCM_ARCHS)  # one set of archs in lemonpack's two AMD tables
    for arch, family in AMD_FAMILIES.items():
        for accel in ("rocm", "vulkan"):
            t = Target.parse(f"{accel}:{arch}")
            assert t.vendor == "amd" and t.node_selector_requirements() == [("amd.com/gpu.family", family)]
    assert Target.parse("rocm:gfx90a").node_selector_requirements() == [("amd.com/gpu.family", "AI")]
    # the spelling host detection derives from KFD's gfx_target_version is the one accepted
    for version, arch in ((90010, "gfx90a"), (90012, "gfx90c"), (90402, "gfx942"), (110501, "gfx1151")):
        assert _gfx_from_target_version(version) == arch and Target.parse(f"rocm:{arch}").arch == arch
    for bad, message in (("gfx9", "is not gfx"), ("gfx90g", "is not gfx"), ("gfx0900", "is not gfx"),
                         ("gfx1199", "no AMD node-labeller family")):
        with pytest.raises(TargetError, match=message):
            Target.parse(f"rocm:{bad}")


def test_arch_spellings_a_user_copies_name_the_same_target():
    # variants of case 64: the arch as a tool prints it is not refused
    for text, arch in (("rocm:GFX90A", "gfx90a"), ("cuda:SM_89", "sm_89"), ("cuda:9.0", "sm_90"),
                       ("cuda:12.0", "sm_120"), ("cuda:sm_90a", "sm_90"), ("cuda:sm_100f", "sm_100"),
                       ("vulkan:Intel", "intel")):
        assert Target.parse(text).arch == arch, text
    assert Target.parse("cuda:sm_90a").node_selector_requirements() == [
        ("nvidia.com/gpu.compute.major", "9"), ("nvidia.com/gpu.compute.minor", "0")]
    for bad in ("cuda:sm_90x", "cuda:9", "rocm:gfx90A1"):
        with pytest.raises(TargetError):
            Target.parse(bad)


def test_gfx90a_deployment_as_the_case_expects(kube_env, capsys):
    kube_env.descriptor(GPU_FORK)
    kube_env.register("user.mi", "llamacpp-gpu")
    code, out, err = _run(capsys, "user.mi", "--image", f"llamacpp-gpu={IMAGE}", "--accelerator", "rocm:gfx90a",
                          "--out", "-")
    assert code == 0, err
    pod = next(yaml.safe_load_all(out))["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["amd.com/gpu"] == "1"
    expr = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert expr["matchExpressions"] == [{"key": "amd.com/gpu.family", "operator": "In", "values": ["AI"]}]


# --- issue 29: GPU scheduling ---------------------------------------------------------------

@pytest.mark.parametrize("target, key", [("cuda:sm_90", "nvidia.com/gpu"), ("rocm:gfx942", "amd.com/gpu"),
                                         ("vulkan:intel", "gpu.intel.com/i915")])
def test_gpu_pods_tolerate_the_device_taint_and_recreate(target, key):
    doc = TOOLBOX if target.startswith("vulkan") else GPU_FORK
    m = KubeModel("user.g", ModelSpec(name="user.g", checkpoints={"main": "/srv/g/g.gguf"}), _recipe(doc))
    docs = generate([m], GenerateOptions(images={} if doc is TOOLBOX else {"llamacpp-gpu": IMAGE},
                                         target=Target.parse(target)))
    kubernetes_validate.validate(docs[0], K8S, strict=True)
    assert _pod(docs)["tolerations"] == [{"key": key, "operator": "Exists", "effect": "NoSchedule"}]
    assert docs[0]["spec"]["strategy"] == {"type": "Recreate"}


# --- case 59: build's image manifests carry created / source / revision ---------------------

def test_build_manifests_carry_created_source_and_revision(tmp_path, monkeypatch, capsys):
    from support.tools import need

    skopeo = need("skopeo")
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")

    def manifest(out: Path, *extra: str) -> tuple[dict, dict]:
        assert main(["build", "--example", "--out", str(out), "--no-progress", *extra]) == 0
        capsys.readouterr()
        raw = subprocess.run([skopeo, "inspect", "--raw", f"oci:{out}:hello-engine.linux-cpu"], capture_output=True,
                             text=True, check=True).stdout
        cfg = subprocess.run([skopeo, "inspect", "--config", f"oci:{out}:hello-engine.linux-cpu"],
                             capture_output=True, text=True, check=True).stdout
        return json.loads(raw), json.loads(cfg)

    m, cfg = manifest(tmp_path / "a")
    ann = m["annotations"]
    assert ann["org.opencontainers.image.created"] == "2023-11-14T22:13:20Z" == cfg["created"]
    assert "org.opencontainers.image.source" not in ann and "org.opencontainers.image.revision" not in ann
    assert cfg["config"]["User"] == "65532:65532"
    src = "https://git.example.test/team/recipes"
    assert main(["build", "--example", "--out", str(tmp_path / "x"), "--source-url", "git.example/x"]) == 2  # usage
    assert "--source-url" in capsys.readouterr().err and not (tmp_path / "x").exists()
    m2, _ = manifest(tmp_path / "b", "--source-url", src, "--revision", "0123abc")
    assert m2["annotations"]["org.opencontainers.image.source"] == src
    assert m2["annotations"]["org.opencontainers.image.revision"] == "0123abc"
    # byte-reproducible: the same inputs give the same bytes
    m3, _ = manifest(tmp_path / "c", "--source-url", src, "--revision", "0123abc")
    assert (tmp_path / "b" / "index.json").read_bytes() == (tmp_path / "c" / "index.json").read_bytes()
    assert m3 == m2


def test_out_errors_name_the_users_path(kube_env, capsys, tmp_path):
    kube_env.descriptor(GPU_FORK)
    kube_env.register("user.q", "llamacpp-gpu")
    d = tmp_path / "outdir"
    d.mkdir()
    code, _, err = _run(capsys, "user.q", "--image", f"llamacpp-gpu={IMAGE}", "--out", str(d))
    assert code == 1 and f"--out {d}: is a directory" in err and ".tmp-" not in err and not list(d.iterdir())
    code, _, err = _run(capsys, "user.q", "--image", f"llamacpp-gpu={IMAGE}", "--out", str(tmp_path / "no" / "x.yaml"))
    assert code == 1 and f"the directory {tmp_path / 'no'} does not exist" in err


def test_the_docs_example_model_name_registers_and_maps(kube_env, capsys):
    """docs/kubernetes.md's example: a name the registry takes, and the object name it gives."""
    from lemonpack.kube.names import object_name

    text = (Path(__file__).resolve().parents[2] / "docs" / "kubernetes.md").read_text()
    assert "`user.Qwen3.Q4_K_M` becomes `qwen3-q4-k-m`" in text
    kube_env.descriptor(GPU_FORK)
    kube_env.register("user.Qwen3.Q4_K_M", "llamacpp-gpu")
    assert object_name("user.Qwen3.Q4_K_M") == "qwen3-q4-k-m"
