"""``lemonpack catalogue build``: sources in, a verified, signed, byte-reproducible index out.

Input: a source tree (the repository top: ``catalogue/publishers``, ``catalogue/entries``,
``catalogue/extensions`` + ``extensions.lock`` + ``api/``, ``catalogue/recipes``) and the
recipes shipped in ``lemonpack/examples``. Output (docs/catalogue.md): ``catalogue.json``
(canonical JSON, schema 1), ``entries/<kind>.<name>.json`` (each entry, canonical),
``catalogue.json.sig`` (with ``--key``: base64 ECDSA-P256/SHA-256 over the bytes of
``catalogue.json``, cosign ``sign-blob`` format; deterministic nonces (RFC 6979) so the
signature is reproducible too), ``feed.atom`` and the static site (:mod:`.site`).

Every community entry is fetched through the verified fetch path (cache, ``--mirror``) and
checked; one that fails is *rejected* and listed with its reasons in ``rejected``: a schema
error, a digest mismatch (or a fetch failure), a contract failure, an invalid signature, or a
claim on an official recipe id / extension name, key, option or provider id. Recorded, not
rejected: signature status, pinning status and reproducibility.

The output appears atomically: it is written into a temporary sibling directory and swapped
in with one rename (the previous output is kept until then). Dates come from ``epoch``
(the CLI: :func:`lemonpack.catalogue.dates.source_epoch`), file order is sorted, JSON
canonical: the same inputs give the same bytes. Focused parts live beside this module:
fetching and bounds (:mod:`.fetching`, :mod:`.bounded`), signature status
(:mod:`.signatures`, with the index key), an entry's platforms and pinning (:mod:`.facts`), the commands shown (:mod:`.commands`), the feed (:mod:`.feed`) and the
memo of a warm build (:mod:`.memo`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

from lemonpack.catalogue import bounded, signatures
from lemonpack.catalogue.commands import extension_commands, recipe_commands
from lemonpack.catalogue.facts import extension_platforms, pinning, recipe_platforms
from lemonpack.catalogue.fetching import bounded_fetch, fetch_source, tree_digest
from lemonpack.catalogue.memo import Memo, entry_key, entry_key_prefix, memoizable
from lemonpack.catalogue.models import community_model, link_recipes, recipe_serves
from lemonpack.catalogue.signatures import load_private_key
from lemonpack.catalogue.sources import EntrySource, Publisher, described, load_sources
from lemonpack.contract.loader import check_text
from lemonpack.files import os_error_reason, replace_directory
from lemonpack.digest import Digest
from lemonpack.errors import CatalogueError, IntegrityError, LemonpackError, StorageError, one_line
from lemonpack.fetch import ArtifactCache, Mirror
from lemonpack.canonical import canonical_json
from lemonpack.safetree import inside

from lemonpack.catalogue.names import INDEX_NAME, SCHEMA, SEARCH_NAME, SIG_NAME, entry_filename, verify_bytes  # noqa: F401
from lemonpack.catalogue.output import FEED_NAME, write_outputs  # noqa: F401  (the build's output files)
from lemonpack.catalogue.history import MAX_HISTORY, _previous_index, carry_history  # noqa: F401

OFFICIAL_PUBLISHER = "lemonpack"


@dataclass
class BuildConfig:
    """``out``: output directory; ``source``: the source tree (repository top); ``mirror``:
    mirror for https/http fetches; ``key``: cosign private key file signing the index,
    ``password``: its password (bytes); ``rebuild``: run the builder on recipes to check
    reproducibility; ``cache``: artifact cache (default: the XDG one); ``epoch``: dates."""

    out: Path
    source: Path
    mirror: Mirror | None = None
    key: Path | None = None
    password: bytes = b""
    rebuild: bool = False
    cache: ArtifactCache | None = None
    epoch: int = 0
    insecure_registry: bool = False
    registry_config: Path | None = None  # auth file read first for OCI sources (--registry-config)
    memo: Path | None = None  # what earlier builds verified (:mod:`.memo`); None: verify everything
    timings: dict[str, float] = field(default_factory=dict)
    client: Any = None  # one httpx.Client for every fetch of a build (connections reused)
    memo_state: Any = None  # the opened memo (:class:`.memo.Memo`), set by build_index


class Rejected(Exception):
    """An entry is rejected: ``reasons`` are listed in the index."""

    def __init__(self, *reasons: str):
        super().__init__("; ".join(reasons))
        self.reasons = bounded.reasons(list(reasons))


def rfc3339(epoch: int) -> str:
    """``epoch`` (seconds) as RFC 3339 UTC: ``1970-01-01T00:00:00Z``."""
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------- the build


class _Context:
    def __init__(self, cfg: BuildConfig):
        self.cfg = cfg
        self.source = cfg.source
        self.private = load_private_key(cfg.key, cfg.password) if cfg.key else None
        self.memo = Memo(cfg.memo)
        self.sources = load_sources(cfg.source / "catalogue", self.memo if cfg.memo else None)
        self.source_resolved = os.path.abspath(cfg.source)
        self.official_recipes: dict[str, Any] = {}
        self.official_exts: list = []
        self.tree_api = None

    def publisher_keys(self) -> dict[str, Publisher]:
        return self.sources.publishers


def _rel(ctx: _Context, path: str | Path) -> str:
    full = os.path.abspath(path)
    if not inside(full, ctx.source_resolved):
        return Path(path).name
    return Path(os.path.relpath(full, ctx.source_resolved)).as_posix()


def _official_recipe_files(source: Path) -> list[tuple[str, Path]]:
    """(path shown in the index, file) of every official recipe: the shipped examples, then
    ``catalogue/recipes/*.json``."""
    out = []
    examples = Path(str(resources.files("lemonpack.examples")))
    for p in sorted(examples.glob("*.json")):
        out.append((f"lemonpack/examples/{p.name}", p))
    for p in sorted((source / "catalogue" / "recipes").glob("*.json")):
        out.append((f"catalogue/recipes/{p.name}", p))
    return out


def _base_entry(**kw) -> dict:
    return {"id": kw["id"], "kind": kw["kind"], "name": kw["name"], "display_name": kw["display_name"],
            "official": kw["official"], "publisher": kw["publisher"], "description": kw["description"],
            **kw["described"], "tags": list(kw["tags"]),
            "capabilities": list(kw["capabilities"]), "version": kw["version"], "platforms": kw["platforms"],
            "source": kw["source"], "digest": kw["digest"], "signature": kw["signature"],
            "pinning": kw["pinning"], "reproducible": kw["reproducible"], "commands": kw["commands"],
            **({"serves": kw["serves"]} if kw.get("serves") else {})}  # a recipe's (catalogue/models.py)


def _not_checked(published: str | None = None, rebuilt: str | None = None) -> dict:
    return {"status": "not-checked", "published": published, "rebuilt": rebuilt}


def _reproduce(ctx: _Context, recipe, published: str | None, work: Path) -> dict:
    """Rebuild ``recipe`` with the builder (same epoch, mirror, cache; otherwise the defaults
    of ``lemonpack build``, :func:`lemonpack.builder.plan.plan_build`) and compare the image
    index digest with ``published``."""
    if not (ctx.cfg.rebuild or published):
        return _not_checked(published)
    from lemonpack.builder.plan import plan_build, write_build

    work.mkdir(parents=True, exist_ok=True)
    try:  # the plan `lemonpack build RECIPE.json` makes (same defaults: host cpu arch, gzip ...)
        plan = plan_build([recipe], out=work / "rebuild", mirror=ctx.cfg.mirror, cache=ctx.cfg.cache,
                          epoch=ctx.cfg.epoch)
        result = write_build(plan, progress=False)
    except LemonpackError as e:
        return {"status": "differs" if published else "not-checked", "published": published, "rebuilt": None,
                "error": one_line(str(e))}
    rebuilt = result.indexes.get(recipe.recipe)
    if not published:
        return _not_checked(None, rebuilt)
    return {"status": "reproduced" if rebuilt == published else "differs", "published": published, "rebuilt": rebuilt}


def official_entries(ctx: _Context, work: Path) -> tuple[list[dict], list[dict]]:
    """Entries for the repo's recipes and the extensions of ``extensions.lock``."""
    from lemonpack.contract import load_recipe

    entries, rejected = [], []
    sig = signatures.official_status(ctx.private, ctx.sources.publishers)
    for shown, path in _official_recipe_files(ctx.source):
        data = path.read_bytes()
        try:
            recipe = load_recipe(path)
        except LemonpackError as e:
            rejected.append({"id": f"recipe:{path.stem}", "publisher": OFFICIAL_PUBLISHER, "file": shown,
                             "reasons": [f"contract: {one_line(str(e))}"]})
            continue
        ctx.official_recipes[recipe.recipe] = recipe
        source = {"type": "repo", "path": shown}
        d = recipe.document
        entries.append(_base_entry(
            id=f"recipe:{recipe.recipe}", kind="recipe", name=recipe.recipe, display_name=recipe.display_name,
            official=True, publisher=OFFICIAL_PUBLISHER, description=str(d.get("description", recipe.display_name)),
            described=described(d), tags=["official"],
            capabilities=sorted(recipe.capabilities), version=str(d.get("version", "1")),
            platforms=recipe_platforms(recipe), source=source,
            digest=str(Digest.of_bytes(data)), signature=sig, pinning=pinning(recipe),
            reproducible=_reproduce(ctx, recipe, None, work / f"official-{recipe.recipe}"), serves=recipe_serves(recipe),
            commands=recipe_commands(recipe.recipe, recipe, source, True,
                                     shipped_example=shown.startswith("lemonpack/examples/"))))
    lock = ctx.source / "extensions.lock"
    if lock.exists():
        from lemonpack.extensions.pipeline import run_pipeline

        sel = run_pipeline(ctx.source, select="lock", features=frozenset({"linux"}), environ={})
        for ext in sel.extensions:
            if not ext.official:
                continue
            ctx.official_exts.append(ext)
            shown = f"catalogue/extensions/{ext.name}"
            digest, _ = tree_digest(ctx.source / shown)
            manifest = json.loads((ctx.source / shown / "extension.json").read_bytes())
            entries.append(_base_entry(
                id=f"extension:{ext.name}", kind="extension", name=ext.name, display_name=ext.name,
                official=True, publisher=OFFICIAL_PUBLISHER, description=str(manifest.get("description", "")),
                described=described(manifest),
                tags=["official"], capabilities=sorted({p.capability for p in ext.providers}),
                version=ext.version, platforms=extension_platforms(ext), source={"type": "repo", "path": shown},
                digest=digest, signature=sig, pinning={"status": "all", "images": [], "artifacts": []},
                reproducible=_not_checked(), commands=extension_commands(ext.name, True)))
    return entries, rejected


def _signature(ctx: _Context, ent: EntrySource, fetched) -> dict:
    """:mod:`.signatures`' status of ``ent``; raises :class:`Rejected` for an invalid signature."""
    keys = ctx.sources.publishers[ent.publisher].keys
    if fetched.oci_ref is not None and ent.signature is None:
        return signatures.oci_status(fetched.oci_ref, keys, insecure=ctx.cfg.insecure_registry,
                                     registry_config=ctx.cfg.registry_config)

    def read(url: str) -> bytes:
        got = bounded_fetch(url, None, bounded.MAX_SIGNATURE_BYTES, cache=ctx.cfg.cache or ArtifactCache(),
                            mirror=ctx.cfg.mirror, client=ctx.cfg.client)
        with open(got.path, "rb") as f:
            return f.read(4096)

    try:
        return signatures.file_status(ent.signature, fetched.subject, keys, read)
    except signatures.InvalidSignature as e:
        raise Rejected(f"{e} (publisher {ent.publisher!r})") from None


def community_entry(ctx: _Context, ent: EntrySource, work: Path) -> dict:
    """Fetch, check and describe one community entry; raises :class:`Rejected`."""
    if ent.publisher not in ctx.sources.publishers:
        raise Rejected(f"publisher {ent.publisher!r}: its publisher file is rejected")
    if ent.kind == "recipe" and ent.name in ctx.official_recipes:
        raise Rejected(f"claims the official recipe id {ent.name!r}")
    if ent.kind == "extension" and any(e.name == ent.name for e in ctx.official_exts):
        raise Rejected(f"claims the official extension name {ent.name!r}")
    if ent.kind == "model":  # manifest, config and GGUF header only (catalogue/models.py)
        return community_model(ctx, ent, work, _base_entry)
    try:
        fetched = fetch_source(ent.kind, ent.source, work, cache=ctx.cfg.cache, mirror=ctx.cfg.mirror,
                               client=ctx.cfg.client, insecure_registry=ctx.cfg.insecure_registry,
                               registry_config=ctx.cfg.registry_config)
    except IntegrityError as e:
        raise Rejected(f"digest mismatch: expected {e.expected}, got {e.actual}") from None
    except LemonpackError as e:
        raise Rejected(f"fetch failed: {e}") from None
    common = dict(official=False, publisher=ent.publisher, description=ent.description,
                  described=ent.described, tags=list(ent.tags), source=_shown_source(ent.source), digest=fetched.digest)
    if ent.kind == "recipe":
        from lemonpack.contract.loader import build_model

        label = f"{ent.id}"
        doc, problems = check_text(fetched.recipe_text or "", label)
        if doc is not None:  # lint's build policy too; unpinned images are recorded, not rejected
            from lemonpack.oci.policy import document_policy_problems

            problems = list(problems) + [p for p in document_policy_problems(label, doc) if p.rule != "digest-pinning"]
        if problems:
            raise Rejected(*[f"contract: {p.path or '(root)'}: {p.message} [{p.rule}]" for p in problems])
        recipe = build_model(doc, label)  # checked above: lint's rules, once
        if recipe.recipe in ctx.official_recipes:
            raise Rejected(f"claims the official recipe id {recipe.recipe!r}")
        if recipe.recipe != ent.name:
            raise Rejected(f"the recipe's id {recipe.recipe!r} differs from the entry name {ent.name!r}")
        sig = _signature(ctx, ent, fetched)
        published = ent.published_digest or (fetched.digest if fetched.oci_ref else None)
        d = recipe.document
        return _base_entry(id=ent.id, kind="recipe", name=ent.name, display_name=recipe.display_name,
                           capabilities=sorted(recipe.capabilities), version=str(d.get("version", "")),
                           platforms=recipe_platforms(recipe), signature=sig, pinning=pinning(recipe),
                           reproducible=_reproduce(ctx, recipe, published, work), serves=recipe_serves(recipe),
                           commands=recipe_commands(ent.name, recipe, ent.source, False, fetched.digest), **common)
    from lemonpack.extensions.manifest import load_manifest
    from lemonpack.extensions.includes import IncludeCheck, entry_problems, tree_problems
    from lemonpack.extensions.collisions import collision_problems
    from lemonpack.extensions.pipeline import api_problem, host_api

    try:
        ext = load_manifest(fetched.path)
    except LemonpackError as e:
        raise Rejected(f"extension manifest: {e}") from None
    # the pipeline's rules for a community extension: the walk, the entry symbols and the
    # compiler's include allowlist (lemonpack.extensions.includes)
    unsafe = tree_problems(fetched.path)
    reasons = [f"extension: {r}" for r in unsafe]
    if not unsafe:
        with IncludeCheck() as check:
            reasons += [f"extension: {r}" for r in entry_problems(ext, check) + check.include_problems(ext)]
    reasons += [f"claims an official extension's {r}" if "official" not in r else r
                for r in collision_problems(ext, ctx.official_exts)]
    minor, revision = host_api(ctx.source)
    api = api_problem(ext, minor, revision)
    if api:
        reasons.append(f"extension: {api}")
    if ext.name != ent.name:
        reasons.append(f"the extension's name {ext.name!r} differs from the entry name {ent.name!r}")
    if reasons:
        raise Rejected(*reasons)
    sig = _signature(ctx, ent, fetched)
    return _base_entry(id=ent.id, kind="extension", name=ent.name, display_name=ext.name,
                       capabilities=sorted({p.capability for p in ext.providers}), version=ext.version,
                       platforms=extension_platforms(ext), signature=sig,
                       pinning={"status": "all", "images": [], "artifacts": []}, reproducible=_not_checked(),
                       commands=extension_commands(ent.name, False, ent.source, fetched.digest), **common)


def _unpath(ctx: _Context, wdir: Path, text: str) -> str:
    """``text`` without the build's temporary directory or the source tree's absolute path
    (reasons must be the same bytes in every build)."""
    for p in (str(wdir.resolve()), str(wdir)):
        text = text.replace(p + "/", "").replace(p, ".")
    for p in (str(ctx.source.resolve()), str(ctx.source.absolute())):
        text = text.replace(p + "/", "")
    return text


def _shown_source(src: dict) -> dict:
    return {k: src[k] for k in sorted(src)}


def _plain(entry: dict) -> dict:
    """``entry`` as a reader of its JSON sees it (lists, string keys): what the index, the
    memo and the site are made of, so an entry from the memo and one described now are the
    same objects. Floats pass (refused when the whole index is encoded)."""
    return json.loads(canonical_json(entry, floats="shortest"))


def build_index(cfg: BuildConfig) -> tuple[dict, Any]:
    """The catalogue index (``catalogue.json`` as a dict) of ``cfg.source`` and the opened
    signing key (None without ``cfg.key``); raises
    LemonpackError only for what stops the whole build (an unreadable key, a bad lock)."""
    import time

    from lemonpack.fetch.download import download_client

    ctx = _Context(cfg)
    rejected: list[dict] = []
    own_client = cfg.client is None  # then made on the first fetch (a warm build may make none)
    with tempfile.TemporaryDirectory(prefix="lemonpack-catalogue-") as tmp, contextlib.ExitStack() as clients:
        work = Path(tmp)
        t0 = time.perf_counter()
        entries, rej = official_entries(ctx, work)
        rejected += rej
        for file, problems in sorted(ctx.sources.rejected.items()):
            p = Path(file)
            is_pub = p.parent.name == "publishers"
            rejected.append({"id": f"publisher:{p.stem}" if is_pub else f"entry:{p.parent.name}/{p.stem}",
                             "publisher": p.stem if is_pub else p.parent.name, "file": _rel(ctx, p),
                             "reasons": [one_line(f"schema: {q.path or '(root)'}: {q.message} [{q.rule}]")
                                         for q in problems]})
        entries = [_plain(e) for e in entries]
        seen: dict[str, str] = {}
        pub_parts: dict[str, bytes] = {}
        official_ids = sorted(ctx.official_recipes)
        for i, ent in enumerate(ctx.sources.entries):
            wdir = work / f"e{i}"  # created by the fetchers that need room (git, archives, OCI)
            fetched = False
            try:
                if ent.id in seen:
                    raise Rejected(f"duplicate id {ent.id!r} (also {_rel(ctx, seen[ent.id])})")
                key = None
                if cfg.memo is not None and memoizable(ent, cfg.rebuild) and ent.publisher in ctx.sources.publishers:
                    if ent.publisher not in pub_parts:
                        pub = ctx.sources.publishers[ent.publisher]
                        pub_parts[ent.publisher] = entry_key_prefix(pub.to_json(), [k.pem for k in pub.keys],
                                                                    official_ids)
                    key = entry_key(ent.data, prefix=pub_parts[ent.publisher])
                hit = ctx.memo.entry(key) if key else None
                if hit is None:
                    fetched = True
                    if own_client and cfg.client is None:
                        cfg.client = clients.enter_context(download_client())
                    entry = _plain(community_entry(ctx, ent, wdir))
                    if key:
                        ctx.memo.remember(key, entry)
                    entry = dict(entry)
                else:
                    entry = dict(hit)  # the memo's own object stays as remembered (history is added below)
                entries.append(entry)
                seen[ent.id] = ent.file  # shown relative only when a duplicate names it
            except Rejected as r:
                rejected.append({"id": ent.id, "publisher": ent.publisher, "file": _rel(ctx, ent.file),
                                 "reasons": [_unpath(ctx, wdir, x) for x in r.reasons]})
            if fetched and wdir.exists():
                shutil.rmtree(wdir, ignore_errors=True)
        cfg.timings["entries"] = time.perf_counter() - t0
    cfg.memo_state = ctx.memo
    if own_client:
        cfg.client = None
    entries.sort(key=lambda e: (not e["official"], e["id"]))
    link_recipes(entries)  # the recipes whose selector accepts each model entry
    rejected.sort(key=lambda r: (r["file"], r["id"]))
    pubs = dict(ctx.sources.publishers)
    return {"schema": SCHEMA, "generated": rfc3339(cfg.epoch),
            "publishers": [pubs[k].to_json() for k in sorted(pubs)], "entries": entries,
            "rejected": rejected}, ctx.private


def replace_dir(tmp: Path, out: Path) -> None:
    """Put the directory ``tmp`` at ``out`` in one step (:func:`lemonpack.files.replace_directory`).
    Raises StorageError."""
    try:
        replace_directory(tmp, out)
    except OSError as e:
        raise StorageError(f"cannot write {out}: {e.strerror or e}") from None


def build(cfg: BuildConfig) -> dict:
    """Build the catalogue into ``cfg.out`` (see the module docstring); returns the index.
    Bad entries never fail the build (they are listed); raises LemonpackError for a bad
    key or source tree, StorageError when the disk refuses; ``cfg.out`` unchanged then."""
    import time

    if not (cfg.source / "catalogue").is_dir():
        raise CatalogueError(f"{cfg.source} has no catalogue/ directory (use --source REPO_TOP)")
    index, private = build_index(cfg)
    out = Path(cfg.out).absolute()
    carry_history(index, _previous_index(out / INDEX_NAME, cfg.memo_state if cfg.memo is not None else None))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot build into {cfg.out}: {os_error_reason(exc, cfg.out)}") from None
    t0 = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        from lemonpack.catalogue.memo import Previous

        memo = cfg.memo_state if cfg.memo is not None else None
        write_outputs(index, tmp, private, memo.page_cache() if memo is not None else None,
                      Previous(out if memo is not None else None, cfg.epoch), cfg.epoch, memo)
        os.chmod(tmp, 0o755)
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if cfg.memo_state is not None:
        cfg.memo_state.save()
    cfg.timings["write"] = time.perf_counter() - t0
    return index
