"""Model entries of the catalogue (issue 28 point 6): a ModelPack (or any format
:mod:`lemonpack.runtime.models.artifact` reads) artifact named by digest,
``source = {type = "oci", ref = "[oci://]HOST/REPO@sha256:..."}`` (a tag is refused by the entry
schema, as for OCI recipes).

The build fetches only the manifest and config (:func:`lemonpack.runtime.models.pull.inspect_model`)
and the main weight file's GGUF header (:func:`lemonpack.runtime.models.pull.fetch_gguf_header`, a
``Range`` read), into a model store inside the build's temporary directory (the user's store is
not touched), and records under ``model``:

- ``format`` (the artifact format), ``model_format`` (``gguf`` ...), ``size`` (bytes of all
  layers), ``main`` (the main weight file's name), ``files``;
- ``architecture``, ``parameters``, ``quantization``, ``context_length``: the GGUF header's
  (:func:`lemonpack.runtime.models.artifact.facts_from_gguf`), else the artifact config's;
- ``memory``: :func:`lemonpack.runtime.models.memory.estimate_model` of the header at
  ``ctx_size`` = the launch default (4096 tokens, ``runtime/launch/tokens.py``) or the model's
  context length when smaller: ``{"bytes", "weights", "kv", "ctx_size", "how"}``, no engine
  floor (the recipe is not chosen yet); a non-GGUF artifact: its size;
- ``recipes``: the ids of the recipe entries in the same index whose selector accepts the model
  (:func:`link_recipes`): seed 001's ``can_serve`` rule of
  :mod:`lemonpack.runtime.selection.selector` (``extensions["dev.lemonpack.serves"]`` glob
  patterns against the main file's name, :func:`~lemonpack.runtime.selection.selector.serves_match`);
  ``default_backend`` is the selector's fallback (``llamacpp``) for a GGUF model, else None.

Fit (:func:`model_fit`): the estimate against the host's memory budget
(:func:`lemonpack.runtime.serving.budget.default_budget`: ``MemAvailable`` minus the headroom,
what ``serve`` admits against), or a budget given (``--memory-budget``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from shlex import quote
from typing import Any

#: The selector's fallback for a GGUF model (:data:`lemonpack.runtime.selection.selector.BUILTIN_DEFAULT`).
DEFAULT_BACKEND = "llamacpp"


def pinned_ref(source: Mapping[str, Any]) -> str:
    """``HOST/REPO@sha256:...`` of a model entry's ``source`` (``oci://`` dropped)."""
    return str(source["ref"]).removeprefix("oci://")


def describe_model(ref: str, work: Path, *, insecure: bool = False, registry_config=None) -> dict[str, Any]:
    """The ``model`` object of an entry for the artifact ``ref`` (``HOST/REPO@sha256:...``; module
    docstring), fetching only its manifest, config and GGUF header into a store under ``work``.
    ``recipes`` is empty here (:func:`link_recipes` fills it). Raises what
    :func:`~lemonpack.runtime.models.pull.inspect_model` and
    :func:`~lemonpack.runtime.models.pull.fetch_gguf_header` raise (``LemonpackError``s)."""
    from lemonpack.runtime.launch.tokens import OPTION_DEFAULTS
    from lemonpack.runtime.models.artifact import facts_from_gguf
    from lemonpack.runtime.models.memory import estimate_model
    from lemonpack.runtime.models.pull import fetch_gguf_header, inspect_model
    from lemonpack.runtime.models.store import ModelStore

    store = ModelStore(work / "models")
    opts = dict(insecure=insecure, registry_config=registry_config)
    art = inspect_model(ref, store=store, **opts).artifact
    main = art.main
    facts: dict[str, Any] = {"architecture": art.architecture, "parameters": art.parameters,
                             "quantization": art.quantization, "context_length": art.context_length}
    ctx = int(OPTION_DEFAULTS["ctx_size"])
    if main is not None and main.is_gguf:
        header = fetch_gguf_header(ref, store=store, **opts)
        got = facts_from_gguf(header.identity)
        facts.update({k: v for k, v in (("architecture", got.architecture), ("parameters", got.parameters),
                                        ("quantization", got.quantization), ("context_length", got.context_length))
                      if v is not None})
        if facts["context_length"]:
            ctx = min(ctx, int(facts["context_length"]))
        est = estimate_model(str(header.path), ctx_size=ctx)
        memory = {"bytes": est.total, "weights": est.weights, "kv": est.kv, "ctx_size": ctx, "how": est.how}
    else:
        memory = {"bytes": art.size, "weights": art.size, "kv": 0, "ctx_size": None, "how": "size of the artifact"}
    gguf = main is not None and main.is_gguf
    return {"format": art.format, "model_format": art.model_format or ("gguf" if gguf else None),
            "size": art.size, "main": main.name if main else None, "files": [f.name for f in art.layers],
            **facts, "memory": memory, "recipes": [], "default_backend": DEFAULT_BACKEND if gguf else None}


