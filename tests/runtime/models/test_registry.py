"""The user model registry (RFC section 10): round trip, validation, atomic 0600 writes."""

from __future__ import annotations

import json
import os
import stat
import threading

import pytest

from lemonpack.errors import LemonpackError, ManifestError
from lemonpack.runtime.models.registry import ModelEntry, ModelRegistry, default_path, parse_checkpoint, parse_option


@pytest.fixture
def reg(tmp_path) -> ModelRegistry:
    return ModelRegistry(tmp_path / "conf" / "user_models.json")


def test_default_path_follows_config_root(monkeypatch, tmp_path):
    monkeypatch.setenv("LEMONPACK_CONFIG_DIR", str(tmp_path))
    assert default_path() == tmp_path / "user_models.json"
    assert ModelRegistry().path == tmp_path / "user_models.json"


def test_missing_file_is_an_empty_registry(reg):
    assert reg.list() == () and dict(reg.load()) == {}
    assert not reg.path.parent.exists()  # reading creates nothing


def test_round_trip(reg):
    e = reg.add("user.qwen-0.5b", "llamacpp-vulkan-custom",
                {"main": "/models/qwen.gguf", "mmproj": "org/repo:mmproj-f16.gguf", "draft": "d.gguf"},
                {"ctx_size": 4096, "vk_device": "1", "flash": True, "temp": 0.5, "none": None})
    assert isinstance(e, ModelEntry) and e.main == "/models/qwen.gguf"
    reg.add("user.a", "llamacpp", {"main": "unsloth/gemma-3-270m-it-GGUF:gemma-3-270m-it-UD-IQ2_M.gguf"})
    again = ModelRegistry(reg.path)
    assert [m.name for m in again.list()] == ["user.a", "user.qwen-0.5b"]
    got = again.get("user.qwen-0.5b")
    assert got == e
    assert dict(got.checkpoints)["mmproj"] == "org/repo:mmproj-f16.gguf"
    assert dict(got.recipe_options) == {"ctx_size": 4096, "vk_device": "1", "flash": True, "temp": 0.5, "none": None}
    with pytest.raises(TypeError):
        got.checkpoints["main"] = "x"  # type: ignore[index]
    on_disk = json.loads(reg.path.read_text())
    assert on_disk["user.a"] == {"recipe": "llamacpp",
                                 "checkpoints": {"main": "unsloth/gemma-3-270m-it-GGUF:gemma-3-270m-it-UD-IQ2_M.gguf"}}
    assert list(on_disk) == ["user.a", "user.qwen-0.5b"]
    removed = again.remove("user.a")
    assert removed.name == "user.a" and [m.name for m in reg.list()] == ["user.qwen-0.5b"]


def test_file_mode_is_0600_and_no_temp_files_are_left(reg):
    reg.add("user.a", "llamacpp", {"main": "/m.gguf"})
    os.chmod(reg.path, 0o644)
    reg.add("user.b", "llamacpp", {"main": "/m.gguf"})
    assert stat.S_IMODE(os.stat(reg.path).st_mode) == 0o600
    assert sorted(p.name for p in reg.path.parent.iterdir()) == ["user_models.json", "user_models.json.lock"]


def test_existing_name_needs_replace(reg):
    reg.add("user.a", "llamacpp", {"main": "/one.gguf"})
    with pytest.raises(LemonpackError, match="already exists"):
        reg.add("user.a", "llamacpp", {"main": "/two.gguf"})
    assert reg.get("user.a").main == "/one.gguf"
    reg.add("user.a", "whispercpp", {"main": "/two.gguf"}, replace=True)
    assert reg.get("user.a").recipe == "whispercpp"


def test_unknown_names(reg):
    with pytest.raises(LemonpackError, match="no model named 'user.x'"):
        reg.get("user.x")
    with pytest.raises(LemonpackError, match="no model named 'user.x'"):
        reg.remove("user.x")


