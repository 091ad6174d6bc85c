"""Which extension tree a command reads: the one shipped in the package, or a checkout.

A *tree* is what :func:`lemonpack.extensions.pipeline.run_pipeline` and
:func:`lemonpack.extensions.apilock.check_api_lock` read (seed 002 sections 6 to 8):
``catalogue/extensions/<name>/`` (the official extensions: ``extension.json`` and sources),
``api/minor``, ``api/changes/*.md``, ``api/changes.lock.json``, ``extensions.lock``, and for
the API lock the interface files (``include/gufo/ext/*.hpp``,
``lemonpack/extensions/schema/``, ``lemonpack/extensions/templates.py``).

The package ships one (:data:`SHIPPED_TREE`, package data): in a checkout its entries are
symlinks to the repository's own directories (one copy of the files), in an installed wheel
they are the files themselves. So ``lemonpack extensions list``, ``probe`` and ``diagnose``
work wherever lemonpack is installed; ``--tree DIR`` reads a checkout (or any tree of the
same layout) instead.
"""

from __future__ import annotations

from pathlib import Path

#: The tree shipped in the package: the release's official extensions, API records and lock.
SHIPPED_TREE = Path(__file__).resolve().parent / "tree"


def find_tree(tree: Path | None = None) -> Path:
    """The tree a command reads: ``tree`` when given (``--tree DIR``: a checkout's top, used
    as it is, so a missing ``api/minor`` is reported by the pipeline naming the file), else
    :data:`SHIPPED_TREE`. Never looks at the working directory: the same command gives the
    same answer wherever it runs."""
    return Path(tree) if tree is not None else SHIPPED_TREE
