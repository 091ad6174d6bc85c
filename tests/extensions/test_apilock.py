"""The change-record lock (seed 002 section 7): the repository's interface matches its
records, and a change to the schema, a public header or the generator's templates without a
new record fails, as does an edited or removed record."""

from __future__ import annotations

import pytest

from lemonpack.errors import LemonpackError
from lemonpack.extensions.apilock import check_api_lock, refresh_api_lock
from lemonpack.extensions.apilock import records
from support.extensions import REPO

#: The next change record's number in the repository.
NEXT = len(records(REPO)) + 1


def test_repository_interface_matches_its_change_records():
    assert check_api_lock(REPO) == []


@pytest.mark.parametrize("path,edit", [
    ("include/gufo/ext/registry.hpp", lambda t: t.replace("void add_option", "void add_flag")),
    ("lemonpack/extensions/templates.py", lambda t: t.replace("Do not edit.", "Do not edit!")),
    ("lemonpack/extensions/schema/extension-v1.schema.json", lambda t: t.replace('"maxLength": 64', '"maxLength": 65', 1)),
])
def test_interface_change_without_a_record_fails(tree, path, edit):
    f = tree / path
    f.write_text(edit(f.read_text()))
    (problem,) = check_api_lock(tree)
    assert f"{path} changed" in problem and f"add a change record api/changes/{NEXT:04d}-<slug>.md" in problem
    with pytest.raises(LemonpackError, match="no change record was added"):
        refresh_api_lock(tree)
    (tree / f"api/changes/{NEXT:04d}-rename-add-option.md").write_text("# renamed\n")
    assert any(f"{NEXT:04d}-rename-add-option.md is not in api/changes.lock.json" in p for p in check_api_lock(tree))
    doc = refresh_api_lock(tree)
    assert doc["revision"] == NEXT and check_api_lock(tree) == []


def test_new_public_header_needs_a_record(tree):
    (tree / "include/gufo/ext/text_generation.hpp").write_text("#pragma once\n")
    assert "include/gufo/ext/text_generation.hpp was added" in check_api_lock(tree)[0]


def test_schema_whitespace_is_not_a_change(tree):
    f = tree / "lemonpack/extensions/schema/extension-v1.schema.json"
    f.write_text(f.read_text().replace("\n", "\n  "))
    assert check_api_lock(tree) == []


def test_edited_or_removed_record_fails(tree):
    rec = tree / "api/changes/0001-initial-extension-api.md"
    text = rec.read_text()
    rec.write_text(text + "\nedited later\n")
    (problem,) = check_api_lock(tree)
    assert "0001-initial-extension-api.md was edited after it was recorded" in problem
    with pytest.raises(LemonpackError, match="append-only"):
        refresh_api_lock(tree)
    rec.unlink()
    assert any("was removed" in p for p in check_api_lock(tree))


def test_records_are_numbered_without_gaps(tree):
    (tree / f"api/changes/{NEXT + 1:04d}-skipped.md").write_text("x\n")
    assert any(f"expected {NEXT:04d}" in p for p in check_api_lock(tree))
