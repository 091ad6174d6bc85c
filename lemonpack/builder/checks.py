"""What ``lemonpack lint`` reports for a file: the contract's problems and the execution policy's.

The policy itself (digest pinning, shell strings) lives in :mod:`lemonpack.oci.policy`, below the
builder and the runtime that both use it; it is re-exported here for the builder's callers.
"""

from __future__ import annotations

from itertools import chain
from pathlib import Path

from lemonpack.contract.loader import check_file
from lemonpack.errors import Problem, bound
from lemonpack.oci.policy import document_policy_problems, recipe_policy_problems, require_pinned


def lint_problems(path: str | Path) -> list[Problem]:
    """Every problem ``lemonpack lint`` reports for the file at ``path``: the contract's
    (unreadable file, JSON syntax, schema, semantic rules) and the policy's
    (:func:`lemonpack.oci.policy.document_policy_problems`), the latter even when the
    document breaks the contract (every argv whose fields are well-typed is checked). The
    file is read and parsed once. Returns the problems in that order, bounded as one report
    (:func:`lemonpack.errors.bound`: at most 200, then one ``more-problems`` line counting
    the rest of every kind); never raises for a file's content."""
    file = str(path)
    doc, problems = check_file(path)
    if doc is None:
        return list(problems)
    return bound(chain(problems, document_policy_problems(file, doc)), file)


__all__ = ["lint_problems", "recipe_policy_problems", "require_pinned"]
