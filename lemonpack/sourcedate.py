"""``SOURCE_DATE_EPOCH``, read in one place, below every room (stdlib only).

The reproducible-builds.org specification ("SOURCE_DATE_EPOCH", https://reproducible-builds.org/
specs/source-date-epoch/): the variable holds the seconds since 1970-01-01 00:00:00 UTC as an
ASCII decimal integer; a build that finds it uses it for every timestamp it writes, and a value
that is not such an integer is an error ("the build process SHOULD exit with a non-zero error
code"), not a reason to fall back silently. Surrounding whitespace is tolerated (as lemonpack
always has), an empty value is the same as an unset one.

Who reads it: builds and releases (:func:`source_date_epoch`, default 0: the fixed epoch), and
the catalogue (:func:`lemonpack.catalogue.dates.source_epoch`, which falls back to the source
tree's last commit instead, through :func:`from_environ`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

VARIABLE = "SOURCE_DATE_EPOCH"


def from_environ(environ: Mapping[str, str] | None = None) -> int | None:
    """``SOURCE_DATE_EPOCH`` of ``environ`` (default ``os.environ``) as seconds since the epoch,
    or None when it is unset or empty. Raises :class:`~lemonpack.errors.ConfigError` naming the
    variable and its value when it is set to anything but a non-negative ASCII integer
    (``-1``, ``1.5``, ``yesterday``, a non-ASCII digit)."""
    env = os.environ if environ is None else environ
    raw = env.get(VARIABLE, "").strip()
    if not raw:
        return None
    if not (raw.isascii() and raw.isdigit()):
        from lemonpack.errors import ConfigError

        raise ConfigError(f"{VARIABLE} must be a non-negative integer, got {raw!r}")
    return int(raw)


def source_date_epoch(environ: Mapping[str, str] | None = None) -> int:
    """The build date: ``SOURCE_DATE_EPOCH`` (:func:`from_environ`), or 0 when it is unset, so
    a build without it is still the same bytes on every machine. Raises ``ConfigError`` as
    :func:`from_environ` does."""
    got = from_environ(environ)
    return 0 if got is None else got


__all__ = ["VARIABLE", "from_environ", "source_date_epoch"]