def link_recipes(entries: Iterable[dict[str, Any]]) -> None:
    """Fill each model entry's ``model.recipes`` with the sorted ids of the recipe entries (of
    the same ``entries``) whose ``serves`` patterns accept its main file name (module docstring),
    and its commands with the first of them. Changes ``entries`` in place; raises nothing."""
    from lemonpack.runtime.selection.selector import serves_match

    entries = list(entries)
    recipes = [(e["id"], e.get("name"), e.get("serves") or []) for e in entries if e.get("kind") == "recipe"]
    names_of = {rid: name for rid, name, _ in recipes}
    for e in entries:
        m = e.get("model")
        if e.get("kind") != "model" or not isinstance(m, dict):
            continue
        names = [m["main"].rsplit("/", 1)[-1]] if m.get("main") else []
        m["recipes"] = sorted(rid for rid, _, pats in recipes if names and serves_match(pats, names))
        e["commands"] = model_commands(e["name"], e["source"], [str(names_of[r]) for r in m["recipes"]])


def model_commands(name: str, source: Mapping[str, Any], recipes: list[str] | None = None) -> dict[str, str]:
    """The commands shown for a model entry ``name`` (``recipes``: the ids of the recipes that
    serve it, best first): ``fetch`` = ``lemonpack models pull oci://REF`` (by
    digest: the pull checks every blob), ``install`` = ``lemonpack models add user.NAME --recipe
    RECIPE -c main=oci://REF`` (the first accepting recipe, else the selector's default), ``run``;
    every value shell-quoted."""
    ref = quote("oci://" + pinned_ref(source))
    recipe = quote((recipes or [DEFAULT_BACKEND])[0])
    user = quote(f"user.{name}")
    return {"fetch": f"lemonpack models pull {ref}",
            "install": f"lemonpack models add {user} --recipe {recipe} -c main={ref}",
            "run": f"lemonpack run {user}"}


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n} B"


def model_fit(entry: Mapping[str, Any], budget: int | None):
    """Whether the model ``entry`` fits the memory ``budget`` (bytes; None: unknown, as
    ``serve`` treats it: no limit) as a :class:`lemonpack.catalogue.fits.HostFit`: fits when its
    estimate (``model.memory.bytes``) is at most the budget. Raises nothing."""
    from lemonpack.catalogue.fits import HostFit

    need = ((entry.get("model") or {}).get("memory") or {}).get("bytes")
    if not isinstance(need, int):
        return HostFit(False, "no memory estimate recorded")
    if budget is None:
        return HostFit(True, f"needs {_size(need)}; this host's memory budget is unknown")
    if need <= budget:
        return HostFit(True, f"needs {_size(need)} of this host's {_size(budget)} memory budget")
    return HostFit(False, f"needs {_size(need)}, more than this host's {_size(budget)} memory budget")


def host_budget() -> int | None:
    """This host's memory budget in bytes (:func:`lemonpack.runtime.serving.budget.default_budget`)."""
    from lemonpack.runtime.serving.budget import default_budget

    return default_budget()


