"""Picking the provider for a model file (seed 002 section 4).

The core reads the artifact identity of a model file without loading weights: for a GGUF,
``general.architecture``, the other metadata key/values, and the tensor names and shapes.
It hands that identity to the probe of every registered provider of the capability asked
for, in the registry's fixed order (docs/extension-json.md, "Official and community; collisions"); each
probe answers yes or no from metadata alone, and the first yes wins. No yes at all is an
error: "No text provider found for model architecture '<arch>'".

The identity comes from :func:`lemonpack.gguf_header.read_identity` (the one GGUF reader).
Two functions here:

- :func:`evaluate` runs one declarative probe (docs/extension-json.md, "A probe") against an
  identity and says why, one human sentence per condition.
- :func:`decide` / :func:`pick_provider` ask the probes in order.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lemonpack.errors import LemonpackError, one_line
from lemonpack.gguf_header import ModelIdentity, TensorInfo

#: Capability -> the word the no-provider message uses ("No text provider found ...").
CAPABILITY_WORDS = {
    "text_generation": "text",
    "embeddings": "embeddings",
    "speech_recognition": "speech recognition",
    "speech_synthesis": "speech synthesis",
    "image_generation": "image",
    "video_generation": "video",
    "decisions": "decision",
}


class NoProviderError(LemonpackError):
    """No available provider of the capability said yes (seed 002 section 4: "No text
    provider found for model architecture"). ``decision`` is the full :class:`Decision`."""

    kind = "no-provider"

    def __init__(self, decision: "Decision"):
        self.decision = decision
        super().__init__(decision.message)

    def to_json(self) -> dict[str, Any]:
        """The base shape plus ``decision`` (:meth:`Decision.to_json`)."""
        return {"error": self.kind, "message": str(self), "decision": self.decision.to_json()}


# --- one probe ------------------------------------------------------------------------------------

def _show(v: Any) -> str:
    """A value as a reason prints it: strings quoted, booleans as JSON (true/false)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return repr(v)
    return str(v)


def _shape(shape: Sequence[Any]) -> str:
    return "[" + ", ".join("null" if d is None else str(d) for d in shape) + "]"


def _same(expected: Any, actual: Any) -> bool:
    """Exact equality of a probe's value with a file's: a boolean matches only a boolean,
    an integer only an integer (never a float or a boolean), a string only a string."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(expected, bool) and isinstance(actual, bool) and expected == actual
    if isinstance(expected, int):
        return isinstance(actual, int) and expected == actual
    if isinstance(expected, str):
        return isinstance(actual, str) and expected == actual
    return False


@functools.lru_cache(maxsize=1024)
def _matcher(pattern: str):
    """A predicate on tensor names: an fnmatch glob (``*``, ``?``, ``[...]``) or exact."""
    if any(c in pattern for c in "*?["):
        return re.compile(fnmatch.translate(pattern)).match
    return pattern.__eq__


def _as_mapping(probe: Any) -> Mapping[str, Any] | None:
    """A probe as a mapping: a dict as the manifest has it, or an object with ``to_json()``
    or dataclass fields (whatever ext-core's manifest model holds)."""
    if probe is None or isinstance(probe, Mapping):
        return probe
    if hasattr(probe, "to_json"):
        return probe.to_json()
    import dataclasses
    if dataclasses.is_dataclass(probe) and not isinstance(probe, type):
        return dataclasses.asdict(probe)
    raise TypeError(f"a probe must be a mapping, not {type(probe).__name__}")


def evaluate(probe: Any, identity: ModelIdentity) -> tuple[bool, list[str]]:
    """Run one declarative probe (docs/extension-json.md, "A probe") against ``identity``.

    ``probe`` is the manifest's mapping ``{"format": "gguf", "architecture": [...],
    "metadata": {key: str | int | bool}, "tensors": [{"name", "present", "shape",
    "types"}]}``; ``types`` lists the GGML type names (``Q4_K``) every matching tensor must
    have, so an official probe can say no to a quantized variant it cannot run.
    The architecture decides first: when it is not one of the probe's, that is the one
    reason given. Otherwise every other condition is checked (not only up to the first
    failure) and gives one reason,
    e.g. ``general.architecture is 'llama', not one of ['qwen4exp']`` or ``tensor
    blk.*.ffn_gate_exps.weight shape [2048, 768, 64] matches (48 tensors)``. Returns
    ``(yes, reasons)``: yes when every condition holds. A missing probe (None) says no.
    Raises nothing for any identity.
    """
    p = _as_mapping(probe)
    if p is None:
        return False, ["declares no declarative probe (its probe is code in the extension, which lemonpack "
                       "does not run)"]
    reasons: list[str] = []
    ok = True
    fmt = p.get("format", "gguf")
    if fmt != identity.format:
        return False, [f"probe format {_show(fmt)} does not read a {identity.format} file"]
    archs = list(p.get("architecture") or [])
    shown = "[" + ", ".join(_show(a) for a in archs) + "]"
    if identity.architecture is None:
        raw = identity.metadata.get("general.architecture")
        ok = False
        reasons.append("general.architecture is missing, not one of " + shown if raw is None else
                       f"general.architecture is {_show(raw)} "
                       f"({identity.metadata_types.get('general.architecture', '?')}), not a string")
    elif identity.architecture in archs:
        reasons.append(f"general.architecture is {_show(identity.architecture)}, one of {shown}")
    else:
        ok = False
        reasons.append(f"general.architecture is {_show(identity.architecture)}, not one of {shown}")
    if not ok:  # another architecture: the rest of the probe is about a model this is not
        return False, [one_line(r) for r in reasons]
    for key, expected in (p.get("metadata") or {}).items():
        if key not in identity.metadata:
            ok = False
            reasons.append(f"metadata {key} is absent, expected {_show(expected)}")
            continue
        actual = identity.metadata[key]
        if _same(expected, actual):
            reasons.append(f"metadata {key} is {_show(actual)}")
        else:
            ok = False
            kind = identity.metadata_types.get(key)
            reasons.append(f"metadata {key} is {_show(actual)}{f' ({kind})' if kind else ''}, "
                           f"not {_show(expected)}")
    for cond in p.get("tensors") or ():
        good, why = _tensor_condition(cond, identity.tensors)
        ok = ok and good
        reasons.append(why)
    return ok, [one_line(r) for r in reasons]


def _tensor_condition(cond: Mapping[str, Any], tensors: Sequence[TensorInfo]) -> tuple[bool, str]:
    pattern = cond["name"]
    present = cond.get("present", True)
    match = _matcher(pattern)
    found = [t for t in tensors if match(t.name)]
    if not present:
        if found:
            return False, f"tensor {pattern} should be absent, but {found[0].name} is present" + (
                f" (and {len(found) - 1} more)" if len(found) > 1 else "")
        return True, f"tensor {pattern} is absent"
    if not found:
        return False, f"no tensor matches {pattern}"
    want = cond.get("shape")
    types = cond.get("types")
    count = f"{len(found)} tensor{'s' if len(found) != 1 else ''}"
    said = []
    if want is not None:
        want = list(want)
        for t in found:
            if len(t.shape) != len(want) or any(w is not None and w != d for w, d in zip(want, t.shape)):
                return False, f"tensor {t.name} has shape {_shape(t.shape)}, not {_shape(want)}"
        said.append(f"shape {_shape(want)}")
    if types is not None:
        allowed = list(types)
        for t in found:
            if t.type not in allowed:
                return False, f"tensor {t.name} has type {t.type}, not one of [{', '.join(allowed)}]"
        said.append(f"type in [{', '.join(allowed)}]")
    if not said:
        return True, f"tensor {pattern} is present ({count})"
    return True, f"tensor {pattern} {' and '.join(said)} matches ({count})"


# --- asking the providers in order ----------------------------------------------------------------

@dataclass(frozen=True)
class Candidate:
    """One provider of the capability asked for, in registry order.

    ``available`` False: its target is not built (``reasons`` holds the registry's reason)
    and it was not asked (``answer`` None). Otherwise ``answer`` is its probe's yes/no with
    one reason per condition. ``chosen``: the first yes."""

    extension: str
    provider: str
    available: bool
    answer: bool | None
    reasons: tuple[str, ...]
    chosen: bool = False

    def to_json(self) -> dict[str, Any]:
        """``{"extension", "provider", "available", "asked", "answer", "chosen", "reasons"}``."""
        return {"extension": self.extension, "provider": self.provider, "available": self.available,
                "asked": self.answer is not None, "answer": self.answer, "chosen": self.chosen,
                "reasons": list(self.reasons)}


@dataclass(frozen=True)
class Decision:
    """The outcome of :func:`decide`: ``chosen`` (the first candidate whose probe said yes,
    or None), every candidate of ``capability`` in registry order, and ``message``: the
    decision in one sentence, or the no-provider error."""

    capability: str
    architecture: str | None
    candidates: tuple[Candidate, ...]
    chosen: Candidate | None
    message: str

    @property
    def ok(self) -> bool:
        """True when a provider was chosen."""
        return self.chosen is not None

    def to_json(self) -> dict[str, Any]:
        """``{"ok", "capability", "architecture", "chosen": {"extension", "provider"} | null,
        "message", "candidates": [...]}``."""
        c = self.chosen
        return {"ok": self.ok, "capability": self.capability, "architecture": self.architecture,
                "chosen": None if c is None else {"extension": c.extension, "provider": c.provider},
                "message": self.message, "candidates": [x.to_json() for x in self.candidates]}


def _unpack(item: Any) -> tuple[str, Any, bool, str | None]:
    """``(extension name, Provider, available, reason)`` of a registry entry: a
    ``ProviderStatus(extension, provider, available, reason)`` of the pipeline, or a bare
    provider (then available, extension unknown: ``""``)."""
    provider = getattr(item, "provider", None)
    if provider is None:
        return "", item, True, None
    ext = getattr(item, "extension", "")
    return getattr(ext, "name", ext) or "", provider, bool(getattr(item, "available", True)), getattr(item, "reason", None)


def no_provider_message(capability: str, architecture: str | None) -> str:
    """``No text provider found for model architecture 'qwen4exp'`` (seed 002 section 4);
    the word is :data:`CAPABILITY_WORDS`'s; a file without ``general.architecture`` says so."""
    word = CAPABILITY_WORDS.get(capability, capability)
    if architecture is None:
        return f"No {word} provider found for model architecture (none: the file has no general.architecture)"
    return one_line(f"No {word} provider found for model architecture {architecture!r}")


def decide(identity: ModelIdentity, providers: Iterable[Any], capability: str = "text_generation") -> Decision:
    """Ask the probes of ``providers`` (registry order; pipeline ``ProviderStatus`` entries
    or bare providers) whose ``capability`` matches, in order; the first yes wins (seed 002
    section 4). Unavailable providers are listed with their reason and not asked. Every
    available probe is evaluated, so a later provider that would also say yes is shown as
    such (it is not chosen). Pure: no I/O; raises nothing."""
    candidates: list[Candidate] = []
    chosen: Candidate | None = None
    for item in providers:
        ext, provider, available, reason = _unpack(item)
        if getattr(provider, "capability", None) != capability:
            continue
        pid = getattr(provider, "id", "?")
        if not available:
            candidates.append(Candidate(ext, pid, False, None, (f"unavailable: {reason or 'no reason given'}",)))
            continue
        yes, reasons = evaluate(getattr(provider, "probe", None), identity)
        cand = Candidate(ext, pid, True, yes, tuple(reasons), chosen=yes and chosen is None)
        if cand.chosen:
            chosen = cand
        candidates.append(cand)
    if chosen is None:
        message = no_provider_message(capability, identity.architecture)
    else:
        label = f"{chosen.provider} ({chosen.extension})" if chosen.extension else chosen.provider
        message = one_line(f"{label} serves {identity.path or 'the model'}: the first "
                           f"{CAPABILITY_WORDS.get(capability, capability)} provider in registry order "
                           "whose probe says yes")
    return Decision(capability, identity.architecture, tuple(candidates), chosen, message)


def pick_provider(identity: ModelIdentity, providers: Iterable[Any], capability: str = "text_generation") -> Decision:
    """:func:`decide`, raising :class:`NoProviderError` ("No text provider found for model
    architecture '<arch>'", exit 1) when no available provider's probe says yes. Returns
    the :class:`Decision`; its ``chosen`` is the winning candidate."""
    decision = decide(identity, providers, capability)
    if decision.chosen is None:
        raise NoProviderError(decision)
    return decision


__all__ = [
    "CAPABILITY_WORDS", "Candidate", "Decision", "NoProviderError", "decide", "evaluate",
    "no_provider_message", "pick_provider",
]
