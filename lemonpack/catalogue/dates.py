"""The date of a catalogue build: the sources' date, reproducibly.

``SOURCE_DATE_EPOCH`` when it is set (reproducible-builds.org, read by
:mod:`lemonpack.sourcedate`); otherwise the committer time
of the source tree's last commit (``git log -1 --format=%ct``), which the same checkout
always gives; otherwise (a tree outside git) the newest modification time of the files the
index is built from (``catalogue/``, ``extensions.lock``, the shipped example recipes). Never
1970 for a real tree.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from lemonpack.sourcedate import from_environ


def _git_time(source: Path) -> int | None:
    git = shutil.which("git")
    if git is None:
        return None
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "GIT_CONFIG_NOSYSTEM": "1",
           "HOME": os.environ.get("HOME", "/")}
    try:
        proc = subprocess.run([git, "-C", str(source), "log", "-1", "--format=%ct"], env=env, capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    out = proc.stdout.strip()
    return int(out) if proc.returncode == 0 and out.isdigit() else None


def _newest_mtime(source: Path) -> int:
    newest = 0
    roots = [source / "catalogue", source / "extensions.lock"]
    for root in roots:
        if root.is_file():
            newest = max(newest, int(root.stat().st_mtime))
            continue
        for dirpath, _dirs, files in os.walk(root):
            for name in files:
                try:
                    newest = max(newest, int(os.lstat(os.path.join(dirpath, name)).st_mtime))
                except OSError:
                    continue
    return newest


def source_epoch(source: Path, environ: Mapping[str, str] | None = None) -> int:
    """Seconds since the epoch to date a build of ``source`` with (see the module docstring);
    ``environ``: where ``SOURCE_DATE_EPOCH`` is read (default ``os.environ``), by
    :func:`lemonpack.sourcedate.from_environ`. Raises :class:`~lemonpack.errors.ConfigError`
    for a ``SOURCE_DATE_EPOCH`` that is not a non-negative integer."""
    epoch = from_environ(environ)
    if epoch is not None:
        return epoch
    return _git_time(Path(source)) or _newest_mtime(Path(source))