@pytest.mark.parametrize("name, recipe, checkpoints, options, rule", [
    ("qwen", "llamacpp", {"main": "/m"}, None, "model-name"),
    ("user.", "llamacpp", {"main": "/m"}, None, "model-name"),
    ("user.-x", "llamacpp", {"main": "/m"}, None, "model-name"),
    ("user.a b", "llamacpp", {"main": "/m"}, None, "model-name"),
    ("user." + "x" * 200, "llamacpp", {"main": "/m"}, None, "model-name"),
    ("user.a", "Llama.CPP", {"main": "/m"}, None, "recipe-id"),
    ("user.a", "llamacpp", {"mmproj": "/m"}, None, "missing-field"),
    ("user.a", "llamacpp", {"main": "/m", "bad name": "/x"}, None, "checkpoint-name"),
    ("user.a", "llamacpp", {"main": ""}, None, "checkpoint-value"),
    ("user.a", "llamacpp", {"main": "/m\n--evil"}, None, "checkpoint-value"),
    ("user.a", "llamacpp", {"main": "/m"}, {"ctx": [1, 2]}, "option-value"),
    ("user.a", "llamacpp", {"main": "/m"}, {"ctx": {"a": 1}}, "option-value"),
    ("user.a", "llamacpp", {"main": "/m"}, {"ctx": float("inf")}, "option-value"),
    ("user.a", "llamacpp", {"main": "/m"}, {"-x": 1}, "option-name"),
])
def test_invalid_add_raises_and_changes_nothing(reg, name, recipe, checkpoints, options, rule):
    reg.add("user.keep", "llamacpp", {"main": "/keep.gguf"})
    before = reg.path.read_bytes()
    before_stat = os.stat(reg.path)
    with pytest.raises(ManifestError) as info:
        reg.add(name, recipe, checkpoints, options)
    assert rule in [p.rule for p in info.value.problems]
    assert all(p.file == str(reg.path) for p in info.value.problems)
    assert reg.path.read_bytes() == before
    assert os.stat(reg.path).st_ino == before_stat.st_ino


@pytest.mark.parametrize("text, rule, where", [
    ("{nope", "json-syntax", ""),
    ("[]", "schema-type", ""),
    ("null", "schema-type", ""),  # a null document: named (it once gave an empty message)
    ('{"user.a": {"recipe": "llamacpp", "checkpoints": {"main": "/m"}}, "user.a": {}}', "duplicate-key", '["user.a"]'),
    ('{"user.a": {"recipe": "llamacpp"}}', "missing-field", '["user.a"].checkpoints'),
    ('{"user.a": {"recipe": "llamacpp", "checkpoints": {"main": "/m"}, "extra": 1}}', "unknown-field",
     '["user.a"].extra'),
    ('{"user.a": {"recipe": "llamacpp", "checkpoints": {"main": 3}}}', "checkpoint-value", '["user.a"].checkpoints.main'),
    ('{"bad": {"recipe": "llamacpp", "checkpoints": {"main": "/m"}}}', "model-name", "bad"),
    ('{"user.a": {"recipe": "llamacpp", "checkpoints": {"main": "/m"}, "recipe_options": {"x": NaN}}}',
     "json-syntax", ""),
    ('{"user.a": "llamacpp"}', "schema-type", '["user.a"]'),
])
def test_malformed_file_is_a_clear_error_naming_file_and_entry(reg, text, rule, where):
    reg.path.parent.mkdir(parents=True)
    reg.path.write_text(text)
    with pytest.raises(ManifestError) as info:
        reg.list()
    problems = info.value.problems
    assert rule in [p.rule for p in problems]
    p = next(p for p in problems if p.rule == rule)
    assert p.file == str(reg.path) and p.path == where
    assert str(reg.path) in str(info.value)
    # writes refuse to clobber a malformed file
    with pytest.raises(ManifestError):
        reg.add("user.new", "llamacpp", {"main": "/m"})
    assert reg.path.read_text() == text


def test_unreadable_file_is_a_manifest_error(reg):
    reg.path.parent.mkdir(parents=True)
    reg.path.write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(ManifestError, match="cannot read"):
        reg.load()


def test_concurrent_adds_lose_nothing(reg):
    errors = []

    def worker(i):
        try:
            ModelRegistry(reg.path).add(f"user.m{i}", "llamacpp", {"main": f"/m{i}.gguf"})
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(reg.list()) == 12


def test_parse_option_and_checkpoint():
    assert parse_option("ctx_size=4096") == ("ctx_size", 4096)
    assert parse_option("temp=0.7") == ("temp", 0.7)
    assert parse_option("flash=true") == ("flash", True)
    assert parse_option("x=null") == ("x", None)
    assert parse_option('dev="0"') == ("dev", "0")
    assert parse_option("name=hello world") == ("name", "hello world")
    assert parse_option("list=[1,2]") == ("list", "[1,2]")
    assert parse_option("nan=NaN") == ("nan", "NaN")
    assert parse_option("empty=") == ("empty", "")
    with pytest.raises(LemonpackError):
        parse_option("novalue")
    assert parse_checkpoint("main=/m.gguf") == ("main", "/m.gguf")
    assert parse_checkpoint("mmproj=org/repo:file.gguf") == ("mmproj", "org/repo:file.gguf")
    for bad in ("org/repo:file.gguf", "main", "main=", "=/m.gguf"):  # no bare value: NAME=PATH only
        with pytest.raises(LemonpackError, match="must be NAME=PATH"):
            parse_checkpoint(bad)


