"""The canonical capability registry (RFC section 5).

A capability maps to exactly one deployment mode label and one or more fixed routes.
A manifest can never add one: membership here is the contract.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["core", "extension", "plumbing"]


@dataclass(frozen=True)
class Capability:
    """One registry row: ``name``, ``kind``, deployment ``mode`` (None for plumbing),
    the Lemonade ``routes`` it gates, and ``variant_of_only`` (section 5, D9)."""

    name: str
    kind: Kind
    mode: str | None
    routes: tuple[str, ...]
    variant_of_only: bool = False


CAPABILITIES: dict[str, Capability] = {
    c.name: c
    for c in (
        Capability("chat_completion", "core", "chat", ("POST /v1/chat/completions",)),
        Capability("completion", "core", "chat", ("POST /v1/completions",)),
        Capability("embeddings", "core", "embeddings", ("POST /v1/embeddings",)),
        Capability("reranking", "core", "reranking", ("POST /v1/rerank", "POST /v1/reranking", "POST /v1/reranker")),
        Capability("transcription", "core", "transcription", ("POST /v1/audio/transcriptions",)),
        Capability("image", "core", "image",
                   ("POST /v1/images/generations", "POST /v1/images/edits", "POST /v1/images/variations")),
        Capability("tts", "core", "tts", ("POST /v1/audio/speech",)),
        Capability("responses", "extension", "chat", ("POST /v1/responses",)),
        Capability("streaming_transcription", "extension", "transcription", ("WS /realtime",), variant_of_only=True),
        Capability("classification", "extension", "classification", ("POST /v1/classify",)),
        Capability("audio_generation", "extension", "audio-generation", ("POST /v1/audio/generations",)),
        Capability("model_3d", "extension", "3d", ("POST /v1/3d/generations",)),
        Capability("slots", "plumbing", None, ("GET /v1/slots", "POST /v1/slots/{id}")),
        Capability("tokenize", "plumbing", None, ("POST /v1/tokenize",)),
    )
}


def capabilities_for_mode(declared: tuple[str, ...] | list[str], mode: str) -> tuple[str, ...]:
    """The declared capabilities whose deployment mode is ``mode`` (section 5: a model
    deploys in one mode, and every declared capability of that mode is enabled together)."""
    return tuple(c for c in declared if c in CAPABILITIES and CAPABILITIES[c].mode == mode)


def modes_of(declared: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The deployment modes the ``declared`` capabilities give (section 5), each once, in the
    order of the first capability giving it; plumbing capabilities give none."""
    modes: dict[str, None] = {}
    for c in declared:
        mode = CAPABILITIES[c].mode if c in CAPABILITIES else None
        if mode:
            modes[mode] = None
    return tuple(modes)
