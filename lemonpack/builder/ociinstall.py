"""``lemonpack install oci://HOST/REPO@sha256:...``: install a recipe's artifact from a registry.

The same install as :mod:`lemonpack.builder.install` (same block choice, same destination and
receipt, removed by :func:`lemonpack.builder.install.uninstall`), with the artifact taken from
an image ``lemonpack publish`` pushed instead of its origin URL.

Install from a registry: the reference (a recipe's image index or one target's image
manifest, as ``lemonpack publish`` pushed them) is pulled into a scratch layout, every
manifest and blob verified (:func:`lemonpack.registry.transfer.pull_layout`), and, when a
key is given, its cosign signature checked first (:func:`lemonpack.signing.remote.verify_image`).
The recipe travels inside the image (layer 2: ``etc/lemonpack/recipes/<recipe>.json``); it
is loaded and validated, the host's block is chosen exactly as ``lemonpack install`` does
(:func:`lemonpack.builder.install.plan_install`), and that target's artifact layer
(``opt/lemonpack/<recipe>/``) is extracted safely. Its recorded artifact sha256 must be
the one the recipe pins.

The new tree replaces ``<cache>/external/<recipe>/`` as every install ends
(:func:`lemonpack.builder.install.commit_install`: one ``renameat2(RENAME_EXCHANGE)``, no
moment without an install, no half install); the receipt ``<cache>/external/<recipe>.install.json`` (the record ``lemonpack
install`` writes, plus ``from``: reference, digests, signature) is written by temp + rename
right after, and a copy travels inside the tree (``.lemonpack-install.json``). Any failure
before the exchange leaves the previous install and receipt untouched.
"""

from __future__ import annotations

import json
import os
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ec

from lemonpack.builder.artifact import check_executables
from lemonpack.builder.install import DISCLOSURE, commit_install
from lemonpack.digest import sha256_text
from lemonpack.errors import BuildError, IntegrityError, RegistryError, SelectionError, StorageError
from lemonpack.fetch.archive import extract
from lemonpack.oci.descriptor import Descriptor
from lemonpack.oci.layout_reader import read_json_blob, read_layout, verify_blob
from lemonpack.oci.mediatypes import MEDIA_TYPE_IMAGE_INDEX
from lemonpack.paths import external_dir, require_cache_root

ANNOTATION_PREFIX = "dev.lemonpack."
TREE_RECEIPT = ".lemonpack-install.json"


def _json(layout: Path, desc: Descriptor, what: str) -> dict:
    """The JSON object of the small blob ``desc`` (:func:`~lemonpack.oci.layout_reader.read_json_blob`)."""
    return read_json_blob(layout, desc, f"{layout}: {what}")


def image_manifests(layout: Path, root: Descriptor) -> list[tuple[str, dict]]:
    """``[(digest, manifest)]`` of the image manifests the pulled ``root`` (a descriptor of the
    layout's index) reaches: itself, or an index's children. Every blob is read through
    :func:`~lemonpack.oci.layout_reader.read_blob` (regular file, size, digest): LayoutError
    (:class:`~lemonpack.errors.LayoutBlobError` for other bytes or size) naming the blob."""
    doc = _json(layout, root, "image")
    if root.media_type == MEDIA_TYPE_IMAGE_INDEX or doc.get("mediaType") == MEDIA_TYPE_IMAGE_INDEX:
        out = []
        for d in doc.get("manifests", []):
            child = Descriptor.from_json(d)
            out.append((child.digest, _json(layout, child, "image manifest")))
        return out
    return [(root.digest, doc)]


def recipe_from_image(layout: Path, manifest: dict, where: str):
    """The recipe a lemonpack image carries (its second layer, ``recipe.json``), loaded and
    validated like a file; ``where`` names the image in errors. Raises LemonpackError for an
    image that is not lemonpack's (no recipe layer) or a recipe that does not validate."""
    from lemonpack.contract.loader import load_recipe_text

    layers = manifest.get("layers", [])
    if len(layers) < 2:
        raise RegistryError(f"{where}: not a lemonpack image (no recipe layer)")
    recipe_layer = verify_blob(layout, Descriptor.from_json(layers[1]), f"{where}: recipe layer")
    with tarfile.open(recipe_layer, "r:*") as tf:
        for member in tf:
            if member.isfile() and member.name.startswith("etc/lemonpack/recipes/") and member.name.endswith(".json"):
                f = tf.extractfile(member)
                if f is not None:  # a regular member always has one
                    return load_recipe_text(f.read(1 << 20).decode("utf-8"), f"{where}:{member.name}")
    raise RegistryError(f"{where}: not a lemonpack image (no etc/lemonpack/recipes/*.json in layer 2)")


