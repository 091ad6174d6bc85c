"""What a build used, as signed attestations: ``lemonpack build --attest`` / ``publish --attest``.

From the build plan (:func:`lemonpack.builder.plan.plan_build`: the recipes, the narrowing,
the base, the epoch) and what :func:`~lemonpack.builder.plan.write_build` wrote (the targets'
manifest digests, each artifact's URL and verified sha256, and the base's digest that each
image manifest records in ``org.opencontainers.image.base.digest``), nothing resolved a second
time, two in-toto statements per recipe (in-toto/attestation ``spec/v1/statement.md``), both
about the same subjects: the recipe's image index (named by its tag ``<recipe>``) and every
target's manifest (``<recipe>.<target>``), by sha256:

- **SLSA provenance v1** (``https://slsa.dev/provenance/v1``; the fields of in-toto/attestation
  ``protos/in_toto_attestation/predicates/provenance/v1/provenance.proto``):
  ``buildDefinition.buildType`` :data:`BUILD_TYPE`; ``externalParameters``: ``recipe`` (its
  file name, the sha256 of its canonical JSON, the blob every image carries, and its media
  type) and the narrowing the user chose (``os``, ``accelerator``, ``arch`` when given;
  ``cpuArch``, ``compression``; ``base`` for a registry base; ``sourceUrl``/``revision``
  when given); ``internalParameters.sourceDateEpoch``; ``resolvedDependencies``: every
  artifact (URL and sha256, named by its target), each base manifest (sha256, and its
  reference for a registry base), each pinned container image of a recipe target, each
  ``extends`` base recipe a recipe target carries (its blob's sha256), and lemonpack itself
  (``pkg:pypi/lemonpack@VERSION``); ``runDetails.builder.id`` :data:`BUILDER_ID` with ``version.lemonpack``; ``metadata.startedOn``/``finishedOn`` the
  build's ``SOURCE_DATE_EPOCH`` (the time every file and config of the build carries).
- **SPDX 2.3** (``https://spdx.dev/Document``, in-toto/attestation ``spec/predicates/spdx2.md``;
  SPDX 2.3 JSON): one package per image (the index and each target, checksum the manifest's
  sha256, purl ``pkg:oci``), per engine artifact (download location the URL, checksum its
  sha256), per base manifest and per pinned container image (checksum its sha256), the
  recipe and each ``extends`` base recipe (checksum its sha256); the document DESCRIBES the
  index, which CONTAINS its targets, which CONTAIN their artifact, the recipe and its
  ``extends`` bases and are DESCENDANT_OF their base (DEPENDS_ON a container image a recipe
  target runs). ``documentNamespace`` is derived from the index
  digest, ``created`` is the epoch.

Each statement is canonical JSON (:mod:`lemonpack.canonical`) and signed into a DSSE envelope
with RFC 6979 nonces (:mod:`lemonpack.signing.dsse`), so the same build and key give the same
bytes. Subject names are the layout's tags (not the registry repository cosign would write),
so the envelopes ``build --attest`` writes beside the images in the layout and those
``publish --attest`` pushes are the same bytes. Storage is :mod:`lemonpack.signing.attestations`
(cosign's ``sha256-<hex>.att``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from cryptography.hazmat.primitives.asymmetric import ec

from lemonpack import __version__
from lemonpack.builder.pipeline import ANNOTATION_PREFIX, BuildResult, TargetResult
from lemonpack.builder.plan import BuildPlan
from lemonpack.canonical import canonical_json
from lemonpack.contract.model import Recipe
from lemonpack.digest import Digest
from lemonpack.errors import Interrupted, UsageError
from lemonpack.oci.base import ANNOTATION_BASE_DIGEST, ANNOTATION_BASE_NAME
from lemonpack.oci.layout import rfc3339
from lemonpack.oci.layout_reader import read_json_blob, read_layout
from lemonpack.oci.mediatypes import MEDIA_TYPE_LEMONPACK_RECIPE
from lemonpack.oci.reference import parse_reference
from lemonpack.registry import RegistryClient
from lemonpack.signing.attestations import (PREDICATE_SLSA_PROVENANCE_V1, PREDICATE_SPDX, STATEMENT_TYPE, Attestation,
                                            attach_attestations, sign_statement, write_layout_attestations)

#: ``runDetails.builder.id``: lemonpack's own build, on the machine that ran it.
BUILDER_ID = "https://lemonpack.dev/builder/v1"
#: ``buildDefinition.buildType``: a recipe built into an OCI layout (this module's doc is its definition).
BUILD_TYPE = "https://lemonpack.dev/build/recipe/v1"
SPDX_NAMESPACE = "https://lemonpack.dev/spdx"
#: The layer annotation naming an ``extends`` base recipe in a recipe target's manifest (``builder.pipeline``).
EXTENDS_BASE = ANNOTATION_PREFIX + "extends-base"


@dataclass(frozen=True)
class _Base:
    digest: str
    name: str | None


@dataclass(frozen=True)
class RecipeAttestations:
    """The attestations of one recipe's build: ``recipe`` id, ``subjects`` (tag -> digest),
    the ``provenance`` and ``sbom`` statements (canonical JSON bytes)."""

    recipe: str
    subjects: dict[str, str]
    provenance: bytes
    sbom: bytes

    def signed(self, private: ec.EllipticCurvePrivateKey) -> list[Attestation]:
        """Both statements in DSSE envelopes signed by ``private`` (provenance first)."""
        return [sign_statement(private, self.provenance, PREDICATE_SLSA_PROVENANCE_V1),
                sign_statement(private, self.sbom, PREDICATE_SPDX)]


def _hex(digest: str) -> str:
    return Digest.parse(digest).hex


def _built(layout: Path, targets: Sequence[TargetResult]) -> tuple[dict[str, _Base], dict[str, list[tuple[str, str]]]]:
    """What the built manifests record, per tag: the base of an image built on one
    (``org.opencontainers.image.base.*``), and the ``extends`` chain a recipe target carries as
    layers (``dev.lemonpack.extends-base``: ``[(recipe id, blob digest)]``, nearest first)."""
    tags = read_layout(layout)
    bases, chains = {}, {}
    for t in targets:
        if t.tag not in tags:
            continue
        manifest = read_json_blob(layout, tags[t.tag], f"{layout}:{t.tag}")
        ann = manifest.get("annotations") or {}
        if t.kind == "image" and isinstance(ann.get(ANNOTATION_BASE_DIGEST), str):
            bases[t.tag] = _Base(ann[ANNOTATION_BASE_DIGEST], ann.get(ANNOTATION_BASE_NAME))
        chain = [(layer["annotations"][EXTENDS_BASE], layer["digest"]) for layer in manifest.get("layers", [])
                 if isinstance(layer, dict) and isinstance((layer.get("annotations") or {}).get(EXTENDS_BASE), str)]
        if chain:
            chains[t.tag] = chain
    return bases, chains


def _image_name(ref: str) -> tuple[str, str]:
    """A pinned container image reference -> (name without tag or digest, its digest)."""
    r = parse_reference(ref)
    assert r.digest is not None, "recipe images are pinned by the build"
    return r.name, r.digest


def _external(plan: BuildPlan, recipe: Recipe, recipe_digest: str) -> dict[str, Any]:
    out: dict[str, Any] = {"recipe": {"name": f"{recipe.recipe}.json", "digest": {"sha256": _hex(recipe_digest)},
                                      "mediaType": MEDIA_TYPE_LEMONPACK_RECIPE},
                           "cpuArch": plan.cpu_arch, "compression": plan.compression}
    for key, value in (("os", plan.os), ("accelerator", plan.accelerator), ("arch", plan.arch),
                       ("sourceUrl", plan.source_url), ("revision", plan.revision)):
        if value is not None:
            out[key] = value
    if plan.base is not None and not plan.base.startswith("oci:"):  # a local layout's path would tie bytes to a directory
        out["base"] = plan.base
    return out


def _dependencies(targets: Sequence[TargetResult], bases: dict[str, _Base],
                  chains: dict[str, list[tuple[str, str]]]) -> list[dict[str, Any]]:
    deps: list[dict[str, Any]] = []
    seen: set[str] = set()

    def add(dep: dict[str, Any]) -> None:
        key = canonical_json(dep).decode()
        if key not in seen:
            seen.add(key)
            deps.append(dep)
    for t in targets:
        if t.source and t.sha256:
            add({"name": t.tag, "uri": t.source, "digest": {"sha256": t.sha256}})
    for b in sorted(set(bases.values()), key=lambda b: b.digest):
        dep: dict[str, Any] = {"name": b.name or "base", "digest": {"sha256": _hex(b.digest)}}
        if b.name:
            dep["uri"] = f"oci://{b.name}"
        add(dep)
    for t in targets:
        for image in t.images:
            name, digest = _image_name(image)
            add({"name": name, "uri": f"oci://{name}@{digest}", "digest": {"sha256": _hex(digest)}})
        for rid, digest in chains.get(t.tag, ()):
            add({"name": f"{rid}.json", "digest": {"sha256": _hex(digest)}, "mediaType": MEDIA_TYPE_LEMONPACK_RECIPE})
    add({"name": "lemonpack", "uri": f"pkg:pypi/lemonpack@{__version__}"})
    return deps


def _statement(subjects: dict[str, str], predicate_type: str, predicate: dict[str, Any]) -> bytes:
    return canonical_json({"_type": STATEMENT_TYPE, "predicateType": predicate_type, "predicate": predicate,
                           "subject": [{"name": name, "digest": {"sha256": _hex(d)}}
                                       for name, d in sorted(subjects.items())]})


def _purl(name: str, digest: str) -> str:
    """The package URL of an OCI image (purl-spec's ``oci`` type): ``pkg:oci/NAME@DIGEST``, the
    last path component of the reference ``name`` (tag and digest dropped), ``repository_url``
    for a name with a registry or a path."""
    try:
        ref = parse_reference(name)
        repo, last = ref.name, ref.path.rsplit("/", 1)[-1]
    except ValueError:  # a layout tag that is no reference (uppercase ...): the name as it is
        repo, last = name, name.lower()
    out = f"pkg:oci/{quote(last, safe='')}@{quote(digest, safe='')}"
    return out + (f"?repository_url={quote(repo, safe='/:')}" if "/" in repo else "")


def _package(spdx_id: str, name: str, sha256_hex: str, purpose: str, *, download: str = "NOASSERTION",
             purl: str | None = None) -> dict[str, Any]:
    pkg: dict[str, Any] = {"SPDXID": spdx_id, "name": name, "downloadLocation": download, "filesAnalyzed": False,
                           "checksums": [{"algorithm": "SHA256", "checksumValue": sha256_hex}],
                           "licenseConcluded": "NOASSERTION", "licenseDeclared": "NOASSERTION",
                           "copyrightText": "NOASSERTION", "primaryPackagePurpose": purpose}
    if purl:
        pkg["externalRefs"] = [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                                "referenceLocator": purl}]
    return pkg


def _spdx(plan: BuildPlan, recipe: Recipe, recipe_digest: str, index: str, targets: Sequence[TargetResult],
          bases: dict[str, _Base], chains: dict[str, list[tuple[str, str]]]) -> dict[str, Any]:
    packages = [_package("SPDXRef-Image", recipe.recipe, _hex(index), "CONTAINER", purl=_purl(recipe.recipe, index)),
                _package("SPDXRef-Recipe", f"{recipe.recipe}.json", _hex(recipe_digest), "SOURCE")]
    rels = [("SPDXRef-DOCUMENT", "DESCRIBES", "SPDXRef-Image")]
    ids: dict[str, str] = {}

    def once(key: str, make) -> str:
        if key not in ids:
            ids[key] = f"SPDXRef-Package-{len(ids) + 1}"
            packages.append(make(ids[key]))
        return ids[key]
    for i, t in enumerate(targets, 1):
        tid = f"SPDXRef-Target-{i}"
        packages.append(_package(tid, t.tag, _hex(t.digest), "CONTAINER", purl=_purl(t.tag, t.digest)))
        rels += [("SPDXRef-Image", "CONTAINS", tid), (tid, "CONTAINS", "SPDXRef-Recipe")]
        if t.source and t.sha256:
            src, sha = t.source, t.sha256
            aid = once(f"artifact {src} {sha}", lambda sid: _package(
                sid, Path(urlsplit(src).path).name or src, sha, "APPLICATION", download=src))
            rels.append((tid, "CONTAINS", aid))
        base = bases.get(t.tag)
        if base is not None:
            bid = once(f"base {base.digest}", lambda sid: _package(
                sid, base.name or "base", _hex(base.digest), "CONTAINER",
                purl=_purl(base.name or "base", base.digest)))
            rels.append((tid, "DESCENDANT_OF", bid))
        for image in t.images:
            name, digest = _image_name(image)
            iid = once(f"image {name}@{digest}", lambda sid: _package(
                sid, name, _hex(digest), "CONTAINER", purl=_purl(name, digest)))
            rels.append((tid, "DEPENDS_ON", iid))
        for rid, digest in chains.get(t.tag, ()):
            rid_pkg = once(f"recipe {rid} {digest}", lambda sid: _package(sid, f"{rid}.json", _hex(digest), "SOURCE"))
            rels.append((tid, "CONTAINS", rid_pkg))
    return {"spdxVersion": "SPDX-2.3", "dataLicense": "CC0-1.0", "SPDXID": "SPDXRef-DOCUMENT",
            "name": f"{recipe.recipe} (lemonpack build)",
            "documentNamespace": f"{SPDX_NAMESPACE}/{quote(recipe.recipe, safe='')}/sha256-{_hex(index)}",
            "creationInfo": {"created": rfc3339(plan.epoch), "creators": [f"Tool: lemonpack-{__version__}"]},
            "packages": packages,
            "relationships": [{"spdxElementId": a, "relationshipType": r, "relatedSpdxElement": b} for a, r, b in rels]}


def statements(plan: BuildPlan, result: BuildResult) -> list[RecipeAttestations]:
    """The provenance and SBOM statements of each recipe of ``plan`` as ``result`` built it
    (module doc), in the plan's order. Reads the built manifests in ``result.out`` (for
    their base); raises what :func:`lemonpack.oci.layout_reader.read_json_blob` raises."""
    layout = Path(result.out)
    out = []
    for recipe in plan.recipes:
        targets = [t for t in result.targets if t.recipe == recipe.recipe]
        index = result.indexes[recipe.recipe]
        recipe_digest = str(Digest.of_bytes(recipe.canonical))
        bases, chains = _built(layout, targets)
        subjects = {recipe.recipe: index, **{t.tag: t.digest for t in targets}}
        started = rfc3339(plan.epoch)
        provenance = {
            "buildDefinition": {"buildType": BUILD_TYPE, "externalParameters": _external(plan, recipe, recipe_digest),
                                "internalParameters": {"sourceDateEpoch": plan.epoch},
                                "resolvedDependencies": _dependencies(targets, bases, chains)},
            "runDetails": {"builder": {"id": BUILDER_ID, "version": {"lemonpack": __version__}},
                           "metadata": {"startedOn": started, "finishedOn": started}}}
        out.append(RecipeAttestations(
            recipe.recipe, subjects, _statement(subjects, PREDICATE_SLSA_PROVENANCE_V1, provenance),
            _statement(subjects, PREDICATE_SPDX, _spdx(plan, recipe, recipe_digest, index, targets, bases, chains))))
    return out


def _summary(att: RecipeAttestations) -> dict[str, Any]:
    return {"recipe": att.recipe, "subjects": dict(sorted(att.subjects.items())),
            "predicate_types": [PREDICATE_SLSA_PROVENANCE_V1, PREDICATE_SPDX]}


def attest_build(plan: BuildPlan, result: BuildResult, private: ec.EllipticCurvePrivateKey) -> list[dict[str, Any]]:
    """``build --attest``: sign each recipe's statements and write them beside its images in
    the layout ``result.out`` (each subject's ``sha256-<hex>.att`` tag,
    :func:`lemonpack.signing.attestations.write_layout_attestations`). Returns per recipe
    ``{"recipe", "subjects", "predicate_types", "tags"}`` (tags: ``.att`` tag -> manifest digest)."""
    done = []
    for att in statements(plan, result):
        signed = att.signed(private)
        tags = write_layout_attestations(result.out, {d: signed for d in set(att.subjects.values())})
        done.append({**_summary(att), "tags": tags})
    return done


def check_publish_attest(plan: BuildPlan | None, source: str) -> BuildPlan:
    """The plan ``publish --attest`` attests; raises :class:`UsageError` (exit 2) when SOURCE
    was a layout (no plan says what went into it: build it with ``build --attest`` and
    publish its ``.att`` tags, or publish the RECIPE.json)."""
    if plan is None:
        raise UsageError(f"--attest needs a RECIPE.json to build ({source} is a layout, and only the build "
                         "knows what went into it): lemonpack build --attest KEY, then publish the layout "
                         "with --to HOST/REPO (its sha256-<hex>.att tags go too)", param="--attest")
    return plan


def attest_published(plan: BuildPlan, result: BuildResult, private: ec.EllipticCurvePrivateKey,
                     client: RegistryClient, repository: str) -> list[dict[str, Any]]:
    """``publish --attest``: sign each recipe's statements and push them under every
    subject's ``.att`` tag in ``repository`` (:func:`lemonpack.signing.attestations.attach_attestations`,
    after the images were pushed). Returns per recipe ``{"recipe", "subjects",
    "predicate_types", "attached": [...]}``. Ctrl-C part way raises
    :class:`~lemonpack.errors.Interrupted` saying how many were attested (attaching again
    adds only what is missing)."""
    done = []
    for att in statements(plan, result):
        signed = att.signed(private)
        attached: list[dict[str, Any]] = []
        digests = sorted(set(att.subjects.values()))
        for d in digests:
            try:
                attached.append(attach_attestations(client, repository, d, signed))
            except KeyboardInterrupt:
                raise Interrupted(f"publish to {client.host}/{repository}: every tag was pushed; interrupted while "
                                  f"attaching attestations to {d} ({len(attached)} of {len(digests)} attested; "
                                  "publish --attest again to finish)") from None
        done.append({**_summary(att), "attached": attached})
    return done


__all__ = ["BUILDER_ID", "BUILD_TYPE", "RecipeAttestations", "attest_build", "attest_published",
           "check_publish_attest", "statements"]
