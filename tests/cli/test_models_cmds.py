"""``lemonpack models add|list|remove`` (lemonpack/cli/models_cmds.py) with real registry files and
descriptor dirs, and ``models add --endpoint``: models served by engines lemonpack does not spawn."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from lemonpack.cli import main
from lemonpack.runtime.models.registry import ModelRegistry

EXAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "lemonade-examples"


@pytest.fixture
def models_home(home, monkeypatch) -> Path:
    """The home's root: the Vulkan example the only discovered recipe (``backends/vk.json``), model
    files in ``models/``, the working directory (``-c main=m`` is ``models/m``, stored absolute)."""
    (backends,) = home.search_path(home.root / "backends")
    shutil.copy(EXAMPLES / "llamacpp_vulkan_custom.json", backends / "vk.json")
    os.chmod(backends / "vk.json", 0o644)
    models = home.root / "models"
    models.mkdir()
    for name in ("tiny.gguf", "m.gguf", "m", "n"):
        (models / name).write_bytes(b"GGUF")
    monkeypatch.chdir(models)
    return home.root


def registry_file(root: Path) -> Path:
    return root / "config" / "user_models.json"


def test_add_list_remove(models_home, capsys):
    assert main(["models", "add", "user.tiny", "--recipe", "llamacpp-vulkan-custom",
                 "--checkpoint", "main=tiny.gguf", "--checkpoint", "mmproj=org/repo:mm.gguf",
                 "--option", "vk_device=1", "--option", 'label="7"', "--option", "note=hello"]) == 0
    assert "registered user.tiny" in capsys.readouterr().out
    path = registry_file(models_home)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert json.loads(path.read_text()) == {"user.tiny": {
        "recipe": "llamacpp-vulkan-custom",
        "checkpoints": {"main": str(models_home / "models" / "tiny.gguf"), "mmproj": "org/repo:mm.gguf"},
        "recipe_options": {"vk_device": 1, "label": "7", "note": "hello"}}}
    assert main(["models", "add", "user.builtin", "--recipe", "llamacpp", "-c", "main=m.gguf"]) == 0
    capsys.readouterr()
    assert main(["models", "list", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in doc["models"]] == ["user.builtin", "user.tiny"]
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "user.tiny" in out and "mmproj=org/repo:mm.gguf" in out and 'label="7"' in out
    assert main(["models", "remove", "user.tiny"]) == 0
    assert "removed user.tiny" in capsys.readouterr().out
    assert list(json.loads(path.read_text())) == ["user.builtin"]


def test_unknown_recipe_is_refused_unless_forced(models_home, capsys):
    code = main(["models", "add", "user.x", "--recipe", "no-such-recipe", "-c", "main=m.gguf"])
    assert code == 1
    err = capsys.readouterr().err
    assert "no-such-recipe" in err and "--force" in err and "llamacpp-vulkan-custom" in err
    assert not registry_file(models_home).exists()
    assert main(["models", "add", "user.x", "--recipe", "no-such-recipe", "-c", "main=m.gguf", "--force"]) == 0
    assert "warning:" in capsys.readouterr().err
    assert "user.x" in json.loads(registry_file(models_home).read_text())


def test_rejected_recipe_reports_the_rejection(models_home, capsys):
    os.chmod(models_home / "backends" / "vk.json", 0o664)
    assert main(["models", "add", "user.x", "--recipe", "llamacpp-vulkan-custom", "-c", "main=m"]) == 1
    err = capsys.readouterr().err
    assert "not a built-in and was not discovered" in err  # untrusted files are never parsed


def test_invalid_name_and_duplicates(models_home, capsys):
    assert main(["models", "add", "qwen", "--recipe", "llamacpp", "-c", "main=m"]) == 1
    assert "model name 'qwen'" in capsys.readouterr().err
    assert main(["models", "add", "user.a", "--recipe", "llamacpp", "-c", "mmproj=m"]) == 1
    assert "'main' checkpoint is required" in capsys.readouterr().err
    assert main(["models", "add", "user.a", "--recipe", "llamacpp", "-c", "main=m"]) == 0
    assert main(["models", "add", "user.a", "--recipe", "llamacpp", "-c", "main=n"]) == 1
    assert "already exists" in capsys.readouterr().err
    assert main(["models", "add", "user.a", "--recipe", "llamacpp", "-c", "main=n", "--replace"]) == 0
    assert main(["models", "remove", "user.zzz"]) == 1
    assert "no model named 'user.zzz'" in capsys.readouterr().err


def test_json_error_output(models_home, capsys):
    assert main(["models", "add", "bad", "--recipe", "llamacpp", "-c", "main=m", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["error"] == "manifest" and doc["problems"][0]["rule"] == "model-name"


def test_malformed_registry_via_subprocess_has_no_traceback(models_home):
    path = registry_file(models_home)
    path.parent.mkdir(parents=True)
    path.write_text('{"user.a": {"recipe": "llamacpp", "checkpoints": {}}}')
    proc = subprocess.run(["lemonpack", "models", "list"], capture_output=True, text=True,
                          env=os.environ.copy(), timeout=60)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert str(path) in proc.stderr and "'main' checkpoint is required" in proc.stderr


def test_checkpoint_without_name_is_a_usage_error(models_home, capsys):
    assert main(["models", "add", "user.a", "--recipe", "llamacpp", "-c", "main"]) == 2
    err = capsys.readouterr().err
    assert "NAME=PATH" in err and "--checkpoint" in err
    assert main(["models", "add", "user.a", "--recipe", "llamacpp", "-c", "main=m", "-o", "novalue"]) == 2
    err = capsys.readouterr().err
    assert "KEY=VALUE" in err and "--option" in err
    assert not registry_file(models_home).exists()


def test_missing_local_checkpoint_is_refused_unless_forced_and_hub_refs_are_kept(models_home, capsys):
    missing = models_home / "models" / "absent.gguf"
    assert main(["models", "add", "user.a", "--recipe", "llamacpp", "-c", f"main={missing}"]) == 1
    err = capsys.readouterr().err
    assert f"local file {missing} does not exist" in err and "--force" in err
    assert not registry_file(models_home).exists()
    assert main(["models", "add", "user.a", "--recipe", "llamacpp", "-c", "main=absent.gguf", "--force"]) == 0
    assert "warning:" in capsys.readouterr().err
    assert main(["models", "add", "user.h", "--recipe", "llamacpp", "-c", "main=unsloth/Qwen3-GGUF:Q4_K_M",
                 "-c", "draft=../models/./m.gguf"]) == 0
    doc = json.loads(registry_file(models_home).read_text())
    assert doc["user.a"]["checkpoints"] == {"main": str(missing)}
    assert doc["user.h"]["checkpoints"] == {"main": "unsloth/Qwen3-GGUF:Q4_K_M", "draft": str(models_home / "models" / "m.gguf")}


def test_duplicate_names_the_replace_flag_and_bad_name_names_the_argument(models_home, capsys):
    assert main(["models", "add", "user.a", "--recipe", "llamacpp", "-c", "main=m"]) == 0
    capsys.readouterr()
    assert main(["models", "add", "user.a", "--recipe", "llamacpp", "-c", "main=m"]) == 1
    assert "(use --replace to overwrite)" in capsys.readouterr().err
    assert main(["models", "add", "qwen", "--recipe", "llamacpp", "-c", "main=m"]) == 1
    err = capsys.readouterr().err
    assert "argument NAME: model name 'qwen'" in err and "user_models.json" not in err
    assert main(["models", "add", "user.b", "--recipe", "llamacpp", "-c", "main=m", "-c", "bad name=m",
                 "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["problems"][0]["file"] == "argument --checkpoint" and doc["problems"][0]["rule"] == "checkpoint-name"


# --- models add --endpoint: models served by engines lemonpack does not spawn ---------------

def test_add_endpoints_without_checkpoint(models_home, capsys):
    assert main(["models", "add", "user.remote", "--recipe", "llamacpp", "--endpoint", "http://engine-svc:8080",
                 "-e", "HTTPS://Engine-2.example:8443/"]) == 0
    assert json.loads(registry_file(models_home).read_text()) == {"user.remote": {
        "recipe": "llamacpp", "endpoints": ["http://engine-svc:8080", "https://engine-2.example:8443"]}}
    entry = ModelRegistry(registry_file(models_home)).get("user.remote")
    assert entry.endpoints == ("http://engine-svc:8080", "https://engine-2.example:8443")
    capsys.readouterr()
    assert main(["models", "list"]) == 0
    assert "endpoint=http://engine-svc:8080" in capsys.readouterr().out


@pytest.mark.parametrize("url, why", [
    ("ftp://engine:21", "must use http or https"),
    ("engine-svc:8080", "must use http or https"),
    ("http://user:s3cret@engine:8080", "must not carry a user or password"),
    ("http://engine", "must give the port explicitly"),
    ("http://engine:8080/v1", "no path, query or fragment"),
    ("http://engine:8080?x=1", "no path, query or fragment"),
    ("http://:8080", "has no host"),
    ("http://engine:70000", "not a valid URL"),
    ("http://engine:0", "port must be 1-65535"),
    ("http://eng ine:80", "whitespace"),
])
def test_bad_endpoint_is_one_line_exit_1_nothing_written(models_home, capsys, url, why):
    assert main(["models", "add", "user.remote", "--recipe", "llamacpp", "--endpoint", "http://ok:1",
                 "--endpoint", url]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "user.remote" in err and "--endpoint" in err and why in err, err
    assert "s3cret" not in err  # a credential is never echoed
    assert not registry_file(models_home).exists()


def test_duplicate_endpoint_and_neither_checkpoint_nor_endpoint(models_home, capsys):
    assert main(["models", "add", "user.remote", "--recipe", "llamacpp", "-e", "http://a:1", "-e", "http://A:1/"]) == 1
    assert "given twice" in capsys.readouterr().err
    assert main(["models", "add", "user.remote", "--recipe", "llamacpp"]) == 2
    assert "--endpoint" in capsys.readouterr().err
    assert not registry_file(models_home).exists()


def test_registry_file_endpoint_problems_name_the_file_and_field(tmp_path):
    from lemonpack.errors import ManifestError

    path = tmp_path / "user_models.json"
    path.write_text(json.dumps({"user.r": {"recipe": "llamacpp", "endpoint": "http://a:1",
                                           "endpoints": ["http://b:2", "gopher://c:3"]}}))
    with pytest.raises(ManifestError) as e:
        ModelRegistry(path).load()
    assert str(path) in str(e.value) and 'endpoints[1]' in str(e.value) and "gopher" in str(e.value)
    path.write_text(json.dumps({"user.r": {"recipe": "llamacpp", "endpoint": "http://a:1",
                                           "endpoints": ["http://b:2"]}}))
    assert ModelRegistry(path).get("user.r").endpoints == ("http://a:1", "http://b:2")
    path.write_text(json.dumps({"user.r": {"recipe": "llamacpp", "endpoints": []}}))
    with pytest.raises(ManifestError, match="non-empty list"):
        ModelRegistry(path).load()


def test_run_refuses_an_endpoint_model(models_home, capsys):
    assert main(["models", "add", "user.remote", "--recipe", "llamacpp-vulkan-custom", "-e", "http://127.0.0.1:9"]) == 0
    capsys.readouterr()
    assert main(["run", "llamacpp-vulkan-custom", "-m", "user.remote"]) == 1
    err = capsys.readouterr().err
    assert "served by its endpoints" in err and "lemonpack serve is its gateway" in err, err


# --- oci:// checkpoints: a tag refused, `models pin` and `models add --pin` (issue 23, point 3) --------

def _push_artifact(registry, repo: str, tag: str, layer: bytes = b"GGUF not really") -> str:
    """A minimal OCI artifact (empty config, one small layer) pushed to the real registry under
    ``tag``; returns its manifest digest as the registry computed it (sha256 of the bytes)."""
    from lemonpack.canonical import canonical_json
    from lemonpack.digest import Digest
    from lemonpack.oci.mediatypes import EMPTY_DIGEST, EMPTY_JSON, MEDIA_TYPE_EMPTY, MEDIA_TYPE_IMAGE_MANIFEST
    from lemonpack.registry.client import RegistryClient

    manifest = canonical_json({
        "schemaVersion": 2, "mediaType": MEDIA_TYPE_IMAGE_MANIFEST, "artifactType": "application/x.test",
        "config": {"mediaType": MEDIA_TYPE_EMPTY, "digest": EMPTY_DIGEST, "size": 2},
        "layers": [{"mediaType": "application/octet-stream", "digest": str(Digest.of_bytes(layer)),
                    "size": len(layer), "annotations": {"org.opencontainers.image.title": "m.gguf"}}]})
    with RegistryClient(registry.host) as c:
        c.push_blob(repo, EMPTY_JSON, EMPTY_DIGEST, 2)
        c.push_blob(repo, layer, str(Digest.of_bytes(layer)), len(layer))
        return c.put_manifest(repo, tag, manifest, MEDIA_TYPE_IMAGE_MANIFEST)


def test_an_oci_checkpoint_by_tag_is_refused_naming_pin(models_home, capsys):
    code = main(["models", "add", "user.x", "-r", "llamacpp-vulkan-custom", "-c", "main=oci://127.0.0.1:5/m/tiny:v1"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "argument --checkpoint" in err and "tag is mutable" in err and "lemonpack models pin" in err
    assert not registry_file(models_home).exists()


def test_models_pin_and_add_pin_resolve_the_tag_in_a_real_registry(models_home, registry, capsys):
    digest = _push_artifact(registry, "models/tiny", "v1")
    ref = f"oci://{registry.host}/models/tiny:v1"
    assert main(["models", "pin", ref, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"reference": ref, "pinned": f"{ref}@{digest}"}
    assert main(["models", "add", "user.x", "-r", "llamacpp-vulkan-custom", "-c", f"main={ref}", "--pin"]) == 0
    doc = json.loads(registry_file(models_home).read_text())
    assert doc["user.x"]["checkpoints"] == {"main": f"{ref}@{digest}"}
    capsys.readouterr()
    # the registry moves the tag: the entry keeps the digest it was pinned to; pin reports the new one
    moved = _push_artifact(registry, "models/tiny", "v1", b"GGUF other bytes")
    assert moved != digest
    assert main(["models", "pin", ref]) == 0
    assert capsys.readouterr().out.strip() == f"{ref}@{moved}"
    assert main(["models", "pin", f"oci://{registry.host}/models/tiny"]) == 4  # no tag: latest, not there
    err = capsys.readouterr().err
    assert "models/tiny" in err and "latest" in err and "404" in err, err
    assert json.loads(registry_file(models_home).read_text())["user.x"]["checkpoints"]["main"].endswith(digest)


def test_models_push_modelcar_also_pushes_a_runnable_image_beside_the_artifact(models_home, registry, capsys,
                                                                             tmp_path):
    from support.oci_base import busybox_base

    (tmp_path / "m").mkdir()
    gguf = tmp_path / "m" / "tiny.gguf"
    from support.llama_server import write_tiny_gguf

    write_tiny_gguf(gguf)
    assert main(["models", "push", str(gguf), "--to", f"{registry.host}/models/tiny:v1", "--modelcar",
                 "--modelcar-base", busybox_base(tmp_path / "bb"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    car = out["modelcar"]
    assert car["reference"] == f"{registry.host}/models/tiny:v1-modelcar@{car['digest']}" and car["base"]
    assert car["digest"] != out["digest"] and car["files"] == ["tiny.gguf"]
    raw = subprocess.run(["skopeo", "inspect", "--config", "--tls-verify=false",
                          f"docker://{registry.host}/models/tiny:v1-modelcar"], check=True, capture_output=True).stdout
    cfg = json.loads(raw)
    assert cfg["config"]["User"] == "65532:65532" and len(cfg["rootfs"]["diff_ids"]) == 2  # busybox + the file
    assert main(["models", "push", str(gguf), "--to", f"{registry.host}/models/tiny:v1", "--modelcar"]) == 0
    assert "files only, not runnable" in capsys.readouterr().out
