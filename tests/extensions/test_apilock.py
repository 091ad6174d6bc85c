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


# ---------------------------------------------------------------- what counts, and every build step checks it

def generate(tree, tmp_path, *extra):
    """``lemonpack extensions generate --json`` on ``tree``: (exit code, JSON document)."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "lemonpack.cli", "extensions", "generate", "--json", "--tree", str(tree),
                          "--feature", "linux", "--out", str(tmp_path / "gen"), *extra],
                         capture_output=True, text=True, timeout=120)
    return out.returncode, json.loads(out.stdout)


def test_a_readme_in_the_records_directory_is_not_a_record(tree, tmp_path):
    """shared/cases 65: only NNNN-<slug>.md counts; a README changes neither the API revision
    nor the lock's verdict."""
    from lemonpack.extensions.pipeline import host_api

    before = host_api(tree)
    (tree / "api/changes/README.md").write_text("# About these records\n")
    (tree / "api/changes/.gitkeep").write_text("")
    assert host_api(tree) == before == (1, NEXT - 1)
    assert records(tree) == records(REPO) and check_api_lock(tree) == []
    code, doc = generate(tree, tmp_path)
    assert code == 0 and doc["api_version"] == f"0.1.{NEXT - 1}"


@pytest.mark.parametrize("name", [f"{NEXT:04d}_underscore.md", f"{NEXT:04d}-Capital.md", f"{NEXT}-short.md"])
def test_a_misnamed_record_is_said_not_to_count(tree, name):
    from lemonpack.extensions.pipeline import host_api

    (tree / "api/changes" / name).write_text("# looks like a record\n")
    assert host_api(tree)[1] == NEXT - 1
    assert any(f"api/changes/{name}: a change record is named NNNN-<slug>.md" in p and "does not count" in p
               for p in check_api_lock(tree))


@pytest.mark.parametrize("change", ["edited", "removed", "unlocked"])
def test_generate_and_build_refuse_records_that_do_not_match_their_lock(tree, tmp_path, change):
    """Every build step checks the record lock: removing a record would silently build a lower
    revision, adding an unlocked one a higher one, editing one rewrites history."""
    import json
    import subprocess
    import sys

    rec = tree / "api/changes/0002-compiled-registry.md"
    if change == "edited":
        rec.write_text(rec.read_text() + "\nlater\n")
        want = "0002-compiled-registry.md was edited after it was recorded"
    elif change == "removed":
        rec.unlink()
        want = "0002-compiled-registry.md was removed; change records are append-only"
    else:
        (tree / f"api/changes/{NEXT:04d}-new.md").write_text("# new\n")
        want = f"{NEXT:04d}-new.md is not in api/changes.lock.json"
    code, doc = generate(tree, tmp_path)
    assert code == 1 and doc["error"] == "lock" and want in doc["message"] and not (tmp_path / "gen").exists()
    assert doc["message"].startswith(f"{tree}: the extension API's change records do not match api/changes.lock.json")
    build = subprocess.run([sys.executable, "-m", "lemonpack.cli", "extensions", "build", "--json", "--tree", str(tree),
                            "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert build.returncode == 1 and want in json.loads(build.stdout)["message"] and not (tmp_path / "out").exists()
    # list and check still answer (check says what is wrong; list reads metadata)
    check = subprocess.run([sys.executable, "-m", "lemonpack.cli", "extensions", "check", "--tree", str(tree)],
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 1 and want in check.stdout
