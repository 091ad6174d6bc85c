"""Publishers can do what the docs say, and the commands and facts the catalogue shows are
true (cases 27-32, 34): entry signing, the fingerprint helper, the official install command,
the community Nix command on Nix 2.8, platforms that exist, the sources' date, the site
benchmark from a plain install."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lemonpack.catalogue.facts import extension_platforms
from lemonpack.catalogue.dates import source_epoch
from lemonpack.signing.keys import encode_key_pair
from support.catalogue import CatalogueWorld, PASSWORD, REPO, by_id, community_extension, fingerprint, git, run, sha
from support.catalogue import tree_listing

pytestmark = pytest.mark.timeout(300)


@pytest.fixture()
def world(tmp_path):
    w = CatalogueWorld(tmp_path, community=False)
    yield w
    w.stop()


def cli(world, *args, **env) -> subprocess.CompletedProcess:
    return run(world, *args, env=env or None)


def keygen(world, key) -> tuple[Path, Path]:
    pair = encode_key_pair(key, PASSWORD.encode())
    priv, pub = world.tmp / "pub.key", world.tmp / "pub.pub"
    priv.write_bytes(pair.private_pem)
    pub.write_bytes(pair.public_pem)
    return priv, pub


def https_recipe_entry(world, name: str) -> Path:
    r = json.loads((REPO / "lemonpack" / "examples" / "hello-engine.json").read_text())
    r["recipe"] = name
    path, _ = world.https_recipe("acme", r)
    return path


@pytest.mark.parametrize("listed", [True, False], ids=["publisher-key", "other-key"])
def test_catalogue_sign_writes_the_signature_the_build_verifies(world, listed):
    """Case 27: `catalogue sign ENTRY --key KEY` (a lemonpack keygen key) signs the fetched
    bytes; the build then shows verified (a key of the publisher) or unknown-key (the entry
    names its key)."""
    key = world.keys["acme"] if listed else world.keys["stranger"]
    world.publisher("acme", world.keys["acme"])
    priv, _ = keygen(world, key)
    entry = https_recipe_entry(world, "signed-engine")
    before = entry.read_text()
    r = cli(world, "catalogue", "sign", str(entry), "--key", str(priv), "--mirror", world.mirror, "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["fingerprint"] == fingerprint(key) and info["publisher_key"] is listed
    text = entry.read_text()
    assert text.startswith(before.rstrip("\n")) and "[signature]\nvalue = " in text and ("key = " in text) is not listed
    # signing again replaces the table rather than adding a second one
    assert cli(world, "catalogue", "sign", str(entry), "--key", str(priv), "--mirror", world.mirror).returncode == 0
    assert entry.read_text().count("[signature]") == 1
    out = world.tmp / "site"
    r = cli(world, "catalogue", "build", "--out", str(out), "--source", str(world.source), "--mirror", world.mirror)
    assert r.returncode == 0, r.stderr
    e = by_id(json.loads((out / "catalogue.json").read_bytes()))["recipe:signed-engine"]
    assert e["signature"] == {"status": "verified" if listed else "unknown-key", "fingerprint": fingerprint(key)}


def test_catalogue_sign_refuses_a_source_that_no_longer_matches(world):
    world.publisher("acme", world.keys["acme"])
    priv, _ = keygen(world, world.keys["acme"])
    entry = https_recipe_entry(world, "moved-engine")
    world.put("https://example.invalid/acme/moved-engine.json", b"{}")
    before = entry.read_bytes()
    r = cli(world, "catalogue", "sign", str(entry), "--key", str(priv), "--mirror", world.mirror)
    assert r.returncode == 3 and entry.read_bytes() == before


def test_fingerprint_helpers_print_the_publisher_file_fingerprint(world):
    """Case 28: the command the publisher file names prints sha256:<hex> of the DER key."""
    _, pub = keygen(world, world.keys["acme"])
    want = fingerprint(world.keys["acme"])
    helper = subprocess.run([sys.executable, "-m", "lemonpack.catalogue.sources", str(pub)],
                            capture_output=True, text=True, timeout=60)
    assert helper.returncode == 0 and helper.stdout.strip() == want
    assert cli(world, "catalogue", "fingerprint", str(pub)).stdout.strip() == want
    assert "lemonpack catalogue fingerprint KEY.pub" in (REPO / "catalogue" / "publishers" / "lemonpack.toml").read_text()


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    """The repository's own catalogue built exactly as the README says (no SOURCE_DATE_EPOCH)."""
    tmp = tmp_path_factory.mktemp("official")
    env = {k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}
    env.update(LEMONPACK_CACHE_DIR=str(tmp / "cache"), LEMONPACK_CONFIG_DIR=str(tmp / "config"))
    r = subprocess.run([sys.executable, "-c", "from lemonpack.cli import main; main()", "catalogue", "build",
                        "--out", str(tmp / "site")], cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    return tmp, json.loads((tmp / "site" / "catalogue.json").read_bytes()), env


def test_official_install_command_works(official):
    """Case 29: the shown install command of the official recipe installs it."""
    tmp, index, env = official
    cmd = by_id(index)["recipe:hello-engine"]["commands"]["install"]
    assert cmd == "lemonpack install --example"
    r = subprocess.run([sys.executable, "-c", "from lemonpack.cli import main; main()",
                        *shlex.split(cmd)[1:], "--yes", "--no-progress"], cwd=tmp, env=env,
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr + r.stdout


def test_no_platform_that_does_not_exist(official):
    """Case 31: HIP and CUDA targets are listed for linux and windows, never darwin."""
    _tmp, index, _env = official
    assert not [e["id"] for e in index["entries"] for p in e["platforms"]
                if p["os"] == "darwin" and p["accelerator"] in ("rocm", "cuda")]
    assert any(p["accelerator"] == "rocm" for e in index["entries"] for p in e["platforms"])

    class T:
        def __init__(self, requires):
            self.requires = requires

    class E:
        targets = [T(["hip"]), T(["cuda"]), T(["vulkan"]), T(["macos"]), T(["testing", "hip"])]

    assert [(p["os"], p["accelerator"]) for p in extension_platforms(E())] == [
        ("darwin", "cpu"), ("darwin", "vulkan"), ("linux", "cuda"), ("linux", "rocm"), ("linux", "vulkan"),
        ("windows", "cuda"), ("windows", "rocm"), ("windows", "vulkan")]


def test_the_date_is_the_sources_date(official, tmp_path):
    """Case 32: without SOURCE_DATE_EPOCH, the last commit's time (or, outside git, the newest
    source file); with it, that."""
    _tmp, index, _env = official
    assert not index["generated"].startswith("1970")
    if (REPO / ".git").exists():
        commit = subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%ct"], capture_output=True,
                                text=True).stdout.strip()
        from lemonpack.catalogue.build import rfc3339

        assert index["generated"] == rfc3339(int(commit))
    (tmp_path / "catalogue").mkdir()
    (tmp_path / "catalogue" / "x.toml").write_text("")
    os.utime(tmp_path / "catalogue" / "x.toml", (1_700_000_123, 1_700_000_123))
    assert source_epoch(tmp_path, {}) == 1_700_000_123
    assert source_epoch(tmp_path, {"SOURCE_DATE_EPOCH": "42"}) == 42


def test_site_benchmark_runs_without_pytest(tmp_path):
    """Case 34: bench/catalogue_site.py imports nothing that needs the test extras."""
    code = ("import sys, runpy; sys.modules['pytest'] = None; "
            "sys.argv = ['bench/catalogue_site.py', '--entries', '20', '--repeat', '1']; "
            "runpy.run_path('bench/catalogue_site.py', run_name='__main__')")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests")]),
               LEMONPACK_BENCH_RESULTS=str(tmp_path / "RESULTS.md"))  # not over the real figures
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "page interactive" in r.stdout
    assert "`python3 bench/catalogue_site.py --entries 20 --repeat 1`" in (tmp_path / "RESULTS.md").read_text()


