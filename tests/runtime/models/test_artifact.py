"""The model-artifact formats (lemonpack/runtime/models/artifact.py): ModelPack and Docker written
byte-reproducibly, every format lemonpack reads detected by artifactType, then config media type,
then layer types, and anything else refused naming what it found.

The foreign manifests below follow their specs: ModelPack (modelpack/model-spec docs/spec.md,
specs-go/v1/mediatype.go), Docker Model Runner (docker/model-runner
pkg/distribution/types/config.go, internal/partial/partial.go ManifestForLayers), KitOps
(kitops-ml/kitops pkg/artifact/spec.md, pkg/lib/constants/mediaType.go), RamaLama
(containers/ramalama ramalama/transports/oci/oci.py: podman artifact add --type ...)."""

from __future__ import annotations

import json

import pytest

from lemonpack.canonical import canonical_json
from lemonpack.digest import Digest
from lemonpack.oci import mediatypes as mt
from lemonpack.runtime.models.artifact import ModelArtifactError, ModelFacts, PackFile, detect_format, \
    facts_from_gguf, read_artifact, write_docker, write_modelpack
from lemonpack.gguf_header import read_identity
from support.gguf_files import write_gguf

D1 = str(Digest.of_bytes(b"one"))
D2 = str(Digest.of_bytes(b"two"))
FACTS = ModelFacts(architecture="llama", parameters="8B", quantization="Q4_K_M", context_length=8192)


def manifest(config_type: str, config: bytes, layers: list[dict], artifact_type: str | None = None) -> bytes:
    doc = {"schemaVersion": 2, "mediaType": mt.MEDIA_TYPE_IMAGE_MANIFEST,
           "config": {"mediaType": config_type, "digest": str(Digest.of_bytes(config)), "size": len(config)},
           "layers": layers}
    if artifact_type:
        doc["artifactType"] = artifact_type
    return canonical_json(doc)


def layer(media_type: str, digest: str = D1, size: int = 3, **annotations: str) -> dict:
    out: dict = {"mediaType": media_type, "digest": digest, "size": size}
    if annotations:
        out["annotations"] = {k.replace("_", "."): v for k, v in annotations.items()}
    return out


def test_modelpack_is_written_as_the_spec_says_and_read_back():
    files = [PackFile("m-00001-of-00002.gguf", D1, 3), PackFile("m-00002-of-00002.gguf", D2, 3)]
    packed = write_modelpack(files, FACTS, created=1700000000, name="m", version="1")
    doc = json.loads(packed.manifest)
    assert doc["artifactType"] == mt.MEDIA_TYPE_MODELPACK_MANIFEST
    assert doc["config"]["mediaType"] == mt.MEDIA_TYPE_MODELPACK_CONFIG
    assert [x["mediaType"] for x in doc["layers"]] == [mt.MEDIA_TYPE_MODELPACK_WEIGHT_RAW] * 2
    for x, f in zip(doc["layers"], files):
        assert x["annotations"] == {mt.ANNOTATION_MODELPACK_FILEPATH: f.name, mt.ANNOTATION_TITLE: f.name}
    assert doc["annotations"][mt.ANNOTATION_LEMONPACK_CONTEXT_LENGTH] == "8192"
    config = json.loads(packed.config)
    assert config == {"descriptor": {"name": "m", "version": "1", "createdAt": "2023-11-14T22:13:20Z"},
                      "config": {"format": "gguf", "architecture": "llama", "paramSize": "8B",
                                 "quantization": "Q4_K_M"},
                      "modelfs": {"type": "layers", "diffIds": [D1, D2]}}
    art = read_artifact(packed.manifest, packed.config)
    assert (art.format, art.architecture, art.parameters, art.quantization, art.context_length) == \
        ("modelpack", "llama", "8B", "Q4_K_M", 8192)
    assert art.main is not None and art.main.name == "m-00001-of-00002.gguf"
    again = write_modelpack(files, FACTS, created=1700000000, name="m", version="1")
    assert again.digest == packed.digest
    assert write_modelpack(files, FACTS, created=1700000001, name="m", version="1").digest != packed.digest


