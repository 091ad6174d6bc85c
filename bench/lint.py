#!/usr/bin/env python3
"""Benchmark ``lemonpack lint``'s checking on large hostile recipes (a script, not a test).

Inputs (built in memory; the trial's k5-hostile shapes): ``many-caps-50k`` (a 900 KB recipe
with 50,000 repeated capabilities: 49,999 problems), ``arch-many`` (229 KB, 20,000 empty
arch overrides: 20,000 problems), ``many-args-100k`` (100,000 arguments, valid) and
``many-env-40k`` (40,000 env variables, valid).

Measured in this process, each the best of ``--repeat`` runs: the checking ``lemonpack
lint`` does for one file (``lint_problems``: parse, schema, semantic rules, policy walk)
plus rendering every problem as its text line and as its JSON object; the baseline is
``json.loads`` of the same text, measured in the same run, so the ratio compares like with
like on a loaded machine. Peak memory (``tracemalloc``) of one lint is printed too. Target:
well under 1 s each, time and memory growing linearly with the input (compare
``--scale 2``).

Usage: ``python bench/lint.py [--repeat N] [--scale K]``.
"""

from __future__ import annotations

import argparse
import sys
import json
import tempfile
import tracemalloc
from pathlib import Path

from lemonpack.builder.checks import lint_problems

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _support import best  # noqa: E402

BASE = ('{"recipe":"bench-h","display_name":"t","api_contract_version":"1","capabilities":["chat_completion"],'
        '"platforms":{"linux":{"cpu":{"command":"x","args":[%s]}}}%s}')


def inputs(scale: int) -> dict[str, str]:
    """Name -> recipe text."""
    plain = BASE % ("", "")
    return {
        "many-caps-50k": plain.replace('["chat_completion"]', "[" + ",".join(['"chat_completion"'] * 50000 * scale) + "]"),
        "arch-many": plain.replace('"args":[]', '"args":[],"arch":{'
                                   + ",".join(f'"x{i}":{{}}' for i in range(20000 * scale)) + "}"),
        "many-args-100k": BASE % (",".join(['"--x"'] * 100000 * scale), ""),
        "many-env-40k": plain.replace('"args":[]', '"args":[],"env":{'
                                      + ",".join(f'"V{i}":"x"' for i in range(40000 * scale)) + "}"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--scale", type=int, default=1, help="multiply every input's size")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="lemonpack-bench-lint-") as tmp:
        print(f"{'input':<16} {'bytes':>9} {'problems':>9} {'lint s':>8} {'json.loads s':>12} {'ratio':>7} {'peak MiB':>9}")
        for name, text in inputs(opts.scale).items():
            path = Path(tmp) / f"{name}.json"
            path.write_text(text)

            def lint() -> int:
                problems = lint_problems(path)
                "\n".join(map(str, problems))
                [json.dumps(p.to_json()) for p in problems]
                return len(problems)

            count = lint()
            t_lint = best(lint, opts.repeat)
            t_base = best(lambda: json.loads(text), opts.repeat)
            tracemalloc.start()
            lint()
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            print(f"{name:<16} {len(text):>9} {count:>9} {t_lint:>8.3f} {t_base:>12.4f} {t_lint / t_base:>7.0f} "
                  f"{peak / 2**20:>9.1f}")
    return 0


if __name__ == "__main__":
    from _support import run_recorded

    raise SystemExit(run_recorded("lint", main))
