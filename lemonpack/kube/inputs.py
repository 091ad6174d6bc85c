"""The command line's inputs of ``kube generate``, read and checked: models, images, publish.

- :func:`resolve_models`: each MODEL argument is a registered model (``user.*`` in the
  model registry, :mod:`lemonpack.runtime.models.registry`), served by the recipe it is registered
  for; or a model file, served by the recipe the backend selector picks
  (:func:`lemonpack.runtime.selection.selector.select_backend`, seed 001 section 2.3) for the target
  host, where a recipe counts as available when its image is known (an ``--image`` for it, or
  the image of its own container ``run``). Recipes come from one discovery scan; a recipe
  discovery rejected (an ``extends`` whose base is unknown, a ``variant_of`` that names no
  built-in, an unpinned image ...) is named with the rejection.
- :func:`parse_images`: ``RECIPE=HOST/REPO@sha256:DIGEST``, pinned by digest (a tag is
  refused, as ``lint`` refuses it in recipes).
- :func:`parse_publish`: ``HOST:PORT`` with a loopback HOST unless publishing on any address
  is asked for explicitly.
- :func:`parse_probe_exec`: ``--probe-exec`` as a JSON list of argv words, each one podman's
  shell reads as itself (:data:`PROBE_WORD`).
- :func:`check_outputs` / :func:`write_output`: ``--out`` and ``--systemd`` checked before
  anything is generated, and written atomically, every failure naming the user's path (never
  the temporary file a write goes through).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from lemonpack.errors import LemonpackError
from lemonpack.hosts import is_loopback
from lemonpack.kube.accelerators import Target
from lemonpack.kube.generate import KubeError, KubeModel, ModelSource
from lemonpack.oci.cmdline import UnreadableCommandLine, read_container_argv
from lemonpack.oci.reference import check_pinned
from lemonpack.runtime.launch.modelfiles import ModelSpec
from lemonpack.runtime.models.ref import OCI_SCHEME, oci_model_facts, resolve_model
from lemonpack.runtime.models.registry import ModelRegistry
from lemonpack.runtime.selection.selector import (Presence, discovery_order, effective_override, host_block, model_artifact,
                                        select_backend)
from lemonpack.strictjson import nesting_depth


def parse_images(values: Iterable[str]) -> dict[str, str]:
    """``{recipe: image}`` from ``RECIPE=IMAGE`` texts. Raises :class:`KubeError` naming
    ``--image`` for a missing ``=``, a recipe given twice, or an image not pinned by digest."""
    out: dict[str, str] = {}
    for text in values:
        rid, eq, image = text.partition("=")
        if not eq or not rid or not image:
            raise KubeError(f"--image {text!r}: expected RECIPE=HOST/REPO@sha256:DIGEST")
        why = check_pinned(image)
        if why:
            raise KubeError(f"--image {text}: {why}")
        if rid in out and out[rid] != image:
            raise KubeError(f"--image {text}: recipe {rid!r} already has the image {out[rid]}")
        out[rid] = image
    return out


def parse_publish(text: str | None, *, any_address: bool = False) -> tuple[str, int] | None:
    """``(host IP, port)`` from ``HOST:PORT`` (``[::1]:PORT`` for IPv6); None for None.
    Raises :class:`KubeError` naming ``--publish`` for a malformed value, a port outside
    1..65535, or a HOST that is not a loopback address unless ``any_address``
    (``--publish-any``)."""
    if text is None:
        return None
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise KubeError(f"--publish {text!r}: expected HOST:PORT, e.g. 127.0.0.1:8080")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise KubeError(f"--publish {text}: port {port} is outside 1..65535")
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        addr = ipaddress.ip_address(bare)
    except ValueError:
        raise KubeError(f"--publish {text}: {host!r} is not an IP address") from None
    if not is_loopback(str(addr)) and not any_address:
        raise KubeError(f"--publish {text}: {bare} is not a loopback address; publishing the engines on other "
                        "hosts' reach needs --publish-any")
    return str(addr), port


#: One word of ``--probe-exec``: characters a POSIX shell reads as themselves (what
#: :func:`shlex.quote` leaves unquoted), plus ``{port}``. podman 4.3's ``kube play`` joins an exec
#: probe's words with spaces and runs ``/bin/sh -c 'WORDS || exit 1'`` (measured: the healthcheck
#: is ``["CMD-SHELL", word, ..., "||", "exit", "1"]``), while a kubelet executes the words as an
#: argv: only words free of shell syntax mean the same to both.
PROBE_WORD = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
PROBE_PORT = "{port}"


def parse_probe_exec(text: str | None) -> tuple[str, ...] | None:
    """The argv of ``--probe-exec`` (None for None): a JSON list of 1..32 non-empty strings,
    each :data:`PROBE_WORD` after ``{port}`` (the container port, filled in by
    :func:`lemonpack.kube.generate.generate_one`) is taken out, at most 4096 characters in all.
    No shell string is accepted: ``["sh", "-c", "..."]`` is refused by the word rule. Raises
    :class:`KubeError` naming ``--probe-exec`` and the word."""
    if text is None:
        return None
    if len(text) > 4096:
        raise KubeError(f"--probe-exec: {len(text)} characters; at most 4096")
    if nesting_depth(text) > 1:  # an argv is flat; deep nesting would only exhaust the decoder's stack
        raise KubeError("--probe-exec: expected a flat JSON list of strings (an argv), not nested lists")
    try:
        argv = json.loads(text)
    except json.JSONDecodeError as e:
        raise KubeError(f"--probe-exec {text!r}: not a JSON list of strings ({e.msg}), e.g. "
                        '\'["wget", "-q", "--spider", "http://127.0.0.1:{port}/health"]\'') from None
    if not isinstance(argv, list) or not argv or not all(isinstance(w, str) for w in argv):
        raise KubeError(f"--probe-exec {text!r}: expected a non-empty JSON list of strings (an argv)")
    if len(argv) > 32:
        raise KubeError(f"--probe-exec: {len(argv)} words; at most 32")
    for i, word in enumerate(argv):
        if not PROBE_WORD.fullmatch(word.replace(PROBE_PORT, "0")):
            raise KubeError(f"--probe-exec: word {i} {word!r} holds a character a shell would read (podman "
                            "kube play runs the probe through /bin/sh -c); use only letters, digits and "
                            "_@%+=:,./- (and {port})")
    return tuple(argv)


def check_outputs(out: str, systemd: Path | None) -> None:
    """Refuse an ``--out`` (``-``: stdout) that is a directory or lies in no directory, and a
    ``--systemd`` that exists and is not a directory. Raises :class:`KubeError` naming the
    option and the user's path."""
    if out != "-":
        if os.path.isdir(out):
            raise KubeError(f"--out {out}: is a directory; give the YAML file's path "
                            f"(e.g. {Path(out) / 'engines.yaml'})")
        parent = os.path.dirname(os.path.abspath(out))
        if not os.path.isdir(parent):
            from lemonpack.files import non_directory_parent

            blocker = non_directory_parent(out)
            raise KubeError(f"--out {out}: {blocker} is not a directory" if blocker is not None
                            else f"--out {out}: the directory {parent} does not exist")
    if systemd is not None and systemd.exists() and not systemd.is_dir():
        raise KubeError(f"--systemd {systemd}: is not a directory")


