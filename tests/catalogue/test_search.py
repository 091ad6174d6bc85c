"""The shared query table (tests/catalogue/queries.json over fixture-catalogue.json) through
the real CLI (`lemonpack catalogue search --json`): the site's JavaScript runs the same table.
Plus --fits-host with injected host facts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lemonpack.catalogue.search import search

HERE = Path(__file__).parent
FIXTURE = HERE / "fixture-catalogue.json"
QUERIES = json.loads((HERE / "queries.json").read_text())

FLAG = {"kind": "--kind", "capability": "--capability", "accelerator": "--accelerator", "os": "--os",
        "gpu_arch": "--gpu-arch"}


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.pop("LEMONPACK_HOST_FACTS", None)
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", "from lemonpack.cli import main; main()", *args],
                          capture_output=True, text=True, env=e, timeout=60)


def argv_for(q: dict) -> list[str] | None:
    """CLI arguments for a table row; None when the CLI has no flag for a filter."""
    args = ["catalogue", "search", q["query"], "--index", str(FIXTURE), "--json"]
    for name, value in q["filters"].items():
        values = value if isinstance(value, list) else [value]
        if name == "official":
            args.append("--official" if value else "--community")
        elif name in FLAG:
            for v in values:
                args += [FLAG[name], v]
        else:
            return None
    return args


@pytest.mark.parametrize("q", QUERIES, ids=[q["note"][:60] for q in QUERIES])
def test_table_through_cli(q):
    args = argv_for(q)
    if args is None:  # signature / pinning / reproducible / publisher: page facets, checked via the library
        assert [e["id"] for e in search(json.loads(FIXTURE.read_text()), q["query"], q["filters"])] == q["expected_ids"]
        return
    r = cli(*args)
    assert r.returncode == 0, r.stderr
    assert [x["id"] for x in json.loads(r.stdout)["results"]] == q["expected_ids"]


def test_table_covers_every_filter():
    from lemonpack.catalogue.search import FILTERS

    used = {k for q in QUERIES for k in q["filters"]}
    assert used == set(FILTERS)


def test_unknown_index_is_an_error(tmp_path):
    r = cli("catalogue", "search", "x", "--index", str(tmp_path))
    assert r.returncode == 1 and "no catalogue index" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("facts,expected", [
    ({"os": "linux", "accelerators": ["cpu"]}, ["extension:qwen", "recipe:hello-engine", "recipe:acme-strix-toolbox"]),
    ({"os": "linux", "accelerators": ["rocm"], "rocm_arch": "gfx1151"},
     ["extension:qwen", "recipe:hello-engine", "recipe:acme-strix-toolbox"]),
    ({"os": "linux", "accelerators": ["cuda"], "cuda_arch": "sm_90"},
     ["extension:qwen", "recipe:hello-engine", "recipe:acme-strix-toolbox", "recipe:beta-whisper-cuda"]),
    ({"os": "linux", "accelerators": ["cuda"], "cuda_arch": "sm_75"},
     ["extension:qwen", "recipe:hello-engine", "recipe:acme-strix-toolbox"]),
    ({"os": "darwin", "accelerators": ["metal"]}, ["recipe:beta-metal-embed"]),
    ({"os": "windows", "accelerators": ["vulkan"]}, ["extension:acme_moe", "recipe:beta-whisper-cuda"]),
])
def test_fits_host_with_injected_facts(facts, expected, tmp_path):
    r = cli("catalogue", "search", "", "--index", str(FIXTURE), "--fits-host", "--json",
            env={"LEMONPACK_HOST_FACTS": json.dumps(facts)})
    assert r.returncode == 0, r.stderr
    assert [x["id"] for x in json.loads(r.stdout)["results"]] == expected
    # the same facts from a file (what `lemonpack host --json` prints)
    f = tmp_path / "host.json"
    f.write_text(json.dumps(facts))
    r = cli("catalogue", "search", "", "--index", str(FIXTURE), "--fits-host", "--host-facts", str(f), "--json")
    assert [x["id"] for x in json.loads(r.stdout)["results"]] == expected


@pytest.mark.parametrize("content, why", [
    ('{"os": "plan9"}', "'os' must be one of"),
    ("[1, 2", "Expecting"),
    ('{"os": "linux", "extra": 1}', "unknown key 'extra'"),
])
def test_a_bad_host_facts_file_is_one_line_naming_it(content, why, tmp_path):
    f = tmp_path / "host.json"
    f.write_text(content)
    r = cli("catalogue", "search", "", "--index", str(FIXTURE), "--fits-host", "--host-facts", str(f))
    assert r.returncode == 1
    assert f"cannot read host facts {f}: " in r.stderr and why in r.stderr and "Traceback" not in r.stderr
