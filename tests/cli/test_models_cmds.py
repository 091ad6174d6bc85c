"""``lemonpack models add|list|remove`` with real registry files and descriptor dirs."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from lemonpack.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "lemonade-examples"


@pytest.fixture
def env(tmp_path, monkeypatch):
    backends = tmp_path / "backends"
    backends.mkdir()
    os.chmod(backends, 0o755)
    shutil.copy(EXAMPLES / "llamacpp_vulkan_custom.json", backends / "vk.json")
    os.chmod(backends / "vk.json", 0o644)
    monkeypatch.setenv("LEMONPACK_BACKENDS_PATH", str(backends))
    monkeypatch.setenv("LEMONPACK_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "250")
    models = tmp_path / "models"
    models.mkdir()
    for name in ("tiny.gguf", "m.gguf", "m", "n"):
        (models / name).write_bytes(b"GGUF")
    monkeypatch.chdir(models)  # "-c main=m" is models/m, stored absolute
    return tmp_path


def registry_file(env) -> Path:
    return env / "config" / "user_models.json"


def test_add_list_remove(env, capsys):
    assert main(["models", "add", "user.tiny", "--recipe", "llamacpp-vulkan-custom",
                 "--checkpoint", "main=tiny.gguf", "--checkpoint", "mmproj=org/repo:mm.gguf",
                 "--option", "vk_device=1", "--option", 'label="7"', "--option", "note=hello"]) == 0
    assert "registered user.tiny" in capsys.readouterr().out
    path = registry_file(env)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert json.loads(path.read_text()) == {"user.tiny": {
        "recipe": "llamacpp-vulkan-custom",
        "checkpoints": {"main": str(env / "models" / "tiny.gguf"), "mmproj": "org/repo:mm.gguf"},
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


def test_unknown_recipe_is_refused_unless_forced(env, capsys):
    code = main(["models", "add", "user.x", "--recipe", "no-such-recipe", "-c", "main=m.gguf"])
    assert code == 1
    err = capsys.readouterr().err
    assert "no-such-recipe" in err and "--force" in err and "llamacpp-vulkan-custom" in err
    assert not registry_file(env).exists()
    assert main(["models", "add", "user.x", "--recipe", "no-such-recipe", "-c", "main=m.gguf", "--force"]) == 0
    assert "warning:" in capsys.readouterr().err
    assert "user.x" in json.loads(registry_file(env).read_text())


def test_rejected_recipe_reports_the_rejection(env, capsys):
    os.chmod(env / "backends" / "vk.json", 0o664)
    assert main(["models", "add", "user.x", "--recipe", "llamacpp-vulkan-custom", "-c", "main=m"]) == 1
    err = capsys.readouterr().err
    assert "not a built-in and was not discovered" in err  # untrusted files are never parsed


def test_invalid_name_and_duplicates(env, capsys):
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


def test_json_error_output(env, capsys):
    assert main(["models", "add", "bad", "--recipe", "llamacpp", "-c", "main=m", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["error"] == "manifest" and doc["problems"][0]["rule"] == "model-name"


def test_malformed_registry_via_subprocess_has_no_traceback(env):
    path = registry_file(env)
    path.parent.mkdir(parents=True)
    path.write_text('{"user.a": {"recipe": "llamacpp", "checkpoints": {}}}')
    proc = subprocess.run(["lemonpack", "models", "list"], capture_output=True, text=True,
                          env=os.environ.copy(), timeout=60)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert str(path) in proc.stderr and "'main' checkpoint is required" in proc.stderr


def test_checkpoint_without_name_is_a_usage_error(env, capsys):
    assert main(["models", "add", "user.a", "--recipe", "llamacpp", "-c", "main"]) == 2
    err = capsys.readouterr().err
    assert "NAME=PATH" in err and "--checkpoint" in err
    assert main(["models", "add", "user.a", "--recipe", "llamacpp", "-c", "main=m", "-o", "novalue"]) == 2
    err = capsys.readouterr().err
    assert "KEY=VALUE" in err and "--option" in err
    assert not registry_file(env).exists()


def test_missing_local_checkpoint_is_refused_unless_forced_and_hub_refs_are_kept(env, capsys):
    missing = env / "models" / "absent.gguf"
    assert main(["models", "add", "user.a", "--recipe", "llamacpp", "-c", f"main={missing}"]) == 1
    err = capsys.readouterr().err
    assert f"local file {missing} does not exist" in err and "--force" in err
    assert not registry_file(env).exists()
    assert main(["models", "add", "user.a", "--recipe", "llamacpp", "-c", "main=absent.gguf", "--force"]) == 0
    assert "warning:" in capsys.readouterr().err
    assert main(["models", "add", "user.h", "--recipe", "llamacpp", "-c", "main=unsloth/Qwen3-GGUF:Q4_K_M",
                 "-c", "draft=../models/./m.gguf"]) == 0
    doc = json.loads(registry_file(env).read_text())
    assert doc["user.a"]["checkpoints"] == {"main": str(missing)}
    assert doc["user.h"]["checkpoints"] == {"main": "unsloth/Qwen3-GGUF:Q4_K_M", "draft": str(env / "models" / "m.gguf")}


def test_duplicate_names_the_replace_flag_and_bad_name_names_the_argument(env, capsys):
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