def write_output(path: str, data: bytes, option: str) -> None:
    """Write ``data`` to ``path`` atomically (:func:`lemonpack.files.replace_file`). Raises
    :class:`KubeError` naming ``option`` and ``path`` when the disk refuses."""
    from lemonpack.files import os_error_reason, replace_file

    try:
        replace_file(path, data)
    except OSError as e:
        raise KubeError(f"{option}: cannot write {path}: {os_error_reason(e, path)}") from None


def _recipe_image(recipe) -> str | None:
    """The image of a passthrough recipe whose Linux blocks run a container (the first one)."""
    for block in recipe.platforms.get("linux", {}).values():
        if not block.command:
            continue
        try:
            inv = read_container_argv([block.command, *(block.args or ())])
        except UnreadableCommandLine:
            continue
        if inv is not None and inv.subcommand == "run" and inv.image:
            return inv.image
    return None


def _rejection(discovered, rid: str) -> str | None:
    for r in discovered.errors:
        if r.recipe == rid or (r.recipe is None and r.file.stem in (rid, rid.replace("-", "_"))):
            return f"recipe {rid!r} was rejected at {r.file}: {r.kind}: {r.reason}"
    return None


def resolve_models(refs: Sequence[str], *, target: Target, images: Mapping[str, str], discovered,
                   registry: ModelRegistry | None = None,
                   sources: Mapping[str, ModelSource] | None = None,
                   default_source: ModelSource | None = None) -> list[KubeModel]:
    """Each MODEL of ``refs`` as a :class:`KubeModel` (module docstring). ``discovered`` is a
    :class:`~lemonpack.runtime.recipes.discovery.DiscoveryResult`; ``registry`` the model registry
    (default: the user's); ``sources`` a model source per MODEL argument, ``default_source``
    for the others (default ``hostpath``). Raises :class:`KubeError` naming the model and
    the field: no such model or file, a recipe not discovered or rejected, no recipe the
    selector can pick, an ``oci://`` model whose artifact cannot be read.

    A model registered by ``oci://`` (issue 23, point 4) is mounted, unless ``sources`` or
    ``default_source`` say otherwise, as an image volume of its artifact by digest
    (:class:`ModelSource` ``oci``); its pod paths are the artifact's file names and its memory
    request the estimate from the main file's GGUF header
    (:func:`lemonpack.runtime.models.ref.oci_model_facts`: the manifest, config and header are
    fetched into the model store, the weights never)."""
    registry = registry or ModelRegistry()
    sources = sources or {}
    out: list[KubeModel] = []
    for ref in refs:
        source = sources.get(ref, default_source)
        try:  # the one model-argument rule of run and select (runtime.models.ref)
            named = resolve_model(ref, registry=registry)
        except LemonpackError as e:
            raise KubeError(str(e)) from None  # it names the model already (runtime.models.ref)
        if named.entry is None:
            assert named.path is not None, "a model that is no catalogue entry is a file"
            out.append(_file_model(ref, named.path, target, images, discovered, source or ModelSource()))
            continue
        entry = named.entry
        found = discovered.recipes.get(entry.recipe)
        if found is None:
            why = _rejection(discovered, entry.recipe) or f"recipe {entry.recipe!r} is not discovered (lemonpack " \
                                                           "backends list)"
            raise KubeError(f'model {ref}: {registry.path} ["{ref}"].recipe: {why}')
        spec = ModelSpec.from_entry(entry)
        try:  # registered by oci://: the artifact's file names and memory estimate, no weights fetched
            facts = oci_model_facts(spec, found.recipe)
        except LemonpackError as e:
            raise KubeError(f'model {ref}: {registry.path} ["{ref}"].checkpoints: {e}') from None
        if facts is None:
            out.append(KubeModel(ref, spec, found.recipe, source or ModelSource()))
            continue
        if source is None:  # the default for an oci:// model: its artifact as an image volume, by digest
            source = ModelSource("oci", reference=spec.checkpoints["main"][len(OCI_SCHEME):])
        out.append(KubeModel(ref, spec, found.recipe, source, artifact_files=facts.files,
                             artifact_memory=facts.memory))
    return out


