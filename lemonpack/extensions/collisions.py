"""Collisions between official and community extensions (seed 002 section 4, step 4 of
section 8): a community extension claiming an extension name, artifact key, option name,
contributed option value or provider id that an official extension owns is rejected, the
reason naming both manifests. Two community (or two official) extensions may share a key;
the probes, in order, decide. :func:`lemonpack.extensions.pipeline.run_pipeline` and the
catalogue's verification call :func:`collision_problems`."""

from __future__ import annotations

from typing import Sequence

from lemonpack.extensions.manifest import Extension


def _claims(ext: Extension) -> list[tuple[str, str]]:
    """What an extension claims: ``(kind, value)`` pairs (name, key, option, option value, provider)."""
    out = [("extension name", ext.name)]
    for p in ext.providers:
        out.append(("provider id", p.id))
        out += [("key", k) for k in p.keys]
    for o in ext.options:
        if o.contributes_to:
            out += [(f"value of {o.contributes_to}", v) for v in o.values]
        else:
            out.append(("option", o.name))
    return out


def claim_owners(officials: Sequence[Extension]) -> dict[tuple[str, str], Extension]:
    """``{(kind, value): the first official extension claiming it}`` for
    :func:`collision_problems` (build it once for many community extensions)."""
    owners: dict[tuple[str, str], Extension] = {}
    for off in officials:
        for claim in _claims(off):
            owners.setdefault(claim, off)
    return owners


def collision_problems(ext: Extension, officials: Sequence[Extension],
                       owners: dict[tuple[str, str], Extension] | None = None) -> list[str]:
    """Reasons community extension ``ext`` is rejected: each claim (extension name, key,
    option name, contributed option value, provider id) that an official extension owns,
    naming both manifests (seed 002 section 4). ``owners``: :func:`claim_owners` of
    ``officials``, when the caller has it already."""
    if owners is None:
        owners = claim_owners(officials)
    out = []
    for kind, value in _claims(ext):
        off = owners.get((kind, value))
        if off is not None:
            out.append(f"community extension {ext.name} ({ext.manifest}) claims {kind} {value!r}, which official "
                       f"extension {off.name} ({off.manifest}) owns")
    return out


__all__ = ["claim_owners", "collision_problems"]
