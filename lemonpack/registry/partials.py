"""What a killed pull leaves, and how it goes: the ``OUT.tmp-*`` staging directory beside a
pull's output (:class:`lemonpack.oci.layout.LayoutWriter`'s), locked with ``flock(2)`` while the
pull runs (:class:`DirLock`; the kernel drops the lock when the process dies, whatever killed
it) and recorded in ``<cache>/partial-pulls/`` until it ends. The next pull into the same OUT
(:func:`remove_leftovers`) and ``lemonpack cache clean --partial`` (:func:`sweep_partial_pulls`)
remove the ones nobody holds (:func:`lemonpack.fetch.staging.sweep`: a live pull's is never
touched). A ``publish RECIPE.json``'s build directory is kept the same way
(:func:`publish_workdir`)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

from lemonpack.files import locked


def remove_leftovers(out: Path) -> list[Path]:
    """Remove what a killed pull into ``out`` left beside it: ``OUT.tmp-*`` staging
    directories whose writer is gone (a running pull holds an ``flock`` on its own, and the
    kernel drops it when the process dies: :func:`lemonpack.fetch.staging.sweep`). Returns the
    paths removed."""
    from lemonpack.fetch.staging import sweep

    return [p for p, _size in sweep(out.parent, (f"{out.name}.tmp-",))] if out.name else []


class DirLock:
    """An exclusive ``flock`` on a directory (a pull's staging directory), held until the
    ``with`` block exits: :func:`remove_leftovers` of another run leaves it alone meanwhile."""

    def __init__(self) -> None:
        self._held = contextlib.ExitStack()
        self.note: Path | None = None

    def record(self, directory: Path) -> None:
        """Name ``directory`` in the cache's record of pulls under way (:func:`sweep_partial_pulls`);
        the record goes when the block exits. A cache that cannot be written is no reason to fail."""
        note = partial_pulls_dir() / f"{directory.name}-{os.getpid()}.path"
        try:
            note.parent.mkdir(parents=True, exist_ok=True)
            note.write_text(str(directory.resolve()), encoding="utf-8")
            self.note = note
        except OSError:
            self.note = None

    def lock(self, directory: Path) -> None:
        """Take the exclusive lock of ``directory`` (:func:`lemonpack.files.locked`: blocks until
        granted, :class:`lemonpack.errors.StorageError` when it cannot be opened), held until the
        block exits."""
        self._held.enter_context(locked(directory))

    def __enter__(self) -> "DirLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self._held.close()
        if self.note is not None:
            self.note.unlink(missing_ok=True)
            self.note = None


#: The prefix of the work directory a ``publish RECIPE.json`` builds in (:func:`publish_workdir`).
PUBLISH_PREFIX = "lemonpack-publish-"


@contextlib.contextmanager
def publish_workdir() -> Iterator[Path]:
    """A temporary directory for ``publish`` to build a recipe in, removed when the block exits:
    first the ones killed publishes left (recorded in the cache, lock free: :func:`sweep_partial_pulls`)
    are removed, then a new one is made, locked and recorded like a pull's staging directory,
    so a publish killed mid-build leaves nothing the next run or ``cache clean --partial``
    does not remove."""
    import shutil
    import tempfile

    sweep_partial_pulls()
    work = Path(tempfile.mkdtemp(prefix=PUBLISH_PREFIX))
    try:
        with DirLock() as hold:
            hold.lock(work)
            hold.record(work)
            yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def partial_pulls_dir() -> Path:
    """Where pulls under way are recorded (``<cache>/partial-pulls/``): one file per pull naming
    its ``OUT.tmp-*`` staging directory, removed when the pull ends."""
    from lemonpack.paths import cache_root

    return cache_root() / "partial-pulls"


def sweep_partial_pulls() -> list[tuple[Path, int]]:
    """Remove the staging directories of killed pulls the cache's record names (``cache clean
    --partial``): each one nobody holds the lock of any more is removed, with its record; a
    running pull's is left alone. Returns ``[(path, bytes freed)]``."""
    from lemonpack.fetch.staging import is_stale, sweep

    removed: list[tuple[Path, int]] = []
    records = partial_pulls_dir()
    for note in sorted(records.glob("*.path")) if records.is_dir() else []:
        try:
            staged = Path(note.read_text(encoding="utf-8").strip())
        except OSError:
            continue
        if not staged.is_absolute() or not (".tmp-" in staged.name or staged.name.startswith(PUBLISH_PREFIX)):
            note.unlink(missing_ok=True)  # not one of ours
            continue
        if staged.exists() and not is_stale(staged):
            continue  # a pull under way
        removed += sweep(staged.parent, (staged.name,)) if staged.exists() else []
        note.unlink(missing_ok=True)
    return removed


__all__ = ["publish_workdir", "PUBLISH_PREFIX", "DirLock", "remove_leftovers", "sweep_partial_pulls", "partial_pulls_dir"]
