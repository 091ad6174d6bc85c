"""The recipe schema's lock (lemonpack/contract/schemalock.py): the shipped schema matches its
lock, a change without a refreshed lock fails, a whitespace edit does not, a released major is frozen."""

import json
import shutil

import pytest

from lemonpack.contract.schemalock import SCHEMA_DIR, check_lock, refresh_lock
from lemonpack.errors import LemonpackError


def copy_schema(tmp_path):
    d = tmp_path / "schema"
    shutil.copytree(SCHEMA_DIR, d)
    return d


def test_shipped_schema_matches_lock():
    assert check_lock() == []


def test_schema_change_without_lock_refresh_fails(tmp_path):
    d = copy_schema(tmp_path)
    p = d / "recipe-v1.schema.json"
    doc = json.loads(p.read_text())
    doc["properties"]["new_field"] = {"type": "string"}
    p.write_text(json.dumps(doc))
    [problem] = check_lock(d)
    assert "major 1" in problem and "scripts/locks.py recipe-schema" in problem
    before = json.loads((d / "lock.json").read_text())["majors"]["1"]
    with pytest.raises(LemonpackError, match="--reason"):
        refresh_lock(d)  # a correction is never silent
    assert check_lock(d) == [problem]
    refresh_lock(d, reason="add new_field")
    assert check_lock(d) == []
    entry = json.loads((d / "lock.json").read_text())["majors"]["1"]
    assert entry["history"][-1] == {"sha256": before["sha256"], "reason": "add new_field"}
    assert entry["history"][:-1] == before.get("history", [])


def test_whitespace_only_edit_keeps_lock(tmp_path):
    d = copy_schema(tmp_path)
    p = d / "recipe-v1.schema.json"
    p.write_text(json.dumps(json.loads(p.read_text()), indent=8))
    assert check_lock(d) == []


def test_released_major_is_frozen(tmp_path):
    d = copy_schema(tmp_path)
    lock = json.loads((d / "lock.json").read_text())
    lock["majors"]["1"]["released"] = True
    (d / "lock.json").write_text(json.dumps(lock))
    p = d / "recipe-v1.schema.json"
    doc = json.loads(p.read_text())
    doc["title"] = "edited"
    p.write_text(json.dumps(doc))
    assert "released and frozen" in check_lock(d)[0]
    with pytest.raises(LemonpackError, match="frozen"):
        refresh_lock(d)
