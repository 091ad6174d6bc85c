"""Bounds on community input: what the catalogue accepts from a publisher, before it costs
memory, disk or a reader's screen.

- A recipe fetched for an entry is held to ``lemonpack lint``'s own size limit
  (:data:`MAX_RECIPE_BYTES`, :data:`lemonpack.strictjson.MAX_FILE_BYTES`), checked on the
  file's size before it is read.
- An archive (an extension tarball or zip, or the tar ``git archive`` writes) is measured
  from its headers before anything is extracted (:func:`check_archive`): at most
  :data:`MAX_MEMBERS` members, :data:`MAX_EXTRACTED_BYTES` in total, and, for a compressed
  archive above :data:`RATIO_FLOOR_BYTES`, at most :data:`MAX_RATIO` times its own size (a
  "zip bomb"). Tar headers are read as a stream and the scan stops at the first member over
  a limit, so a bomb costs one header, not its expansion. The sizes a header declares are
  what extraction writes (``tarfile`` copies exactly ``size`` bytes; ``zipfile`` stops at
  ``file_size`` and checks the CRC), so the scan and the extraction agree.
- Texts shown to readers (rejection reasons, names) are bounded by :func:`short` and
  :func:`reasons`: a reason quotes at most a short prefix of a value, and a rejection lists
  at most :data:`MAX_REASONS` reasons ("and N more").

- Every http(s) fetch of a catalogue source is bounded while it is read
  (:func:`transfer_bounds`, applied through :func:`lemonpack.httpclient.bounded`): an overall
  :data:`FETCH_DEADLINE`, a :data:`MIN_RATE` once :data:`RATE_GRACE` seconds have passed, and
  the size limit of what is fetched (a recipe: :data:`MAX_RECIPE_BYTES`; an archive:
  :data:`MAX_ARCHIVE_BYTES`; a signature: :data:`MAX_SIGNATURE_BYTES`), so a source trickling
  bytes or sending an endless body fails with the reason instead of holding the build.

Every violation of a content limit raises :class:`~lemonpack.errors.UnsafeContentError`
(exit 5) naming the archive and the limit; a broken transfer bound is a FetchError.
"""

from __future__ import annotations

import tarfile
import zipfile
from pathlib import Path

from lemonpack.strictjson import MAX_FILE_BYTES
from lemonpack.errors import UnsafeContentError, one_line

#: A fetched recipe file: the limit ``lemonpack lint`` applies to recipe files (bytes).
MAX_RECIPE_BYTES = MAX_FILE_BYTES
#: Members of one archive.
MAX_MEMBERS = 10_000
#: Bytes of all regular members of one archive once extracted.
MAX_EXTRACTED_BYTES = 256 * 1024 * 1024
#: Extracted bytes per archive byte, checked when the extracted total is above RATIO_FLOOR_BYTES.
MAX_RATIO = 100
RATIO_FLOOR_BYTES = 8 * 1024 * 1024
#: A fetched extension archive (packed bytes), and a detached signature file.
MAX_ARCHIVE_BYTES = MAX_EXTRACTED_BYTES
MAX_SIGNATURE_BYTES = 64 * 1024
#: Seconds one catalogue fetch may take in all; its minimum average rate (bytes/s), checked
#: after RATE_GRACE seconds (a 4 MiB recipe at the minimum rate takes 256 s, under the deadline).
FETCH_DEADLINE = 300.0
MIN_RATE = 16 * 1024
RATE_GRACE = 10.0
#: Characters of one rejection reason; reasons listed per rejected entry.
MAX_REASON_CHARS = 400
MAX_REASONS = 20


def transfer_bounds(max_bytes: int):
    """The :class:`lemonpack.httpclient.TransferBounds` of a catalogue fetch of at most
    ``max_bytes`` bytes (imported here: a search never loads httpx)."""
    from lemonpack.httpclient import TransferBounds

    return TransferBounds(deadline=FETCH_DEADLINE, min_rate=MIN_RATE, grace=RATE_GRACE, max_body_bytes=max_bytes)


def check_recipe_size(path: Path, label: str) -> None:
    """Raise UnsafeContentError when the file at ``path`` is larger than :data:`MAX_RECIPE_BYTES`."""
    size = path.stat().st_size
    if size > MAX_RECIPE_BYTES:
        raise UnsafeContentError(f"{label}: the recipe is {size} bytes, larger than lint's limit of "
                                 f"{MAX_RECIPE_BYTES} bytes")


def check_archive(path: Path, kind: str, label: str) -> None:
    """Measure the archive at ``path`` (``kind`` ``tar`` or ``zip``, as
    :func:`lemonpack.fetch.detect_format` says; anything else passes) against the module's
    limits without extracting it. Raises UnsafeContentError naming ``label`` and the limit;
    a corrupt archive is left for the extractor to report."""
    packed = max(1, path.stat().st_size)
    total = members = 0

    def account(name: str, size: int) -> None:
        nonlocal total, members
        members += 1
        total += max(0, size)
        if members > MAX_MEMBERS:
            raise UnsafeContentError(f"{label}: more than {MAX_MEMBERS} members")
        if total > MAX_EXTRACTED_BYTES:
            raise UnsafeContentError(f"{label}: expands to more than {MAX_EXTRACTED_BYTES} bytes "
                                     f"(at member {short(name, 80)})")
        if total > RATIO_FLOOR_BYTES and total > MAX_RATIO * packed:
            raise UnsafeContentError(f"{label}: expands more than {MAX_RATIO} times its {packed} bytes "
                                     f"(at member {short(name, 80)}): refused as an archive bomb")

    if kind == "tar":
        try:
            with tarfile.open(path, "r|*") as tf:
                for m in tf:
                    account(m.name, m.size if m.isreg() else 0)
        except (tarfile.TarError, EOFError, OSError, ValueError):
            return  # corrupt: extract() says so with its own message
    elif kind == "zip":
        try:
            with zipfile.ZipFile(path) as zf:
                for info in zf.infolist():
                    account(info.filename, info.file_size)
        except (zipfile.BadZipFile, OSError, ValueError):
            return


def short(value: object, limit: int = 60) -> str:
    """``value`` as one line of at most ``limit`` characters (a prefix and an ellipsis): how a
    reason quotes a publisher's text."""
    text = one_line(str(value))
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def reasons(items: list[str]) -> list[str]:
    """At most :data:`MAX_REASONS` reasons of at most :data:`MAX_REASON_CHARS` characters each,
    one line each; the last says how many more there were."""
    out = [short(r, MAX_REASON_CHARS) for r in items[:MAX_REASONS]]
    if len(items) > MAX_REASONS:
        out.append(f"and {len(items) - MAX_REASONS} more")
    return out

