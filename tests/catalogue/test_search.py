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

from lemonpack.catalogue.search import search, sort_entries

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
    args = ["catalogue", "search", q["query"], "--index", str(FIXTURE), "--json", "--sort", q.get("sort", "relevance")]
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
        found = search(json.loads(FIXTURE.read_text()), q["query"], q["filters"])
        assert [e["id"] for e in sort_entries(found, q.get("sort", "relevance"))] == q["expected_ids"]
        return
    r = cli(*args)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [x["id"] for x in out["results"]] == q["expected_ids"]
    assert out["corrected"] == q.get("corrected", {})


def test_table_is_large_and_first_hits_are_distinct():
    assert len(QUERIES) >= 40
    firsts = {q["expected_ids"][0] for q in QUERIES if q["expected_ids"]}
    assert len(firsts) >= 6  # the table's first hits cover most entries, not one


def test_shipped_rules_are_the_contract_tables():
    """static/search-rules.json (what the CLI and the page read) is compute_rules() of the
    contract's tables: a new accelerator, OS, capability or arch cannot leave it behind."""
    from lemonpack.catalogue.search import compute_rules, rules

    assert rules() == json.loads(json.dumps(compute_rules()))
    assert "text to speech" in rules()["synonyms"]["tts"] and "speech_synthesis" in rules()["synonyms"]["tts"]


@pytest.mark.parametrize("args, option, hint", [
    (["--accelerator", "rocmm"], "--accelerator", "'rocm'"),
    (["--os", "macos"], "--os", "'darwin'"),
    (["--capability", "embedding"], "--capability", "'embeddings'"),
    (["--gpu-arch", "gfx11511"], "--gpu-arch", "'gfx1151'"),
    (["--kind", "recipes"], "--kind", "'recipe'"),
])
def test_unknown_filter_values_are_usage_errors_naming_the_choices(args, option, hint):
    """Case 74: a filter value outside its vocabulary exits 2 naming the option, a near miss
    and the choices, never a silent "no matches"."""
    r = cli("catalogue", "search", *args, "--index", str(FIXTURE))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert option in r.stderr and f"did you mean {hint}" in r.stderr and "choices: " in r.stderr
    assert "Traceback" not in r.stderr and "no matches" not in r.stdout


def test_filter_values_are_case_insensitive():
    r = cli("catalogue", "search", "--accelerator", "ROCM", "--os", "Linux", "--index", str(FIXTURE), "--json")
    assert r.returncode == 0, r.stderr
    assert [x["id"] for x in json.loads(r.stdout)["results"]] == [
        "extension:qwen", "recipe:acme-strix-toolbox", "recipe:gamma-rocm-tuned"]


def test_a_near_miss_says_what_it_searched():
    r = cli("catalogue", "search", "llma", "--index", str(FIXTURE))
    assert r.returncode == 0
    assert "did you mean 'llama'" in r.stderr and r.stdout.splitlines()[0].startswith("recipe:hello-engine")


def test_gpu_arch_keeps_what_fits_a_host_of_that_arch():
    """Case 75 on the fixture: every entry that runs on a gfx1151 host through rocm is kept
    by --gpu-arch gfx1151."""
    host = {"os": "linux", "accelerators": ["cpu", "rocm"], "cuda_arch": None, "rocm_arch": "gfx1151"}
    fit = cli("catalogue", "search", "--index", str(FIXTURE), "--fits-host", "--json",
              env={"LEMONPACK_HOST_FACTS": json.dumps(host)})
    arch = cli("catalogue", "search", "--gpu-arch", "gfx1151", "--index", str(FIXTURE), "--json")
    gpu = [x["id"] for x in json.loads(fit.stdout)["results"] if x["fits"].startswith("linux/rocm")]
    assert gpu == ["extension:qwen", "recipe:acme-strix-toolbox", "recipe:gamma-rocm-tuned"]
    assert set(gpu) <= {x["id"] for x in json.loads(arch.stdout)["results"]}


def test_table_covers_every_filter():
    from lemonpack.catalogue.search import FILTERS

    used = {k for q in QUERIES for k in q["filters"]}
    assert used == set(FILTERS)


