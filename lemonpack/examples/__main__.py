"""``python -m lemonpack.examples``: rewrite the example artifact from ``engine/hello-engine``
and pin its sha256 in ``hello-engine.json`` (run it after editing the engine)."""

from __future__ import annotations

import json
from pathlib import Path

from lemonpack.digest import Digest
from lemonpack.files import replace_file
from lemonpack.examples import ENGINE_SOURCE, EXAMPLE_ARCHIVE, EXAMPLE_RECIPE, engine_archive


def _write(path: Path, data: bytes) -> None:
    replace_file(path, data, mode=0o644)


def main() -> None:
    """Write the archive and the recipe's ``sha256`` (atomically); print the new digest."""
    data = engine_archive(ENGINE_SOURCE)
    digest = str(Digest.of_bytes(data))
    EXAMPLE_ARCHIVE.parent.mkdir(parents=True, exist_ok=True)
    _write(EXAMPLE_ARCHIVE, data)
    doc = json.loads(EXAMPLE_RECIPE.read_text())
    doc["sha256"] = digest
    _write(EXAMPLE_RECIPE, (json.dumps(doc, indent=2) + "\n").encode())
    print(f"{EXAMPLE_ARCHIVE.name}: {digest}")


if __name__ == "__main__":
    main()
