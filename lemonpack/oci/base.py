"""Base images: the layers an engine image is built on, read from a local OCI image layout.

A base is named ``oci:DIR[:TAG]`` (a local OCI image layout, image-spec v1.1
``image-layout.md``; ``TAG`` may be left out when the layout has exactly one tag). A
registry base ``HOST/REPO@sha256:...`` is pulled into a layout first by the caller (the
registry room), then read here the same way. :func:`open_base` reads the layout and
:func:`BaseSource.for_platform` picks the manifest of one platform (from an image index:
the entry whose ``platform`` matches; from a manifest: its config must say that platform).
Every JSON blob read (index, manifest, config) is hashed against its descriptor; layer
blobs are verified where they are copied (:meth:`BaseImage.copy_layers`), byte for byte,
never recompressed, so the image's first layers are the base's own blobs. Each layer's tar
is read once by :func:`lemonpack.oci.layerscan.scan_layer` (its ``diff_id``, the entries that
could hide the engine's path).

Errors: :class:`~lemonpack.errors.LayoutError` (exit 1: not a layout, no such tag, a
malformed document), :class:`~lemonpack.errors.SelectionError` (exit 1: another
OS/architecture), :class:`~lemonpack.errors.IntegrityError`
(exit 3: a blob that does not hash to its digest, a diff_id that does not match),
:class:`~lemonpack.errors.UnsafeContentError` (exit 5: a whiteout or a non-directory over
the engine's path). Every message starts with ``base <name>:``.

Spec: OCI image-spec v1.1 ``image-index.md`` (platform selection), ``manifest.md``,
``config.md`` (``rootfs.diff_ids``, ``history``), ``layer.md`` (whiteouts),
``annotations.md`` (``org.opencontainers.image.base.digest`` / ``.base.name``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from lemonpack.errors import IntegrityError, LayoutError, LemonpackError, SelectionError, UnsafeContentError
from lemonpack.oci.descriptor import Descriptor
from lemonpack.oci.layerscan import BadLayer, LayerFacts, shadow_problem
from lemonpack.oci.layout_reader import MAX_JSON_BLOB, read_blob, read_json_blob, read_layout
from lemonpack.oci.mediatypes import IMAGE_INDEX_TYPES, IMAGE_MANIFEST_TYPES, LAYER_TYPES

ANNOTATION_BASE_DIGEST = "org.opencontainers.image.base.digest"
ANNOTATION_BASE_NAME = "org.opencontainers.image.base.name"



def _arch_name(platform: dict) -> str:
    text = f"{platform.get('os')}/{platform.get('architecture')}"
    return text + (f"/{platform['variant']}" if platform.get("variant") else "")


@dataclass(frozen=True)
class BaseImage:
    """One platform's manifest of a base: ``name`` (as given), ``layout`` (directory),
    ``digest`` of the manifest, ``layers`` (descriptors, in order), ``diff_ids`` (the
    config's), ``config`` (the whole config document), ``reference`` (the registry
    reference it was pulled from, or None)."""

    name: str
    layout: Path
    digest: str
    layers: tuple[Descriptor, ...]
    diff_ids: tuple[str, ...]
    config: dict
    reference: str | None = None

    def blob(self, desc: Descriptor) -> Path:
        """The path of ``desc``'s blob in the base layout."""
        return self.layout / "blobs" / "sha256" / desc.hex

    def annotations(self) -> dict[str, str]:
        """``org.opencontainers.image.base.digest`` and, for a registry base, ``.base.name``
        (a local layout's path is not a reference, and would tie digests to a directory)."""
        out = {ANNOTATION_BASE_DIGEST: self.digest}
        if self.reference:
            out[ANNOTATION_BASE_NAME] = self.reference
        return out

    def check(self, prefixes: tuple[str, ...], facts_of: Callable[[Descriptor, Path], LayerFacts]) -> None:
        """Check every layer's diff_id and that none shadows any of ``prefixes``.
        ``facts_of(desc, path)`` returns the layer's :class:`LayerFacts` (scanning it, with
        the digest of the bytes read, or from a record keyed by its digest). Raises :class:`IntegrityError` (a diff_id that
        does not match), :class:`UnsafeContentError` (shadowing), LemonpackError (unreadable)."""
        for i, (desc, diff_id) in enumerate(zip(self.layers, self.diff_ids)):
            try:
                facts = facts_of(desc, self.blob(desc))
            except FileNotFoundError:
                raise LayoutError(f"base {self.name}: layer {desc.digest} is missing from {self.layout}") from None
            except BadLayer as exc:
                if exc.digest != desc.digest:
                    raise IntegrityError(f"base {self.name}: layer blob {self.blob(desc)}", desc.digest,
                                         exc.digest) from None
                raise LayoutError(f"base {self.name}: layer {desc.digest}: {exc}") from None
            except ValueError as exc:
                raise LayoutError(f"base {self.name}: layer {desc.digest}: {exc}") from None
            if facts.digest is not None and facts.digest != desc.digest:
                raise IntegrityError(f"base {self.name}: layer blob {self.blob(desc)}", desc.digest, facts.digest)
            if facts.diff_id != diff_id:
                raise IntegrityError(f"base {self.name}: layer {i} ({desc.digest}) uncompressed",
                                     diff_id, facts.diff_id)
            for prefix in prefixes:
                why = shadow_problem(facts, prefix)
                if why:
                    raise UnsafeContentError(f"base {self.name}: layer {i} ({desc.digest}): {why}")

    def config_for(self, prefix: str, entrypoint: list[str], labels: dict[str, str], *,
                   path_dir: str | None = None, extra_env: tuple[str, ...] = ()) -> dict:
        """The ``config`` object of an image on this base: the base's ``Env`` with
        ``/prefix`` (or ``/path_dir``) put first on ``PATH`` (the default PATH when the
        base has none), then ``extra_env`` (``NAME=value``, replacing the base's NAME), its
        ``User``, ``Labels`` merged under ``labels``; ``Entrypoint`` ``entrypoint``, ``Cmd``
        empty, ``WorkingDir`` ``/prefix``. Nothing else of the base's run settings
        (``Cmd``, ``Entrypoint``, ``Volumes``, ``ExposedPorts``, healthchecks) carries over."""
        base = self.config.get("config") or {}
        env = [e for e in base.get("Env") or [] if isinstance(e, str)]
        path = next((e for e in env if e.startswith("PATH=")), None)
        default = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        new_path = f"PATH=/{path_dir or prefix}:" + (path[5:] if path is not None else default)
        base_env = env
        env = [new_path if e is path else e for e in base_env] if path is not None else [new_path, *base_env]
        extra = {e.split("=", 1)[0]: e for e in extra_env}
        env = [extra.pop(e.split("=", 1)[0], e) for e in env] + list(extra.values())
        out: dict[str, Any] = {"Env": env, "Entrypoint": list(entrypoint), "Cmd": [],
                               "Labels": {**(base.get("Labels") or {}), **labels}, "WorkingDir": f"/{prefix}"}
        if isinstance(base.get("User"), str) and base["User"]:
            out["User"] = base["User"]
        return out

    def history(self, added: int, created: str, by: str) -> list[dict] | None:
        """The base's ``history`` plus ``added`` entries for the layers on top; None when the
        base has no history (then the image has none either)."""
        hist = self.config.get("history")
        if not isinstance(hist, list) or not hist:
            return None
        return [*hist, *({"created": created, "created_by": by} for _ in range(added))]


