"""Generate the registry, the constants header and the same facts as JSON from a
:class:`~lemonpack.extensions.pipeline.Selection` (seed 002 sections 3 and 8, step 6).

Byte format (fixed and documented in ``docs/extensions-generated.md``; the
Nix library reproduces it byte for byte): the output is a pure function of the selection
(extensions in registry order, provider availability, API version, features): no paths,
times or dictionary order leak in. The fixed text lives in
:mod:`lemonpack.extensions.templates`.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from lemonpack.extensions import templates as T
from lemonpack.files import os_error_reason

if TYPE_CHECKING:
    from lemonpack.extensions.pipeline import Selection

#: The file names :func:`generate` returns, in a stable order.
FILES = ("extensions.json", "gufo_ext_registry.cpp", "gufo_ext_constants.hpp")


def mangle(text: str) -> str:
    """A manifest identifier as a C++ identifier part: leading ``--`` dropped, every ``-``
    and ``.`` replaced by ``_`` (``--mtp-model`` -> ``mtp_model``, ``flash-next-q4`` ->
    ``flash_next_q4``)."""
    if text.startswith("--"):
        text = text[2:]
    return text.replace("-", "_").replace(".", "_")


def facts(selection: "Selection") -> dict[str, Any]:
    """The JSON document of ``extensions.json`` (before serialisation)."""
    status = {(s.extension.name, s.provider.id): s for s in selection.providers}
    exts = []
    for ext in selection.extensions:
        providers = []
        for p in ext.providers:
            s = status[(ext.name, p.id)]
            providers.append({"available": s.available, "capability": p.capability, "entry": p.entry, "id": p.id,
                              "keys": list(p.keys), "reason": s.reason, "target": p.target})
        exts.append({"dependencies": list(ext.dependencies), "entry": ext.entry, "name": ext.name,
                     "official": ext.official,
                     "options": [{"commands": list(o.commands), "help": o.help, "name": o.name, "type": o.type,
                                  "values": list(o.values)} for o in ext.options],
                     "providers": providers, "version": ext.version})
    return {"api_version": selection.api_version, "extensions": exts, "features": sorted(selection.features),
            "schema": T.EXTENSIONS_JSON_SCHEMA}


def extensions_json(selection: "Selection") -> bytes:
    """``extensions.json``: compact JSON, keys sorted, no spaces, no trailing newline
    (what Nix ``builtins.toJSON`` prints for the same value)."""
    return json.dumps(facts(selection), sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def registry_cpp(selection: "Selection") -> bytes:
    """``gufo_ext_registry.cpp``: declarations of every extension entry then every
    available provider entry, then ``gufo_ext_register_all``: per extension (in order)
    ``registry.set_extension(name)`` and its entry; then per extension that has providers
    ``registry.set_extension(name)`` and per provider (in order) its entry or
    ``registry.unavailable(extension, id, capability, {keys}, reason)``."""
    out = [T.REGISTRY_HEAD.format(api_version=selection.api_version, features=" ".join(sorted(selection.features)))]
    out += [T.REGISTRY_DECL.format(entry=e.entry) for e in selection.extensions]
    out += [T.REGISTRY_DECL.format(entry=s.provider.entry) for s in selection.providers if s.available]
    out.append(T.REGISTRY_FUNC_OPEN)
    for e in selection.extensions:
        out.append(T.REGISTRY_SET_EXTENSION.format(name=e.name))
        out.append(T.REGISTRY_CALL.format(entry=e.entry))
    current = None
    for s in selection.providers:
        if s.extension.name != current:
            current = s.extension.name
            out.append(T.REGISTRY_SET_EXTENSION.format(name=current))
        p = s.provider
        out.append(T.REGISTRY_CALL.format(entry=p.entry) if s.available
                   else T.REGISTRY_UNAVAILABLE.format(extension=current, id=p.id, capability=p.capability,
                                                      keys=_strings(p.keys), reason=s.reason))
    out.append(T.REGISTRY_FUNC_CLOSE)
    return "".join(out).encode("ascii")


def _strings(values) -> str:
    return ", ".join(f'"{v}"' for v in values)


def constants_hpp(selection: "Selection") -> bytes:
    """``gufo_ext_constants.hpp``: ``namespace gufo::ext::constants`` with ``api_version``
    and per extension a namespace holding ``name``, ``version``, per provider
    ``provider_<id>`` and ``provider_<id>_keys[]``, per option ``option_<name>`` and,
    when it has values, ``option_<name>_values[]``."""
    out = [T.CONSTANTS_HEAD, T.CONSTANTS_API.format(api_version=selection.api_version)]
    for ext in selection.extensions:
        out.append(T.CONSTANTS_NS_OPEN.format(name=ext.name))
        out.append(T.CONSTANTS_STRING.format(ident="name", value=ext.name))
        out.append(T.CONSTANTS_STRING.format(ident="version", value=ext.version))
        for p in ext.providers:
            ident = f"provider_{mangle(p.id)}"
            out.append(T.CONSTANTS_STRING.format(ident=ident, value=p.id))
            out.append(T.CONSTANTS_ARRAY.format(ident=f"{ident}_keys", values=_strings(p.keys)))
        for o in ext.options:
            ident = f"option_{mangle(o.name)}"
            out.append(T.CONSTANTS_STRING.format(ident=ident, value=o.name))
            if o.values:
                out.append(T.CONSTANTS_ARRAY.format(ident=f"{ident}_values", values=_strings(o.values)))
        out.append(T.CONSTANTS_NS_CLOSE.format(name=ext.name))
    out.append(T.CONSTANTS_TAIL)
    return "".join(out).encode("ascii")


def generate(selection: "Selection") -> dict[str, bytes]:
    """The three generated files: ``{"extensions.json", "gufo_ext_registry.cpp",
    "gufo_ext_constants.hpp"}`` -> bytes. Deterministic: equal selections give equal bytes."""
    return {"extensions.json": extensions_json(selection), "gufo_ext_registry.cpp": registry_cpp(selection),
            "gufo_ext_constants.hpp": constants_hpp(selection)}


def write_generated(files: Mapping[str, bytes], out: str | os.PathLike[str]) -> list[Path]:
    """Write the generated ``files`` as the directory ``out``, atomically as a whole: they
    are written into a new sibling directory, which then replaces ``out``
    (:func:`lemonpack.files.replace_directory`), so ``out`` is at every instant either what
    it was or the complete new output, never a mix (what a Nix build step or a concurrent
    reader needs). Files are mode 0644, the directory 0755. Returns the written paths in
    ``files``' order.

    ``out`` may be absent, empty, or a previous output (only :data:`FILES` in it); anything
    else in it is refused rather than deleted. Raises :class:`~lemonpack.errors.StorageError`
    naming ``out`` (exists as a file, holds other files, the disk refuses); ``out`` is then
    as it was."""
    from lemonpack.errors import StorageError
    from lemonpack.files import remove_tree, replace_directory

    target = Path(os.path.abspath(out))
    if os.path.lexists(target):
        if target.is_symlink() or not target.is_dir():
            raise StorageError(f"cannot write into {out}: it exists and is not a directory")
        try:
            other = sorted(n for n in os.listdir(target) if n not in FILES)
        except OSError as e:
            raise StorageError(f"cannot write into {out}: {e.strerror or e}") from None
        if other:
            raise StorageError(f"cannot write into {out}: it holds {other[0]!r}, which generate did not write; "
                               "give a new directory (the output directory is replaced as a whole)")
    stage = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.new-"))
        for name, data in files.items():
            (stage / name).write_bytes(data)
            os.chmod(stage / name, 0o644)
        os.chmod(stage, 0o755)
        replace_directory(stage, target)
    except OSError as e:
        if stage is not None and os.path.lexists(stage):
            remove_tree(stage)
        raise StorageError(f"cannot write into {out}: {os_error_reason(e, out)}") from None
    return [target / name for name in files]


__all__ = ["FILES", "constants_hpp", "extensions_json", "facts", "generate", "mangle", "registry_cpp",
           "write_generated"]
