"""Modelcar images (lemonpack/runtime/models/modelcar.py): deterministic layouts judged by skopeo,
run by real podman (the files under /models, the user non-root), pushed to the real registry."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from lemonpack.errors import InputError, UnreadableFileError
from lemonpack.runtime.models.modelcar import MODELCAR_USER, push_modelcar, write_modelcar
from support.oci_base import busybox_base

def skopeo_json(*args: str) -> dict:
    return json.loads(subprocess.run(["skopeo", *args], check=True, capture_output=True, text=True).stdout)


@pytest.fixture
def model_files(tmp_path) -> list[Path]:
    d = tmp_path / "model"
    d.mkdir()
    (d / "tiny.gguf").write_bytes(b"GGUF" + bytes(range(256)) * 64)
    (d / "mmproj-tiny.gguf").write_bytes(b"GGUF mmproj")
    return [d / "tiny.gguf", d / "mmproj-tiny.gguf"]


def test_same_files_same_digest_and_skopeo_reads_the_image(tmp_path, model_files):
    env = {"SOURCE_DATE_EPOCH": "1700000000"}
    a = write_modelcar(model_files, tmp_path / "a", environ=env)
    b = write_modelcar(model_files, tmp_path / "b", environ=env)
    c = write_modelcar(model_files, tmp_path / "c", environ={"SOURCE_DATE_EPOCH": "1700000001"})
    assert a.digest == b.digest != c.digest and a.files == ("tiny.gguf", "mmproj-tiny.gguf") and a.base is None
    cfg = skopeo_json("inspect", "--config", f"oci:{tmp_path / 'a'}:latest")
    assert cfg["config"]["User"] == MODELCAR_USER and cfg["config"]["WorkingDir"] == "/models"
    assert cfg["config"]["Labels"] == {"org.containers.type": "ai.image.model.car"}
    assert cfg["created"] == "2023-11-14T22:13:20Z" and len(cfg["rootfs"]["diff_ids"]) == 2
    raw = skopeo_json("inspect", "--raw", f"oci:{tmp_path / 'a'}:latest")
    assert raw["annotations"]["org.opencontainers.image.title"] == "tiny.gguf"
    assert "sha256:" + hashlib.sha256(json.dumps(raw, separators=(",", ":"), sort_keys=True).encode()).hexdigest() \
        == a.digest  # the manifest is canonical JSON; skopeo gave the same bytes back


def test_files_are_refused_before_anything_is_written(tmp_path, model_files):
    other = tmp_path / "other"
    other.mkdir()
    (other / "tiny.gguf").write_bytes(b"GGUF2")
    with pytest.raises(InputError, match="two model files are named 'tiny.gguf'"):
        write_modelcar([model_files[0], other / "tiny.gguf"], tmp_path / "out")
    with pytest.raises(UnreadableFileError, match="not a regular file"):
        write_modelcar([tmp_path / "missing.gguf"], tmp_path / "out")
    with pytest.raises(InputError, match="at least one"):
        write_modelcar([], tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_podman_runs_the_modelcar_as_non_root_with_the_files_under_models(tmp_path, model_files, podman_conf):
    car = write_modelcar(model_files, tmp_path / "car", base=busybox_base(tmp_path / "base"), tag="t1")
    assert car.base is not None
    name = f"localhost/lemonpack-test-modelcar:{car.digest[7:19]}"
    env = podman_conf["env"]
    subprocess.run(["skopeo", "copy", f"oci:{tmp_path / 'car'}:t1", f"containers-storage:{name}"], check=True,
                   capture_output=True, env=env)
    try:
        out = subprocess.run(["podman", "run", "--rm", "--read-only", "--cap-drop", "ALL", name, "sh", "-c",
                              "id -u; sha256sum /models/tiny.gguf; ls /models"],
                             check=True, capture_output=True, text=True, env=env).stdout.split()
        assert out[0] == "65532"
        assert out[1] == hashlib.sha256(model_files[0].read_bytes()).hexdigest()
        assert sorted(out[3:]) == ["mmproj-tiny.gguf", "tiny.gguf"]
        # KServe's modelcar sidecar command (its docs' "ln -sf /proc/$$/root/models /mnt/"), then a look
        # through the link as the serving container would
        kserve = subprocess.run(["podman", "run", "--rm", "--read-only", "--tmpfs", "/mnt", name, "sh", "-c",
                                 "ln -sf /proc/$$/root/models /mnt/models && ls /mnt/models/ && sleep 0"],
                                check=True, capture_output=True, text=True, env=env).stdout.split()
        assert sorted(kserve) == ["mmproj-tiny.gguf", "tiny.gguf"]
    finally:
        subprocess.run(["podman", "rmi", name], capture_output=True, env=env)


def test_push_to_the_real_registry_gives_the_pinned_reference(tmp_path, model_files, registry):
    car = push_modelcar(model_files, f"{registry.host}/models/tiny-car:v1", environ={"SOURCE_DATE_EPOCH": "0"})
    assert car.reference == f"{registry.host}/models/tiny-car:v1@{car.digest}"
    raw = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{registry.host}/models/tiny-car@{car.digest}"],
                         check=True, capture_output=True).stdout
    assert "sha256:" + hashlib.sha256(raw).hexdigest() == car.digest
    with pytest.raises(InputError, match="not a digest"):
        push_modelcar(model_files, car.reference)


def test_the_modelcar_goes_beside_the_artifact_under_tag_modelcar():
    from lemonpack.runtime.models.modelcar import modelcar_destination

    assert modelcar_destination("oci://127.0.0.1:5000/models/tiny:v1") == "127.0.0.1:5000/models/tiny:v1-modelcar"
    assert modelcar_destination("127.0.0.1:5000/models/tiny") == "127.0.0.1:5000/models/tiny:latest-modelcar"
    with pytest.raises(InputError, match="too long"):
        modelcar_destination("127.0.0.1:5000/models/tiny:" + "t" * 125)
    with pytest.raises(InputError, match="no registry host"):
        modelcar_destination("models/tiny:v1")
