#!/usr/bin/env python3
"""Benchmark ``lemonpack lint``'s checking on large hostile recipes (a script, not a test).

Inputs (built in memory, each filled up to ``--size`` bytes, default the 4 MiB cap a recipe
may have, :data:`lemonpack.strictjson.MAX_FILE_BYTES`), one per kind of problem a file can
be made of (issue 26: "every input kind"):

- ``many-caps``: one capability repeated (schema problems: a duplicate item each);
- ``arch-bad-keys``: arch overrides keyed by no arch name (``"x 1"``: invalid-key problems,
  one each);
- ``bad-tokens``: arguments each holding an unknown token (semantic problems, one each);
- ``unpinned-images``: one ``podman pull`` of tag-only images (policy problems, one each);
- ``duplicate-keys``: one object of repeated keys in the open ``extensions`` bag (the parser's
  duplicate-key problems, one each);
- ``lone-surrogates``: strings holding a lone UTF-16 surrogate (the parser's invalid-unicode
  problems, one each);
- ``many-args`` and ``many-env``: valid recipes of many arguments and env variables.

Measured in this process, each the best of ``--repeat`` runs: the checking ``lemonpack
lint`` does for one file (``lint_problems``: read, parse, schema, semantic rules, policy
walk) plus rendering every problem as its text line and as its JSON object; the baseline is
``json.loads`` of the same text, measured in the same run, so the ratio compares like with
like on a loaded machine. Then the report's length (lines of ``lemonpack lint``: problems
plus the one ``[more-problems]`` line) and the peak memory of one lint (``tracemalloc``: what
the checking allocates). Targets: at most 201 report lines and under 100 MiB peak for every
input (docs/recipes-and-policy.md: "A file's report is bounded"), time and memory growing
linearly with the input (compare ``--size 2097152``).

Usage: ``python bench/lint.py [--repeat N] [--size BYTES]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import tracemalloc
from pathlib import Path

from lemonpack.builder.checks import lint_problems
from lemonpack.strictjson import MAX_FILE_BYTES

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _support import best  # noqa: E402

BASE = ('{"recipe":"bench-h","display_name":"t","api_contract_version":"1","capabilities":["chat_completion"],'
        '"platforms":{"linux":{"cpu":{"command":"x","args":[%s]}}}%s}')
#: Report lines at most (200 problems and one [more-problems] line) and peak MiB below.
MAX_LINES, MAX_PEAK_MIB = 201, 100


def _fill(template: str, unit, size: int) -> str:
    """``template`` with ``@`` replaced by as many ``unit(i)`` (comma-separated) as fit in
    ``size`` bytes."""
    room = size - len(template.encode()) + 1
    parts, used, i = [], 0, 0
    while True:
        u = unit(i)
        n = len(u.encode()) + (1 if parts else 0)
        if used + n > room:
            break
        parts.append(u)
        used += n
        i += 1
    return template.replace("@", ",".join(parts))


def inputs(size: int) -> dict[str, str]:
    """Name -> recipe text of about ``size`` bytes."""
    plain = BASE % ("", "")
    return {
        "many-caps": _fill(plain.replace('["chat_completion"]', "[@]"), lambda i: '"chat_completion"', size),
        "arch-bad-keys": _fill(plain.replace('"args":[]', '"args":[],"arch":{@}'), lambda i: f'"x {i}":{{}}', size),
        "bad-tokens": _fill(BASE % ("@", ""), lambda i: '"{nope}"', size),
        "unpinned-images": _fill(plain.replace('"command":"x","args":[]', '"command":"podman","args":["pull",@]'),
                                 lambda i: f'"img{i}:1"', size),
        "duplicate-keys": _fill(BASE % ("", ',"extensions":{"x":{@}}'), lambda i: '"a":1', size),
        "lone-surrogates": _fill(BASE % ("", ',"extensions":{"x":[@]}'), lambda i: '"\\ud800"', size),
        "many-args": _fill(BASE % ("@", ""), lambda i: '"--x"', size),
        "many-env": _fill(plain.replace('"args":[]', '"args":[],"env":{@}'), lambda i: f'"V{i}":"x"', size),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--size", type=int, default=MAX_FILE_BYTES, help="bytes of every input (at most the cap)")
    opts = ap.parse_args()
    missed = []
    with tempfile.TemporaryDirectory(prefix="lemonpack-bench-lint-") as tmp:
        print(f"{'input':<16} {'bytes':>9} {'lines':>6} {'lint s':>8} {'json.loads s':>12} {'ratio':>7} {'peak MiB':>9}")
        for name, text in inputs(min(opts.size, MAX_FILE_BYTES)).items():
            path = Path(tmp) / f"{name}.json"
            path.write_text(text)

            def lint() -> int:
                problems = lint_problems(path)
                "\n".join(map(str, problems))
                [json.dumps(p.to_json()) for p in problems]
                return len(problems)

            lines = lint()
            t_lint = best(lint, opts.repeat)
            t_base = best(lambda: json.loads(text), opts.repeat)
            tracemalloc.start()
            lint()
            peak = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
            size = len(text.encode())
            print(f"{name:<16} {size:>9} {lines:>6} {t_lint:>8.3f} {t_base:>12.4f} {t_lint / t_base:>7.0f} "
                  f"{peak:>9.1f}")
            if lines > MAX_LINES or peak >= MAX_PEAK_MIB:
                missed.append(name)
    print(f"targets: at most {MAX_LINES} report lines and under {MAX_PEAK_MIB} MiB peak for every input: "
          + ("met" if not missed else f"MISSED ({', '.join(missed)})"))
    return 1 if missed else 0


if __name__ == "__main__":
    from _support import run_recorded

    raise SystemExit(run_recorded("lint", main))
