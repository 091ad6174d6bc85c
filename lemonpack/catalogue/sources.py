"""Catalogue sources: publisher and community entry files (TOML) and their loaders.

Layout (docs/catalogue.md): ``catalogue/publishers/<publisher>.toml`` and
``catalogue/entries/<publisher>/<name>.toml``. Both are read with the stdlib ``tomllib`` and
checked against the JSON Schemas shipped in ``lemonpack/catalogue/schema/`` (Draft 2020-12),
then against the rules a schema cannot say (the file name is the id, a key's fingerprint is
the SHA-256 of its public key, the entry's publisher exists). Every problem is reported, as
:class:`~lemonpack.errors.Problem` (file, JSON path, rule, message), never only the first.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from collections.abc import Mapping, Sequence

import jsonschema

from lemonpack.schemacheck import schema_problems
from lemonpack.strictjson import read_source_bytes
from lemonpack.digest import Digest
from lemonpack.errors import ManifestError, Problem
from lemonpack.jsonpath import join

#: The descriptive fields of an entry, copied into the index as written: from a community
#: entry file (checked by ``schema/entry.schema.json``), an official recipe's document or an
#: official extension's ``extension.json``; the value is what an official source without the
#: field gets. The index, ``catalogue show`` and the site's entry page carry every row, so a
#: new field is a row here, a property in ``schema/entry.schema.json`` and, to show it on the
#: site, a line in ``templates/entry.html``.
DESCRIBED: dict[str, str] = {"license": "MIT", "homepage": "", "changelog": ""}


def described(doc: Mapping) -> dict[str, str]:
    """``{field: str}`` for every :data:`DESCRIBED` field of ``doc`` (a parsed entry, recipe or
    extension manifest), its default where ``doc`` lacks it."""
    return {k: str(doc.get(k, default)) for k, default in DESCRIBED.items()}


PUBLISHER_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
MAX_FILE_BYTES = 1024 * 1024


@cache
def schema(name: str) -> dict:
    """The shipped schema ``publisher`` or ``entry`` as a dict."""
    return json.loads(resources.files("lemonpack.catalogue").joinpath(f"schema/{name}.schema.json").read_text())


@cache
def _validator(name: str) -> jsonschema.protocols.Validator:
    return jsonschema.Draft202012Validator(schema(name))


@dataclass(frozen=True)
class PublicKey:
    """A publisher key: the PEM text and its fingerprint ``sha256:<hex>`` of the DER
    SubjectPublicKeyInfo (what ``openssl pkey -pubin -outform DER | sha256sum`` prints)."""

    pem: str
    fingerprint: str


@dataclass(frozen=True)
class Publisher:
    """A reviewed publisher (``catalogue/publishers/<id>.toml``)."""

    id: str
    display_name: str
    homepage: str
    contact: str
    keys: tuple[PublicKey, ...]
    file: str

    def to_json(self) -> dict:
        """The index's publisher shape: ``{"id", "display_name", "homepage", "contact", "keys": [{"fingerprint"}]}``."""
        return {"id": self.id, "display_name": self.display_name, "homepage": self.homepage,
                "contact": self.contact, "keys": [{"fingerprint": k.fingerprint} for k in self.keys]}


@dataclass(frozen=True)
class EntrySource:
    """A community entry (``catalogue/entries/<publisher>/<name>.toml``) as written:
    ``source`` is ``{"type": "https", "url", "sha256"}``, ``{"type": "oci", "ref"}`` or
    ``{"type": "git", "url", "commit", "path", "sha256"}``; ``signature`` None or
    ``{"url"}`` / ``{"value"}`` (base64 ECDSA-SHA256 over the fetched bytes, cosign
    ``sign-blob`` format)."""

    publisher: str
    kind: str
    name: str
    description: str
    source: dict
    file: str
    described: dict[str, str] = field(default_factory=dict)  # the DESCRIBED fields
    tags: tuple[str, ...] = ()
    signature: dict | None = None
    published_digest: str | None = None
    raw: dict = field(default_factory=dict, compare=False)
    data: bytes = field(default=b"", compare=False, repr=False)  # the file's bytes

    @property
    def id(self) -> str:
        """``recipe:<name>``, ``extension:<name>`` or ``model:<name>``."""
        return f"{self.kind}:{self.name}"