@dataclass
class BaseSource:
    """A base layout opened by :func:`open_base`: ``name`` (as given), ``layout``, the root
    descriptor (``digest``, an index or a manifest), ``reference`` (registry reference or None)."""

    name: str
    layout: Path
    root: Descriptor
    reference: str | None = None
    _cache: dict = field(default_factory=dict)

    def _json(self, desc: Descriptor, what: str) -> dict:
        return read_json_blob(self.layout, desc, f"base {self.name}: {what}")

    def platforms(self) -> list[str]:
        """``os/architecture[/variant]`` of every image the base offers."""
        if self.root.media_type in IMAGE_INDEX_TYPES:
            doc = self._json(self.root, "image index")
            return [_arch_name(m.get("platform") or {}) for m in doc.get("manifests") or [] if isinstance(m, dict)]
        return [_arch_name(self._config(self.root)[1])]

    def _config(self, desc: Descriptor) -> tuple[dict, dict]:
        manifest = self._json(desc, "manifest")
        try:
            cfg_desc = Descriptor.from_json(manifest["config"])
        except (KeyError, LemonpackError, TypeError):
            raise LayoutError(f"base {self.name}: manifest {desc.digest} has no valid config descriptor") from None
        config = self._json(cfg_desc, "image config")
        return manifest, config

    def for_platform(self, os_name: str, arch: str, target: str) -> BaseImage:
        """The base image for ``os_name``/``arch`` (OCI names: ``linux``/``amd64``).
        ``target`` names what is being built, for the error: ``base NAME is linux/arm64
        (only), TARGET is linux/amd64``. Results are cached per platform."""
        key = (os_name, arch)
        if key in self._cache:
            return self._cache[key]
        desc = self.root
        if desc.media_type in IMAGE_INDEX_TYPES:
            doc = self._json(desc, "image index")
            found = None
            offered = []
            for m in doc.get("manifests") or []:
                try:
                    d = Descriptor.from_json(m)
                except LemonpackError:
                    continue
                plat = dict(d.platform or {})
                offered.append(_arch_name(plat))
                if plat.get("os") == os_name and plat.get("architecture") == arch and d.media_type in IMAGE_MANIFEST_TYPES:
                    found = d
                    break
            if found is None:
                raise SelectionError(f"base {self.name}: its index offers {', '.join(offered) or 'no platform'}; "
                                     f"{target} is {os_name}/{arch}")
            desc = found
        elif desc.media_type not in IMAGE_MANIFEST_TYPES:
            raise LayoutError(f"base {self.name}: {desc.digest} is a {desc.media_type}, not an image "
                              "manifest or index")
        manifest, config = self._config(desc)
        if manifest.get("artifactType") or not isinstance(config.get("rootfs"), dict):
            raise LayoutError(f"base {self.name}: {desc.digest} is not an image (no rootfs in its config)")
        got = {"os": config.get("os"), "architecture": config.get("architecture"), "variant": config.get("variant")}
        if got["os"] != os_name or got["architecture"] != arch:
            raise SelectionError(f"base {self.name} is {_arch_name(got)}; {target} is {os_name}/{arch}")
        try:
            layers = tuple(Descriptor.from_json(l) for l in manifest.get("layers") or [])
        except LemonpackError as exc:
            raise LayoutError(f"base {self.name}: manifest {desc.digest}: {exc}") from None
        diff_ids = config["rootfs"].get("diff_ids")
        if not isinstance(diff_ids, list) or len(diff_ids) != len(layers) or \
                not all(isinstance(d, str) for d in diff_ids):
            raise LayoutError(f"base {self.name}: config of {desc.digest} lists {len(diff_ids or [])} diff_ids "
                              f"for {len(layers)} layers")
        for layer in layers:
            if layer.media_type not in LAYER_TYPES:
                raise LayoutError(f"base {self.name}: layer {layer.digest} has media type {layer.media_type}, "
                                  "not a tar layer (tar, tar+gzip, tar+zstd)")
        image = BaseImage(self.name, self.layout, desc.digest, layers, tuple(diff_ids), config, self.reference)
        self._cache[key] = image
        return image


