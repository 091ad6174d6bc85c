"""Model artifacts through the CLI against the real local registry (issue 23, points 1 and 2):
``models push`` / ``pull`` / ``inspect``, artifacts in Docker's, KitOps' and RamaLama's formats
(written by tests/support/model_artifacts.py as those tools write them) read by ``models pull``,
a flipped byte in the registry's storage refused with exit 3 and nothing visible in the store,
``cache list|verify|clean`` knowing the store, and a signed push verified by ``lemonpack verify``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lemonpack.cli import main
from lemonpack.digest import Digest
from support.gguf_files import llama
from support.model_artifacts import push_docker_v01, push_kitops, push_ramalama, push_ramalama_image

ROOT = Path(__file__).resolve().parents[2]


def lp(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def run_json(capsys, *args: str) -> dict:
    code, out, err = lp(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def tiny(tmp_path) -> Path:
    return llama(tmp_path / "tiny.gguf")


def test_push_pull_inspect_round_trip(home, registry, tiny, capsys):
    pushed = run_json(capsys, "models", "push", str(tiny), "--to", f"{registry.host}/models/tiny:v1")
    assert pushed["format"] == "modelpack" and pushed["reference"].endswith("@" + pushed["digest"])
    inspected = run_json(capsys, "models", "inspect", f"{registry.host}/models/tiny:v1")
    assert inspected["digest"] == pushed["digest"] and not inspected["stored"]
    assert inspected["artifact"]["architecture"] == "llama" and inspected["artifact"]["main"] == "tiny.gguf"
    pulled = run_json(capsys, "models", "pull", f"oci://{registry.host}/models/tiny:v1")
    assert pulled["digest"] == pushed["digest"]
    main_file = Path(pulled["files"]["tiny.gguf"])
    assert main_file.name == "tiny.gguf" and main_file.read_bytes() == tiny.read_bytes()
    assert Path(pulled["directory"]).is_relative_to(home.cache / "models")
    again = run_json(capsys, "models", "pull", f"{registry.host}/models/tiny@{pushed['digest']}")
    assert again["fetched"] == 0
    code, out, _ = lp(capsys, "models", "inspect", f"{registry.host}/models/tiny@{pushed['digest']}")
    assert code == 0 and "stored: yes" in out and "quantization: F32" in out


def test_docker_kitops_and_ramalama_artifacts_are_pulled(home, registry, tiny, capsys):
    split = [llama(tiny.parent / "s-00001-of-00002.gguf"), llama(tiny.parent / "s-00002-of-00002.gguf")]
    cases = {
        "docker": (push_docker_v01(registry.host, "m/docker", "v1", [tiny]), "docker-v0.1",
                   {"tiny.gguf", "LICENSE"}),
        "docker-old": (push_docker_v01(registry.host, "m/docker-old", "v1", split, annotated=False), "docker-v0.1",
                       {"model-00001-of-00002.gguf", "model-00002-of-00002.gguf", "LICENSE"}),
        "docker-v02": (push_docker_v01(registry.host, "m/docker-v02", "v1", [tiny], v02=True,
                                       extra={"tokenizer/tokenizer.json": b"{}"}), "docker-v0.2",
                       {"tiny.gguf", "LICENSE", "tokenizer/tokenizer.json"}),
        "kitops": (push_kitops(registry.host, "m/kitops", "v1", tiny, docs={"README.md": b"# tiny\n"}), "kitops",
                   {"models/tiny.gguf", "README.md"}),
        "ramalama": (push_ramalama(registry.host, "m/ramalama", "v1", tiny), "ramalama", {"tiny.gguf"}),
        "ramalama-image": (push_ramalama_image(registry.host, "m/ramalama-image", "v1", tiny), "ramalama-image",
                           {"tiny.gguf", "model.file"}),
    }
    for repo, (digest, fmt, names) in cases.items():
        repo_path = {"docker-old": "m/docker-old"}.get(repo, f"m/{repo}")
        got = run_json(capsys, "models", "pull", f"{registry.host}/{repo_path}:v1")
        assert got["digest"] == digest and got["artifact"]["format"] == fmt, repo
        directory = Path(got["directory"])
        on_disk = {str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file()}
        assert on_disk == names, repo
        ggufs = [p for p in directory.rglob("*.gguf")]
        assert all(p.read_bytes()[:4] == b"GGUF" for p in ggufs), repo
        assert Path(got["main"]).read_bytes() == (split[0] if repo == "docker-old" else tiny).read_bytes(), repo
    assert (directory / "model.file").is_symlink() and (directory / "model.file").resolve().name == "tiny.gguf"
    kit = run_json(capsys, "models", "inspect", f"{registry.host}/m/kitops:v1")["artifact"]
    assert kit["name"] == "tiny" and kit["version"] == "1.0.0"


def test_another_artifact_is_refused_naming_its_media_types(home, registry, capsys):
    from lemonpack.registry import RegistryClient

    with RegistryClient(registry.host) as client:
        data = b"chart"
        d = str(Digest.of_bytes(data))
        client.push_blob("x/helm", data, d, len(data))
        client.push_blob("x/helm", b"{}", str(Digest.of_bytes(b"{}")), 2)
        client.put_manifest("x/helm", "v1", json.dumps({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.cncf.helm.config.v1+json", "digest": str(Digest.of_bytes(b"{}")),
                       "size": 2},
            "layers": [{"mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip", "digest": d,
                        "size": len(data)}]}).encode(), "application/vnd.oci.image.manifest.v1+json")
    code, out, err = lp(capsys, "models", "pull", f"{registry.host}/x/helm:v1")
    assert code == 1 and "application/vnd.cncf.helm.config.v1+json" in err + out
    assert "Traceback" not in err


@pytest.mark.slow
def test_a_flipped_byte_in_registry_storage_exits_3_and_leaves_nothing(home, registry, tiny):
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    push = subprocess.run([sys.executable, "-m", "lemonpack.cli", "models", "push", str(tiny), "--to",
                           f"{registry.host}/models/tiny:v1", "--json"], capture_output=True, text=True, env=env)
    assert push.returncode == 0, push.stderr
    layer = json.loads(push.stdout)["files"][0]["digest"]
    hexd = Digest.parse(layer).hex
    data = registry.storage / "docker" / "registry" / "v2" / "blobs" / "sha256" / hexd[:2] / hexd / "data"
    raw = bytearray(data.read_bytes())
    raw[100] ^= 0x20
    data.write_bytes(bytes(raw))
    pull = subprocess.run([sys.executable, "-m", "lemonpack.cli", "models", "pull", f"{registry.host}/models/tiny:v1"],
                          capture_output=True, text=True, env=env)
    assert pull.returncode == 3, pull.stderr
    assert "sha256 mismatch" in pull.stderr and "Traceback" not in pull.stderr
    store = home.cache / "models"
    assert not (store / "blobs" / "sha256" / hexd).exists()
    assert not (store / "views").exists() or not list((store / "views" / "sha256").iterdir())
    assert not list((store / "partial" / "sha256").iterdir())


def test_cache_list_verify_clean_know_the_store(home, registry, tiny, capsys):
    run_json(capsys, "models", "push", str(tiny), "--to", f"{registry.host}/models/tiny:v1")
    pulled = run_json(capsys, "models", "pull", f"{registry.host}/models/tiny:v1")
    listed = run_json(capsys, "cache", "list")
    models = [e for e in listed["entries"] if e["cache"] == "models"]
    assert {e["name"] for e in models} >= {pulled["digest"], f"view {pulled['digest']}"}
    assert listed["caches"]["models"]["size"] >= tiny.stat().st_size
    assert run_json(capsys, "cache", "verify")["bad"] == []
    blob = home.cache / "models" / "blobs" / "sha256" / Digest.parse(pulled["artifact"]["files"][0]["digest"]).hex
    blob.chmod(0o644)
    blob.write_bytes(b"X" * blob.stat().st_size)
    code, out, _ = lp(capsys, "cache", "verify", "--json")
    assert code == 3 and [b["name"] for b in json.loads(out)["bad"]] == [pulled["artifact"]["files"][0]["digest"]]
    assert not blob.exists() and not Path(pulled["directory"]).exists()
    run_json(capsys, "cache", "clean")
    assert [e for e in run_json(capsys, "cache", "list")["entries"] if e["cache"] == "models"] == []


def test_signed_push_verifies(home, registry, tiny, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LEMONPACK_PASSWORD", "pw")
    assert main(["keygen", "--out", str(tmp_path / "cosign")]) == 0
    capsys.readouterr()
    pushed = run_json(capsys, "models", "push", str(tiny), "--to", f"{registry.host}/models/s:v1",
                      "--sign", str(tmp_path / "cosign.key"))
    assert pushed["signature"]["digest"] == pushed["digest"]
    code, _, err = lp(capsys, "verify", f"{registry.host}/models/s@{pushed['digest']}", "--key",
                      str(tmp_path / "cosign.pub"))
    assert code == 0, err


def _reject_policy(path: Path, scope: str) -> Path:
    path.write_text(json.dumps({"default": [{"type": "insecureAcceptAnything"}],
                                "transports": {"docker": {scope: [{"type": "reject"}]}}}))
    return path


def test_a_model_the_trust_policy_rejects_is_never_fetched(home, registry, tiny, tmp_path, capsys):
    """Issue 24: an ``oci://`` model is judged by the same containers-policy.json as engine
    images, before any byte of it is fetched: ``models pull`` and ``fetch_checkpoints`` (what
    ``run`` and ``serve`` call) refuse with exit 3 naming the scope; another repository of the
    same registry still pulls."""
    from lemonpack.errors import TrustError
    from lemonpack.runtime.launch.modelfiles import ModelSpec
    from lemonpack.runtime.models.ref import fetch_checkpoints
    from lemonpack.trust.check import Trust

    pushed = run_json(capsys, "models", "push", str(tiny), "--to", f"{registry.host}/models/denied:v1")
    policy = _reject_policy(tmp_path / "policy.json", f"{registry.host}/models/denied")
    code, _out, err = lp(capsys, "models", "pull", f"oci://{registry.host}/models/denied:v1", "--policy", str(policy))
    assert code == 3 and f"{registry.host}/models/denied" in err and "reject" in err.lower(), err
    ref = f"oci://{registry.host}/models/denied@{pushed['digest']}"
    spec = ModelSpec(name="user.denied", checkpoints={"main": ref})
    with pytest.raises(TrustError):
        fetch_checkpoints(spec, trust=Trust.load(policy))
    assert not [p for p in (home.cache / "models").rglob("*") if p.is_file() and p.stat().st_size > 0
                and "blobs" in p.parts]  # nothing of the rejected model was fetched
    run_json(capsys, "models", "push", str(tiny), "--to", f"{registry.host}/models/allowed:v1")
    allowed = run_json(capsys, "models", "pull", f"{registry.host}/models/allowed:v1", "--policy", str(policy))
    assert Path(allowed["files"]["tiny.gguf"]).read_bytes() == tiny.read_bytes()


def _descriptor(client, repo: str, digest: str, platform: dict | None = None) -> dict:
    """The index entry of manifest ``digest`` of ``repo`` (its media type and size as the registry has it)."""
    body, media_type, _ = client.get_manifest(repo, digest)
    entry = {"mediaType": media_type, "digest": digest, "size": len(body)}
    return {**entry, "platform": platform} if platform else entry


def _push_index(client, repo: str, tag: str, entries: list[dict]) -> str:
    from lemonpack.canonical import canonical_json
    from lemonpack.oci.mediatypes import MEDIA_TYPE_IMAGE_INDEX

    doc = {"schemaVersion": 2, "mediaType": MEDIA_TYPE_IMAGE_INDEX, "manifests": entries}
    return client.put_manifest(repo, tag, canonical_json(doc), MEDIA_TYPE_IMAGE_INDEX)


def test_an_image_index_is_pulled_through_its_one_model_artifact(home, registry, tiny, tmp_path, capsys):
    """``models pull`` of an OCI image index: the one manifest that is a model artifact (ModelPack
    or Docker's) is taken, beside runtime images and attestations; of several, the one for this
    machine's platform; several with no platform match are refused, each named."""
    from lemonpack.oci.platform import host_platform
    from lemonpack.registry import RegistryClient
    from lemonpack.runtime.models.push import push_model
    from support.trust import push_image

    os_name, arch = host_platform()
    other = "arm64" if arch != "arm64" else "amd64"
    repo = "models/indexed"
    other_gguf = llama(tmp_path / "other.gguf")
    modelpack = push_model([tiny], f"{registry.host}/{repo}:modelpack").digest
    docker = push_model([other_gguf], f"{registry.host}/{repo}:docker", fmt="docker").digest
    with RegistryClient(registry.host) as client:
        runtime = push_image(client, repo, "runtime", b"an engine's runtime layer")
        here = {"os": os_name, "architecture": arch}
        _push_index(client, repo, "with-runtime", [_descriptor(client, repo, runtime, here),
                                                   _descriptor(client, repo, modelpack)])
        per_platform = _push_index(client, repo, "per-platform", [_descriptor(client, repo, modelpack, {"os": os_name, "architecture": other}),
                                                   _descriptor(client, repo, docker, here)])
        _push_index(client, repo, "ambiguous", [_descriptor(client, repo, modelpack),
                                                            _descriptor(client, repo, docker)])
        _push_index(client, repo, "no-model", [_descriptor(client, repo, runtime, here)])

    pulled = run_json(capsys, "models", "pull", f"{registry.host}/{repo}:with-runtime")
    assert pulled["digest"] == modelpack and pulled["artifact"]["format"] == "modelpack"
    assert Path(pulled["files"]["tiny.gguf"]).read_bytes() == tiny.read_bytes()
    picked = run_json(capsys, "models", "pull", f"{registry.host}/{repo}:per-platform")
    assert picked["digest"] == docker and picked["artifact"]["format"] == "docker-v0.1"
    # by the index's digest, then offline: the store knows which manifest that index gave
    for extra in ((), ("--offline",)):
        again = run_json(capsys, "models", "pull", f"{registry.host}/{repo}@{per_platform}", *extra)
        assert again["digest"] == docker, (extra, again)
    assert run_json(capsys, "models", "pull", f"{registry.host}/{repo}@{per_platform}")["fetched"] == 0
    code, _out, err = lp(capsys, "models", "pull", f"{registry.host}/{repo}:ambiguous")
    assert code == 1 and "2 model artifacts and none for" in err and modelpack in err and docker in err, err
    assert "modelpack" in err and "docker-v0.1" in err and "Traceback" not in err
    code, _out, err = lp(capsys, "models", "pull", f"{registry.host}/{repo}:no-model")
    assert code == 1 and "no model artifact among its manifests" in err and runtime in err, err
