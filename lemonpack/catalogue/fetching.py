"""Fetching an entry's source and checking its digest: what ``catalogue build`` verifies and
what ``catalogue fetch`` (the download step the catalogue shows) hands a user.

Sources (:class:`lemonpack.catalogue.sources.EntrySource`): ``https`` (a recipe file or an
extension archive, through the verified fetch path: cache, mirror, streaming sha256), ``git``
(a bare ``git clone`` and ``git archive`` of one commit's path; the digest of a directory is
:func:`tree_digest`), ``oci`` (a recipe pulled by digest through the registry client). Every
input is bounded (:mod:`.bounded`): a recipe by lint's size limit, an archive by members,
extracted size and expansion ratio before extraction.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lemonpack.digest import Digest, sha256_text
from lemonpack.files import commit, os_error_reason, replace_file
from lemonpack.catalogue import bounded
from lemonpack.errors import CatalogueError, FetchError, IntegrityError, OutputError, one_line
from lemonpack.fetch import ArtifactCache, Mirror, detect_format, extract, fetch


@dataclass
class Fetched:
    """What an entry's source gave: ``digest`` (``sha256:<hex>``), the signed ``subject``
    bytes (the file, the archive, or a tree listing), and ``path`` (a recipe file or an
    extension directory) inside the work directory; ``recipe_text`` for recipes."""

    digest: str
    subject: bytes
    path: Path
    recipe_text: str | None = None
    oci_ref: str | None = None


def tree_digest(root: Path) -> tuple[str, bytes]:
    """The digest of a directory: ``sha256`` of its listing, one line per regular file,
    ``<sha256 hex>  <relative path>\\n`` (``sha256sum`` output), sorted by path (bytes);
    returns ``("sha256:<hex>", listing)``. Symlinks and other non-regular files raise
    :class:`LemonpackError` (an entry's tree must be plain files)."""
    lines: list[bytes] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            if p.is_symlink():
                raise CatalogueError(f"{p}: symlinks are not allowed in a catalogue entry")
        for name in filenames:
            p = Path(dirpath, name)
            rel = p.relative_to(root).as_posix()
            lines.append(f"{Digest.of_bytes(p.read_bytes()).hex}  {rel}\n".encode())
    lines.sort(key=lambda line: line.split(b"  ", 1)[1])
    listing = b"".join(lines)
    return str(Digest.of_bytes(listing)), listing


def _git(*args: str, cwd: Path | None = None) -> bytes:
    git = shutil.which("git")
    if git is None:
        raise FetchError("git is not installed: git entries cannot be fetched")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_TERMINAL_PROMPT": "0", "HOME": str(cwd or "/"),
           "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C"}
    proc = subprocess.run([git, *args], cwd=cwd, env=env, capture_output=True, timeout=300)
    if proc.returncode != 0:
        raise FetchError(f"git {args[0]} failed: {one_line(proc.stderr.decode('utf-8', 'replace').strip())[:300]}")
    return proc.stdout


def _bounded_extract(archive: Path, dest: Path, name_hint: str, label: str) -> None:
    """:func:`lemonpack.fetch.extract` after :func:`bounded.check_archive` (UnsafeContentError)."""
    bounded.check_archive(archive, detect_format(archive, name_hint), label)
    extract(archive, dest, name_hint=name_hint, label=label)


def fetch_source(kind: str, src: dict, work: Path, *, cache: ArtifactCache | None = None,
                 mirror: Mirror | None = None, client: Any = None, insecure_registry: bool = False,
                 registry_config: Path | None = None) -> Fetched:
    """Fetch the source ``src`` (an entry's ``[source]`` table) of an entry of ``kind``
    (``recipe`` / ``extension``) into ``work`` and check its digest. Raises IntegrityError
    (digest mismatch), FetchError, UnsafeContentError (too large, an archive bomb, a hostile
    member), LemonpackError."""
    cache = cache or ArtifactCache()
    if not (src["type"] == "https" and kind == "recipe"):  # a recipe file needs no room
        work.mkdir(parents=True, exist_ok=True)
    if src["type"] == "https":
        limit = bounded.MAX_RECIPE_BYTES if kind == "recipe" else bounded.MAX_ARCHIVE_BYTES
        got = bounded_fetch(src["url"], src["sha256"], limit, cache=cache, mirror=mirror, client=client)
        if kind == "recipe":
            bounded.check_recipe_size(got.path, bounded.short(src["url"], 120))
            data = got.path.read_bytes()
            return Fetched(sha256_text(got.sha256), data, got.path, recipe_text=data.decode("utf-8", "replace"))
        dest = work / "tree"
        label = bounded.short(src["url"], 200)
        _bounded_extract(got.path, dest, src["url"].rsplit("/", 1)[-1].split("?", 1)[0] or "archive", label)
        return Fetched(sha256_text(got.sha256), got.path.read_bytes(), _extension_root(dest))
    if src["type"] == "git":
        label = bounded.short(f"{src['url']}@{src['commit']}", 200)
        repo = work / "repo.git"
        _git("clone", "--quiet", "--bare", "--no-hardlinks", "--", src["url"], str(repo))
        tar = work / "tree.tar"
        with open(tar, "wb") as f:
            git = shutil.which("git") or "git"
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C",
                   "HOME": str(repo)}
            proc = subprocess.run([git, "archive", "--format=tar", src["commit"], "--", src["path"]], cwd=repo,
                                  env=env, stdout=f, stderr=subprocess.PIPE, timeout=300)
        if proc.returncode != 0:
            raise FetchError(f"git archive failed: {one_line(proc.stderr.decode('utf-8', 'replace').strip())[:300]}")
        dest = work / "tree"
        _bounded_extract(tar, dest, "tree.tar", label)
        target = dest / src["path"]
        if kind == "recipe":
            if not target.is_file():
                raise FetchError(f"{src['path']} is not a file at commit {src['commit']}")
            bounded.check_recipe_size(target, label)
            data = target.read_bytes()
            digest = str(Digest.of_bytes(data))
            subject, text = data, data.decode("utf-8", "replace")
        else:
            if not target.is_dir():
                raise FetchError(f"{src['path']} is not a directory at commit {src['commit']}")
            digest, subject = tree_digest(target)
            text = None
        if digest != src["sha256"]:
            raise IntegrityError(f"{src['url']}@{src['commit']}:{src['path']}", src["sha256"], digest)
        return Fetched(digest, subject, target, recipe_text=text)
    if src["type"] == "oci":
        return _fetch_oci(kind, src, work, insecure_registry, registry_config)
    raise CatalogueError(f"unknown source type {src['type']!r}")