@pytest.mark.slow
def test_community_extension_nix_command_builds_on_nix_28(world):
    """Case 30: the shown Nix command (absolute flake path) builds in a checkout of the project
    with the extension next to flake.nix."""
    if not shutil.which("nix"):
        pytest.fail("nix is missing: apt-get install -y nix-bin (scripts/test.sh)")
    world.publisher("acme", world.keys["acme"])
    repo = world.tmp / "gitsrc"
    (repo / "demo_ext").mkdir(parents=True)
    for n, b in community_extension("demo_ext", "demo-p", "gguf:demoarch", ["linux"]).items():
        (repo / "demo_ext" / n).write_bytes(b)
    git("init", "-q", "-b", "main", cwd=repo)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "x", cwd=repo)
    commit = git("rev-parse", "HEAD", cwd=repo)
    world.entry("acme", "demo_ext", (
        'kind = "extension"\nname = "demo_ext"\ndescription = "demo"\nlicense = "MIT"\n'
        f'[source]\ntype = "git"\nurl = "{repo.as_uri()}"\ncommit = "{commit}"\npath = "demo_ext"\n'
        f'sha256 = "{sha(tree_listing(repo / "demo_ext"))}"\n'))
    out = world.tmp / "site"
    assert cli(world, "catalogue", "build", "--out", str(out), "--source", str(world.source)).returncode == 0
    cmds = by_id(json.loads((out / "catalogue.json").read_bytes()))["extension:demo_ext"]["commands"]
    assert '(builtins.getFlake ("path:" + toString ./.))' in cmds["nix"]
    proj = world.tmp / "proj"
    if (REPO / ".git").exists():
        subprocess.run(["git", "clone", "-q", str(REPO), str(proj)], check=True, timeout=120)
    else:
        shutil.copytree(REPO, proj)
    # no nixpkgs here: the clone's flake is locked to the offline stand-in (a user's nix fetches
    # nixpkgs itself); the catalogue's command is run as shown
    from support.nixflake import lock_offline

    lock_offline(proj)
    # the user's download step puts the extension beside flake.nix
    fetch = subprocess.run([sys.executable, "-c", "from lemonpack.cli import main; main()",
                            *shlex.split(cmds["fetch"])[1:]], cwd=proj, capture_output=True, text=True, timeout=120)
    assert fetch.returncode == 0, fetch.stderr
    env = dict(os.environ, NIX_CONFIG="experimental-features = nix-command flakes\nsubstituters =")
    start = time.monotonic()
    r = subprocess.run(["bash", "-c", cmds["nix"]], cwd=proj, env=env, capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "relative path" not in r.stderr and time.monotonic() - start < 280


def test_first_run_search_uses_the_shipped_official_index(tmp_path):
    """Right after install (no cached index) search and show read the index of the official
    entries shipped in the package, which is what the tree describes; official entries say
    'official, in-tree, index digest ...' instead of 'unsigned'."""
    from lemonpack.catalogue.index import shipped_index
    from lemonpack.catalogue.signatures import index_digest

    env = dict(os.environ, LEMONPACK_CACHE_DIR=str(tmp_path / "cache"), LEMONPACK_CONFIG_DIR=str(tmp_path / "cfg"))
    main = [sys.executable, "-c", "from lemonpack.cli import main; main()"]
    r = subprocess.run([*main, "catalogue", "search", "qwen", "--json"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    ids = [x["id"] for x in json.loads(r.stdout)["results"]]
    assert ids[0] == "extension:qwen" and all("qwen" in i for i in ids)
    r = subprocess.run([*main, "catalogue", "show", "hello-engine"], env=env, capture_output=True, text=True, timeout=60)
    digest = index_digest(shipped_index().read_bytes())
    assert f"signature: official, in-tree, index digest {digest}" in r.stdout
    # the shipped file is what the source tree describes (python -m lemonpack.catalogue.official)
    check = subprocess.run([sys.executable, "-m", "lemonpack.catalogue.official", "--check", "--source", str(REPO)],
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stderr


def test_search_ranks_id_and_name_matches_first(official):
    """A term in an entry's id or name puts it before an entry matching only elsewhere."""
    from lemonpack.catalogue.search import search

    _tmp, index, _env = official
    ids = [e["id"] for e in search(index, "qwen")]
    assert ids[0] == "extension:qwen"
    site = (_tmp / "site")
    assert '<link rel="alternate" type="application/atom+xml"' in (site / "index.html").read_text()
    # official entries of an unsigned index: in-tree, with the digest of the index, never "unsigned"
    from lemonpack.catalogue.signatures import index_digest

    page = (site / "entry" / "recipe-hello-engine.html").read_text()
    assert "official, in-tree" in page and index_digest((site / "catalogue.json").read_bytes()) in page
    assert all(e["signature"]["status"] == "in-tree" for e in index["entries"] if e["official"])
    assert 'href="../feed.atom"' in next((site / "entry").glob("*.html")).read_text()