def install_reference(reference: str):
    """``reference`` (``[oci://]HOST/REPO@sha256:...``) parsed, as :func:`install_from_registry`
    needs it: a :class:`~lemonpack.oci.reference.ImageReference` with a digest. Raises LemonpackError
    (exit 1) for a malformed reference or one without a digest (a tag can move: what is
    installed must be what was reviewed). Checked before anything is printed or fetched."""
    from lemonpack.oci.reference import parse_registry_reference

    ref = parse_registry_reference(reference)
    if not ref.digest:
        raise RegistryError(f"{reference}: install from a registry needs a digest: oci://HOST/REPO@sha256:... "
                            "(`lemonpack publish --json` prints it)")
    return ref


def install_from_registry(reference: str, *, public_key: ec.EllipticCurvePublicKey | None = None,
                          insecure: bool = False, accelerator: str | None = None, arch: str | None = None,
                          host=None, client=None, registry_config: str | os.PathLike[str] | None = None,
                          policy: str | os.PathLike[str] | None = None,
                          registries_d: str | os.PathLike[str] | None = None) -> dict:
    """Install the recipe artifact published at ``reference`` (``[oci://]HOST/REPO@sha256:...``).

    The trust policy (containers-policy.json, :mod:`lemonpack.trust.check`) judges the
    reference first (``policy``/``registries_d``: ``--policy``/``--registries.d``, else the
    default places): a rejection is a :class:`~lemonpack.errors.TrustError` and nothing is
    pulled or written. ``public_key``: verify the reference's cosign signature first (nothing is pulled when it
    does not hold). ``registry_config``: an auth file read first. ``host``: a :class:`~lemonpack.contract.HostFacts` (default: detected).
    Returns the receipt: ``{"recipe", "path", "binary", "source", "sha256", "policy",
    "platform", "from": {"reference", "digest", "manifest", "layer", "signature"}}``.
    Raises SignatureError, IntegrityError, FetchError (nothing changed), SelectionError,
    LemonpackError (no digest in the reference; not a lemonpack image; nothing to install;
    the artifact's recorded sha256 differs from the recipe's pin), StorageError.
    """
    from lemonpack.builder.install import plan_install
    from lemonpack.contract import detect_host
    from lemonpack.registry import RegistryClient
    from lemonpack.registry.transfer import pull_layout
    from lemonpack.signing.remote import verify_image

    from lemonpack.trust.check import Trust

    ref = install_reference(reference)
    c = client if client is not None else RegistryClient(ref.host, insecure=insecure, registry_config=registry_config)
    signature = None
    try:
        trust = Trust.load(policy, registries_d, insecure=insecure, registry_config=registry_config)
        trust.enforce(str(ref), use="install", client=c)  # by its digest: what is judged is what is pulled
        if public_key is not None:
            signature = verify_image(str(ref), public_key, client=c)
        cache = require_cache_root()
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache, prefix=".oci-install-") as tmp:
            layout = Path(tmp) / "layout"
            pulled = pull_layout(ref, layout, c, tag="install")
            images = image_manifests(layout, read_layout(layout)[pulled.tag])
            if not images:
                raise RegistryError(f"{ref}: holds no image manifest")
            recipe = recipe_from_image(layout, images[0][1], str(ref))
            plan = plan_install(recipe, host or detect_host(), accelerator=accelerator, arch=arch)
            target = plan.block.target_name
            chosen = [(d, m) for d, m in images
                      if (m.get("annotations") or {}).get(ANNOTATION_PREFIX + "target") == target]
            if not chosen:
                have = [(m.get("annotations") or {}).get(ANNOTATION_PREFIX + "target", "?") for _, m in images]
                raise SelectionError(f"{ref}: no image for target {target} of {recipe.recipe} "
                                     f"(it holds: {', '.join(have)})")
            cpus = [(_json(layout, Descriptor.from_json(m["config"]), "image config").get("architecture"), d, m)
                    for d, m in chosen]
            mine = [(d, m) for cpu, d, m in cpus if cpu == plan.cpu_arch]
            if not mine:
                raise SelectionError(f"{ref}: the image of target {target} is for "
                                     f"{', '.join(sorted({str(c) for c, _, _ in cpus}))}, not this host's CPU "
                                     f"{plan.cpu_arch} (publish a build with --cpu-arch {plan.cpu_arch})")
            digest, manifest = mine[0]
            ann = manifest.get("annotations") or {}
            prov = plan.block.provenance
            recorded = ann.get(ANNOTATION_PREFIX + "sha256", "")
            if prov.sha256 and recorded != sha256_text(prov.sha256):
                raise IntegrityError(f"{ref}: artifact recorded for {target}", sha256_text(prov.sha256),
                                     recorded or "(none)")
            layer = manifest["layers"][0]
            record = {"recipe": recipe.recipe, "path": str(external_dir(recipe.recipe)), "binary": plan.block.binary,
                      "source": prov.source, "sha256": recorded or None, "policy": prov.policy,
                      "platform": plan.block.path,
                      "from": {"reference": str(ref), "digest": pulled.digest, "manifest": digest,
                               "layer": layer["digest"],
                               "signature": None if signature is None else
                               {"verified": len(signature["verified"]), "checked": signature["checked"]}}}
            unpacked = Path(tmp) / "unpacked"
            artifact = verify_blob(layout, Descriptor.from_json(layer), f"{ref}: artifact layer")
            extract(artifact, unpacked, name_hint="layer.tar.gz",
                    label=f"{ref} layer {layer['digest']}")
            tree = unpacked / "opt" / "lemonpack" / recipe.recipe
            if not tree.is_dir() or (plan.block.binary and not (tree / plan.block.binary).is_file()):
                raise BuildError(f"{ref}: the artifact layer has no opt/lemonpack/{recipe.recipe}/"
                                 f"{plan.block.binary or ''}")
            check_executables(tree, plan.cpu_arch, f"{ref}: artifact layer {layer['digest']} of {target}")
            (tree / TREE_RECEIPT).write_text(json.dumps(record, indent=2) + "\n")
            return commit_install(external_dir(recipe.recipe), record, lambda staged: os.rename(tree, staged))
    except OSError as exc:
        raise StorageError(f"{reference}: cannot install: {exc.strerror or exc}") from None
    finally:
        if client is None:
            c.close()


