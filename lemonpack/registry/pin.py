"""``lemonpack pin``: container image tags of a recipe resolved to digests, in place.

Images are found where lint's digest-pinning rule looks for them
(:mod:`lemonpack.oci.policy`: every container ``run``/``create``/``pull`` argv of a platform
block or arch override, read by :func:`lemonpack.oci.cmdline.read_container_argv`). Each
unpinned ``host/repo[:tag]`` is resolved with one manifest ``GET`` of the tag: the digest is the
sha256 of the body (a ``Docker-Content-Digest`` header, when sent, must be that digest; it is not
required: distribution-spec, "pulling manifests"), and the image is written
``host/repo:tag@sha256:<hex>``.

The file is edited as text: only the JSON string literals that hold an image are replaced
(spans found by :func:`string_spans`, a small scanner of RFC 8259 JSON), so key order,
indentation, spacing and every other byte stay as they were; the result is written to a temp
file beside the recipe and renamed over it (same permissions).

``{arch_alias}`` in an image: it cannot be pinned as one literal (lint refuses tokens in image
references). Each alias of ``arch_aliases`` is resolved, and the command fails with the pinned
reference per arch pattern, to be written as arch overrides (seed 000 sections 5.3, 13.2).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from lemonpack import jsonpath
from lemonpack.errors import LemonpackError, ManifestError, Problem, RegistryError, SelectionError
from lemonpack.files import read_user_file, replace_file
from lemonpack.strictjson import decode_json_bytes
from lemonpack.oci.cmdline import UnreadableCommandLine, read_container_argv
from lemonpack.oci.policy import platform_argvs
from lemonpack.oci.reference import check_pinned, parse_reference as parse_image

JsonPath = tuple  # of str keys and int indexes

#: CPython's JSON string scanner (``(text, index after the quote) -> (value, end)``): public in
#: the json package, though typeshed does not declare it.
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


@dataclass(frozen=True)
class ImageSite:
    """One image reference in a recipe: ``path`` (JSON path tuple of the string holding it),
    ``image`` (the reference, possibly a substring of that string, e.g. a --mount value)."""

    path: JsonPath
    image: str

    @property
    def where(self) -> str:
        """The JSON path as text (``platforms.linux.cpu.args[3]``)."""
        return jsonpath.join(self.path)

    def to_json(self) -> dict:
        """``{"path", "image"}``."""
        return {"path": self.where, "image": self.image}


@dataclass(frozen=True)
class Pinned:
    """One rewrite: ``path`` (text), ``old`` and ``new`` image references."""

    path: str
    old: str
    new: str

    def to_json(self) -> dict:
        """``{"path", "old", "new"}``."""
        return {"path": self.path, "old": self.old, "new": self.new}


# --- a JSON scanner that keeps the spans of string values -------------------------------

def string_spans(text: str) -> dict[JsonPath, tuple[int, int]]:
    """Every string *value* of the JSON document ``text``: ``{path: (start, end)}``, the span
    of its literal including the quotes. Raises ``ValueError`` on invalid JSON
    (RFC 8259 grammar; the scanner agrees with ``json.loads`` on what it accepts)."""
    decoder = json.JSONDecoder()
    spans: dict[JsonPath, tuple[int, int]] = {}
    ws = " \t\n\r"

    def skip(i: int) -> int:
        while i < len(text) and text[i] in ws:
            i += 1
        return i

    def value(i: int, path: JsonPath) -> int:
        i = skip(i)
        if i >= len(text):
            raise ValueError("unexpected end")
        ch = text[i]
        if ch == "{":
            i = skip(i + 1)
            if text[i] == "}":
                return i + 1
            while True:
                i = skip(i)
                key, end = _scanstring(text, i + 1)
                if text[i] != '"':
                    raise ValueError(f"expected a key at {i}")
                i = skip(end)
                if text[i] != ":":
                    raise ValueError(f"expected ':' at {i}")
                i = skip(value(i + 1, path + (key,)))
                if text[i] == "}":
                    return i + 1
                if text[i] != ",":
                    raise ValueError(f"expected ',' at {i}")
                i += 1
        if ch == "[":
            i = skip(i + 1)
            if text[i] == "]":
                return i + 1
            n = 0
            while True:
                i = skip(value(i, path + (n,)))
                n += 1
                if text[i] == "]":
                    return i + 1
                if text[i] != ",":
                    raise ValueError(f"expected ',' at {i}")
                i += 1
        if ch == '"':
            _, end = _scanstring(text, i + 1)
            spans[path] = (i, end)
            return end
        _, end = decoder.raw_decode(text, i)
        return end

    try:
        end = skip(value(0, ()))
        if end != len(text):
            raise ValueError(f"extra data at {end}")
    except (ValueError, IndexError) as exc:
        raise ValueError(f"not valid JSON: {exc}") from None
    return spans


# --- where the images are --------------------------------------------------------------

def image_sites(doc: Any) -> list[ImageSite]:
    """Every container image reference of a raw recipe document, at the string that holds it.

    An arch override that sets only ``command`` (or only ``args``) takes the other from its
    block, as lint does; images are attributed to the level whose field holds them (an image
    inherited from the block is reported at the block). Unreadable argvs are lint's to report
    and are skipped here.
    """
    sites: dict[tuple[JsonPath, str], ImageSite] = {}
    platforms = doc.get("platforms") if isinstance(doc, dict) else None
    for site in platform_argvs(platforms):
        try:
            inv = read_container_argv((site.command, *site.args))
        except UnreadableCommandLine:
            continue
        if inv is None:
            continue
        cmd_field, args_field = site.fields
        for index, image in inv.images:
            where = site.command_at + (cmd_field,) if index == 0 else site.args_at + (args_field, index - 1)
            sites.setdefault((where, image), ImageSite(where, image))
    return list(sites.values())


class NotARecipeError(ManifestError):
    """The file given to ``pin`` is not a recipe: the recipe contract
    (:func:`lemonpack.contract.loader.check_text`, what ``lint`` and every loader apply) refuses
    it, e.g. a JSON array, a containers-policy.json, a file that is not JSON. Exit 2, so that
    ``pin --check`` on a wrong path fails in CI rather than passing as "every image pinned"
    (exit 0) or being taken for "unpinned" (exit 1). ``problems`` are the contract's (rules as
    ``lint`` names them: ``json-syntax``, ``document-type``, ``missing-field`` ...)."""

    exit_code = 2
    kind = "not-a-recipe"

    def __init__(self, file: str, problems: list[Problem] | tuple[Problem, ...]):
        self.file = file
        super().__init__(problems)
        self.args = (f"{file}: not a recipe (the recipe contract refuses it, as lint does); nothing was "
                     "checked or pinned:\n" + "\n".join(f"  {p}" for p in self.problems),)

    def __str__(self) -> str:
        return str(self.args[0])

    def to_json(self) -> dict[str, Any]:
        """:meth:`ManifestError.to_json` plus ``file``."""
        return {**super().to_json(), "file": self.file}


def check_recipe(path: str | os.PathLike[str]) -> list[ImageSite]:
    """The image sites of the recipe file at ``path`` that are not pinned by digest
    (:func:`lemonpack.oci.reference.check_pinned`). Raises :class:`UnreadableFileError` when the
    file cannot be read and :class:`NotARecipeError` (exit 2) when it is not a valid recipe."""
    doc, _text, _bom = _read(Path(path))
    return [s for s in image_sites(doc) if check_pinned(s.image) is not None]


def _read(path: Path) -> tuple[Any, str, bytes]:
    """``(document, text, bom)`` of the recipe at ``path``, validated as the contract does (the
    digest-pinning policy is not part of the contract: unpinned images are what pin is for);
    ``bom`` is the UTF-8 byte order mark the file starts with (kept on rewrite), or ``b""``."""
    from lemonpack.contract.loader import check_text

    file = str(path)
    data = read_user_file(path, "recipe file")
    bom = b"\xef\xbb\xbf" if data.startswith(b"\xef\xbb\xbf") else b""
    text, problems = decode_json_bytes(data, file)
    if text is None:
        raise NotARecipeError(file, problems)
    doc, problems = check_text(text, file)
    if problems:
        raise NotARecipeError(file, problems)
    return doc, text, bom


# --- resolving -----------------------------------------------------------------------------

class _Resolver:
    """Tag -> digest through one :class:`RegistryClient` per host (closed by :meth:`close`)."""

    def __init__(self, insecure: bool, registry_config):
        self.insecure, self.registry_config = insecure, registry_config
        self.clients: dict[str, Any] = {}
        self.cache: dict[str, str] = {}

    def resolve(self, image: str, file: str, where: str) -> str:
        from lemonpack.registry.client import RegistryClient

        if image in self.cache:
            return self.cache[image]
        ref = parse_image(image)
        if ref.domain is None:
            raise ManifestError([Problem(file, where, "pin", f"image {image!r} names no registry host; "
                                         "write it as HOST/REPO:TAG so that pin knows where to look")])
        client = self.clients.get(ref.host)
        if client is None:  # docker.io is asked at registry-1.docker.io (RegistryClient's endpoint)
            client = self.clients[ref.host] = RegistryClient(ref.host, insecure=self.insecure,
                                                             registry_config=self.registry_config)
        tag = ref.tag or "latest"
        # One GET: the digest is the sha256 of the body; a Docker-Content-Digest the registry
        # sends must agree with it, and one it leaves out (distribution-spec: not guaranteed)
        # is not needed.
        fetched = client.get_manifest(ref.repository, tag, missing_ok=True)  # library/ for Docker Hub's one-part names
        if fetched is None:
            raise RegistryError(f"{file}: {where}: {ref.host}/{ref.repository}:{tag} not found in the registry")
        digest = fetched[2]
        pinned = f"{ref.name}:{tag}@{digest}"
        self.cache[image] = pinned
        return pinned

    def close(self) -> None:
        for c in self.clients.values():
            c.close()


def pin_recipe(path: str | os.PathLike[str], *, insecure: bool = False,
               registry_config: str | os.PathLike[str] | None = None) -> list[Pinned]:
    """Pin every unpinned container image of the recipe at ``path`` in place; returns the
    rewrites (empty when nothing needed pinning: then the file is not touched).

    Raises :class:`NotARecipeError` (exit 2: not UTF-8 JSON, or not a recipe by the contract),
    :class:`ManifestError` (an image without registry host), :class:`RegistryError` (a tag the registry does not have), :class:`SelectionError` for ``{arch_alias}`` images (the message
    gives the pinned image per arch pattern), ``FetchError``/:class:`IntegrityError` from the
    registry. The file is unchanged on any error.
    """
    file = Path(path)
    doc, text, bom = _read(file)
    sites = [s for s in image_sites(doc) if check_pinned(s.image) is not None]
    if not sites:
        return []
    try:
        spans = string_spans(text)
    except ValueError as exc:  # json.loads took it: the scanner and the parser disagree
        raise ManifestError([Problem(str(file), "", "json-syntax", str(exc))]) from None
    resolver = _Resolver(insecure, registry_config)
    try:
        templated = [s for s in sites if "{arch_alias}" in s.image]
        if templated:
            raise SelectionError(_alias_message(file, doc, templated, resolver))
        bad = [s for s in sites if "{" in s.image]
        if bad:
            raise ManifestError([Problem(str(file), s.where, "pin", f"image {s.image!r} holds a token that "
                                         "pin cannot resolve; write a literal HOST/REPO:TAG") for s in bad])
        changes: list[Pinned] = []
        edits: dict[JsonPath, str] = {}
        for site in sites:
            new = resolver.resolve(site.image, str(file), site.where)
            current = edits.get(site.path, _value_at(doc, site.path))
            edits[site.path] = current.replace(site.image, new, 1)
            changes.append(Pinned(site.where, site.image, new))
    finally:
        resolver.close()
    out = text
    for jpath, (start, end) in sorted(((p, spans[p]) for p in edits), key=lambda x: -x[1][0]):
        out = out[:start] + json.dumps(edits[jpath], ensure_ascii=False) + out[end:]
    replace_file(file, bom + out.encode("utf-8"))
    return changes


def _value_at(doc: Any, path: JsonPath) -> str:
    for p in path:
        doc = doc[p]
    return doc


def _alias_message(file: Path, doc: dict, sites: list[ImageSite], resolver: _Resolver) -> str:
    aliases = doc.get("arch_aliases")
    lines = [f"{file}: {{arch_alias}} in a container image cannot be pinned as one literal (a token in an "
             "image reference is refused by lint)."]
    if not isinstance(aliases, dict) or not aliases:
        lines.append("The recipe declares no arch_aliases, so {arch_alias} has no values to resolve.")
        return "\n".join(lines)
    lines.append("Resolved per alias; write one arch override per arch pattern with these images:")
    for site in sites:
        for pattern, alias in aliases.items():
            image = site.image.replace("{arch_alias}", str(alias))
            try:
                pinned = resolver.resolve(image, str(file), site.where)
            except LemonpackError as exc:
                pinned = f"cannot resolve: {exc}"
            lines.append(f"  {site.where}: arch {pattern} (alias {alias}): {pinned}")
    return "\n".join(lines)


__all__ = ["ImageSite", "NotARecipeError", "Pinned", "check_recipe", "image_sites", "pin_recipe", "string_spans"]