def key_fingerprint(pem: str | bytes) -> str:
    """``sha256:<hex>`` of the DER SubjectPublicKeyInfo of the PEM public key ``pem``.
    Raises ``ValueError`` when it is not a PEM public key."""
    from cryptography.hazmat.primitives import serialization

    data = pem.encode() if isinstance(pem, str) else pem
    key = serialization.load_pem_public_key(data)
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return str(Digest.of_bytes(der))


def _read_toml(path: Path, file: str) -> tuple[dict | None, list[Problem], bytes]:
    data, problems = read_source_bytes(path, too_large_rule="too-large", limit=MAX_FILE_BYTES)
    if data is None:
        return None, problems, b""
    try:
        return tomllib.loads(data.decode("utf-8")), [], data
    except UnicodeDecodeError as e:
        return None, [Problem(file, "", "encoding", f"not UTF-8: {e.reason} at byte {e.start}")], data
    except tomllib.TOMLDecodeError as e:
        return None, [Problem(file, "", "toml", f"not valid TOML: {e}")], data


def _read_checked(path: Path, file: str, name: str, memo) -> tuple[dict | None, list[Problem], bytes]:
    """:func:`_read_toml` and :func:`_schema_problems` of the ``name`` schema. With ``memo``
    (:class:`lemonpack.catalogue.memo.Memo`): a file whose exact bytes passed in an earlier
    build (same code and schemas) is neither parsed nor checked again (the memo keeps its
    parsed document); one that passes now is remembered."""
    if memo is None:
        doc, problems, data = _read_toml(path, file)
        return doc, (problems or _schema_problems(doc, name, file)) if doc is not None else problems, data
    from lemonpack.catalogue.memo import file_key

    raw, problems = read_source_bytes(path, too_large_rule="too-large", limit=MAX_FILE_BYTES)
    if raw is None:
        return None, problems, b""
    key = file_key(raw, name)
    doc = memo.valid_doc(key)
    if doc is not None:
        return doc, [], raw
    doc, problems, data = _read_toml(path, file)
    if doc is None:
        return None, problems, data
    problems = _schema_problems(doc, name, file)
    if not problems:
        memo.mark_valid(key, doc)
    return doc, problems, data


def _explain(err, path: list, file: str) -> list[Problem] | None:
    """Catalogue sources drop the wrapper errors of conditional schemas (``if``/``allOf``:
    their inner errors are reported at the offending field)."""
    return [] if err.validator in ("if", "allOf") else None


def _schema_problems(doc: dict, name: str, file: str) -> list[Problem]:
    return schema_problems(doc, file, validator=_validator(name), explain=_explain)


def check_publisher(path: str | Path, memo=None) -> tuple[Publisher | None, list[Problem]]:
    """Load the publisher file at ``path``: the publisher (None when any problem) and every
    problem (``memo``: see :func:`_checked_schema`)."""
    path = Path(path)
    file = str(path)
    doc, problems, data = _read_checked(path, file, "publisher", memo)
    if doc is None:
        return None, problems
    pid = path.stem
    if not PUBLISHER_ID.match(pid):
        problems.append(Problem(file, "", "publisher-id", f"file name {pid!r} is not a publisher id "
                                f"(lower-case letters, digits, '-')"))
    keys = []
    for i, k in enumerate(doc.get("keys") or []):
        if not isinstance(k, dict) or not isinstance(k.get("pem"), str):
            continue
        try:
            fp = key_fingerprint(k["pem"])
        except (ValueError, TypeError) as e:
            problems.append(Problem(file, join(["keys", i, "pem"]), "key", f"not a PEM public key: {e}"))
            continue
        if k.get("fingerprint") != fp:
            problems.append(Problem(file, join(["keys", i, "fingerprint"]), "fingerprint",
                                    f"fingerprint {k.get('fingerprint')!r} does not match the key ({fp})"))
        keys.append(PublicKey(k["pem"], fp))
    if problems:
        return None, problems
    return Publisher(pid, doc["display_name"], doc["homepage"], doc["contact"], tuple(keys), file), []


