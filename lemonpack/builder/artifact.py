"""Fetch and unpack one target's artifact, with errors that name the recipe and field.

Shared by ``lemonpack build`` (the image layer) and ``lemonpack install`` (the runtime's
install directory), so both verify, unpack and check the same way: the effective
``source`` is fetched and verified (:func:`lemonpack.fetch.fetch`; ``roll_forward``
records the observed hash), unpacked safely (:func:`lemonpack.fetch.extract`), and the
block's ``binary`` must be a file at the top level of the unpacked tree, because that is
where the launch plan looks for it (RFC section 9: ``<cache>/external/<recipe>/<binary>``).
Every executable of the unpacked tree must be machine code for the target's CPU
(:func:`check_executables`, over the :mod:`lemonpack.exe_header` primitive): an image labelled
``linux/arm64`` or an install on an arm64 host never takes an x86-64 engine; scripts pass.
"""

from __future__ import annotations

import lzma
import tarfile
import zipfile
import zlib
from pathlib import Path
from urllib.parse import urlsplit

from lemonpack.contract import EffectiveBlock
from lemonpack.contract.cpuartifacts import for_cpu, offered_cpus
from lemonpack.digest import sha256_text
from lemonpack.errors import BuildError, FetchError, IntegrityError, StorageError, UnsafeContentError
from lemonpack.exe_header import Executable, executables, mismatch_message
from lemonpack.fetch import ArtifactCache, Fetched, Mirror, extract, fetch, mirror_path
from lemonpack.fetch.staging import remove_tree
from lemonpack.nix.emit import NIX_CPUS, NixArtifact


def source_field(eff: EffectiveBlock) -> str:
    """The JSON path of the field ``eff``'s effective ``source`` comes from: the per-CPU
    artifact's (``extensions["dev.lemonpack.cpu-artifacts"]["linux/cpu"].arm64.source``), the arch
    override's (``platforms.linux.rocm.arch.gfx1151.source``), the block's
    (``platforms.linux.cpu.source``) or the recipe's top-level ``source``."""
    if eff.source_path is not None:  # a per-CPU artifact (lemonpack.contract.cpuartifacts)
        return eff.source_path
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


def artifact_where(fetched: Fetched, eff: EffectiveBlock) -> str:
    """How a message names ``eff``'s artifact: the recipe file, the source field, the URL and
    the digest."""
    return f"{_where(eff)}: artifact {eff.provenance.source or ''} ({sha256_text(fetched.sha256)})"


def check_executables(tree: Path, cpu_arch: str, where: str) -> list[tuple[str, Executable]]:
    """Refuse a ``tree`` holding an executable (ELF, PE, Mach-O: :mod:`lemonpack.exe_header`)
    whose machine code is not for the OCI architecture ``cpu_arch``; returns every executable
    found (relative path, header). Raises :class:`BuildError` naming ``where`` (the artifact
    and its field), each file, what it is and the target; ``OSError`` when a file cannot be read."""
    found = list(executables(tree))
    check_recorded(found, cpu_arch, where)
    return found


def check_recorded(found: list[tuple[str, Executable]], cpu_arch: str, where: str) -> None:
    """:func:`check_executables` over executables found earlier (a cached layer's record)."""
    foreign = [(rel, exe) for rel, exe in found if not exe.runs_on(cpu_arch)]
    if foreign:
        raise BuildError(mismatch_message(where, foreign, cpu_arch))


def unpack_target(fetched: Fetched, dest: Path, eff: EffectiveBlock, *,
                  cpu_arch: str) -> list[tuple[str, Executable]]:
    """Unpack ``fetched`` into the new directory ``dest`` and check the binary is there and
    every executable is for ``cpu_arch`` (an OCI architecture: the image's, the host's).

    Raises :class:`UnsafeContentError` (hostile member, or one the file system refuses:
    a name too long ...), :class:`StorageError` (the disk failed: no space ...),
    :class:`BuildError` (not a readable archive; ``binary`` missing at the top level; an
    executable for another CPU, :func:`check_executables`);
    each names the recipe file and the source field; ``dest`` does not exist then. Returns
    the executables found (:func:`check_executables`).
    """
    source = eff.provenance.source or ""
    name = Path(urlsplit(source).path).name or "artifact"
    artifact = f"artifact {source} ({sha256_text(fetched.sha256)})"
    what = artifact_where(fetched, eff)
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
    try:
        return check_executables(dest, cpu_arch, what)
    except BaseException:
        remove_tree(dest)
        raise


def other_cpu_artifacts(t: EffectiveBlock, built: str) -> tuple[NixArtifact, ...]:
    """The per-CPU artifacts the recipe offers for ``t`` besides the ``built`` CPU's
    (:mod:`lemonpack.contract.cpuartifacts`), for its Nix package: Nix fetches them by their
    pinned sha256 and ``lemonpack unpack --cpu-arch`` checks them there, so the package's
    ``meta.platforms`` is what the recipe offers."""
    out = []
    for cpu in offered_cpus(t.recipe, t.os, t.accelerator, t.arch_pattern):
        if cpu != built and cpu in NIX_CPUS:
            prov = for_cpu(t, cpu).provenance
            assert prov.source and prov.sha256, "a per-CPU artifact has a source and a sha256"
            out.append(NixArtifact(cpu, prov.source, mirror_path(prov.source), prov.sha256))
    return tuple(out)
