"""Helpers for the build tests: a real HTTP mirror on 127.0.0.1, artifacts made to fit
the reference recipes, recipe copies pinned to the served hashes, and the CLI.

Fixtures (registered in tests/conftest.py): ``site``, a per-test server (a thread serving a
directory laid out as ``<host>/<path>``, :mod:`lemonpack.fetch.mirror`), and ``lp``, the CLI
run in-process. The build tests take a private cache from the ``home`` fixture
(:mod:`support.home`). Artifacts are tiny (a shell script named as the block's ``binary``, with
random bytes so no earlier run's Nix store path or cache entry can satisfy a test).
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import io
import json
import os
import secrets
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest

from lemonpack.fetch import mirror_path
from support.fileserver import LocalServer
from support.recipes import recipe_doc, write_recipe
from support.tools import CONTAINERS_CONF, need  # noqa: F401  (re-exported to the build tests)

REPO = Path(__file__).resolve().parents[2]
LEMONADE = REPO / "tests" / "fixtures" / "lemonade-examples"
SEED = REPO / "tests" / "fixtures" / "seed-examples"

# ---------------------------------------------------------------- artifacts

def tar_gz(members: list[tuple[str, bytes, int]]) -> bytes:
    """A tar.gz of regular files ``(name, data, mode)``."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data, mode in members:
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = len(data), mode, 1_700_000_000
            tf.addfile(ti, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def zip_bytes(members: list[tuple[str, bytes, int]]) -> bytes:
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data, mode in members:
            zi = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            zi.external_attr = (0o100000 | mode) << 16
            zf.writestr(zi, data)
    return raw.getvalue()


def artifact_for(url: str, binary: str, payload: bytes | None = None) -> bytes:
    """An archive (zip if ``url`` ends in .zip, else tar.gz) holding an executable
    ``binary`` at its top level, plus a README."""
    payload = payload if payload is not None else (
        f"#!/bin/sh\necho {binary} from {url} {secrets.token_hex(16)}\n".encode())
    members = [(binary, payload, 0o755), ("README.txt", b"test artifact\n", 0o644)]
    return zip_bytes(members) if url.endswith(".zip") else tar_gz(members)


def recipe_sources(doc: dict) -> list[tuple[str, str]]:
    """``(url, binary)`` of every artifact a recipe JSON declares (recipe-level source,
    platform blocks and arch overrides)."""
    out = []
    for blocks in doc.get("platforms", {}).values():
        for block in blocks.values():
            binary = block.get("binary") or "server"
            src = block.get("source") or doc.get("source")
            if src:
                out.append((src, binary))
            for o in (block.get("arch") or {}).values():
                if o.get("source"):
                    out.append((o["source"], o.get("binary") or binary))
    return list(dict.fromkeys(out))


# ---------------------------------------------------------------- server

class Site(LocalServer):
    """A mirror tree served over HTTP on 127.0.0.1 (random port)."""

    def __init__(self, root: Path):
        root.mkdir(parents=True, exist_ok=True)
        super().__init__(root)
        self.hashes: dict[str, str] = {}  # origin URL -> sha256 hex of the served file

    def path_of(self, url: str) -> Path:
        return self.root / mirror_path(url)

    def put(self, url: str, data: bytes) -> str:
        """Serve ``data`` at the mirror path of origin ``url``; return its sha256 hex."""
        p = self.path_of(url)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        self.hashes[url] = hashlib.sha256(data).hexdigest()
        return self.hashes[url]

    def serve_recipe(self, recipe: Path) -> dict[str, str]:
        """Serve an artifact for every source of ``recipe``; ``{url: sha256 hex}``."""
        doc = json.loads(recipe.read_text())
        return {url: self.put(url, artifact_for(url, binary)) for url, binary in recipe_sources(doc)}

    def pinned(self, recipe: Path, dest: Path) -> Path:
        """A copy of ``recipe`` in ``dest`` (same file name) with every artifact served
        and every ``sha256`` replaced by the served file's hash."""
        doc = json.loads(recipe.read_text())
        hashes = self.serve_recipe(recipe)

        def fix(node: dict):
            if "sha256" in node and node.get("source") in hashes:
                node["sha256"] = "sha256:" + hashes[node["source"]]
        doc2 = copy.deepcopy(doc)
        fix(doc2)
        for blocks in doc2.get("platforms", {}).values():
            for block in blocks.values():
                fix(block)
                for o in (block.get("arch") or {}).values():
                    fix(o)
        dest.mkdir(parents=True, exist_ok=True)
        out = dest / recipe.name
        out.write_text(json.dumps(doc2, indent=2))
        return out


# ---------------------------------------------------------------- a variant_of recipe

#: The variant_of recipe of the ``build --base`` tests and the artifact URL it fetches.
RECIPE_ID = "llamacpp-variant"
URL = "https://example.invalid/engines/llama-server-cpu.tar.gz"


def variant_recipe(path: Path, site, url: str = URL, artifact: bytes | None = None) -> Path:
    """A ``variant_of: llamacpp`` recipe with one linux/cpu block whose artifact ``site`` serves."""
    sha = site.put(url, artifact if artifact is not None else artifact_for(url, "llama-server"))
    return write_recipe(path, recipe_doc(
        RECIPE_ID, display_name="llama.cpp on a base", capabilities=["chat_completion", "completion"],
        variant_of="llamacpp", binary="llama-server",
        block={"source": url, "sha256": f"sha256:{sha}", "reserved_args": ["--port", "--host", "-m"]}))


class CliResult:
    def __init__(self, code: int, out: str, err: str):
        self.code, self.out, self.err = code, out, err

    @property
    def text(self) -> str:
        """stdout + stderr with whitespace runs collapsed (rich may wrap)."""
        return " ".join((self.out + "\n" + self.err).split())

    def json(self):
        return json.loads(self.out)

    def __repr__(self):
        return f"CliResult(code={self.code}, out={self.out[-2000:]!r}, err={self.err[-2000:]!r})"


def read_index(layout: Path) -> dict:
    return json.loads((layout / "index.json").read_text())


def tags(layout: Path) -> dict[str, dict]:
    """``tag -> descriptor`` of a layout's index.json."""
    return {m["annotations"]["org.opencontainers.image.ref.name"]: m for m in read_index(layout)["manifests"]}


def blob(layout: Path, digest: str) -> bytes:
    algo, hexd = digest.split(":", 1)
    return (layout / "blobs" / algo / hexd).read_bytes()


def blob_json(layout: Path, digest: str) -> dict:
    return json.loads(blob(layout, digest))


def tree_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def podman_env(tmp_path: Path):
    """``(env, podman_argv_prefix, store_spec, cleanup)`` for private podman storage."""
    import tempfile
    conf = tmp_path / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    root = tmp_path / "storage"
    runroot = Path(tempfile.mkdtemp(prefix="lp-run-"))  # podman: runroot must be short
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    podman = ["podman", "--root", str(root), "--runroot", str(runroot), "--storage-driver", "vfs"]

    def cleanup():
        shutil.rmtree(runroot, ignore_errors=True)
    return env, podman, f"[vfs@{root}+{runroot}]", cleanup


@pytest.fixture
def site(tmp_path):
    """A :class:`Site` (the mirror) serving ``tmp_path/www``, stopped after the test."""
    s = Site(tmp_path / "www")
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def lp(capsys):
    """``lp("build", ...)`` runs ``lemonpack.cli.main`` in-process; returns a :class:`CliResult`."""
    from lemonpack.cli import main

    def run(*args) -> CliResult:
        capsys.readouterr()
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)
    return run