def _file_model(ref: str, path: Path, target: Target, images: Mapping[str, str], discovered,
                source: ModelSource) -> KubeModel:
    resolved = path.resolve()
    recipes = [d.recipe for d in discovery_order(discovered.recipes.values())]
    host = target.host_facts()
    presence: dict[str, Presence] = {}
    for r in recipes:
        eff = host_block(r, host)
        if isinstance(eff, str):
            continue
        if r.recipe in images:
            presence[r.recipe] = Presence(True, f"--image {r.recipe}={images[r.recipe]}")
        elif (img := _recipe_image(r)) is not None:
            presence[r.recipe] = Presence(True, f"image {img} (its container run)")
        else:
            presence[r.recipe] = Presence(False, f"an image (no --image {r.recipe}=...)")
    override, src = effective_override(None, None)
    sel = select_backend(model_artifact(ref, str(resolved)), recipes, host, presence, override=override,
                         override_source=src)
    if sel.outcome != "recipe" or sel.recipe is None:
        raise KubeError(f"model {ref}: recipe: no recipe serves it on {target}: {sel.message}")
    recipe = discovered.recipes[sel.recipe].recipe
    spec = ModelSpec(name=resolved.stem, checkpoints={"main": os.fspath(resolved)}, model_dir=str(resolved.parent))
    return KubeModel(resolved.stem, spec, recipe, source)


__all__ = ["PROBE_PORT", "PROBE_WORD", "check_outputs", "parse_images", "parse_probe_exec", "parse_publish",
           "resolve_models", "write_output"]
