"""``lemonpack kube generate``: objects from recipes and models, checked against the Kubernetes
schemas (kubernetes-validate, strict), golden files for an NVIDIA and an AMD block, determinism."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from lemonpack.contract import load_recipe_text
from lemonpack.kube import GenerateOptions, KubeModel, ModelSource, Target, generate, render_yaml
from lemonpack.kube.accelerators import AMD_FAMILY_LABEL, NVIDIA_MAJOR_LABEL, NVIDIA_MINOR_LABEL, TargetError
from lemonpack.runtime.launch.modelfiles import ModelSpec

from support.kube import GPU_FORK, IMAGE, TOOLBOX, TOOLBOX_IMAGE

GOLDEN = Path(__file__).parent / "golden"
K8S_VERSION = "1.37.0"


def _validate(docs) -> None:
    for d in docs:
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)  # raises ValidationError


def _model(name="user.qwen-0.5b", recipe_doc=GPU_FORK, main_path="/srv/models/qwen/qwen-0.5b-q4.gguf", **kw):
    r = load_recipe_text(json.dumps(recipe_doc), f"/etc/lemonpack/backends/{recipe_doc['recipe']}.json")
    return KubeModel(name, ModelSpec(name=name, checkpoints={"main": main_path}, **kw), r)


def _pod(docs, i=0):
    return docs[i]["spec"]["template"]["spec"]


@pytest.mark.parametrize("target, golden", [("cuda:sm_90", "nvidia.yaml"), ("rocm:gfx1151", "amd.yaml")])
def test_golden_gpu_blocks(target, golden):
    """The NVIDIA and AMD blocks of one fork: resources, affinity, arch override, hardware tokens."""
    models = [_model(), _model("user.llama-3b", main_path="/srv/models/llama/llama-3b.gguf")]
    opts = GenerateOptions(images={"llamacpp-gpu": IMAGE}, target=Target.parse(target), namespace="engines",
                           replicas=2)
    docs = generate(models, opts)
    _validate(docs)
    data = render_yaml(docs)
    path = GOLDEN / golden
    if os.environ.get("LEMONPACK_UPDATE_GOLDEN"):
        path.write_bytes(data)
    assert data == path.read_bytes(), f"{golden} differs; regenerate with LEMONPACK_UPDATE_GOLDEN=1 and review"


def test_nvidia_and_amd_specifics():
    nv = generate([_model()], GenerateOptions(images={"llamacpp-gpu": IMAGE}, target=Target.parse("cuda:sm_90")))
    c = _pod(nv)["containers"][0]
    assert c["resources"] == {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "1"}}  # no file here: no memory
    exprs = _pod(nv)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"]
    assert exprs == [{"key": NVIDIA_MAJOR_LABEL, "operator": "In", "values": ["9"]},
                     {"key": NVIDIA_MINOR_LABEL, "operator": "In", "values": ["0"]}]
    assert c["command"] == ["/opt/lemonpack/llamacpp-gpu/llama-server"]
    assert c["args"][-2:] == ["--flash-attn", "on"]  # the sm_90 arch override
    assert ["--port", "8080"] == c["args"][c["args"].index("--port"):c["args"].index("--port") + 2]
    assert c["args"][c["args"].index("--host") + 1] == "0.0.0.0"
    assert c["args"][c["args"].index("-m") + 1] == "/models/qwen-0.5b-q4.gguf"
    assert c["args"][c["args"].index("--ctx-size") + 1] == "8192"  # recipe_options

    amd = generate([_model()], GenerateOptions(images={"llamacpp-gpu": IMAGE}, target=Target.parse("rocm:gfx1151")))
    c = _pod(amd)["containers"][0]
    assert c["resources"] == {"limits": {"amd.com/gpu": "1"}, "requests": {"cpu": "1"}}
    assert _pod(amd)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"] == [{"key": AMD_FAMILY_LABEL, "operator": "In",
                                                         "values": ["GC_11_5_0"]}]
    assert c["args"][-2:] == ["--alias", "strix-halo"]  # gfx115* override, {arch_alias}
    assert {"name": "LP_ARCH", "value": "gfx1151"} in c["env"]  # {rocm_arch}

    cpu = generate([_model()], GenerateOptions(images={"llamacpp-gpu": IMAGE}))
    assert "affinity" not in _pod(cpu) and _pod(cpu)["containers"][0]["resources"] == {"requests": {"cpu": "1"}}
    assert "tolerations" not in _pod(cpu) and "strategy" not in cpu[0]["spec"]
    _validate(nv + amd + cpu)


def test_probes_from_health_probe():
    docs = generate([_model()], GenerateOptions(images={"llamacpp-gpu": IMAGE}))
    c = _pod(docs)["containers"][0]
    # poll_interval_ms 500 -> 1 s period; timeout_seconds 300 -> 300 startup attempts
    # numeric ports (podman < 4.6 cannot resolve a named one); each attempt may take 15 s
    assert c["startupProbe"] == {"httpGet": {"path": "/health", "port": 8080}, "periodSeconds": 1,
                                 "failureThreshold": 300, "timeoutSeconds": 15}
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8080}
    assert c["livenessProbe"]["periodSeconds"] == 10 and c["livenessProbe"]["timeoutSeconds"] == 15
    # no livenessProbe on request (the CLI's default with --publish: podman kube play's curl-in-the-image)
    c = _pod(generate([_model()], GenerateOptions(images={"llamacpp-gpu": IMAGE}, liveness=False)))["containers"][0]
    assert "livenessProbe" not in c and {"startupProbe", "readinessProbe"} <= set(c)
    tcp = generate([_model(recipe_doc=TOOLBOX)], GenerateOptions(target=Target.parse("vulkan:gfx1151")))
    c = _pod(tcp)["containers"][0]
    assert c["startupProbe"] == {"tcpSocket": {"port": 8080}, "periodSeconds": 2, "failureThreshold": 30,
                                 "timeoutSeconds": 15}
    proc = dict(TOOLBOX, recipe="toolbox-proc", health_probe={"type": "process"})
    c = _pod(generate([_model(recipe_doc=proc)], GenerateOptions(target=Target.parse("vulkan:gfx1151"))))[
        "containers"][0]
    assert not {"startupProbe", "readinessProbe", "livenessProbe"} & set(c)
    _validate(tcp)


def test_container_run_recipe_takes_its_image_and_model_mount():
    docs = generate([_model(recipe_doc=TOOLBOX)], GenerateOptions(target=Target.parse("vulkan:gfx1151")))
    _validate(docs)
    pod = _pod(docs)
    c = pod["containers"][0]
    assert c["image"] == TOOLBOX_IMAGE and "command" not in c  # the image's entrypoint, as podman run keeps it
    assert c["args"] == ["llama-server", "-m", "/data/qwen-0.5b-q4.gguf", "--host", "0.0.0.0", "--port", "8080"]
    assert c["volumeMounts"] == [{"mountPath": "/data/qwen-0.5b-q4.gguf", "name": "model", "readOnly": True},
                                 {"mountPath": "/tmp", "name": "tmp"}]  # -v {model_dir}:/data: the file under /data
    assert c["env"] == [{"name": "GGML_VK_VISIBLE_DEVICES", "value": "0"}]
    assert c["resources"]["limits"] == {"amd.com/gpu": "1"}  # vulkan on a gfx arch: the AMD plugin
    assert pod["volumes"] == [{"name": "model", "hostPath": {"path": "/srv/models/qwen/qwen-0.5b-q4.gguf",
                                                             "type": "File"}}, {"name": "tmp", "emptyDir": {}}]


def test_model_sources_and_publish():
    pvc = KubeModel("user.a", ModelSpec(name="user.a", checkpoints={"main": "/m/sub/a.gguf"}, model_dir="/m"),
                    _model().recipe, ModelSource.parse("pvc:models"))
    oci_ref = f"registry.example.test/models/b@sha256:{'12' * 32}"
    oci = KubeModel("user.b", ModelSpec(name="user.b", checkpoints={"main": "/x/b.gguf"}), _model().recipe,
                    ModelSource.parse(f"oci:{oci_ref}"))
    docs = generate([oci, pvc], GenerateOptions(images={"llamacpp-gpu": IMAGE}, publish=("127.0.0.1", 18080)))
    _validate(docs)
    a, b = _pod(docs, 0), _pod(docs, 2)  # name order: a, then b
    assert a["volumes"][0] == {"name": "model", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}}
    assert "/models/sub/a.gguf" in a["containers"][0]["args"]
    assert b["volumes"][0] == {"name": "model", "image": {"reference": oci_ref, "pullPolicy": "IfNotPresent"}}
    assert a["containers"][0]["volumeMounts"][0] == {"name": "model", "mountPath": "/models", "readOnly": True}
    assert [x["containers"][0]["ports"][0]["hostPort"] for x in (a, b)] == [18080, 18081]
    assert {x["containers"][0]["ports"][0]["hostIP"] for x in (a, b)} == {"127.0.0.1"}
    with pytest.raises(Exception, match="tag is mutable"):
        ModelSource.parse("oci:registry.example.test/models/b:latest")


def test_output_is_deterministic_and_independent_of_input_order_and_host(monkeypatch):
    models = [_model(f"user.m{i}", main_path=f"/srv/m/{i}.gguf") for i in range(5)]
    opts = GenerateOptions(images={"llamacpp-gpu": IMAGE}, target=Target.parse("cuda:sm_86"))
    first = render_yaml(generate(models, opts))
    monkeypatch.setenv("LEMONPACK_HOST_FACTS", '{"os": "linux", "accelerators": ["rocm"], "rocm_arch": "gfx1100"}')
    monkeypatch.setenv("HF_HOME", "/somewhere/else")
    assert render_yaml(generate(list(reversed(models)), opts)) == first
    # Every document parses back to what was generated.
    assert list(yaml.safe_load_all(first)) == generate(models, opts)


def test_labels_and_names():
    docs = generate([_model("user.Qwen3:Q4_K_M.gguf")], GenerateOptions(images={"llamacpp-gpu": IMAGE}))
    dep, svc = docs
    assert dep["metadata"]["name"] == svc["metadata"]["name"] == "qwen3-q4-k-m-gguf"
    labels = dep["metadata"]["labels"]
    assert labels == {"app.kubernetes.io/name": "qwen3-q4-k-m-gguf", "app.kubernetes.io/managed-by": "lemonpack",
                      "dev.lemonpack.recipe": "llamacpp-gpu", "dev.lemonpack.model": "user-qwen3-q4-k-m-gguf"}
    import hashlib

    digest = "sha256:" + hashlib.sha256(_model().recipe.canonical).hexdigest()
    assert dep["metadata"]["annotations"] == {"dev.lemonpack.model": "user.Qwen3:Q4_K_M.gguf",
                                              "dev.lemonpack.recipe-digest": digest}
    assert dep["spec"]["selector"]["matchLabels"] == svc["spec"]["selector"]
    assert dep["spec"]["template"]["metadata"]["labels"] == labels
    _validate(docs)


def test_kubernetes_validate_cli_strict_on_a_written_file(tmp_path):
    """The tool itself (not only its library call) accepts the file, strictly."""
    gpu, tb = tmp_path / "gpu.yaml", tmp_path / "toolbox.yaml"
    gpu.write_bytes(render_yaml(generate([_model()], GenerateOptions(images={"llamacpp-gpu": IMAGE},
                                                                     target=Target.parse("rocm:gfx1100")))))
    tb.write_bytes(render_yaml(generate([_model(recipe_doc=TOOLBOX, name="user.tb")],
                                        GenerateOptions(target=Target.parse("vulkan:gfx1100")))))
    r = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "-k", K8S_VERSION, str(gpu), str(tb)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("text, message", [
    ("metal", "no Kubernetes device plugin"), ("vulkan", "name it with the arch"),
    ("cuda:gfx1100", "runs on nvidia GPUs"), ("rocm:gfx9999", "no AMD node-labeller family"),
    ("quantum", "unknown accelerator"), ("cpu:sm_90", "cpu takes no GPU arch")])
def test_bad_targets(text, message):
    with pytest.raises(TargetError, match=message):
        Target.parse(text)


def test_the_schema_check_is_live():
    """The strict validation used above rejects a field Kubernetes does not know."""
    dep = generate([_model()], GenerateOptions(images={"llamacpp-gpu": IMAGE}))[0]
    dep["spec"]["template"]["spec"]["containers"][0]["gpus"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(dep, K8S_VERSION, strict=True)


def _boxed(*options: str, tail=("srv", "--port", "{port}")) -> dict:
    from support.recipes import recipe_doc

    return recipe_doc("boxed", command="podman",
                      args=["run", "--rm", *options, "registry.example.test/x@sha256:" + "1" * 64, *tail])


def test_container_run_options_map_to_the_pod():
    doc = _boxed("--entrypoint", "/bin/srv", "-w", "/work", "--mount", "type=bind,source={model_dir},target=/weights",
                 "-p", "127.0.0.1:{port}:80", "--env=MODE=fast", tail=("--port", "80", "-m", "/weights/{model_relative_path}"))
    c = _pod(generate([_model(recipe_doc=doc)], GenerateOptions()))["containers"][0]
    assert c["command"] == ["/bin/srv"] and c["workingDir"] == "/work"
    assert c["args"] == ["--port", "80", "-m", "/weights/qwen-0.5b-q4.gguf"]
    assert c["ports"][0]["containerPort"] == 80  # -p {port}:80: the engine listens on 80 in the container
    assert c["volumeMounts"][0]["mountPath"] == "/weights/qwen-0.5b-q4.gguf"  # the model file under the mount
    assert c["env"] == [{"name": "MODE", "value": "fast"}]


@pytest.mark.parametrize("options, message", [
    (("--user", "1000"), "--user 1000 has no pod equivalent"),
    (("-v", "/etc/secrets:/s:ro"), "mounts something other than the model directory"),
    (("--env", "HOME"), "takes HOME from the host's environment"),
])
def test_container_run_options_without_a_pod_equivalent_are_refused(options, message):
    from lemonpack.kube import KubeError

    with pytest.raises(KubeError, match=f"model user.qwen-0.5b: .*platforms.linux.cpu.args: .*{re.escape(message)}"):
        generate([_model(recipe_doc=_boxed(*options))], GenerateOptions())


# --- models registered by oci:// (issue 23, point 4) ----------------------------------------------

ART = f"registry.example.test/models/tiny@sha256:{'34' * 32}"
CAR = f"registry.example.test/models/tiny-car@sha256:{'56' * 32}"


def _oci_model(source: ModelSource, files=None, memory=300 << 20):
    spec = ModelSpec(name="user.tiny", checkpoints={"main": f"oci://{ART}", "mmproj": f"oci://{ART}"})
    return KubeModel("user.tiny", spec, _model().recipe, source,
                     artifact_files=files or {"main": "tiny.gguf", "mmproj": "mmproj-tiny.gguf"}, artifact_memory=memory)


def test_an_oci_model_is_an_image_volume_by_digest_with_the_artifacts_file_names():
    from support.pss import pod_specs, violations

    docs = generate([_oci_model(ModelSource.parse(f"oci:{ART}"))], GenerateOptions(images={"llamacpp-gpu": IMAGE}))
    _validate(docs)
    pod = _pod(docs)
    assert pod["volumes"][0] == {"name": "model", "image": {"reference": ART, "pullPolicy": "IfNotPresent"}}
    assert "hostPath" not in json.dumps(docs) and "initContainers" not in pod
    args = pod["containers"][0]["args"]
    assert args[args.index("-m") + 1] == "/models/tiny.gguf" and "/models/mmproj-tiny.gguf" in args
    res = pod["containers"][0]["resources"]
    assert res["requests"] == {"cpu": "1", "memory": "300Mi"} and res["limits"]["memory"] == "1324Mi"
    assert [violations(p) for _w, p in pod_specs(docs)] == [[]]


def test_a_modelcar_source_copies_models_in_an_init_container_and_stays_restricted():
    from support.pss import pod_specs, violations

    docs = generate([_oci_model(ModelSource.parse(f"modelcar:{CAR}"))], GenerateOptions(images={"llamacpp-gpu": IMAGE}))
    _validate(docs)
    pod = _pod(docs)
    (init,) = pod["initContainers"]
    assert init["image"] == CAR and init["command"] == ["cp", "-R", "/models/.", "/lemonpack-model/"]
    assert init["volumeMounts"] == [{"name": "model", "mountPath": "/lemonpack-model"}]
    assert init["securityContext"] == pod["containers"][0]["securityContext"]
    assert init["resources"] == {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "64Mi"}}
    assert pod["volumes"][0] == {"name": "model", "emptyDir": {}}
    assert pod["containers"][0]["volumeMounts"][0] == {"name": "model", "mountPath": "/models", "readOnly": True}
    assert [violations(p) for _w, p in pod_specs(docs)] == [[]]
    with pytest.raises(Exception, match="tag is mutable"):
        ModelSource.parse("modelcar:registry.example.test/models/tiny-car:v1")


def test_an_oci_model_has_no_host_file_to_mount():
    with pytest.raises(Exception, match="registered by oci:// and has no file on this machine"):
        generate([_oci_model(ModelSource())], GenerateOptions(images={"llamacpp-gpu": IMAGE}))
