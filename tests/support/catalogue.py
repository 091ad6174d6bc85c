"""A catalogue source tree for tests: the repository's official set plus community entries
(publishers with real ECDSA keys, recipes and extensions served over a real HTTP server on
127.0.0.1 through the mirror mechanism, an extension in a real ``file://`` git repository),
one entry per reject kind. Nothing here is shipped.

``world = CatalogueWorld(tmp_path)`` builds it; ``world.build(out, ...)`` runs the CLI;
``world.stop()`` stops the server (the ``catalogue_world`` fixture does it).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from lemonpack.fetch import mirror_path
from lemonpack.signing.keys import encode_key_pair
from support.fileserver import LocalServer

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "catalogue-test-pw"


def pem(key) -> str:
    """The PEM public key of private ``key``."""
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def fingerprint(key) -> str:
    """``sha256:<hex>`` of the DER public key of ``key`` (lemonpack.catalogue.sources.key_fingerprint)."""
    der = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(der).hexdigest()


def sign(key, data: bytes) -> str:
    """base64 DER ECDSA-SHA256 of ``data`` (cosign sign-blob), computed here independently."""
    return base64.b64encode(key.sign(data, ec.ECDSA(hashes.SHA256()))).decode()


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def tree_listing(root: Path) -> bytes:
    """``sha256sum``-style listing of every file under ``root`` sorted by path."""
    lines = []
    for p in sorted(root.rglob("*")):
        if p.is_file():
            lines.append((p.relative_to(root).as_posix(), f"{hashlib.sha256(p.read_bytes()).hexdigest()}  "
                          f"{p.relative_to(root).as_posix()}\n".encode()))
    return b"".join(line for _, line in sorted(lines, key=lambda x: x[0].encode()))


def toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string for our ASCII values



def community_extension(name: str, provider_id: str, key: str, requires: list[str]) -> dict[str, bytes]:
    """Files of a community extension directory."""
    manifest = {
        "name": name, "version": "0.3.0", "description": f"{name}: a community extension.",
        "api_version": ">= 0.1.0", "entry": f"{name}_register",
        "providers": [{"id": provider_id, "capability": "text_generation", "keys": [key],
                       "target": f"gufo_{name}_t", "entry": f"{name}_provider_register",
                       "probe": {"format": "gguf", "architecture": [name]}}],
        "options": [], "targets": [{"name": f"gufo_{name}_t", "requires": requires}],
        "files": ["extension.cpp"], "dependencies": [],
    }
    cpp = (f'#include "gufo/ext/registry.hpp"\nextern "C" void {name}_register(gufo::ext::Registry &r) {{}}\n'
           f'extern "C" void {name}_provider_register(gufo::ext::Registry &r) {{}}\n')
    return {"extension.json": json.dumps(manifest, indent=2).encode(), "extension.cpp": cpp.encode()}


def tar_gz(prefix: str, files: dict[str, bytes]) -> bytes:
    """A deterministic .tar.gz of ``files`` under ``prefix/``."""
    buf = io.BytesIO()
    import gzip

    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tf:
        for name in sorted(files):
            info = tarfile.TarInfo(f"{prefix}/{name}" if prefix else name)
            info.size, info.mtime, info.mode = len(files[name]), 0, 0o755
            tf.addfile(info, io.BytesIO(files[name]))
    return buf.getvalue()


S_CPU = tar_gz("", {"llama-server": b"#!/bin/sh\necho strix cpu\n"})
S_ROCM = tar_gz("", {"llama-server": b"#!/bin/sh\necho strix rocm\n"})


STRIX = {
    "recipe": "acme-strix", "display_name": "Acme Strix llama.cpp", "api_contract_version": "1",
    "variant_of": "llamacpp", "capabilities": ["chat_completion", "embeddings"],
    "source": "https://example.invalid/acme/strix-cpu.tar.gz", "sha256": sha(S_CPU),
    "platforms": {"linux": {"cpu": {"binary": "llama-server"},
                            "rocm": {"binary": "llama-server",
                                     "arch": {"gfx115*": {"source": "https://example.invalid/acme/strix-rocm.tar.gz",
                                                          "sha256": sha(S_ROCM)}}}}},
}
PINNED = "docker.io/beta/whisper@sha256:" + "ab" * 32
BOX = {
    "recipe": "beta-box", "display_name": "Beta whisper box", "api_contract_version": "1",
    "capabilities": ["transcription"],
    "platforms": {"linux": {
        "cpu": {"command": "podman", "args": ["run", "--rm", "-p", "{port}:8080", PINNED, "--model-dir", "{model_dir}"]},
        "cuda": {"command": "podman", "args": ["run", "--rm", "-p", "{port}:8080", "docker.io/beta/whisper-cuda:1.0",
                                               "--model-dir", "{model_dir}"],
                 "arch": {"sm_90": {"env": {"ARCH": "hopper"}}}}}},
}


def git(*args: str, cwd: Path) -> str:
    env = {"PATH": os.environ["PATH"], "HOME": str(cwd), "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "GIT_AUTHOR_DATE": "@0 +0000",
           "GIT_COMMITTER_DATE": "@0 +0000", "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


class CatalogueWorld:
    """The source tree ``source``, the mirror server ``server`` (``mirror`` URL), keys of the
    publishers (``keys["acme"]``, ``keys["beta-labs"]``, ``keys["stranger"]``) and the
    catalogue key files ``index_key`` / ``index_pub``. ``expected_rejects``: file -> kind."""

    def __init__(self, tmp: Path, *, community: bool = True):
        self.tmp = tmp
        self.source = tmp / "src"
        self.mirror_root = tmp / "mirror"
        self.mirror_root.mkdir(parents=True)
        self.server = LocalServer(self.mirror_root)
        self.mirror = self.server.base
        src = self.source
        (src / "catalogue").mkdir(parents=True)
        shutil.copytree(REPO / "catalogue" / "extensions", src / "catalogue" / "extensions")
        shutil.copytree(REPO / "api", src / "api")
        shutil.copytree(REPO / "include", src / "include")
        shutil.copy(REPO / "extensions.lock", src / "extensions.lock")
        self.keys = {n: ec.generate_private_key(ec.SECP256R1()) for n in ("index", "acme", "beta-labs", "stranger")}
        pair = encode_key_pair(self.keys["index"], PASSWORD.encode())
        self.index_key, self.index_pub = tmp / "catalogue.key", tmp / "catalogue.pub"
        self.index_key.write_bytes(pair.private_pem)
        self.index_pub.write_bytes(pair.public_pem)
        self.publisher("lemonpack", self.keys["index"])
        self.expected_rejects: dict[str, str] = {}
        if community:
            self.publisher("acme", self.keys["acme"])
            self.publisher("beta-labs", self.keys["beta-labs"])
            self.populate()

    # ------------------------------------------------------------ helpers
    def put(self, url: str, data: bytes) -> None:
        """Serve ``data`` as origin ``url`` through the mirror."""
        p = self.mirror_root / mirror_path(url)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)

    def publisher(self, pid: str, key) -> None:
        (self.source / "catalogue" / "publishers").mkdir(parents=True, exist_ok=True)
        (self.source / "catalogue" / "publishers" / f"{pid}.toml").write_text(
            f'display_name = {toml_str(pid.title())}\nhomepage = "https://example.invalid/{pid}"\n'
            f'contact = "{pid}@example.invalid"\n\n[[keys]]\npem = """{pem(key)}"""\n'
            f'fingerprint = "{fingerprint(key)}"\n')

    def entry(self, publisher: str, name: str, body: str) -> Path:
        d = self.source / "catalogue" / "entries" / publisher
        d.mkdir(parents=True, exist_ok=True)
        p = d / f"{name}.toml"
        p.write_text(body)
        return p

    def https_recipe(self, publisher: str, doc: dict, *, signature: str = "", name: str | None = None,
                     extra: str = "") -> tuple[Path, bytes]:
        name = name or doc["recipe"]
        data = json.dumps(doc, indent=2).encode()
        url = f"https://example.invalid/{publisher}/{name}.json"
        self.put(url, data)
        path = self.entry(publisher, name, (
            f'kind = "recipe"\nname = "{name}"\nlicense = "MIT"\ntags = ["test"]\n'
            f'description = """A **community** recipe: {name}."""\n{extra}\n'
            f'[source]\ntype = "https"\nurl = "{url}"\nsha256 = "{sha(data)}"\n{signature}'))
        return path, data

    def populate(self) -> None:
        """The community entries: four accepted, one per reject kind."""
        acme, stranger = self.keys["acme"], self.keys["stranger"]
        self.put("https://example.invalid/acme/strix-cpu.tar.gz", S_CPU)
        self.put("https://example.invalid/acme/strix-rocm.tar.gz", S_ROCM)
        data = json.dumps(STRIX, indent=2).encode()
        self.https_recipe("acme", STRIX, signature=f'\n[signature]\nvalue = "{sign(acme, data)}"\n')
        self.https_recipe("beta-labs", BOX)
        # an extension in a file:// git repository, signed by a key acme does not list
        repo = self.tmp / "git" / "acme-ext.git"
        repo.mkdir(parents=True)
        git("init", "-q", "-b", "main", cwd=repo)
        files = community_extension("acme_moe", "acme-moe-q4", "gguf:acmemoe", ["vulkan"])
        (repo / "acme_moe").mkdir()
        for n, b in files.items():
            (repo / "acme_moe" / n).write_bytes(b)
        (repo / "README").write_text("unrelated\n")
        git("add", "-A", cwd=repo)
        git("commit", "-q", "-m", "acme_moe", cwd=repo)
        commit = git("rev-parse", "HEAD", cwd=repo)
        listing = tree_listing(repo / "acme_moe")
        self.entry("acme", "acme_moe", (
            'kind = "extension"\nname = "acme_moe"\nlicense = "Apache-2.0"\ntags = ["moe", "vulkan"]\n'
            'description = "Mixture-of-experts kernels <script>alert(1)</script>"\n'
            f'[source]\ntype = "git"\nurl = "{repo.as_uri()}"\ncommit = "{commit}"\npath = "acme_moe"\n'
            f'sha256 = "{sha(listing)}"\n'
            f'[signature]\nvalue = "{sign(stranger, listing)}"\nkey = """{pem(stranger)}"""\n'))
        # an extension as a tarball over https, unsigned
        tgz = tar_gz("beta_ext", community_extension("beta_ext", "beta-ext-cpu", "gguf:betaext", ["linux"]))
        url = "https://example.invalid/beta/beta_ext-0.3.0.tar.gz"
        self.put(url, tgz)
        self.entry("beta-labs", "beta_ext", (
            'kind = "extension"\nname = "beta_ext"\nlicense = "MIT"\ndescription = "CPU extension."\n'
            f'[source]\ntype = "https"\nurl = "{url}"\nsha256 = "{sha(tgz)}"\n'))

        # ---- rejects, one per kind
        self.expected_rejects["catalogue/entries/acme/broken.toml"] = "schema"
        self.entry("acme", "broken", 'kind = "plugin"\nname = "broken"\nlicense = "MIT"\ndescription = ""\n'
                   'colour = "red"\n[source]\ntype = "https"\nurl = "https://example.invalid/x.json"\n')
        tampered = dict(copy.deepcopy(STRIX), recipe="acme-tampered")
        path, data = self.https_recipe("acme", tampered)
        self.put("https://example.invalid/acme/acme-tampered.json", data + b" ")  # bytes changed after listing
        self.expected_rejects["catalogue/entries/acme/acme-tampered.toml"] = "digest mismatch"
        bad = dict(copy.deepcopy(BOX), recipe="beta-badtoken")
        bad["platforms"]["linux"]["cpu"]["args"] = ["run", PINNED, "--model", "{model_path}"]
        del bad["platforms"]["linux"]["cuda"]
        self.https_recipe("beta-labs", bad)
        self.expected_rejects["catalogue/entries/beta-labs/beta-badtoken.toml"] = "contract"
        forged = dict(copy.deepcopy(STRIX), recipe="acme-forged")
        fdata = json.dumps(forged, indent=2).encode()
        self.https_recipe("acme", forged, signature=f'\n[signature]\nvalue = "{sign(stranger, fdata)}"\n')
        self.expected_rejects["catalogue/entries/acme/acme-forged.toml"] = "invalid signature"
        claim = dict(copy.deepcopy(STRIX), recipe="hello-engine")
        self.https_recipe("beta-labs", claim)
        self.expected_rejects["catalogue/entries/beta-labs/hello-engine.toml"] = "official recipe id"
        tgz = tar_gz("acme_clash", community_extension("acme_clash", "qwen27-q4", "gguf:acmeclash", ["linux"]))
        url = "https://example.invalid/acme/acme_clash.tar.gz"
        self.put(url, tgz)
        self.entry("acme", "acme_clash", (
            'kind = "extension"\nname = "acme_clash"\nlicense = "MIT"\ndescription = "clash"\n'
            f'[source]\ntype = "https"\nurl = "{url}"\nsha256 = "{sha(tgz)}"\n'))
        self.expected_rejects["catalogue/entries/acme/acme_clash.toml"] = "provider id"

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ, LEMONPACK_PASSWORD=PASSWORD, SOURCE_DATE_EPOCH="1700000000")
        env.update(extra)
        return env

    def stop(self) -> None:
        self.server.stop()


def run(world: CatalogueWorld, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``lemonpack *args`` in a child process in ``world``: its own cache and config, no mirror unless
    ``env`` gives one."""
    e = world.env(LEMONPACK_CACHE_DIR=str(world.tmp / "cache"), XDG_CONFIG_HOME=str(world.tmp / "config"))
    e.pop("LEMONPACK_MIRROR", None)
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", "from lemonpack.cli import main; main()", *args],
                          capture_output=True, text=True, env=e, cwd=world.tmp, timeout=240)


def by_id(index: dict) -> dict[str, dict]:
    """The entries of a catalogue index by their ``id``."""
    return {e["id"]: e for e in index["entries"]}
