"""Which test files a pytest run did not collect (used by tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path


def uncollected_test_files(collected: set[Path], root: Path) -> list[Path]:
    """Test files (``test_*.py``, ``*_test.py``) under ``root`` that are not in ``collected``."""
    on_disk = {p.resolve() for pat in ("test_*.py", "*_test.py") for p in root.rglob(pat)
               if "__pycache__" not in p.parts}
    return sorted(on_disk - collected)
