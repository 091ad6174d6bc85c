"""Pulling model artifacts (lemonpack/runtime/models/pull.py) from the real local registry
(Debian's docker-registry, tests/support/registry.py) into the store: the round trip, a flipped
byte in the registry's storage refused with nothing visible in the store, a killed download
resumed, two concurrent pulls sharing one blob, offline, and the GGUF header alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from lemonpack.digest import Digest, file_digest
from lemonpack.errors import IntegrityError, NotFoundError
from lemonpack.registry import RegistryClient
from lemonpack.runtime.models.artifact import ModelArtifactError
from lemonpack.runtime.models.pull import fetch_gguf_header, pull_model
from lemonpack.runtime.models.push import push_model
from lemonpack.runtime.models.store import ModelStore
from support.gguf_files import llama, write_gguf

ROOT = Path(__file__).resolve().parents[3]


def big_gguf(path: Path, mib: int) -> Path:
    """A real GGUF whose one tensor makes it about ``mib`` MiB."""
    return write_gguf(path, "llama", {"llama.context_length": 2048, "general.file_type": 0},
                      {"w": [1024, 256 * mib]})


def registry_blob(registry, digest: str) -> Path:
    hexd = Digest.parse(digest).hex
    return registry.storage / "docker" / "registry" / "v2" / "blobs" / "sha256" / hexd[:2] / hexd / "data"


def test_a_pushed_model_is_pulled_into_a_view_with_its_file_name(registry, tmp_path):
    model = llama(tmp_path / "tiny.gguf")
    pushed = push_model([model], f"{registry.host}/models/tiny:v1")
    store = ModelStore(tmp_path / "store")
    got = pull_model(f"oci://{registry.host}/models/tiny:v1", store=store)
    assert got.manifest_digest == pushed.digest and got.reference.digest == pushed.digest
    assert got.reference.tag == "v1"
    assert got.main is not None and got.main.name == "tiny.gguf" and got.main.read_bytes() == model.read_bytes()
    assert got.directory == store.view_path(pushed.digest) and got.fetched > model.stat().st_size
    assert got.artifact.format == "modelpack" and got.artifact.architecture == "llama"
    again = pull_model(f"{registry.host}/models/tiny@{pushed.digest}", store=store,
                       client=RegistryClient("127.0.0.1:1"))  # no request may be sent: nothing listens there
    assert again.fetched == 0 and again.directory == got.directory
    registry.stop()
    offline = pull_model(f"{registry.host}/models/tiny:v1", store=store, offline=True)
    assert offline.manifest_digest == pushed.digest


def test_offline_refuses_what_the_store_lacks(tmp_path):
    with pytest.raises(NotFoundError, match="--offline"):
        pull_model(f"127.0.0.1:1/models/none@sha256:{'a' * 64}", store=ModelStore(tmp_path), offline=True)


def test_a_flipped_byte_in_the_registry_is_refused_and_nothing_is_visible(registry, tmp_path):
    model = llama(tmp_path / "tiny.gguf")
    pushed = push_model([model], f"{registry.host}/models/tiny:v1")
    blob = registry_blob(registry, pushed.files[0].digest)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0x01
    blob.write_bytes(bytes(data))
    store = ModelStore(tmp_path / "store")
    with pytest.raises(IntegrityError) as e:
        pull_model(f"{registry.host}/models/tiny:v1", store=store)
    assert e.value.exit_code == 3
    assert not store.has(pushed.files[0].digest) and not store.has(pushed.digest)
    assert not store.view_path(pushed.digest).exists()
    assert not list((store.root / "partial" / "sha256").iterdir())


@pytest.mark.slow
def test_a_killed_pull_resumes_from_its_partial(registry, tmp_path):
    model = big_gguf(tmp_path / "big.gguf", 24)
    size = model.stat().st_size
    pushed = push_model([model], f"{registry.host}/models/big:v1")
    store_root = tmp_path / "store"
    # a child pulls and is SIGKILLed by its own progress callback once part of the blob is on disk
    child = f"""
import os, signal, sys
from pathlib import Path
from lemonpack.runtime.models.pull import pull_model
from lemonpack.runtime.models.store import ModelStore
store = ModelStore(Path({str(store_root)!r}))
partial = store.root / "partial" / "sha256" / {Digest.parse(pushed.files[0].digest).hex!r}
def tick(done, total):
    if done >= 8 << 20:
        while not (partial.exists() and partial.stat().st_size > 0):
            pass
        os.kill(os.getpid(), signal.SIGKILL)