def test_the_modelpack_config_validates_against_the_spec_schema():
    import jsonschema
    # modelpack/model-spec schema/config-schema.json, the parts our config uses (additionalProperties false)
    schema = {"type": "object", "additionalProperties": False, "required": ["descriptor", "config", "modelfs"],
              "properties": {
                  "descriptor": {"type": "object", "additionalProperties": False, "properties": {
                      "createdAt": {"type": "string"}, "name": {"type": "string", "minLength": 1},
                      "version": {"type": "string"}}},
                  "config": {"type": "object", "additionalProperties": False, "properties": {
                      k: {"type": "string"} for k in ("architecture", "format", "paramSize", "precision",
                                                      "quantization")}},
                  "modelfs": {"type": "object", "additionalProperties": False, "required": ["type", "diffIds"],
                              "properties": {"type": {"enum": ["layers"]},
                                             "diffIds": {"type": "array", "minItems": 1}}}}}
    packed = write_modelpack([PackFile("a.gguf", D1, 3)], FACTS, created=0, name="a")
    jsonschema.validate(json.loads(packed.config), schema)


def test_docker_v01_is_written_and_read():
    packed = write_docker([PackFile("a.gguf", D1, 3), PackFile("mmproj-a.gguf", D2, 3, "mmproj")], FACTS, created=0)
    doc = json.loads(packed.manifest)
    assert "artifactType" not in doc
    assert doc["config"]["mediaType"] == mt.MEDIA_TYPE_DOCKER_AI_CONFIG_V01
    assert [x["mediaType"] for x in doc["layers"]] == [mt.MEDIA_TYPE_DOCKER_AI_GGUF, mt.MEDIA_TYPE_DOCKER_AI_MMPROJ]
    config = json.loads(packed.config)
    assert config["config"]["context_size"] == 8192 and config["rootfs"] == {"type": "layers", "diff_ids": [D1, D2]}
    art = read_artifact(packed.manifest, packed.config)
    assert art.format == "docker-v0.1" and [f.role for f in art.layers] == ["weight", "mmproj"]
    assert art.context_length == 8192 and art.main is not None and art.main.name == "a.gguf"


def test_docker_v01_layers_without_file_names_are_named_by_role():
    # older Docker Model Runner artifacts: GGUF shards and a license, no filepath annotation
    config = canonical_json({"config": {"format": "gguf"}, "rootfs": {"type": "layers", "diff_ids": [D1, D2]}})
    m = manifest(mt.MEDIA_TYPE_DOCKER_AI_CONFIG_V01, config, [
        layer(mt.MEDIA_TYPE_DOCKER_AI_GGUF, D1), layer(mt.MEDIA_TYPE_DOCKER_AI_GGUF, D2),
        layer(mt.MEDIA_TYPE_DOCKER_AI_LICENSE, str(Digest.of_bytes(b"l")))])
    art = read_artifact(m, config)
    assert [f.name for f in art.layers] == ["model-00001-of-00002.gguf", "model-00002-of-00002.gguf", "LICENSE"]
    assert art.main is not None and art.main.name == "model-00001-of-00002.gguf"


def test_docker_v02_kitops_and_ramalama_are_detected():
    v02 = manifest(mt.MEDIA_TYPE_DOCKER_AI_CONFIG_V02, b"{}", [
        layer(mt.MEDIA_TYPE_DOCKER_AI_GGUF, org_cncf_model_filepath="sub/x.gguf")])
    assert detect_format(v02) == "docker-v0.2"
    assert read_artifact(v02, b"{}").layers[0].name == "sub/x.gguf"
    kitfile = canonical_json({"manifestVersion": "1.0.0", "package": {"name": "kit"},
                              "model": {"name": "tiny", "path": "tiny.gguf", "format": "gguf"}})
    kit = manifest(mt.MEDIA_TYPE_KITOPS_CONFIG, kitfile, [layer("application/vnd.kitops.modelkit.model.v1.tar+gzip")])
    art = read_artifact(kit, kitfile)
    assert (art.format, art.name, art.layers[0].archive) == ("kitops", "tiny", "tar+gzip")
    rama = manifest(mt.MEDIA_TYPE_EMPTY, mt.EMPTY_JSON, [
        layer("application/octet-stream", org_cncf_model_filepath="granite.gguf",
              org_opencontainers_image_title="granite.gguf")], artifact_type=mt.MEDIA_TYPE_MODELPACK_MANIFEST)
    art = read_artifact(rama, mt.EMPTY_JSON)
    assert art.format == "ramalama" and art.main is not None and art.main.name == "granite.gguf"
    # no artifactType and no known config: the layer types decide
    bare = manifest(mt.MEDIA_TYPE_IMAGE_CONFIG, b"{}", [layer(mt.MEDIA_TYPE_MODELPACK_WEIGHT_RAW,
                                                              org_cncf_model_filepath="a.gguf")])
    assert detect_format(bare) == "modelpack"