@dataclass(frozen=True)
class OciInstallPlan:
    """An install from a registry, checked and ready for the user's consent: ``reference`` as
    given, ``public_key`` to verify its signature with (None: not checked) and ``key`` the
    option that named it (for the disclosure), the target choice (``accelerator``, ``arch``),
    ``insecure`` and ``registry_config`` for the registry, ``policy``/``registries_d`` for the
    trust policy (None: the default places). ``warnings``: none (the block is
    chosen after the pull); present so an install plan of either kind prints alike."""

    reference: str
    public_key: ec.EllipticCurvePublicKey | None = None
    key: str | None = None
    accelerator: str | None = None
    arch: str | None = None
    insecure: bool = False
    registry_config: str | os.PathLike[str] | None = None
    warnings: tuple[str, ...] = ()
    policy: str | os.PathLike[str] | None = None
    registries_d: str | os.PathLike[str] | None = None

    def disclosure(self) -> list[str]:
        """The lines printed before asking for consent: the source, whether the signature is
        checked, and the no-sandbox warning (section 10)."""
        signature = f"will be checked with {self.key}" if self.key else "not checked (no --key)"
        return [f"{'source:':<16}{self.reference}", f"{'signature:':<16}{signature}", DISCLOSURE]

    def install(self) -> dict:
        """:func:`install_from_registry` for this plan; returns its receipt."""
        return install_from_registry(self.reference, public_key=self.public_key, insecure=self.insecure,
                                     accelerator=self.accelerator, arch=self.arch,
                                     registry_config=self.registry_config, policy=self.policy,
                                     registries_d=self.registries_d)


def prepare_oci_install(reference: str, *, key: str | None = None,
                        read_key: Callable[[str], ec.EllipticCurvePublicKey] | None = None,
                        accelerator: str | None = None, arch: str | None = None, insecure: bool = False,
                        registry_config: str | os.PathLike[str] | None = None,
                        policy: str | os.PathLike[str] | None = None,
                        registries_d: str | os.PathLike[str] | None = None) -> OciInstallPlan:
    """Check everything the user gave for an install from a registry before consent is asked
    (a question for an install that cannot happen asks for nothing), in this order: the
    reference (:func:`install_reference`), the key (``read_key(key)``, the CLI's key-option
    reader), the registry auth files (:func:`lemonpack.registry.auth.auth_files`), the trust
    policy's files (a malformed policy is refused before consent is asked). Returns the
    :class:`OciInstallPlan`. Raises what those raise."""
    from lemonpack.registry.auth import auth_files

    install_reference(reference)
    public = read_key(key) if key and read_key is not None else None
    auth_files(registry_config)
    from lemonpack.trust.check import Trust

    Trust.load(policy, registries_d)
    return OciInstallPlan(reference, public, key, accelerator, arch, insecure, registry_config,
                          policy=policy, registries_d=registries_d)