def test_checkpoint_kind_and_normalize(tmp_path, monkeypatch):
    from lemonpack.runtime.models.registry import checkpoint_kind, looks_like_path, normalize_checkpoint

    monkeypatch.chdir(tmp_path)
    assert checkpoint_kind("org/repo:file.gguf") == "hub"
    assert checkpoint_kind("unsloth/Qwen3-0.6B-GGUF:Q4_K_M") == "hub"
    assert normalize_checkpoint("org/repo:file.gguf") == "org/repo:file.gguf"
    for local in ("/models/x.gguf", "x.gguf", "./org/repo:file", "a/b/c:d", ".hidden/repo:x"):
        assert checkpoint_kind(local) == "local", local
    (tmp_path / "org").mkdir()
    (tmp_path / "org" / "repo:file.gguf").write_bytes(b"GGUF")  # an existing file wins
    assert checkpoint_kind("org/repo:file.gguf") == "local"
    assert normalize_checkpoint("org/repo:file.gguf") == str(tmp_path / "org" / "repo:file.gguf")
    assert normalize_checkpoint("sub/../m.gguf") == str(tmp_path / "m.gguf")
    assert looks_like_path("/x/m") and looks_like_path("m.GGUF") and looks_like_path("w.safetensors")
    assert not looks_like_path("user.qwen")


def test_load_is_cached_while_the_file_is_unchanged_and_sees_every_change(tmp_path):
    """The server reads the registry per request: an unchanged file is parsed once; a write
    by lemonpack (a rename) or an in-place edit by hand is seen at the next load."""
    reg = ModelRegistry(tmp_path / "user_models.json")
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    reg.add("user.a", "llamacpp", {"main": str(model)})
    first = reg.load()
    assert reg.load() is first  # unchanged: the same parsed mapping
    reg.add("user.b", "llamacpp", {"main": str(model)})
    assert set(reg.load()) == {"user.a", "user.b"}
    doc = json.loads(reg.path.read_text())
    del doc["user.b"]
    with open(reg.path, "r+") as f:  # an in-place edit: same inode
        f.seek(0)
        f.write(json.dumps(doc))
        f.truncate()
    os.utime(reg.path, ns=(1, 1))  # even with an mtime set back, size and ctime change
    assert set(reg.load()) == {"user.a"}


# --- the JSON Schema (schema/user_models.schema.json) and the checks after it -------------------