def check_entry(path: str | Path, publishers: Mapping[str, Publisher | None] | None = None, memo=None
                ) -> tuple[EntrySource | None, list[Problem]]:
    """Load the community entry file at ``path`` (``.../entries/<publisher>/<name>.toml``):
    the entry (None when any problem) and every problem. ``publishers``: known publisher
    ids (None: not checked); ``memo``: see :func:`_checked_schema`."""
    path = Path(path)
    file = str(path)
    doc, problems, data = _read_checked(path, file, "entry", memo)
    if doc is None:
        return None, problems
    publisher = path.parent.name
    if publishers is not None and publisher not in publishers:
        problems.append(Problem(file, "", "unknown-publisher",
                                f"publisher {publisher!r} (the directory) has no catalogue/publishers/{publisher}.toml"))
    if isinstance(doc.get("name"), str) and doc["name"] != path.stem:
        problems.append(Problem(file, "name", "file-name", f"name {doc['name']!r} differs from the file name {path.stem!r}"))
    if problems:
        return None, problems
    return EntrySource(publisher=publisher, kind=doc["kind"], name=doc["name"], description=doc["description"],
                       source=dict(doc["source"]), file=file, described=described(doc), tags=tuple(doc.get("tags", ())),
                       signature=doc.get("signature"), published_digest=doc.get("published_digest"), raw=doc,
                       data=data), []


@dataclass
class Sources:
    """Everything under a ``catalogue/`` directory: valid publishers (id -> Publisher),
    valid entries, and per invalid file its problems (``rejected``: file -> problems)."""

    publishers: dict[str, Publisher]
    entries: list[EntrySource]
    rejected: dict[str, list[Problem]]


def load_sources(catalogue_dir: str | Path, memo=None) -> Sources:
    """Load ``catalogue_dir/publishers/*.toml`` and ``catalogue_dir/entries/*/*.toml`` (sorted
    by path). Invalid files land in ``rejected`` with every problem; nothing raises for
    bad content. ``memo``: files whose bytes passed the schema in an earlier build skip it."""
    root = Path(catalogue_dir)
    pubs: dict[str, Publisher] = {}
    rejected: dict[str, list[Problem]] = {}
    for p in sorted((root / "publishers").glob("*.toml")):
        pub, probs = check_publisher(p, memo)
        if pub is None:
            rejected[str(p)] = probs
        else:
            pubs[pub.id] = pub
    entries = []
    files = {p.stem: None for p in (root / "publishers").glob("*.toml")}
    for p in sorted((root / "entries").glob("*/*.toml")):
        ent, probs = check_entry(p, files, memo)  # an invalid publisher is its own problem
        if ent is None:
            rejected[str(p)] = probs
        else:
            entries.append(ent)
    return Sources(pubs, entries, rejected)


def lint_paths(paths: Sequence[str | Path]) -> list[Problem]:
    """Every problem of the given files or ``catalogue/`` directories (offline). A
    directory is linted as a catalogue (publishers, then entries, with the publisher
    check); a ``.toml`` file under a ``publishers`` directory as a publisher, any other as
    an entry (publisher existence checked when a sibling ``publishers/`` directory exists)."""
    problems: list[Problem] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            src = load_sources(p)
            for probs in src.rejected.values():
                problems += probs
        elif not p.exists():
            problems.append(Problem(str(p), "", "missing", "no such file or directory"))
        elif p.parent.name == "publishers":
            problems += check_publisher(p)[1]
        else:
            pub_dir = p.parent.parent.parent / "publishers"
            known = None
            if pub_dir.is_dir():
                known = {q.stem: None for q in pub_dir.glob("*.toml")}
            problems += check_entry(p, known)[1]
    return problems


def require_valid(problems: list[Problem]) -> None:
    """Raise :class:`ManifestError` carrying ``problems`` when there are any."""
    if problems:
        raise ManifestError(problems)


def main(argv: list[str] | None = None) -> int:
    """``python -m lemonpack.catalogue.sources KEY.pub...``: print each key's fingerprint
    (as ``lemonpack catalogue fingerprint`` does). Exit 1 when a file is not a PEM public key."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m lemonpack.catalogue.sources KEY.pub...", file=sys.stderr)
        return 2
    rc = 0
    for a in args:
        try:
            print(key_fingerprint(Path(a).read_bytes()))
        except (OSError, ValueError) as e:
            print(f"{a}: not a PEM public key: {e}", file=sys.stderr)
            rc = 1
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
