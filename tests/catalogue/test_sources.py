"""The catalogue's sources (lemonpack/catalogue/sources.py): ``lemonpack catalogue lint``, offline,
every problem of every file with its path; and the descriptive fields of an entry in one table
(``DESCRIBED``): the entry schema, the index and ``catalogue show`` all follow it, so a new field is
a row there, a schema property and (to show it on the site) a template line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ec

from lemonpack.catalogue.sources import DESCRIBED, check_entry, check_publisher, described, lint_paths, schema
from support.catalogue import fingerprint, pem

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from lemonpack.cli import main; main()", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=60, env=dict(os.environ))


def test_schemas_are_draft_2020_12_and_valid():
    import jsonschema

    for name in ("publisher", "entry"):
        s = schema(name)
        assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        jsonschema.Draft202012Validator.check_schema(s)


def test_shipped_catalogue_lints_clean():
    r = cli("catalogue", "lint", str(REPO / "catalogue"))
    assert r.returncode == 0 and r.stdout.strip().endswith(": ok"), r.stdout + r.stderr


def publisher(tmp: Path, pid: str, body: str) -> Path:
    p = tmp / "catalogue" / "publishers" / f"{pid}.toml"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(body)
    return p


def entry(tmp: Path, pub: str, name: str, body: str) -> Path:
    p = tmp / "catalogue" / "entries" / pub / f"{name}.toml"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(body)
    return p


def test_every_problem_at_once_with_paths(tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    publisher(tmp_path, "acme", f'display_name = "Acme"\nhomepage = "ftp://x"\ncontact = "a@b"\n'
              f'[[keys]]\npem = """{pem(key)}"""\nfingerprint = "sha256:{"0" * 64}"\n')
    publisher(tmp_path, "Bad_Name", 'display_name = "B"\nhomepage = "https://b"\ncontact = "b@b"\nkeys = []\n')
    entry(tmp_path, "acme", "one", 'kind = "recipe"\nname = "two"\nlicense = "MIT"\ndescription = "d"\n'
          'tags = ["UPPER"]\n[source]\ntype = "git"\nurl = "https://x/r.git"\ncommit = "abc"\npath = "../up"\n'
          'sha256 = "sha256:' + "1" * 64 + '"\n')
    entry(tmp_path, "ghost", "x", 'kind = "recipe"\nname = "x"\nlicense = "MIT"\ndescription = "d"\n'
          '[source]\ntype = "oci"\nref = "reg.example/x:latest"\n')
    entry(tmp_path, "acme", "broken", 'kind = "recipe\n')
    r = cli("catalogue", "lint", "catalogue", "--json", cwd=tmp_path)
    assert r.returncode == 1
    probs = {(Path(p["file"]).name, p["path"], p["rule"]) for p in json.loads(r.stdout)["problems"]}
    assert ("acme.toml", "homepage", "schema-pattern") in probs
    assert ("acme.toml", "keys[0].fingerprint", "fingerprint") in probs
    assert ("Bad_Name.toml", "", "publisher-id") in probs
    assert ("one.toml", "name", "file-name") in probs
    assert ("one.toml", "tags[0]", "schema-pattern") in probs
    assert ("one.toml", "source.commit", "schema-pattern") in probs
    assert ("one.toml", "source.path", "schema-pattern") in probs
    assert ("x.toml", "", "unknown-publisher") in probs
    assert ("x.toml", "source.ref", "schema-pattern") in probs  # a tag, not a digest
    assert ("broken.toml", "", "toml") in probs
    # plain output: one line per problem, FILE: PATH: MESSAGE [RULE]
    r = cli("catalogue", "lint", "catalogue", cwd=tmp_path)
    assert r.returncode == 1 and "catalogue/entries/acme/one.toml: source.commit: " in r.stdout
    assert "Traceback" not in r.stderr


def test_single_files_and_missing(tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    p = publisher(tmp_path, "acme", f'display_name = "Acme"\nhomepage = "https://a"\ncontact = "a@b"\n'
                  f'[[keys]]\npem = """{pem(key)}"""\nfingerprint = "{fingerprint(key)}"\n')
    pub, problems = check_publisher(p)
    assert problems == [] and pub.keys[0].fingerprint == fingerprint(key)
    e = entry(tmp_path, "acme", "ok", 'kind = "extension"\nname = "ok"\nlicense = "MIT"\ndescription = "d"\n'
              'colour = 1\n[source]\ntype = "https"\nurl = "https://x/ok.tar.gz"\nsha256 = "sha256:' + "a" * 64 + '"\n'
              '[signature]\nurl = "https://x/ok.sig"\nvalue = "AAAA"\n')
    _, problems = check_entry(e, {"acme": pub})
    rules = {(q.path, q.rule) for q in problems}
    assert ("colour", "unknown-field") in rules and ("signature", "schema-oneOf") in rules
    assert [q.rule for q in lint_paths([tmp_path / "nope.toml"])] == ["missing"]


def _shipped() -> dict:
    return json.loads(resources.files("lemonpack.catalogue").joinpath("shipped/catalogue.json").read_bytes())


def test_every_described_field_is_in_the_entry_schema():
    schema = json.loads(resources.files("lemonpack.catalogue").joinpath("schema/entry.schema.json").read_bytes())
    assert set(DESCRIBED) <= set(schema["properties"])


def test_described_takes_defaults_and_stringifies():
    assert described({}) == DESCRIBED
    assert described({"license": "Apache-2.0", "homepage": "https://x.example", "other": 1}) == \
        {**DESCRIBED, "license": "Apache-2.0", "homepage": "https://x.example"}


def test_index_entries_and_show_carry_every_described_field():
    entries = _shipped()["entries"]
    assert entries and all(set(DESCRIBED) <= set(e) for e in entries)
    r = subprocess.run([sys.executable, "-c", "from lemonpack.cli import main; main()", "catalogue", "show",
                        "recipe:hello-engine"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("version: "))
    assert [part.split(":")[0] for part in line.split("   ")] == ["version", *DESCRIBED]


def test_an_oci_recipe_entry_spelled_with_its_scheme_shows_one_scheme():
    """A recipe entry's ``ref`` may be written ``oci://HOST/REPO@...`` or ``HOST/REPO@...``: the
    shown commands name ``oci://`` once either way (``install oci://oci://...`` was shown)."""
    from lemonpack.catalogue.commands import recipe_commands

    ref = "registry.example/team/engine@sha256:" + "a" * 64
    for spelled in (ref, "oci://" + ref):
        cmds = recipe_commands("engine", None, {"type": "oci", "ref": spelled}, official=False)
        assert cmds["install"] == f"lemonpack install oci://{ref}"
        assert cmds["nix"] == f"lemonpack pull {ref} --out engine-oci"
