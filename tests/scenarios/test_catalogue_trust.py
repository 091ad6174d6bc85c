"""What the catalogue shows is safe to paste and installs what was verified; a signature
problem is a status; community input is bounded (cases 19-26, 30, 33; end to end through the
CLI: real processes, a real HTTP server on 127.0.0.1, a real file:// git repository)."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from support.catalogue import CatalogueWorld, REPO, by_id, community_extension, git, run, sha, tree_listing

pytestmark = pytest.mark.timeout(300)


def recipe_bytes(name: str, display: str | None = None) -> bytes:
    r = json.loads((REPO / "lemonpack" / "examples" / "hello-engine.json").read_text())
    r["recipe"], r["display_name"] = name, display or f"{name} engine"
    return (json.dumps(r, indent=2) + "\n").encode()


def entry_toml(name: str, url: str, digest: str, *, kind: str = "recipe", description: str = "demo",
               extra: str = "") -> str:
    return (f'kind = "{kind}"\nname = "{name}"\ndescription = {json.dumps(description)}\nlicense = "MIT"\n'
            f'[source]\ntype = "https"\nurl = {json.dumps(url)}\nsha256 = "{digest}"\n{extra}')


def bomb(ratio_mib: int = 20) -> bytes:
    """A .tar.gz of an extension whose one data file is ``ratio_mib`` MiB of zeros (~1000x)."""
    files = community_extension("bomb_ext", "bomb-p", "gguf:bombarch", ["linux"])
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tf:
        for n, b in files.items():
            info = tarfile.TarInfo(f"bomb_ext/{n}")
            info.size = len(b)
            tf.addfile(info, io.BytesIO(b))
        info = tarfile.TarInfo("bomb_ext/zeros.bin")
        info.size = ratio_mib << 20
        tf.addfile(info, io.BytesIO(bytes(info.size)))
    return buf.getvalue()


class World:
    """One catalogue source tree holding one entry per case, served from 127.0.0.1."""

    def __init__(self, tmp: Path):
        self.cat = CatalogueWorld(tmp, community=False)
        self.tmp, self.www = tmp, tmp / "www"
        self.cat.publisher("pub", self.cat.keys["acme"])
        s = self.cat.server
        self.mark = tmp / "PWNED"
        # 19: shell syntax in the URL (the server ignores the query, so the digest matches)
        data = recipe_bytes("shell-engine")
        s.put("www/shell-engine.json", data)
        self.shell_url = f"{s.base}/www/shell-engine.json?$(touch${{IFS}}{self.mark})&`touch${{IFS}}{self.mark}`;id"
        self.cat.entry("pub", "shell-engine", entry_toml("shell-engine", self.shell_url, sha(data)))
        # 20/21: a plain community recipe, swapped later by a test
        self.demo = recipe_bytes("demo-engine")
        self.demo_url = s.put("www/demo-engine.json", self.demo)
        self.cat.entry("pub", "demo-engine", entry_toml(
            "demo-engine", self.demo_url, sha(self.demo),
            description="First paragraph.\n\n## Usage\nRun it with a model.\n"))
        # 20: swapped at the URL by a test after the build
        data = recipe_bytes("swap-engine")
        url = s.put("www/swap-engine.json", data)
        self.cat.entry("pub", "swap-engine", entry_toml("swap-engine", url, sha(data)))
        # 22: a signature URL whose server is down
        data = recipe_bytes("sigdown-engine")
        url = s.put("www/sigdown-engine.json", data)
        self.cat.entry("pub", "sigdown-engine", entry_toml("sigdown-engine", url, sha(data),
                                                           extra='[signature]\nurl = "http://127.0.0.1:9/x.sig"\n'))
        # 24: an 8 MB recipe (lint's limit is 4 MiB)
        big = json.loads(recipe_bytes("big-engine"))
        big["display_name"] = "B" * (8 << 20)
        data = json.dumps(big).encode()
        url = s.put("www/big-engine.json", data)
        self.cat.entry("pub", "big-engine", entry_toml("big-engine", url, sha(data)))
        # 25: an archive bomb
        data = bomb()
        self.bomb_size = len(data)
        url = s.put("www/bomb_ext.tar.gz", data)
        self.cat.entry("pub", "bomb_ext", entry_toml("bomb_ext", url, sha(data), kind="extension"))
        # 26: bidi overrides in the publisher's and the recipe's display names and the description
        (self.cat.source / "catalogue" / "publishers" / "evil.toml").write_text(
            'display_name = "Evil \\u202eCorp"\nhomepage = "https://evil.example"\ncontact = "e@example.org"\nkeys = []\n')
        data = recipe_bytes("rtl-engine", "good-engine \u202e'sdrawkcab'\u202c gpj.exe")
        url = s.put("www/rtl-engine.json", data)
        self.cat.entry("evil", "rtl-engine", entry_toml("rtl-engine", url, sha(data), description="file: \u202egnp.exe"))
        # a recipe breaking many rules at once: a bounded list of reasons
        bad = json.loads(recipe_bytes("noisy-engine"))
        bad["platforms"]["linux"]["cpu"]["env"] = {f"V{i}": "{nope" + "x" * 5000 + "}" for i in range(60)}
        data = json.dumps(bad).encode()
        url = s.put("www/noisy-engine.json", data)
        self.cat.entry("pub", "noisy-engine", entry_toml("noisy-engine", url, sha(data)))
        # 30: a community extension from a file:// git repository
        repo = tmp / "gitsrc"
        (repo / "demo_ext").mkdir(parents=True)
        for n, b in community_extension("demo_ext", "demo-p", "gguf:demoarch", ["linux"]).items():
            (repo / "demo_ext" / n).write_bytes(b)
        git("init", "-q", "-b", "main", cwd=repo)
        git("add", "-A", cwd=repo)
        git("commit", "-q", "-m", "x", cwd=repo)
        self.ext_repo, self.ext_commit = repo, git("rev-parse", "HEAD", cwd=repo)
        self.cat.entry("pub", "demo_ext", (
            'kind = "extension"\nname = "demo_ext"\ndescription = "demo"\nlicense = "MIT"\n'
            f'[source]\ntype = "git"\nurl = "{repo.as_uri()}"\ncommit = "{self.ext_commit}"\npath = "demo_ext"\n'
            f'sha256 = "{sha(tree_listing(repo / "demo_ext"))}"\n'))

    def build(self, out: Path) -> tuple[subprocess.CompletedProcess, dict]:
        r = run(self.cat, "catalogue", "build", "--out", str(out), "--source", str(self.cat.source))
        index = json.loads((out / "catalogue.json").read_bytes()) if (out / "catalogue.json").exists() else {}
        return r, index


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = World(tmp_path_factory.mktemp("trust"))
    yield w
    w.cat.stop()


@pytest.fixture(scope="module")
def built(world):
    out = world.tmp / "site"
    r, index = world.build(out)
    assert r.returncode == 0, r.stderr
    return out, index


def shell(world, cmd: str, cwd: Path, cache: str = "user-cache") -> subprocess.CompletedProcess:
    """Run a shown command with bash, ``lemonpack`` on PATH being this checkout, with the
    user's own cache ``cache``."""
    bindir = world.tmp / "bin"
    if not (bindir / "lemonpack").exists():
        bindir.mkdir(exist_ok=True)
        (bindir / "lemonpack").write_text(
            f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -c "from lemonpack.cli import main; main()" "$@"\n')
        (bindir / "lemonpack").chmod(0o755)
    env = world.cat.env(LEMONPACK_CACHE_DIR=str(world.tmp / cache), PATH=f"{bindir}:{os.environ['PATH']}",
                        PYTHONPATH=os.pathsep.join(sys.path))
    env.pop("LEMONPACK_MIRROR", None)
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def rejected(index: dict) -> dict[str, list[str]]:
    return {r["id"]: r["reasons"] for r in index["rejected"]}


def test_one_unreachable_signature_url_is_a_status_not_an_abort(built):
    """Case 22: the build completes; that entry says why its signature was not checked."""
    _out, index = built
    e = by_id(index)["recipe:sigdown-engine"]
    assert e["signature"] == {"status": "unavailable", "fingerprint": None,
                              "detail": "signature unavailable (unreachable)"}
    assert "recipe:demo-engine" in by_id(index)


def test_shell_syntax_in_a_url_is_quoted_and_pasting_runs_nothing(world, built):
    """Case 19: the URL is one shell word in every command; pasting the fetch step fetches."""
    out, index = built
    cmds = by_id(index)["recipe:shell-engine"]["commands"]
    argv = shlex.split(cmds["fetch"])
    assert argv[:4] == ["lemonpack", "catalogue", "fetch", world.shell_url]
    r = shell(world, cmds["fetch"], world.tmp / "user19")
    assert r.returncode == 0, r.stderr
    assert not world.mark.exists()
    assert (world.tmp / "user19" / "shell-engine.json").read_bytes() == recipe_bytes("shell-engine")


def test_entry_page_shows_every_step_download_first(built):
    """Case 21: the page lists the download (data-command="fetch") before Install."""
    out, index = built
    page = (out / "entry" / "recipe-demo-engine.html").read_text()
    shown = re.findall(r'data-command="([a-z]+)">([^<]*)', page)
    assert [k for k, _ in shown] == ["fetch", "install", "run", "nix"]
    import html

    assert html.unescape(shown[0][1]) == by_id(index)["recipe:demo-engine"]["commands"]["fetch"]


def test_oversized_recipe_and_archive_bomb_are_rejected(world, built):
    """Cases 24, 25: lint's 4 MiB limit applies to fetched recipes; archives are measured
    before extraction (a ~1000x expansion is refused)."""
    out, index = built
    rej = rejected(index)
    # refused while it is fetched: its Content-Length is over lint's 4 MiB (issue 28: limits applied while reading)
    assert "the body is 8389197 bytes, larger than 4194304 bytes" in rej["recipe:big-engine"][0]
    assert "archive bomb" in rej["extension:bomb_ext"][0]
    assert "recipe:big-engine" not in by_id(index) and (out / "index.html").stat().st_size < 1_000_000


def test_reasons_are_bounded(built):
    """Many problems: at most 20 reasons plus 'and N more', each a short line."""
    _out, index = built
    reasons = rejected(index)["recipe:noisy-engine"]
    assert len(reasons) == 21 and reasons[-1].startswith("and ") and reasons[-1].endswith(" more")
    assert all(len(r) <= 400 for r in reasons)


class _BidiScan(HTMLParser):
    BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")

    def __init__(self):
        super().__init__()
        self.stack, self.raw = [], []

    def handle_starttag(self, tag, attrs):
        if tag not in ("meta", "link", "br", "hr", "input"):
            self.stack.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        while self.stack and self.stack.pop()[0] != tag:
            pass

    def handle_data(self, data):
        if self.BIDI.search(data) and not any(t == "bdi" or "dir" in a for t, a in self.stack):
            self.raw.append(data)


def test_bidi_overrides_cannot_reorder_pages_or_cli_output(world, built):
    """Case 26: no raw override outside isolation on any page; names sit in <bdi>; the CLI
    escapes them."""
    out, index = built
    for page in [out / "index.html", *sorted((out / "entry").glob("*.html"))]:
        scan = _BidiScan()
        scan.feed(page.read_text(encoding="utf-8"))
        assert scan.raw == [], page.name
    page = (out / "entry" / "recipe-rtl-engine.html").read_text(encoding="utf-8")
    assert "<bdi>Evil \\u202eCorp</bdi>" in page and "license <bdi>MIT</bdi>" in page
    r = run(world.cat, "catalogue", "show", "rtl-engine", "--index", str(out))
    assert r.returncode == 0 and "\u202e" not in r.stdout and "\\u202e" in r.stdout


def test_show_keeps_the_description_lines(world, built):
    """Case 33."""
    out, _ = built
    r = run(world.cat, "catalogue", "show", "demo-engine", "--index", str(out))
    assert r.stdout.endswith("First paragraph.\n\n## Usage\nRun it with a model.\n\n") or \
        r.stdout.rstrip("\n").endswith("First paragraph.\n\n## Usage\nRun it with a model.")
    assert "\\n" not in r.stdout.split("commands:")[1]


def test_commands_install_only_the_verified_bytes(world, built):
    """Case 20: the shown commands
    refuse content that changed at the URL after the build (exit 3, nothing written, so the
    install step has nothing to install); verify --fetch sees the swap although the cache
    holds the verified copy."""
    out, index = built
    e = by_id(index)["recipe:swap-engine"]
    user = world.tmp / "user20"
    ok = shell(world, e["commands"]["fetch"], user)
    assert ok.returncode == 0, ok.stderr
    assert sha((user / "swap-engine.json").read_bytes()) == e["digest"]
    (user / "swap-engine.json").unlink()
    world.cat.server.put("www/swap-engine.json", recipe_bytes("swap-engine", "SWAPPED after verification"))
    # a user whose cache holds the verified copy gets those bytes (the cache is keyed by digest)
    r = shell(world, e["commands"]["fetch"], user)
    assert r.returncode == 0 and sha((user / "swap-engine.json").read_bytes()) == e["digest"]
    (user / "swap-engine.json").unlink()
    # a new user gets the swapped bytes from the URL: refused
    r = shell(world, e["commands"]["fetch"], user, cache="new-user-cache")
    assert r.returncode == 3 and not (user / "swap-engine.json").exists(), r.stderr
    r = shell(world, e["commands"]["fetch"] + "; " + e["commands"]["install"] + " --yes --no-progress", user,
              cache="new-user-cache2")
    assert r.returncode != 0 and not (user / "swap-engine.json").exists()
    r = run(world.cat, "catalogue", "verify", str(out), "--key", str(world.cat.index_pub), "--fetch")
    assert r.returncode == 3 and "recipe:swap-engine" in r.stdout


def test_extension_download_step_checks_the_tree(world, built):
    """A community extension's download step (git): the directory appears only with the
    verified tree; a wrong digest writes nothing (exit 3)."""
    _out, index = built
    cmds = by_id(index)["extension:demo_ext"]["commands"]
    assert cmds["install"].startswith("lemonpack extensions generate --extension-dir ./demo_ext")
    user = world.tmp / "user-ext"
    r = shell(world, cmds["fetch"], user)
    assert r.returncode == 0, r.stderr
    assert (user / "demo_ext" / "extension.json").is_file()
    wrong = cmds["fetch"].replace("--out demo_ext", "--out other_ext").replace("sha256:", "sha256:0", 1)
    wrong = re.sub(r"sha256:0([0-9a-f]{63})[0-9a-f]", r"sha256:0\1", wrong)
    r = shell(world, wrong, user)
    assert r.returncode == 3 and not (user / "other_ext").exists(), r.stderr