def model_lines(entry: Mapping[str, Any]) -> list[str]:
    """The lines ``catalogue show`` prints for a model entry's ``model`` object."""
    m = entry.get("model") or {}
    mem = m.get("memory") or {}
    return [f"model: {m.get('format') or '-'} ({m.get('model_format') or '-'}), {_size(m.get('size'))}, "
            f"main {m.get('main') or '-'}",
            f"  architecture {m.get('architecture') or '-'}   parameters {m.get('parameters') or '-'}   "
            f"quantization {m.get('quantization') or '-'}   context {m.get('context_length') or '-'}",
            f"  memory estimate {_size(mem.get('bytes'))}" + (f" at {mem['ctx_size']} tokens" if mem.get("ctx_size")
                                                              else "") + f" ({mem.get('how') or '-'})",
            f"  recipes: {', '.join(m.get('recipes') or []) or '-'}"
            + (f"   default backend: {m['default_backend']}" if m.get("default_backend") else "")]


#: What a derived tag must look like (the entry schema's ``tags`` item pattern).
_TAG = re.compile(r"[a-z0-9][a-z0-9+_.-]{0,39}")


def model_tags(tags: Iterable[str], model: Mapping[str, Any]) -> list[str]:
    """The entry's ``tags`` plus the model's architecture, quantization and model format,
    lower-cased (``llama``, ``q4_k_m``, ``gguf``) when they are tag-shaped: the words search and
    the page find a model by. In order, without repeats."""
    out = list(tags)
    for v in (model.get("architecture"), model.get("quantization"), model.get("model_format")):
        t = str(v).lower() if v else ""
        if _TAG.fullmatch(t) and t not in out:
            out.append(t)
    return out


def recipe_serves(recipe) -> list[str] | None:
    """A recipe's ``dev.lemonpack.serves`` patterns (:func:`~lemonpack.runtime.selection.selector.declared_serves`;
    None when absent or malformed): the ``serves`` field of its index entry."""
    from lemonpack.runtime.selection.selector import declared_serves

    patterns, _problem = declared_serves(recipe)
    return list(patterns) if patterns else None


def community_model(ctx, ent, work: Path, base_entry) -> dict[str, Any]:
    """The index entry of the community model entry ``ent`` (``ctx``: the build's context,
    ``base_entry``: the build's entry constructor). Raises
    :class:`lemonpack.catalogue.build.Rejected` when the artifact cannot be described (the
    reason: a digest mismatch, a fetch failure, an artifact lemonpack cannot read)."""
    from lemonpack.catalogue import signatures
    from lemonpack.catalogue.build import Rejected
    from lemonpack.digest import Digest
    from lemonpack.errors import IntegrityError, LemonpackError
    from lemonpack.runtime.models.pull import as_model_reference

    ref = pinned_ref(ent.source)
    try:
        digest = str(as_model_reference(ref).digest)  # the schema requires one: a tag is refused
        model = describe_model(ref, work, insecure=ctx.cfg.insecure_registry, registry_config=ctx.cfg.registry_config)
    except IntegrityError as e:
        raise Rejected(f"digest mismatch: expected {e.expected}, got {e.actual}") from None
    except LemonpackError as e:
        raise Rejected(f"model: {e}") from None
    keys = ctx.sources.publishers[ent.publisher].keys
    sig = signatures.oci_status(ref, keys, insecure=ctx.cfg.insecure_registry, registry_config=ctx.cfg.registry_config)
    source = {"type": "oci", "ref": ref}
    return dict(base_entry(
        id=ent.id, kind="model", name=ent.name, display_name=ent.name, official=False, publisher=ent.publisher,
        description=ent.description, described=ent.described, tags=model_tags(ent.tags, model), capabilities=[],
        version=Digest.parse(digest).hex[:12], platforms=[], source=source, digest=digest, signature=sig,
        pinning={"status": "all", "images": [], "artifacts": []},
        reproducible={"status": "not-checked", "published": None, "rebuilt": None},
        commands=model_commands(ent.name, source)), model=model)