pull_model({str(pushed.reference)!r}, store=store, progress=tick)
"""
    proc = subprocess.run([sys.executable, "-c", child], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    store = ModelStore(store_root)
    partial = store_root / "partial" / "sha256" / Digest.parse(pushed.files[0].digest).hex
    had = partial.stat().st_size
    assert 0 < had < size and not store.has(pushed.files[0].digest)
    got = pull_model(str(pushed.reference), store=store)
    assert got.main is not None and file_digest(got.main)[0] == Digest.parse(pushed.files[0].digest)
    assert got.fetched <= size - had + 64 * 1024  # the rest of the blob (+ manifest and config), not all of it
    assert not partial.exists()


@pytest.mark.slow
def test_two_concurrent_pulls_share_one_blob(registry, tmp_path):
    model = big_gguf(tmp_path / "big.gguf", 16)
    pushed = push_model([model], f"{registry.host}/models/big:v1")
    store = ModelStore(tmp_path / "store")
    results: list = []
    errors: list = []

    def pull():
        try:
            results.append(pull_model(str(pushed.reference), store=ModelStore(store.root)))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=pull) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and len(results) == 2
    assert results[0].directory == results[1].directory
    blobs = list((store.root / "blobs" / "sha256").iterdir())
    assert len(blobs) == 3  # the layer, the config, the manifest: one copy each
    assert sum(r.fetched for r in results) < 1.5 * model.stat().st_size  # one download of the layer


def test_an_unknown_artifact_is_refused_before_its_layers_are_fetched(registry, tmp_path):
    from support.registry import LocalRegistry  # noqa: F401 - the fixture's type
    client = RegistryClient(registry.host)
    layer = b"not a model"
    ld = str(Digest.of_bytes(layer))
    client.push_blob("x/helm", layer, ld, len(layer))
    config = b"{}"
    cd = str(Digest.of_bytes(config))
    client.push_blob("x/helm", config, cd, 2)
    import json
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"mediaType": "application/vnd.cncf.helm.config.v1+json", "digest": cd, "size": 2},
                           "layers": [{"mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip",
                                       "digest": ld, "size": len(layer)}]}).encode()
    client.put_manifest("x/helm", "v1", manifest, "application/vnd.oci.image.manifest.v1+json")
    store = ModelStore(tmp_path / "store")
    with pytest.raises(ModelArtifactError, match="application/vnd.cncf.helm.chart.content.v1.tar"):
        pull_model(f"{registry.host}/x/helm:v1", store=store)
    assert not store.has(ld) and not store.has(cd)


def test_the_gguf_header_alone_comes_by_range(registry, tmp_path):
    model = big_gguf(tmp_path / "big.gguf", 16)
    pushed = push_model([model], f"{registry.host}/models/big:v1")
    store = ModelStore(tmp_path / "store")
    header = fetch_gguf_header(str(pushed.reference), store=store)
    assert header.identity.architecture == "llama"
    assert header.identity.metadata["llama.context_length"] == 2048
    assert 0 < header.fetched <= 1 << 20 and header.path.stat().st_size <= 1 << 20
    assert not store.has(pushed.files[0].digest)
    assert header.artifact is not None and [f.name for f in header.artifact.files] == ["big.gguf"]
    again = fetch_gguf_header(str(pushed.reference), store=store, offline=True)
    assert again.fetched == 0 and again.identity.tensors == header.identity.tensors
    from lemonpack.runtime.models.memory import estimate_model
    assert estimate_model(str(header.path)).weights == estimate_model(str(model)).weights


def test_split_ggufs_an_mmproj_and_a_readme_sit_side_by_side(registry, tmp_path):
    names = ["m-00001-of-00002.gguf", "m-00002-of-00002.gguf", "mmproj-m-f16.gguf", "README.md"]
    files = [llama(tmp_path / n) for n in names[:3]]
    (tmp_path / "README.md").write_text("# m\n")
    files.append(tmp_path / "README.md")
    pushed = push_model(list(reversed(files)), f"{registry.host}/models/m:v1")
    assert [f.role for f in pushed.files] == ["doc", "mmproj", "weight", "weight"]
    got = pull_model(str(pushed.reference), store=ModelStore(tmp_path / "store"))
    assert sorted(p.name for p in got.directory.iterdir()) == sorted(names)
    assert got.main == got.directory / "m-00001-of-00002.gguf"
    assert got.artifact.main is not None and got.artifact.main.name == "m-00001-of-00002.gguf"
    assert got.artifact.name == "m"
    for n in names:
        assert (got.directory / n).read_bytes() == (tmp_path / n).read_bytes()
