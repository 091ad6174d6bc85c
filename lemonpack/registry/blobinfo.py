"""Which repositories of a registry are known to hold a blob: the hint that lets ``publish``
mount a blob from another repository of the same registry (distribution-spec "mounting a
blob from another repository": ``POST .../blobs/uploads/?mount=<digest>&from=<repo>``) instead
of uploading it again, after containers/image's blob info cache (``pkg/blobinfocache``:
``RecordKnownLocation``, ``CandidateLocations``).

Every blob pushed, found already there, mounted or pulled is recorded as ``(registry host,
repository, digest)`` in ``<cache>/blob-locations.json`` (``{"host": {"sha256:...": [repo,
...]}}``, the most recent repository last, at most :data:`MAX_REPOS` per blob and
:data:`MAX_BLOBS` per host, oldest dropped). It is only a hint: a mount the registry refuses
or answers with an upload session costs one request and the blob is uploaded (through that
session), so a stale or lost record is harmless; concurrent writers may lose each other's
records, never corrupt the file (atomic replace). A file that cannot be read or written is
ignored (nothing is a reason to fail a transfer).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

#: Repositories remembered per blob.
MAX_REPOS = 8
#: Blobs remembered per registry host.
MAX_BLOBS = 20000
#: registries remembered in the file, least recently written first dropped
MAX_HOSTS = 256


def _path() -> Path:
    from lemonpack.paths import cache_root

    return cache_root() / "blob-locations.json"


class BlobLocations:
    """The record of one registry ``host``, read once (:meth:`candidates`), written back by
    :meth:`save` with what :meth:`record` added."""

    def __init__(self, host: str, path: str | os.PathLike[str] | None = None):
        self.host = host
        self.path = Path(path) if path is not None else _path()
        self._added: dict[str, list[str]] = {}
        self._known = self._load().get(host, {})

    def _load(self) -> dict:
        try:
            doc = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def candidates(self, digest: str, repo: str) -> list[str]:
        """Repositories of this registry other than ``repo`` known to hold ``digest``, the most
        recent first."""
        repos = self._known.get(digest)
        if not isinstance(repos, list):
            return []
        return [r for r in reversed(repos) if isinstance(r, str) and r != repo]

    def record(self, digest: str, repo: str) -> None:
        """Note that ``repo`` holds ``digest`` (kept until :meth:`save`)."""
        self._added.setdefault(digest, []).append(repo)

    def _newest(self, digest: str) -> str | None:
        repos = self._known.get(digest)
        return repos[-1] if isinstance(repos, list) and repos and isinstance(repos[-1], str) else None

    def save(self) -> None:
        """Merge what was recorded into the file (re-read first), bounded; errors ignored."""
        if not self._added or all(self._newest(d) == repos[-1] and len(set(repos)) == 1
                                  for d, repos in self._added.items()):
            return  # nothing new (each blob's newest repository is the one recorded): no write
        from lemonpack.files import save_bounded_record

        doc = self._load()
        mine = doc.get(self.host)
        mine = mine if isinstance(mine, dict) else {}
        for digest, repos in self._added.items():
            old = [r for r in mine.pop(digest, []) if isinstance(r, str) and r not in repos] \
                if isinstance(mine.get(digest), list) else []
            mine[digest] = (old + list(dict.fromkeys(repos)))[-MAX_REPOS:]  # re-inserted: the newest last
        while len(mine) > MAX_BLOBS:
            mine.pop(next(iter(mine)))
        doc.pop(self.host, None)
        doc[self.host] = mine  # re-inserted: the registry used last is the last one dropped
        save_bounded_record(self.path, doc, MAX_HOSTS)
        self._added.clear()


__all__ = ["BlobLocations", "MAX_BLOBS", "MAX_HOSTS", "MAX_REPOS"]
