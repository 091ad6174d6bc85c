"""Model artifacts in a registry: which format a manifest is, what files it holds, and the
manifests lemonpack writes. Pure: functions of the manifest and config bytes (and, for the
writers, of facts already read from the files); no I/O.

Formats read (detected by ``artifactType``, then the config's media type, then the layers'
media types; anything else is :class:`ModelArtifactError` naming the media types found):

- ``modelpack``: CNCF ModelPack (modelpack/model-spec ``docs/spec.md``, ``specs-go/v1/
  mediatype.go``, ``specs-go/v1/config.go``, ``schema/config-schema.json``): ``artifactType``
  ``application/vnd.cncf.model.manifest.v1+json``, config ``application/vnd.cncf.model.config.v1+json``
  (``descriptor``, ``modelfs.diffIds``, ``config``), layers ``application/vnd.cncf.model.<kind>.v1.raw``
  (the file itself) or ``.tar[+gzip|+zstd]``, named by ``org.cncf.model.filepath``.
- ``docker-v0.1``/``docker-v0.2``: Docker Model Runner (docker/model-runner
  ``pkg/distribution/types/config.go``, ``internal/partial/layer.go``): config
  ``application/vnd.docker.ai.model.config.v0.1+json`` (or ``v0.2``), GGUF layers
  ``application/vnd.docker.ai.gguf.v3``; files named by ``org.cncf.model.filepath`` when the
  layer has it (v0.2 always), else by role (``model.gguf``, ``model-0000N-of-0000M.gguf``,
  ``mmproj.gguf``, ``LICENSE``, ``template.jinja``).
- ``kitops``: KitOps ModelKits (kitops-ml/kitops ``pkg/artifact/spec.md``,
  ``pkg/lib/constants/mediaType.go``): config ``application/vnd.kitops.modelkit.config.v1+json``
  (the Kitfile as JSON), layers ``application/vnd.kitops.modelkit.<kind>.v1.tar[+gzip]`` whose
  members carry the file paths.
- ``ramalama``: RamaLama's artifacts (containers/ramalama ``ramalama/transports/oci/oci.py``:
  ``podman artifact add --type application/vnd.cncf.model.manifest.v1+json`` with
  ``org.cncf.model.filepath`` on every layer, config not ModelPack's): the ModelPack artifact type
  without its config; files named by ``org.cncf.model.filepath``, else
  ``org.opencontainers.image.title``.
- ``ramalama-image``: RamaLama's model images (containers/ramalama ``docs/ramalama-oci.5.md``,
  ``ramalama/transports/oci/oci.py`` ``build_image``): an ordinary image whose config carries the
  label ``org.containers.type`` = ``ai.image.model.raw`` (or ``.car``), the model under
  ``/models/`` with ``/models/model.file`` a symlink to it; only the members under ``models/``
  of its tar layers go into the view (a "car" image's other layers are its runtime).

Written (``lemonpack models push``): ModelPack (:func:`write_modelpack`, one raw layer per file
carrying both ``org.cncf.model.filepath`` and ``org.opencontainers.image.title``, the context
length as the ``dev.lemonpack.model.context-length`` manifest annotation) and Docker's v0.1
(:func:`write_docker`). Same files, same facts, same date: same bytes (canonical JSON).
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lemonpack.canonical import canonical_json
from lemonpack.digest import Digest, is_sha256_digest
from lemonpack.errors import LemonpackError
from lemonpack.oci import mediatypes as mt
from lemonpack.oci.descriptor import Descriptor
from lemonpack.safetree import path_problem


class ModelArtifactError(LemonpackError):
    """A manifest that is no model artifact lemonpack reads (the message names the media types
    found), or one whose manifest or config does not hold together (not JSON, a descriptor
    without digest or size, a file name that escapes its directory). Exit 1."""

    kind = "model-artifact"


#: Format names :func:`detect_format` answers.
FORMATS = ("modelpack", "docker-v0.1", "docker-v0.2", "kitops", "ramalama", "ramalama-image")


@dataclass(frozen=True)
class ModelFile:
    """One layer of a model artifact: ``name`` (the relative path the view gives it; for a tar
    layer, the layer's own label: its members carry their names), ``digest``, ``size`` bytes,
    ``media_type``, ``role`` (``weight``, ``weight-config``, ``mmproj``, ``doc``, ``code``,
    ``dataset``, ``license``, ``chat-template``, ``other``), ``archive`` (None: the layer is the
    file; ``tar``, ``tar+gzip``, ``tar+zstd``: its regular files are extracted), ``members``
    (with ``archive``: only the members below this directory are extracted, named relative to
    it; None: all)."""

    name: str
    digest: str
    size: int
    media_type: str
    role: str = "weight"
    archive: str | None = None
    members: str | None = None

    @property
    def is_gguf(self) -> bool:
        """A raw layer whose name ends in ``.gguf`` or whose media type is Docker's GGUF."""
        return self.archive is None and (self.name.lower().endswith(".gguf") or self.media_type == mt.MEDIA_TYPE_DOCKER_AI_GGUF)

    def to_json(self) -> dict[str, Any]:
        """``{"name", "digest", "size", "mediaType", "role"[, "archive"]}``."""
        out: dict[str, Any] = {"name": self.name, "digest": self.digest, "size": self.size,
                               "mediaType": self.media_type, "role": self.role}
        if self.archive:
            out["archive"] = self.archive
        return out


@dataclass(frozen=True)
class ModelArtifact:
    """A model artifact read from its manifest and config (:func:`read_artifact`).

    ``format``: one of :data:`FORMATS`. ``layers``: every :class:`ModelFile`, in manifest
    order. ``model_format``: ``gguf``, ``safetensors`` ... when the config says it (or the
    layers show it), else None. ``architecture``, ``parameters`` (ModelPack ``paramSize``,
    Docker ``parameters``), ``quantization``, ``context_length`` (tokens: the lemonpack
    annotation, or Docker's ``context_size``), ``name``, ``version``, ``created`` (RFC 3339
    text as written): what the config says, None where it says nothing. ``config_digest``,
    ``manifest_annotations``."""

    format: str
    layers: tuple[ModelFile, ...]
    model_format: str | None = None
    architecture: str | None = None
    parameters: str | None = None
    quantization: str | None = None
    context_length: int | None = None
    name: str | None = None
    version: str | None = None
    created: str | None = None
    config_digest: str = ""
    manifest_annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def files(self) -> tuple[ModelFile, ...]:
        """The layers (the name a brief calls them by)."""
        return self.layers

    @property
    def main(self) -> ModelFile | None:
        """The main weight file: the first raw GGUF weight layer (of split GGUFs the
        ``-00001-of-`` one), else the first weight layer, else None."""
        weights = [f for f in self.layers if f.role == "weight"]
        ggufs = [f for f in weights if f.is_gguf]
        for f in ggufs:
            if re.search(r"-0*1-of-\d+\.gguf$", f.name, re.IGNORECASE):
                return f
        if ggufs:
            return ggufs[0]
        return weights[0] if weights else None

    def main_name(self, names: Iterable[str]) -> str | None:
        """The main weight file among ``names`` (the files of the model's view): :attr:`main`
        when it is a raw layer, else (tar layers) RamaLama's ``model.file``, else the first GGUF
        (of splits the ``-00001-of-`` one); None when there is none."""
        names = list(names)
        m = self.main
        if m is not None and m.archive is None:
            return m.name if m.name in names else None
        if self.format == "ramalama-image" and mt.RAMALAMA_MODEL_FILE in names:
            return mt.RAMALAMA_MODEL_FILE
        ggufs = sorted(n for n in names if n.lower().endswith(".gguf"))
        firsts = [n for n in ggufs if re.search(r"-0*1-of-\d+\.gguf$", n, re.IGNORECASE)]
        return (firsts or ggufs)[0] if ggufs else None

    @property
    def size(self) -> int:
        """Bytes of all layers."""
        return sum(f.size for f in self.layers)

    def to_json(self) -> dict[str, Any]:
        """JSON shape of ``models inspect --json``: format, facts, files, size."""
        main = self.main
        return {"format": self.format, "modelFormat": self.model_format, "architecture": self.architecture,
                "parameters": self.parameters, "quantization": self.quantization,
                "contextLength": self.context_length, "name": self.name, "version": self.version,
                "created": self.created, "config": self.config_digest, "size": self.size,
                "main": main.name if main else None, "files": [f.to_json() for f in self.layers],
                "annotations": dict(self.manifest_annotations)}


# -------------------------------------------------------------------------------- reading
def _json(data: bytes, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise ModelArtifactError(f"{what} is not JSON") from None
    if not isinstance(doc, dict):
        raise ModelArtifactError(f"{what} is not a JSON object")
    return doc


def _descriptor(obj: Any, what: str) -> Descriptor:
    if not isinstance(obj, dict) or not is_sha256_digest(obj.get("digest")) \
            or not isinstance(obj.get("size"), int) or isinstance(obj.get("size"), bool) or obj["size"] < 0 \
            or not isinstance(obj.get("mediaType"), str):
        raise ModelArtifactError(f"{what} is not a descriptor with mediaType, sha256 digest and size")
    return Descriptor.from_json(obj)


def manifest_config(manifest: bytes) -> Descriptor:
    """The config descriptor of the image manifest ``manifest`` (bytes).
    Raises :class:`ModelArtifactError` when it is no image manifest with a config."""
    doc = _json(manifest, "model manifest")
    if doc.get("mediaType", mt.MEDIA_TYPE_IMAGE_MANIFEST) not in mt.IMAGE_MANIFEST_TYPES:
        raise ModelArtifactError(f"model manifest has mediaType {doc.get('mediaType')!r}, not an image manifest")
    return _descriptor(doc.get("config"), "model manifest config")


def _layer_types(doc: Mapping[str, Any]) -> list[str]:
    layers = doc.get("layers")
    if not isinstance(layers, list):
        return []
    return [str(x.get("mediaType")) for x in layers if isinstance(x, dict)]


def _found(doc: Mapping[str, Any]) -> str:
    raw = doc.get("config")
    config: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    types = sorted(set(_layer_types(doc)))
    return (f"artifactType {doc.get('artifactType') or '(none)'}, config {config.get('mediaType') or '(none)'}, "
            f"layers {', '.join(types) if types else '(none)'}")


def needs_config(manifest: bytes) -> bool:
    """Whether :func:`detect_format` needs the config to decide (an image config: a RamaLama
    model image is told apart by its label)."""
    doc = _json(manifest, "model manifest")
    config = doc.get("config")
    return not doc.get("artifactType") and isinstance(config, dict) and config.get("mediaType") in mt.IMAGE_CONFIG_TYPES


def _ramalama_label(config: bytes) -> str | None:
    try:
        doc = json.loads(config)
    except (ValueError, UnicodeDecodeError):
        return None
    labels = (doc.get("config") or {}).get("Labels") if isinstance(doc, dict) else None
    value = labels.get(mt.LABEL_RAMALAMA_TYPE) if isinstance(labels, dict) else None
    return value if value in (mt.RAMALAMA_TYPE_RAW, mt.RAMALAMA_TYPE_CAR) else None


def detect_format(manifest: bytes, config: bytes | None = None) -> str:
    """The format of a model manifest (one of :data:`FORMATS`): by ``artifactType``, then the
    config's media type (for an image config, its ``org.containers.type`` label: ``config``
    is needed then, :func:`needs_config`), then the layers' media types (module docstring).
    Raises :class:`ModelArtifactError` naming the artifact type, config and layer media types
    found when no rule matches."""
    doc = _json(manifest, "model manifest")
    config_type = (doc.get("config") or {}).get("mediaType") if isinstance(doc.get("config"), dict) else None
    artifact_type = doc.get("artifactType")
    if not artifact_type and config_type in mt.IMAGE_CONFIG_TYPES and config is not None and _ramalama_label(config):
        return "ramalama-image"
    if artifact_type == mt.MEDIA_TYPE_MODELPACK_MANIFEST:
        return "modelpack" if config_type == mt.MEDIA_TYPE_MODELPACK_CONFIG else "ramalama"
    by_config = {mt.MEDIA_TYPE_MODELPACK_CONFIG: "modelpack", mt.MEDIA_TYPE_DOCKER_AI_CONFIG_V01: "docker-v0.1",
                 mt.MEDIA_TYPE_DOCKER_AI_CONFIG_V02: "docker-v0.2", mt.MEDIA_TYPE_KITOPS_CONFIG: "kitops"}
    if config_type in by_config:
        return by_config[config_type]
    types = _layer_types(doc)
    if types:
        for table, name in ((mt.MODELPACK_LAYER_TYPES, "modelpack"), (mt.DOCKER_AI_LAYER_TYPES, "docker-v0.1"),
                            (mt.KITOPS_LAYER_TYPES, "kitops")):
            if all(t in table for t in types):
                return name
    label = "" if config is None or config_type not in mt.IMAGE_CONFIG_TYPES else \
        f"; the image config has no {mt.LABEL_RAMALAMA_TYPE} label {mt.RAMALAMA_TYPE_RAW} or {mt.RAMALAMA_TYPE_CAR}"
    raise ModelArtifactError(f"not a model artifact lemonpack reads ({_found(doc)}{label}); it reads CNCF "
                             "ModelPack, Docker Model Runner v0.1/v0.2, KitOps ModelKits and RamaLama artifacts")


def _role(fmt: str, media_type: str) -> tuple[str, str | None]:
    if fmt == "kitops":
        return mt.KITOPS_LAYER_TYPES.get(media_type, ("other", "tar"))
    for table in (mt.MODELPACK_LAYER_TYPES, mt.DOCKER_AI_LAYER_TYPES):
        if media_type in table:
            return table[media_type]
    if media_type in mt.TAR_LAYER_TYPES or media_type in mt.GZIP_LAYER_TYPES or media_type == mt.MEDIA_TYPE_LAYER_TAR_ZSTD:
        return "other", ("tar+gzip" if media_type in mt.GZIP_LAYER_TYPES else
                         "tar+zstd" if media_type == mt.MEDIA_TYPE_LAYER_TAR_ZSTD else "tar")
    return "other", None


def role_of(name: str) -> str:
    """The role of a file by its name: ``mmproj`` (a ``.gguf`` whose name says mmproj),
    ``weight`` (another ``.gguf``, ``.safetensors``), ``license`` (``LICENSE*``),
    ``chat-template`` (``.jinja``), ``doc`` (``README*``, ``.md``, ``.txt``), ``weight-config``
    (anything else: ``tokenizer.json``, ``config.json``)."""
    low = name.lower()
    if low.endswith(".gguf"):
        return "mmproj" if "mmproj" in low else "weight"
    if low.endswith(".safetensors"):
        return "weight"
    if low.startswith(("license", "licence", "copying")):
        return "license"
    if low.endswith(".jinja"):
        return "chat-template"
    if low.startswith("readme") or low.endswith((".md", ".txt")):
        return "doc"
    return "weight-config"


_DOCKER_NAMES = {"mmproj": "mmproj.gguf", "license": "LICENSE", "chat-template": "template.jinja"}


def _names(fmt: str, descs: Sequence[Descriptor]) -> list[str]:
    """Each layer's file name: ``org.cncf.model.filepath``, else ``org.opencontainers.image.title``,
    else by role (Docker v0.1: ``model.gguf``/``model-0000N-of-0000M.gguf``, ...), else the
    digest's first 12 hex digits."""
    out: list[str] = []
    gguf_unnamed = [d for d in descs if not _annotated_name(d) and _role(fmt, d.media_type)[0] == "weight"]
    n = 0
    for d in descs:
        name = _annotated_name(d)
        role, archive = _role(fmt, d.media_type)
        if not name:
            if role == "weight" and archive is None and d.media_type == mt.MEDIA_TYPE_DOCKER_AI_GGUF:
                n += 1
                name = "model.gguf" if len(gguf_unnamed) == 1 else f"model-{n:05d}-of-{len(gguf_unnamed):05d}.gguf"
            elif role in _DOCKER_NAMES and _DOCKER_NAMES[role] not in out:
                name = _DOCKER_NAMES[role]
            else:
                name = f"{role}-{d.hex[:12]}"
        problem = path_problem(name)
        if problem:
            raise ModelArtifactError(f"layer {d.digest}: file name {name!r}: {problem}")
        if name in out:
            raise ModelArtifactError(f"layer {d.digest}: file name {name!r} is already another layer's")
        out.append(name)
    return out


def _annotated_name(d: Descriptor) -> str | None:
    ann = d.annotations or {}
    for key in (mt.ANNOTATION_MODELPACK_FILEPATH, mt.ANNOTATION_TITLE):
        v = ann.get(key)
        if isinstance(v, str) and v:
            return v[2:] if v.startswith("./") else v
    return None


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int) and v > 0:
        return v
    if isinstance(v, str) and v.isascii() and v.isdigit() and int(v) > 0:
        return int(v)
    return None


def read_artifact(manifest: bytes, config: bytes) -> ModelArtifact:
    """The :class:`ModelArtifact` of a manifest and its config (both as bytes; the config's
    digest is checked against the manifest's descriptor). Raises :class:`ModelArtifactError`
    (unknown format, malformed manifest or config, a layer name that escapes its directory)."""
    config_desc = manifest_config(manifest)
    actual = str(Digest.of_bytes(config))
    if actual != config_desc.digest:
        raise ModelArtifactError(f"model config is {actual}, the manifest names {config_desc.digest}")
    fmt = detect_format(manifest, config)
    doc = _json(manifest, "model manifest")
    raw_layers = doc.get("layers")
    if not isinstance(raw_layers, list) or not raw_layers:
        raise ModelArtifactError(f"model manifest has no layers ({_found(doc)})")
    descs = [_descriptor(x, f"model manifest layer {i}") for i, x in enumerate(raw_layers)]
    names = _names(fmt, descs)
    layers = []
    for d, name in zip(descs, names):
        role, archive = _role(fmt, d.media_type)
        if role == "other" and archive is None:
            role = role_of(name)  # a layer type that says nothing (RamaLama's octet-stream): the name does
        if fmt == "ramalama-image":
            if archive is None:
                raise ModelArtifactError(f"RamaLama model image layer {d.digest} has media type {d.media_type}, "
                                         "not a tar layer")
            layers.append(ModelFile(name, d.digest, d.size, d.media_type, "weight", archive, mt.RAMALAMA_MODELS_DIR))
            continue
        layers.append(ModelFile(name, d.digest, d.size, d.media_type, role, archive))
    annotations = {k: v for k, v in (doc.get("annotations") or {}).items() if isinstance(v, str)} \
        if isinstance(doc.get("annotations"), dict) else {}
    facts: dict[str, Any] = {}
    cfg = _json(config, "model config") if config.strip() not in (b"", b"{}") else {}
    if fmt == "modelpack":
        desc, conf = cfg.get("descriptor") or {}, cfg.get("config") or {}
        if not isinstance(desc, dict) or not isinstance(conf, dict):
            raise ModelArtifactError("ModelPack config: descriptor and config must be objects")
        facts = {"model_format": _text(conf.get("format")), "architecture": _text(conf.get("architecture")),
                 "parameters": _text(conf.get("paramSize")), "quantization": _text(conf.get("quantization")),
                 "name": _text(desc.get("name")), "version": _text(desc.get("version")),
                 "created": _text(desc.get("createdAt"))}
    elif fmt.startswith("docker"):
        conf, desc = cfg.get("config") or {}, cfg.get("descriptor") or {}
        if not isinstance(conf, dict) or not isinstance(desc, dict):
            raise ModelArtifactError("Docker model config: config and descriptor must be objects")
        facts = {"model_format": _text(conf.get("format")), "architecture": _text(conf.get("architecture")),
                 "parameters": _text(conf.get("parameters")), "quantization": _text(conf.get("quantization")),
                 "context_length": _int(conf.get("context_size")), "created": _text(desc.get("created"))}
    elif fmt == "kitops":
        pkg, model = cfg.get("package") or {}, cfg.get("model") or {}
        if isinstance(pkg, dict) and isinstance(model, dict):
            facts = {"name": _text(model.get("name")) or _text(pkg.get("name")),
                     "version": _text(model.get("version")) or _text(pkg.get("version")),
                     "model_format": _text(model.get("format"))}
    if facts.get("context_length") is None:
        facts["context_length"] = _int(annotations.get(mt.ANNOTATION_LEMONPACK_CONTEXT_LENGTH))
    if fmt == "ramalama-image":
        facts["name"] = _text(((cfg.get("config") or {}).get("Labels") or {}).get(mt.ANNOTATION_TITLE)) \
            if isinstance(cfg.get("config"), dict) and isinstance(cfg["config"].get("Labels"), dict) else None
    if facts.get("model_format") is None and any(f.is_gguf for f in layers):
        facts["model_format"] = "gguf"
    return ModelArtifact(fmt, tuple(layers), config_digest=config_desc.digest, manifest_annotations=annotations,
                         **facts)


# -------------------------------------------------------------------------------- writing
@dataclass(frozen=True)
class PackFile:
    """A file to push: ``name`` (its file name in the artifact), ``digest``, ``size`` bytes,
    ``role`` (``weight`` for a model's GGUF and its splits, ``mmproj`` for a projector,
    ``doc``, ``weight-config`` ...)."""

    name: str
    digest: str
    size: int
    role: str = "weight"


@dataclass(frozen=True)
class ModelFacts:
    """What the main weight file's GGUF header says (:func:`facts_from_gguf`): ``architecture``
    (``general.architecture``), ``parameters`` (``general.size_label`` or the tensors' element
    count, as ``"1.2B"``/``"35M"``), ``quantization`` (``general.file_type`` as llama.cpp names
    it, ``Q4_K_M``), ``context_length`` (``<arch>.context_length``), ``name``
    (``general.name``), ``parameter_count`` (elements of all tensors)."""

    architecture: str | None = None
    parameters: str | None = None
    quantization: str | None = None
    context_length: int | None = None
    name: str | None = None
    parameter_count: int | None = None


def _count_label(n: int) -> str:
    for unit, div in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= div:
            v = n / div
            return f"{v:.1f}{unit}".replace(".0" + unit, unit) if v < 100 else f"{v:.0f}{unit}"
    return str(n)


def facts_from_gguf(identity: Any) -> ModelFacts:
    """:class:`ModelFacts` from a :class:`lemonpack.gguf_header.ModelIdentity` (pure)."""
    meta = identity.metadata
    arch = identity.architecture
    count = 0
    for t in identity.tensors:
        n = 1
        for d in t.shape:
            n *= int(d)
        count += n
    label = meta.get("general.size_label")
    quant = None
    file_type = meta.get("general.file_type")
    if isinstance(file_type, int) and not isinstance(file_type, bool):
        from gguf.constants import LlamaFileType

        try:
            quant = LlamaFileType(file_type).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            quant = None
    if quant is None and identity.tensors:
        types = [t.type for t in identity.tensors]
        quant = max(sorted(set(types)), key=types.count)
    ctx = meta.get(f"{arch}.context_length") if arch else None
    return ModelFacts(architecture=arch, parameters=label if isinstance(label, str) and label else
                      (_count_label(count) if count else None), quantization=quant,
                      context_length=ctx if isinstance(ctx, int) and not isinstance(ctx, bool) and ctx > 0 else None,
                      name=_text(meta.get("general.name")), parameter_count=count or None)


@dataclass(frozen=True)
class Packed:
    """A manifest and its config as bytes, ready to push (config first, then the manifest);
    ``media_type`` is the manifest's, ``digest`` its sha256."""

    manifest: bytes
    config: bytes
    media_type: str = mt.MEDIA_TYPE_IMAGE_MANIFEST

    @property
    def digest(self) -> str:
        """The manifest's digest."""
        return str(Digest.of_bytes(self.manifest))

    @property
    def config_digest(self) -> str:
        """The config's digest."""
        return str(Digest.of_bytes(self.config))


def _rfc3339(epoch: int) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


_MODELPACK_RAW = {"weight": mt.MEDIA_TYPE_MODELPACK_WEIGHT_RAW, "mmproj": mt.MEDIA_TYPE_MODELPACK_WEIGHT_RAW,
                  "weight-config": mt.MEDIA_TYPE_MODELPACK_WEIGHT_CONFIG_RAW, "doc": mt.MEDIA_TYPE_MODELPACK_DOC_RAW,
                  "license": mt.MEDIA_TYPE_MODELPACK_DOC_RAW, "code": mt.MEDIA_TYPE_MODELPACK_CODE_RAW,
                  "dataset": mt.MEDIA_TYPE_MODELPACK_DATASET_RAW}


def _check_files(files: Sequence[PackFile]) -> None:
    if not files:
        raise ValueError("a model artifact needs at least one file")
    seen: set[str] = set()
    for f in files:
        problem = path_problem(f.name)
        if problem:
            raise ModelArtifactError(f"model file name {f.name!r}: {problem}")
        if f.name in seen:
            raise ModelArtifactError(f"two files are named {f.name!r}")
        seen.add(f.name)
        Digest.parse(f.digest)


def write_modelpack(files: Sequence[PackFile], facts: ModelFacts, *, created: int, name: str,
                    version: str | None = None) -> Packed:
    """A CNCF ModelPack manifest and config for ``files`` (in order: one raw layer each, the
    ``org.cncf.model.filepath`` and ``org.opencontainers.image.title`` annotations both the
    file's name), ``facts`` of the main weight file, ``created`` (seconds since the epoch:
    ``SOURCE_DATE_EPOCH``), the descriptor's ``name`` and ``version``. Config: ``descriptor``
    {name, version, createdAt}, ``modelfs`` {type ``layers``, ``diffIds``: the layers' digests,
    raw layers being their own diff ids}, ``config`` {format ``gguf``, architecture, paramSize,
    quantization}: only fields of ``schema/config-schema.json`` (it allows no others). The
    context length goes to the manifest annotation ``dev.lemonpack.model.context-length``."""
    _check_files(files)
    descriptor: dict[str, Any] = {"name": name, "createdAt": _rfc3339(created)}
    if version:
        descriptor["version"] = version
    conf: dict[str, Any] = {"format": "gguf" if any(f.name.lower().endswith(".gguf") for f in files) else ""}
    for key, value in (("architecture", facts.architecture), ("paramSize", facts.parameters),
                       ("quantization", facts.quantization)):
        if value:
            conf[key] = value
    if not conf["format"]:
        del conf["format"]
    config = canonical_json({"descriptor": descriptor, "config": conf,
                             "modelfs": {"type": "layers", "diffIds": [f.digest for f in files]}})
    layers = [{"mediaType": _MODELPACK_RAW.get(f.role, mt.MEDIA_TYPE_MODELPACK_WEIGHT_RAW), "digest": f.digest,
               "size": f.size, "annotations": {mt.ANNOTATION_MODELPACK_FILEPATH: f.name, mt.ANNOTATION_TITLE: f.name}}
              for f in files]
    annotations = {mt.ANNOTATION_CREATED: _rfc3339(created)}
    if facts.context_length:
        annotations[mt.ANNOTATION_LEMONPACK_CONTEXT_LENGTH] = str(facts.context_length)
    manifest = canonical_json({
        "schemaVersion": 2, "mediaType": mt.MEDIA_TYPE_IMAGE_MANIFEST, "artifactType": mt.MEDIA_TYPE_MODELPACK_MANIFEST,
        "config": {"mediaType": mt.MEDIA_TYPE_MODELPACK_CONFIG, "digest": str(Digest.of_bytes(config)),
                   "size": len(config)},
        "layers": layers, "annotations": annotations})
    return Packed(manifest, config)


_DOCKER_TYPES = {"weight": mt.MEDIA_TYPE_DOCKER_AI_GGUF, "mmproj": mt.MEDIA_TYPE_DOCKER_AI_MMPROJ,
                 "license": mt.MEDIA_TYPE_DOCKER_AI_LICENSE, "chat-template": mt.MEDIA_TYPE_DOCKER_AI_CHAT_TEMPLATE}


def write_docker(files: Sequence[PackFile], facts: ModelFacts, *, created: int) -> Packed:
    """Docker Model Runner's v0.1 manifest and config for ``files`` (docker/model-runner
    ``pkg/distribution/types/config.go``: config ``{"config": {format, architecture,
    parameters, quantization, context_size}, "descriptor": {"created"}, "rootfs": {"type":
    "layers", "diff_ids"}}``; GGUF layers ``application/vnd.docker.ai.gguf.v3``, a projector
    ``application/vnd.docker.ai.mmproj``), each layer annotated with ``org.cncf.model.filepath``
    as Docker's own ``partial.NewLayer`` does (and the OCI title)."""
    _check_files(files)
    conf: dict[str, Any] = {"format": "gguf"}
    for key, value in (("architecture", facts.architecture), ("parameters", facts.parameters),
                       ("quantization", facts.quantization)):
        if value:
            conf[key] = value
    if facts.context_length:
        conf["context_size"] = facts.context_length
    config = canonical_json({"config": conf, "descriptor": {"created": _rfc3339(created)},
                             "rootfs": {"type": "layers", "diff_ids": [f.digest for f in files]}})
    layers = [{"mediaType": _DOCKER_TYPES.get(f.role, mt.MEDIA_TYPE_DOCKER_AI_MODEL_FILE), "digest": f.digest,
               "size": f.size, "annotations": {mt.ANNOTATION_MODELPACK_FILEPATH: f.name, mt.ANNOTATION_TITLE: f.name}}
              for f in files]
    manifest = canonical_json({
        "schemaVersion": 2, "mediaType": mt.MEDIA_TYPE_IMAGE_MANIFEST,
        "config": {"mediaType": mt.MEDIA_TYPE_DOCKER_AI_CONFIG_V01, "digest": str(Digest.of_bytes(config)),
                   "size": len(config)},
        "layers": layers})
    return Packed(manifest, config)


__all__ = ["FORMATS", "ModelArtifact", "ModelArtifactError", "ModelFacts", "ModelFile", "PackFile", "Packed",
           "detect_format", "facts_from_gguf", "needs_config", "role_of", "manifest_config", "read_artifact", "write_docker", "write_modelpack"]