def test_unknown_index_is_an_error(tmp_path):
    r = cli("catalogue", "search", "x", "--index", str(tmp_path))
    assert r.returncode == 1 and "no catalogue index" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("facts,expected", [
    ({"os": "linux", "accelerators": ["cpu"]},
     ["extension:qwen", "recipe:hello-engine", "recipe:acme-strix-toolbox", "recipe:gamma-rocm-tuned"]),
    ({"os": "linux", "accelerators": ["rocm"], "rocm_arch": "gfx1151"},
     ["extension:qwen", "recipe:hello-engine", "recipe:acme-strix-toolbox", "recipe:gamma-rocm-tuned"]),
    ({"os": "linux", "accelerators": ["cuda"], "cuda_arch": "sm_90"},
     ["extension:qwen", "recipe:hello-engine", "recipe:acme-strix-toolbox", "recipe:beta-whisper-cuda",
      "recipe:gamma-rocm-tuned"]),
    ({"os": "linux", "accelerators": ["cuda"], "cuda_arch": "sm_75"},
     ["extension:qwen", "recipe:hello-engine", "recipe:acme-strix-toolbox", "recipe:gamma-rocm-tuned"]),
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


def test_every_sort_order_is_in_the_table_and_an_unknown_one_is_a_usage_error():
    from lemonpack.catalogue.search import SORTS

    assert {q.get("sort", "relevance") for q in QUERIES} == set(SORTS)
    r = cli("catalogue", "search", "--sort", "newest", "--index", str(FIXTURE))
    assert r.returncode == 2 and "--sort" in r.stderr and "relevance, name, new, updated" in r.stderr
    # read case-insensitively, as the filters are (a variant of case 74)
    upper = cli("catalogue", "search", "--sort", "Name", "--index", str(FIXTURE), "--json")
    lower = cli("catalogue", "search", "--sort", "name", "--index", str(FIXTURE), "--json")
    assert upper.returncode == 0 == lower.returncode, upper.stderr
    assert json.loads(upper.stdout)["results"] == json.loads(lower.stdout)["results"]


# ---------------------------------------------------------------- the compact search index (catalogue-search.json)


@pytest.fixture()
def index_dir(tmp_path, monkeypatch):
    """The fixture index as a built directory: catalogue.json plus the catalogue-search.json
    derived from it; the verification stamps in a cache of the test's own."""
    from lemonpack.catalogue.index import search_file_for

    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(tmp_path / "cache"))
    d = tmp_path / "idx"
    d.mkdir()
    data = FIXTURE.read_bytes()
    (d / "catalogue.json").write_bytes(data)
    (d / "catalogue-search.json").write_bytes(search_file_for(data))
    return d


def test_the_table_gives_the_same_results_over_the_compact_index(index_dir):
    from lemonpack.catalogue.index import load_index, load_search_index
    from lemonpack.catalogue.search import check_filters, search_report

    compact, full = load_search_index(index_dir), load_index(index_dir)
    assert "hays" in compact and "commands" not in compact["entries"][0]  # the compact file was read
    for q in QUERIES:
        got = [search_report(ix, q["query"], check_filters(ix, q["filters"])) for ix in (compact, full)]
        ids = [[e["id"] for e in sort_entries(r["results"], q.get("sort", "relevance"))] for r in got]
        assert ids[0] == ids[1] == q["expected_ids"], q["note"]
        assert got[0]["corrected"] == got[1]["corrected"] == q.get("corrected", {})
    assert set(compact["entries"][0]) <= set(full["entries"][0])


def test_the_cli_reads_the_compact_index_only_while_it_matches_catalogue_json(index_dir):
    env = {"LEMONPACK_CACHE_DIR": os.environ["LEMONPACK_CACHE_DIR"]}

    def ids(*args: str) -> list[str]:
        r = cli("catalogue", "search", *args, "--index", str(index_dir), "--json", env=env)
        assert r.returncode == 0, r.stderr
        return [x["id"] for x in json.loads(r.stdout)["results"]]

    assert ids("whisper") == ["recipe:beta-whisper-cuda"]
    # a compact file changed after it was derived (its index_sha256 still right) is what the
    # CLI reads: proof that it reads it; `catalogue verify` and `update` catch such a file
    compact = index_dir / "catalogue-search.json"
    doc = json.loads(compact.read_bytes())
    k = next(i for i, r in enumerate(doc["rows"]) if r[1] == "recipe:beta-whisper-cuda")
    del doc["rows"][k], doc["hays"][k]
    compact.write_text(json.dumps(doc))
    assert ids("whisper") == []
    from lemonpack.catalogue.index import verify_dir

    assert any("catalogue-search.json: differs" in p for p in verify_dir(index_dir, b"unused"))
    # catalogue.json rebuilt or edited since (same size even): the stale compact file is ignored
    data = (index_dir / "catalogue.json").read_bytes()
    (index_dir / "catalogue.json").write_bytes(data.replace(b"Whisper", b"Whisker", 1))
    assert b"Whisker" in (index_dir / "catalogue.json").read_bytes()
    assert ids("whisper") == ["recipe:beta-whisper-cuda"] and ids("whisker") == ["recipe:beta-whisper-cuda"]
    # written by other code (another lemonpack version): ignored too
    (index_dir / "catalogue.json").write_bytes(data)
    compact.write_text(json.dumps({**doc, "code": "0" * 64}))
    assert ids("whisper") == ["recipe:beta-whisper-cuda"]


def test_a_verified_pair_is_remembered_and_hashed_again_when_either_file_changes(index_dir, monkeypatch):
    from lemonpack.catalogue import index as ix

    hashed = []
    real = ix.index_sha256
    monkeypatch.setattr(ix, "index_sha256", lambda data: hashed.append(1) or real(data))
    assert "hays" in ix.load_search_index(index_dir) and len(hashed) == 1
    assert "hays" in ix.load_search_index(index_dir) and len(hashed) == 1  # the stamp: not hashed again
    assert ix.search_stamps_path().is_file()
    os.utime(index_dir / "catalogue.json")  # a touch changes ctime: hashed again, still the same bytes
    assert "hays" in ix.load_search_index(index_dir) and len(hashed) == 2
    (index_dir / "catalogue-search.json").write_bytes(b"{}")
    assert "hays" not in ix.load_search_index(index_dir)  # a malformed compact file: the full index


def test_the_compact_index_carries_the_vocabulary_the_full_one_gives(index_dir):
    from lemonpack.catalogue.index import load_index, load_search_index
    from lemonpack.catalogue.search import vocabulary

    compact, full = load_search_index(index_dir), load_index(index_dir)
    assert compact["vocabulary"] == vocabulary(full) and "vocabulary" not in full


def test_the_near_miss_bound_changes_no_answer():
    """suggest() skips words with more characters the term lacks than edits allowed: the same
    answer as trying every word (a brute force over the fixture's vocabulary and edits of it)."""
    import random

    from lemonpack.catalogue.search import max_distance, osa_distance, suggest, vocabulary

    vocab = vocabulary(json.loads(FIXTURE.read_bytes()))
    rnd = random.Random(5)

    def brute(term):
        hits = [(osa_distance(term, w), w) for w in vocab if w != term]
        hits = [h for h in hits if h[0] <= max_distance(term)]
        return min(hits)[1] if hits else None

    terms = []
    for w in vocab:
        for _ in range(3):
            t = list(w)
            for _ in range(rnd.randint(1, 3)):
                i = rnd.randrange(len(t) + 1)
                op = rnd.choice("ids")
                if op == "i":
                    t.insert(i, rnd.choice("abcdefgx0-"))
                elif t and i < len(t):
                    if op == "d":
                        del t[i]
                    else:
                        t[i] = rnd.choice("abcdefgx0-")
            terms.append("".join(t))
    assert len(terms) > 200
    assert [suggest(t, vocab) for t in terms] == [brute(t) for t in terms]
    assert sum(suggest(t, vocab) is not None for t in terms) > 100