def bounded_fetch(url: str, sha256: str | None, max_bytes: int, *, cache: ArtifactCache,
                  mirror: Mirror | None = None, client: Any = None):
    """:func:`lemonpack.fetch.fetch` of ``url`` with the catalogue's transfer bounds
    (:func:`bounded.transfer_bounds` of ``max_bytes``) applied to ``client`` (default: a new
    :func:`lemonpack.fetch.download.download_client`, closed after) for this fetch only.
    Raises what ``fetch`` raises; a broken bound is a FetchError naming the URL and the bound."""
    from lemonpack.fetch.download import download_client
    from lemonpack.httpclient import bounded as with_bounds

    own = client is None
    c = download_client() if own else client
    try:
        with with_bounds(c, bounded.transfer_bounds(max_bytes)):
            return fetch(url, sha256=sha256, cache=cache, mirror=mirror, progress=False, client=c)
    finally:
        if own:
            c.close()


def _extension_root(dest: Path) -> Path:
    if (dest / "extension.json").is_file():
        return dest
    subs = [p for p in dest.iterdir() if p.is_dir()]
    if len(subs) == 1 and (subs[0] / "extension.json").is_file():
        return subs[0]
    raise CatalogueError("the archive holds no extension.json at its top or in its one top directory")


def _fetch_oci(kind: str, src: dict, work: Path, insecure: bool, registry_config: Path | None) -> Fetched:
    """Pull ``HOST/REPO@sha256:..`` into an OCI layout (every digest verified by the registry
    client) and read the recipe from the image's recipe layer (what ``lemonpack build`` writes)."""
    from lemonpack.oci.reference import parse_registry_reference
    from lemonpack.registry import RegistryClient
    from lemonpack.registry.transfer import pull_layout
    from lemonpack.builder.ociinstall import image_manifests, recipe_from_image
    from lemonpack.oci.layout_reader import read_layout

    if kind != "recipe":
        raise CatalogueError("OCI sources are supported for recipes only")
    ref = parse_registry_reference(src["ref"])
    layout = work / "layout"
    client = RegistryClient(ref.host, insecure=insecure, registry_config=registry_config)
    pulled = pull_layout(ref, layout, client)
    manifests = image_manifests(layout, read_layout(layout)[pulled.tag])
    if not manifests:
        raise CatalogueError("the image has no image manifest")
    recipe = recipe_from_image(layout, manifests[0][1], src["ref"])
    text = recipe.canonical.decode()
    assert ref.digest is not None, "the entry schema pins an OCI source by digest"
    return Fetched(ref.digest, text.encode(), layout, recipe_text=text, oci_ref=src["ref"])


def fetch_to(kind: str, src: dict, out: Path, *, mirror: Mirror | None = None,
             cache: ArtifactCache | None = None) -> str:
    """``catalogue fetch``: fetch ``src`` as the build does, check its digest, and only then
    put the recipe file (``kind`` recipe) or the extension directory (``kind`` extension) at
    ``out`` (a file is replaced atomically; a directory must not exist yet). Returns the
    digest. Raises IntegrityError (exit 3: nothing is written), FetchError,
    UnsafeContentError, LemonpackError (``out`` exists)."""
    given, out = out, Path(out).absolute()
    if kind == "extension" and (out.exists() or out.is_symlink()):
        raise OutputError(f"{out} exists: choose another --out, or remove it first")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot write {given}: {os_error_reason(exc, given)}") from None
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.fetch-", dir=out.parent) as tmp:
        got = fetch_source(kind, src, Path(tmp) / "w", cache=cache, mirror=mirror)
        if kind == "recipe":
            replace_file(out, got.subject)
        else:
            commit(got.path, out, durable=True)
    return got.digest
