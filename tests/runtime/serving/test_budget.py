"""The serve memory budget (lemonpack/runtime/serving/budget.py): sizes as a user writes them, and
the default budget from /proc/meminfo (what is available, less a reserve)."""

from __future__ import annotations

import pytest

from lemonpack.errors import LemonpackError
from lemonpack.runtime.serving.budget import default_budget, parse_size


def test_sizes_and_default_budget(tmp_path):
    assert parse_size("24GiB") == 24 << 30 and parse_size("1MiB") == 1 << 20 and parse_size("1.5 GB") == 1_500_000_000
    for bad in ("", "x", "12 parsecs", "0"):
        with pytest.raises(LemonpackError, match="size"):
            parse_size(bad)
    mi = tmp_path / "meminfo"
    mi.write_text("MemTotal: 8000000 kB\nMemAvailable: 4194304 kB\n")
    assert default_budget(str(mi)) == (4 << 30) - (1 << 30)