def built_without_base(layout: Path, tag: str) -> bool:
    """True when ``layout:tag`` is an image manifest that ``lemonpack build`` wrote without a
    base (a ``dev.lemonpack.recipe`` annotation and no ``org.opencontainers.image.base.digest``):
    the engine alone, which does not start by itself. False for anything else (an image on
    a base, an index, another tool's image) or when the layout cannot be read (no layout,
    no such tag, a manifest that is not JSON).

    The manifest is read through :func:`~lemonpack.oci.layout_reader.read_blob`: a manifest
    blob that is not what the layout's index says (other bytes, another size, a symlink) is
    refused with its :class:`LayoutError` (:class:`~lemonpack.errors.LayoutBlobError` for
    bytes or size), never judged."""
    try:
        desc = read_layout(layout).get(tag)
    except LemonpackError:
        return False
    if desc is None or desc.media_type not in IMAGE_MANIFEST_TYPES:
        return False
    data = read_blob(Path(layout), desc, f"{layout}:{tag}: manifest", limit=MAX_JSON_BLOB)
    try:
        doc = json.loads(data)
    except ValueError:
        return False
    ann = doc.get("annotations") or {} if isinstance(doc, dict) else {}
    return "dev.lemonpack.recipe" in ann and ANNOTATION_BASE_DIGEST not in ann


def parse_base(spec: str) -> tuple[Path, str | None]:
    """Split ``oci:DIR[:TAG]`` into ``(DIR, TAG or None)``; LemonpackError for anything else
    (a registry reference is resolved by the caller before)."""
    if not spec.startswith("oci:"):
        raise LayoutError(f"base {spec}: not oci:DIR[:TAG] (a local OCI image layout) or "
                          "HOST/REPO@sha256:<hex> (a registry image pinned by digest)")
    rest = spec[4:]
    if not rest:
        raise LayoutError(f"base {spec}: no directory after oci:")
    directory, tag = rest, None
    head, sep, tail = rest.rpartition(":")
    if sep and head and "/" not in tail and not Path(rest).exists():
        directory, tag = head, tail
    return Path(directory), tag


def open_base(spec: str, *, layout: Path | None = None, tag: str | None = None,
              reference: str | None = None) -> BaseSource:
    """Open the base named ``spec`` (``oci:DIR[:TAG]``), or, when ``layout`` is given, the
    layout a registry base ``reference`` was pulled into (``spec`` then only names it).

    The tag must exist; without one the layout must hold exactly one tagged image. Raises
    LemonpackError naming the base (not a layout, no such tag, several tags, a tag on
    something that is neither an image manifest nor an index)."""
    if layout is None:
        layout, tag = parse_base(spec)
    try:
        tags = read_layout(layout)
    except LemonpackError as exc:
        raise LayoutError(f"base {spec}: {exc}") from None
    if tag is None:
        if len(tags) != 1:
            raise LayoutError(f"base {spec}: the layout has {len(tags)} tags ({', '.join(sorted(tags)) or 'none'}); "
                              "name one: oci:DIR:TAG")
        tag = next(iter(tags))
    if tag not in tags:
        raise LayoutError(f"base {spec}: no tag {tag!r} in {layout} (tags: {', '.join(sorted(tags)) or 'none'})")
    root = tags[tag]
    if root.media_type not in (*IMAGE_INDEX_TYPES, *IMAGE_MANIFEST_TYPES):
        raise LayoutError(f"base {spec}: tag {tag!r} is a {root.media_type}, not an image manifest or index")
    return BaseSource(spec, Path(layout), root, reference)


__all__ = ["ANNOTATION_BASE_DIGEST", "ANNOTATION_BASE_NAME", "BaseImage", "BaseSource", "built_without_base",
           "open_base", "parse_base"]
