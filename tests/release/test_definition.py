"""Release image definitions (containers/*.json): the shipped ones load, bad ones are refused
with the file and the JSON path of the field, through the loader and the CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lemonpack.cli import main
from lemonpack.errors import LemonpackError, ManifestError
from lemonpack.release import load_definition, load_definitions
from lemonpack.release.definition import schema

REPO = Path(__file__).resolve().parents[2]

GOOD = {"schema": 1, "name": "img", "architectures": ["amd64"], "features": ["linux"], "base": "scratch",
        "recipes": [{"file": "lemonpack/examples/hello-engine.json", "accelerator": "cpu"}]}


def _write(tmp_path: Path, doc, name: str = "img") -> Path:
    d = tmp_path / "containers"
    d.mkdir(exist_ok=True)
    p = d / f"{name}.json"
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


def _problems(path: Path, tree: Path = REPO) -> list[tuple[str, str]]:
    with pytest.raises(ManifestError) as e:
        load_definition(path, tree)
    for p in e.value.problems:
        assert p.file == str(path)
    return [(p.path, p.rule) for p in e.value.problems]


def test_shipped_definitions_load():
    defs = load_definitions(REPO / "containers", REPO)
    by_name = {d.name: d for d in defs}
    assert {"gufo-cpu", "gufo-rocm"} <= set(by_name)
    assert by_name["gufo-cpu"].features == {"linux"}
    assert by_name["gufo-rocm"].features == {"linux", "hip"}
    for d in defs:
        assert d.base == "scratch" and d.architectures
        for r in d.recipes:
            assert r.path.is_file() and r.path.is_relative_to(REPO)


def test_schema_is_draft_2020_12_and_documented():
    assert schema()["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    doc = (REPO / "docs" / "release-images.md").read_text()
    for field in list(schema()["properties"]) + list(schema()["properties"]["recipes"]["items"]["properties"]):
        assert f"`{field}`" in doc, f"docs/release-images.md does not document {field}"


@pytest.mark.parametrize("change, expected", [
    ({"colour": "red"}, [("colour", "unknown-field")]),
    ({"architectures": ["amd64", "s390x"]}, [("architectures[1]", "schema-enum")]),
    ({"architectures": []}, [("architectures", "schema-minItems")]),
    ({"features": ["hip"]}, [("features", "linux-feature")]),
    ({"features": ["linux", "windows"]}, [("features[1]", "schema-enum")]),
    ({"base": "ubuntu:24.04"}, [("base", "base")]),
    ({"base": "127.0.0.1:5000/debian:12"}, [("base", "base")]),
    ({"base": 7}, [("base", "schema-type")]),
    ({"name": "Img"}, [("name", "name")]),
    ({"name": "other"}, [("name", "name-file")]),
    ({"extensions": "all"}, [("extensions", "extensions")]),
    ({"extensions": ["qwen", "Qwen"]}, [("extensions", "extensions")]),
    ({"recipes": [{"file": "../etc/passwd.json", "accelerator": "cpu"}]}, [("recipes[0].file", "recipe-file")]),
    ({"recipes": [{"file": "lemonpack/examples/missing.json", "accelerator": "cpu"}]},
     [("recipes[0].file", "recipe-file")]),
    ({"recipes": [{"file": "lemonpack/examples/hello-engine.json", "accelerator": "quantum"}]},
     [("recipes[0].accelerator", "accelerator")]),
    ({"recipes": [{"file": "lemonpack/examples/hello-engine.json", "accelerator": "cpu"},
                  {"file": "lemonpack/examples/./hello-engine.json", "accelerator": "cpu"}]},
     [("recipes[1].file", "recipe-file")]),
    ({"recipes": [{"file": "lemonpack/examples/hello-engine.json"}]}, [("recipes[0].accelerator", "missing-field")]),
])
def test_bad_definition_names_file_and_field(tmp_path, change, expected):
    assert _problems(_write(tmp_path, {**GOOD, **change})) == expected


def test_missing_required_fields_all_reported(tmp_path):
    got = _problems(_write(tmp_path, {"schema": 1, "name": "img"}))
    assert sorted(got) == [("architectures", "missing-field"), ("base", "missing-field"),
                           ("features", "missing-field")]


def test_not_json(tmp_path):
    assert _problems(_write(tmp_path, "{\"schema\": 1,")) == [("", "json")]


def test_recipe_symlink_leaving_the_tree(tmp_path):
    tree = tmp_path / "tree"
    (tree / "r").mkdir(parents=True)
    os.symlink(REPO / "lemonpack" / "examples" / "hello-engine.json", tree / "r" / "x.json")
    p = _write(tree, {**GOOD, "recipes": [{"file": "r/x.json", "accelerator": "cpu"}]})
    assert _problems(p, tree) == [("recipes[0].file", "recipe-file")]


def test_load_definitions_reports_every_file_and_only(tmp_path):
    _write(tmp_path, {**GOOD, "base": "none"}, "img")
    _write(tmp_path, {**GOOD, "name": "b", "features": []}, "b")
    with pytest.raises(ManifestError) as e:
        load_definitions(tmp_path / "containers", REPO)
    assert {(Path(p.file).name, p.path) for p in e.value.problems} == {("img.json", "base"), ("b.json", "features")}
    (tmp_path / "containers" / "b.json").unlink()
    (tmp_path / "containers" / "img.json").write_text(json.dumps(GOOD))
    with pytest.raises(LemonpackError, match="no release image named 'nope'"):
        load_definitions(tmp_path / "containers", REPO, ("nope",))
    with pytest.raises(LemonpackError, match="no such directory"):
        load_definitions(tmp_path / "absent", REPO)


def test_cli_bad_definition_exit_1_nothing_written(tmp_path, capsys):
    p = _write(tmp_path, {**GOOD, "architectures": ["amd64", "mips"]})
    (tmp_path / "extensions.lock").write_text('{"schema": 1, "extensions": []}')
    out = tmp_path / "out"
    code = main(["release", "--lock", str(tmp_path / "extensions.lock"), "--tree", str(REPO),
                 "--containers", str(p.parent), "--out", str(out), "--json"])
    assert code == 1
    err = json.loads(capsys.readouterr().out)
    assert err["error"] == "manifest"
    assert err["problems"][0]["file"] == str(p) and err["problems"][0]["path"] == "architectures[1]"
    assert not out.exists() and sorted(x.name for x in tmp_path.iterdir()) == ["containers", "extensions.lock"]


def test_cli_refuses_foreign_out_dir(tmp_path, capsys):
    p = _write(tmp_path, GOOD)
    (tmp_path / "extensions.lock").write_text('{"schema": 1, "extensions": []}')
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("keep")
    code = main(["release", "--lock", str(tmp_path / "extensions.lock"), "--tree", str(REPO),
                 "--containers", str(p.parent), "--out", str(out)])
    assert code == 1
    assert "not a lemonpack release" in capsys.readouterr().err
    assert sorted(x.name for x in out.iterdir()) == ["precious.txt"]
