"""``lemonpack pin --check`` names each unpinned image by the JSON path form every other
message uses (lemonpack.jsonpath.join), in text and --json output alike."""

from __future__ import annotations

import json
from pathlib import Path

from support.registry import lemonpack

SEED = Path(__file__).resolve().parents[1] / "fixtures" / "seed-examples" / "walkthrough_toolbox_llamacpp.json"


def test_pin_check_prints_json_paths_not_tuples():
    doc = json.loads(SEED.read_text())
    at = {acc: next(i for i, a in enumerate(doc["platforms"]["linux"][acc]["args"]) if "toolboxes:" in a)
          for acc in ("vulkan", "rocm")}
    r = lemonpack("pin", "--check", str(SEED), check=False)
    assert r.returncode == 1
    lines = r.stderr.splitlines()
    assert lines == [f"{SEED}: platforms.linux.{acc}.args[{i}]: {doc['platforms']['linux'][acc]['args'][i]} "
                     "is not pinned by digest" for acc, i in sorted(at.items(), key=lambda x: x[0] != "vulkan")]
    assert "(" not in r.stderr
    out = json.loads(lemonpack("pin", "--check", "--json", str(SEED), check=False).stdout)
    assert sorted(u["path"] for u in out["unpinned"]) == sorted(f"platforms.linux.{a}.args[{i}]" for a, i in at.items())