def test_the_schema_ships_as_package_data_and_is_the_validator():
    """The schema is read from the package (a wheel carries it: pyproject's package-data
    glob covers it) and checked against its metaschema; the wording is the registry's."""
    import glob
    import tomllib
    from pathlib import Path

    import jsonschema

    from lemonpack.runtime.models import registry

    doc = registry.schema()
    jsonschema.validators.validator_for(doc).check_schema(doc)
    pkg = Path(registry.__file__).parent
    data = tomllib.loads((pkg.parents[2] / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = {Path(f) for pattern in data["lemonpack.runtime.models"] for f in glob.glob(str(pkg / pattern))}
    assert pkg / "schema" / registry.SCHEMA_FILE in shipped


@pytest.mark.parametrize("entry, rule, where, message", [
    ({"recipe": None, "checkpoints": {"main": "/m"}}, "missing-field", '["user.a"].recipe',
     "required field 'recipe' is missing"),
    ({"recipe": "llamacpp", "checkpoints": None}, "missing-field", '["user.a"].checkpoints',
     "required field 'checkpoints' is missing"),
    ({"recipe": "llamacpp", "checkpoints": {}}, "missing-field", '["user.a"].checkpoints.main',
     "the 'main' checkpoint is required"),
    ({"recipe": "llamacpp", "checkpoints": {"main": "/m\x00"}}, "checkpoint-value", '["user.a"].checkpoints.main',
     "checkpoint 'main' must not contain NUL or line breaks"),
    ({"recipe": "llamacpp", "checkpoints": {"main": "/m"}, "zz": 1}, "unknown-field", '["user.a"].zz',
     "unknown field 'zz' (allowed: recipe, checkpoints, recipe_options, backend, endpoint, endpoints)"),
    ({"recipe": "a", "checkpoints": {"main": "/m"}}, "recipe-id", '["user.a"].recipe',
     "recipe 'a' must be a recipe id matching ^[a-z0-9][a-z0-9_-]{1,63}$"),
    ({"recipe": "llamacpp", "checkpoints": {"main": "/m"}, "backend": "-x"}, "backend-name", '["user.a"].backend',
     "backend '-x' must be a recipe id or a default's name matching [A-Za-z0-9][A-Za-z0-9._-]* (at most 64 characters)"),
    ({"recipe": "llamacpp", "endpoints": []}, "schema-type", '["user.a"].endpoints',
     "'endpoints' must be a non-empty list of http(s)://HOST:PORT URLs"),
    ({"recipe": "llamacpp", "endpoints": []}, "missing-field", '["user.a"].checkpoints',  # not served by endpoints
     "required field 'checkpoints' is missing"),
    ({"recipe": "llamacpp", "endpoints": [3]}, "endpoint-url", '["user.a"].endpoints[0]',
     "endpoint '3' must be a non-empty URL string"),
    ({"recipe": "llamacpp", "endpoint": "http://u:pw@h:1"}, "endpoint-url", '["user.a"].endpoint',
     "endpoint 'http://***@h:1' must not carry a user or password (credentials do not belong in the model registry)"),
    ({"recipe": "llamacpp", "endpoint": "http://a:1", "endpoints": ["http://A:1/"]}, "endpoint-url",
     '["user.a"].endpoints[0]', "endpoint 'http://A:1/' is given twice"),
])
def test_schema_and_semantic_problems_keep_the_registrys_wording(reg, entry, rule, where, message):
    reg.path.parent.mkdir(parents=True)
    reg.path.write_text(json.dumps({"user.a": entry}))
    with pytest.raises(ManifestError) as info:
        reg.load()
    assert (str(reg.path), where, rule, message) in [(p.file, p.path, p.rule, p.message) for p in info.value.problems]


def test_nulls_the_registry_has_always_accepted():
    """A remote model's ``checkpoints`` and any model's ``recipe_options`` may be null."""
    from lemonpack.runtime.models.registry import registry_problems

    assert registry_problems({"user.r": {"recipe": "llamacpp", "endpoint": "http://a:1", "checkpoints": None},
                              "user.a": {"recipe": "llamacpp", "checkpoints": {"main": "/m"},
                                         "recipe_options": None}}, "F") == []


def test_every_problem_is_found_at_once_in_document_order(reg):
    """Names first (the document's keys), then each entry: its unknown fields, then its fields."""
    reg.path.parent.mkdir(parents=True)
    reg.path.write_text(json.dumps({"user.a": {"recipe": "Bad", "checkpoints": "x", "recipe_options": 3, "zz": 1},
                                    "bad": 1}))
    with pytest.raises(ManifestError) as info:
        reg.load()
    assert [(p.path, p.rule) for p in info.value.problems] == [
        ("bad", "model-name"), ('["user.a"].zz', "unknown-field"), ('["user.a"].recipe', "recipe-id"),
        ('["user.a"].checkpoints', "schema-type"), ('["user.a"].recipe_options', "schema-type"), ("bad", "schema-type")]


# --- oci:// checkpoints (issue 23, point 3) -------------------------------------------------------

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize("value", [f"oci://127.0.0.1:5000/models/tiny@{DIGEST}",
                                   f"oci://registry.example/models/tiny:v1@{DIGEST}"])
def test_a_pinned_oci_checkpoint_is_registered_as_written(reg, value):
    from lemonpack.runtime.models.registry import checkpoint_kind, normalize_checkpoint

    assert checkpoint_kind(value) == "oci" and normalize_checkpoint(value) == value
    assert reg.add("user.x", "llamacpp", {"main": value}).main == value
    assert ModelRegistry(reg.path).get("user.x").main == value


@pytest.mark.parametrize("value, says", [
    ("oci://127.0.0.1:5000/models/tiny:v1", ["has no digest", "tag is mutable", "lemonpack models pin"]),
    ("oci://127.0.0.1:5000/models/tiny", ["has no digest", "lemonpack models pin"]),
    ("oci://127.0.0.1:5000/models/tiny@sha256:abc", ["digest has 3 hex digits, needs 64"]),
    (f"oci://models/tiny@{DIGEST}", ["no registry host"]),
    (f"oci://127.0.0.1:5000/Models/tiny@{DIGEST}", ["malformed"]),
])
def test_an_unpinned_or_hostless_oci_checkpoint_is_refused(reg, value, says):
    with pytest.raises(ManifestError) as info:
        reg.add("user.x", "llamacpp", {"main": value})
    text = str(info.value)
    assert all(s in text for s in says), text
    assert '["user.x"].checkpoints.main' in text and "checkpoint-oci" in text
    assert not reg.path.exists()  # nothing written


def test_a_hand_edited_tag_in_the_file_is_refused_naming_the_entry(reg):
    reg.path.parent.mkdir(parents=True)
    reg.path.write_text(json.dumps({"user.x": {"recipe": "llamacpp",
                                               "checkpoints": {"main": "oci://127.0.0.1:5000/m:latest"}}}))
    with pytest.raises(ManifestError, match=r'user_models.json: \["user.x"\].checkpoints.main'):
        reg.load()