def test_anything_else_is_refused_naming_the_media_types_found():
    helm = manifest("application/vnd.cncf.helm.config.v1+json", b"{}",
                    [layer("application/vnd.cncf.helm.chart.content.v1.tar+gzip")])
    with pytest.raises(ModelArtifactError) as e:
        detect_format(helm)
    assert "application/vnd.cncf.helm.config.v1+json" in str(e.value)
    assert "application/vnd.cncf.helm.chart.content.v1.tar+gzip" in str(e.value)
    with pytest.raises(ModelArtifactError, match="not JSON"):
        detect_format(b"\xff")


@pytest.mark.parametrize("name", ["../x.gguf", "/etc/passwd", "a/../../b", "a\\b"])
def test_a_file_name_that_escapes_the_view_is_refused(name):
    m = manifest(mt.MEDIA_TYPE_MODELPACK_CONFIG, b"{}", [layer(mt.MEDIA_TYPE_MODELPACK_WEIGHT_RAW,
                                                               org_cncf_model_filepath=name)],
                 mt.MEDIA_TYPE_MODELPACK_MANIFEST)
    with pytest.raises(ModelArtifactError, match="file name"):
        read_artifact(m, b"{}")


def test_a_config_that_is_not_the_manifests_is_refused():
    m = manifest(mt.MEDIA_TYPE_MODELPACK_CONFIG, b"{}", [layer(mt.MEDIA_TYPE_MODELPACK_WEIGHT_RAW)],
                 mt.MEDIA_TYPE_MODELPACK_MANIFEST)
    with pytest.raises(ModelArtifactError, match="the manifest names"):
        read_artifact(m, b'{"x": 1}')


def test_facts_come_from_the_gguf_header(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", "llama", {"general.file_type": 15, "llama.context_length": 4096,
                                                     "general.size_label": "8B", "general.name": "M"},
                      {"a": [8, 8]})
    facts = facts_from_gguf(read_identity(path))
    assert facts == ModelFacts("llama", "8B", "Q4_K_M", 4096, "M", 64)
    bare = facts_from_gguf(read_identity(write_gguf(tmp_path / "b.gguf", "qwen2", {}, {"a": [1000, 2000]})))
    assert (bare.parameters, bare.quantization, bare.context_length) == ("2M", "F32", None)


def test_a_ramalama_model_image_is_told_by_its_config_label():
    labelled = canonical_json({"architecture": "amd64", "os": "linux",
                               "config": {"Labels": {mt.LABEL_RAMALAMA_TYPE: mt.RAMALAMA_TYPE_RAW}},
                               "rootfs": {"type": "layers", "diff_ids": [D1]}})
    image = manifest(mt.MEDIA_TYPE_IMAGE_CONFIG, labelled, [layer(mt.MEDIA_TYPE_LAYER_TAR_GZIP)])
    from lemonpack.runtime.models.artifact import needs_config

    assert needs_config(image)
    assert detect_format(image, labelled) == "ramalama-image"
    art = read_artifact(image, labelled)
    assert art.layers[0].archive == "tar+gzip" and art.layers[0].members == mt.RAMALAMA_MODELS_DIR
    plain = canonical_json({"architecture": "amd64", "os": "linux", "config": {},
                            "rootfs": {"type": "layers", "diff_ids": [D1]}})
    other = manifest(mt.MEDIA_TYPE_IMAGE_CONFIG, plain, [layer(mt.MEDIA_TYPE_LAYER_TAR_GZIP)])
    with pytest.raises(ModelArtifactError, match=f"no {mt.LABEL_RAMALAMA_TYPE} label"):
        read_artifact(other, plain)
