"""Fetch and unpack one target's artifact, with errors that name the recipe and field.

Shared by ``lemonpack build`` (the image layer) and ``lemonpack install`` (the runtime's
install directory), so both verify, unpack and check the same way: the effective
``source`` is fetched and verified (:func:`lemonpack.fetch.fetch`; ``roll_forward``
records the observed hash), unpacked safely (:func:`lemonpack.fetch.extract`), and the
block's ``binary`` must be a file at the top level of the unpacked tree, because that is
where the launch plan looks for it (RFC section 9: ``<cache>/external/<recipe>/<binary>``).
"""

from __future__ import annotations

import lzma
import tarfile
import zipfile
import zlib
from pathlib import Path
from urllib.parse import urlsplit

from lemonpack.contract import EffectiveBlock
from lemonpack.digest import sha256_text
from lemonpack.errors import BuildError, FetchError, IntegrityError, StorageError, UnsafeContentError
from lemonpack.fetch import ArtifactCache, Fetched, Mirror, extract, fetch
from lemonpack.fetch.staging import remove_tree


def source_field(eff: EffectiveBlock) -> str:
    """The JSON path of the field ``eff``'s effective ``source`` comes from: the arch
    override's (``platforms.linux.rocm.arch.gfx1151.source``), the block's
    (``platforms.linux.cpu.source``) or the recipe's top-level ``source``."""
    block = eff.recipe.platforms[eff.os][eff.accelerator]
    if eff.arch_pattern is not None:
        for o in block.arch:
            if o.pattern == eff.arch_pattern and o.source is not None:
                return f"{eff.path}.source"
    if block.source is not None:
        return f"{block.path}.source"
    return "source"


def _where(eff: EffectiveBlock) -> str:
    field = source_field(eff)
    used = "" if field.startswith(eff.path) else f" (used by {eff.path})"
    return f"{eff.recipe.file}: {field}{used}"


def fetch_target(eff: EffectiveBlock, *, cache: ArtifactCache, mirror: Mirror | None,
                 progress: bool | None) -> Fetched:
    """Fetch and verify ``eff``'s effective artifact (it must have a source).

    Raises :class:`IntegrityError` (``what`` names recipe file, field and URL; expected and
    actual digests), :class:`FetchError`, :class:`UnsafeContentError` or
    :class:`StorageError` (the artifact cache cannot be written) prefixed with the recipe
    file and the JSON path of the source field.
    """
    prov = eff.provenance
    assert prov.source is not None, "called only for a block with a source"
    expected = None if prov.policy == "roll_forward" else sha256_text(prov.sha256)
    try:
        return fetch(prov.source, sha256=expected, cache=cache, mirror=mirror, progress=progress)
    except IntegrityError as e:
        raise IntegrityError(f"{_where(eff)} ({e.what})", e.expected, e.actual) from None
    except (FetchError, UnsafeContentError) as e:
        raise type(e)(f"{_where(eff)}: {e}") from None
    except OSError as e:
        raise StorageError(f"{_where(eff)}: cannot keep the download of {prov.source} in the artifact cache "
                           f"{cache.root}: {e.strerror or e}") from None


def unpack_target(fetched: Fetched, dest: Path, eff: EffectiveBlock) -> None:
    """Unpack ``fetched`` into the new directory ``dest`` and check the binary is there.

    Raises :class:`UnsafeContentError` (hostile member, or one the file system refuses:
    a name too long ...), :class:`StorageError` (the disk failed: no space ...),
    :class:`BuildError` (not a readable archive; ``binary`` missing at the top level);
    each names the recipe file and the source field; ``dest`` does not exist then.
    """
    source = eff.provenance.source or ""
    name = Path(urlsplit(source).path).name or "artifact"
    artifact = f"artifact {source} ({sha256_text(fetched.sha256)})"
    what = f"{_where(eff)}: {artifact}"
    try:
        extract(fetched.path, dest, name_hint=name, label=artifact)
    except (UnsafeContentError, StorageError) as e:
        raise type(e)(f"{_where(eff)}: {e}") from None
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error, lzma.LZMAError, OSError) as e:
        raise BuildError(f"{what} is not a readable archive: {e}") from None
    if eff.binary and not (dest / eff.binary).is_file():
        top = sorted(p.name + ("/" if p.is_dir() else "") for p in dest.iterdir())[:10]
        remove_tree(dest)  # read-only directories of the archive included
        raise BuildError(f"{what} has no {eff.binary!r} at its top level (binary of {eff.path}); "
                         f"it holds: {', '.join(top) or 'nothing'}")
