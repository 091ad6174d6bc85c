"""``lemonpack probe MODEL_FILE``: the registry of the real official extension set (a copy of the
repository's tree) plus community extensions written by the tests, asked about real GGUF
files written with the gguf package (seed 002 section 4, figure 4)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lemonpack.cli import main
from support.extensions import manifest, write_extension
from support.gguf_files import GGMLQuantizationType, write_gguf

HIP = ["--feature", "hip", "--feature", "linux"]


@pytest.fixture
def flash_next(tmp_path):
    """The seed's qwen4exp file, shaped as flash-next-q4's probe asks: Q4_K experts (tensor data absent)."""
    experts = {"blk.0.ffn_gate_exps.weight": [2048, 768, 64], "blk.1.ffn_gate_exps.weight": [2048, 768, 64]}
    return write_gguf(tmp_path / "flash-next.gguf", "qwen4exp", {"qwen4exp.expert_count": 64}, experts,
                      with_data=False, types=dict.fromkeys(experts, GGMLQuantizationType.Q4_K))


def probe(capsys, *args):
    code = main(["probe", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def probe_json(capsys, *args):
    code, out, _ = probe(capsys, *args, "--json")
    return code, json.loads(out)


def test_seed_figure_4(tree, flash_next, capsys):
    code, out, err = probe(capsys, flash_next, "--tree", tree, *HIP)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[2] == "decision: flash-next-q4 (qwen38_flash_next)"
    assert lines[3] == "providers of text_generation, in registry order (the first yes wins):"
    assert lines[4:] == [
        "  1. deepseek4 (deepseek_v4_flash): no",
        "       - general.architecture is 'qwen4exp', not one of ['deepseek4']",
        "  2. qwen27-q4 (qwen): no",
        "       - general.architecture is 'qwen4exp', not one of ['qwen27']",
        "  3. qwen27-cpu (qwen): no",
        "       - general.architecture is 'qwen4exp', not one of ['qwen27']",
        "  4. flash-next-q4 (qwen38_flash_next): yes: chosen",
        "       - general.architecture is 'qwen4exp', one of ['qwen4exp']",
        "       - metadata qwen4exp.expert_count is 64",
        "       - tensor blk.*.ffn_gate_exps.weight shape [2048, 768, 64] and type in [Q4_K, Q6_K] matches (2 tensors)",
    ]


def test_unbuilt_targets_are_not_asked_and_no_yes_is_the_error(tree, flash_next, capsys):
    code, out, err = probe(capsys, flash_next, "--tree", tree, "--feature", "linux")
    assert code == 1
    assert "decision: none" in out
    assert ("  4. flash-next-q4 (qwen38_flash_next): not asked\n"
            "       - unavailable: target gufo_qwen38_flash_next_hip not built: needs hip\n") in out
    assert "  3. qwen27-cpu (qwen): no\n" in out  # the cpu target is built: asked
    assert err.strip() == "error: No text provider found for model architecture 'qwen4exp'"


def test_json(tree, flash_next, capsys):
    code, doc = probe_json(capsys, flash_next, "--tree", tree, *HIP)
    assert code == 0 and doc["ok"] and doc["chosen"] == {"extension": "qwen38_flash_next", "provider": "flash-next-q4"}
    assert doc["architecture"] == "qwen4exp" and doc["features"] == ["hip", "linux"]
    assert [(c["provider"], c["answer"], c["chosen"]) for c in doc["candidates"]] == [
        ("deepseek4", False, False), ("qwen27-q4", False, False), ("qwen27-cpu", False, False),
        ("flash-next-q4", True, True)]
    code, doc = probe_json(capsys, flash_next, "--tree", tree, "--feature", "linux")
    assert code == 1 and not doc["ok"] and doc["chosen"] is None
    assert doc["message"] == "No text provider found for model architecture 'qwen4exp'"
    flash = doc["candidates"][-1]
    assert (flash["provider"], flash["available"], flash["asked"]) == ("flash-next-q4", False, False)


def test_community_extension_after_the_official_one(tree, flash_next, tmp_path, capsys):
    # two yes: the official extension comes first in registry order (the lock's), so it wins
    community = write_extension(tmp_path / "ext" / "flash_gsq",
                                manifest("flash_gsq", keys=["gguf:qwen4exp-gsq"], arch="qwen4exp"))
    code, out, _ = probe(capsys, flash_next, "--tree", tree, "--extension-dir", community, "--select", "all", *HIP)
    assert code == 0
    assert "  4. flash-next-q4 (qwen38_flash_next): yes: chosen\n" in out
    assert "  5. flash-gsq-p (flash_gsq): yes, but flash-next-q4 said yes first\n" in out
    # without hip the community one (a linux target) is the first yes
    code, doc = probe_json(capsys, flash_next, "--tree", tree, "--extension-dir", community, "--select", "all",
                           "--feature", "linux")
    assert code == 0 and doc["chosen"] == {"extension": "flash_gsq", "provider": "flash-gsq-p"}
    # the release lock (default selection) does not build it: listed, not asked
    code, doc = probe_json(capsys, flash_next, "--tree", tree, "--extension-dir", community, *HIP)
    assert doc["chosen"]["provider"] == "flash-next-q4"
    last = doc["candidates"][-1]
    assert (last["provider"], last["asked"]) == ("flash-gsq-p", False)
    assert last["reasons"] == ["unavailable: extension flash_gsq is not in this build: not named in the release lock"]


def test_other_capability(tree, tmp_path, capsys):
    emb = write_gguf(tmp_path / "emb.gguf", "gemma-embedding", {"gemma-embedding.pooling_type": 1}, {"a": [4]})
    code, doc = probe_json(capsys, emb, "--tree", tree, "--feature", "linux", "--capability", "embeddings")
    assert code == 0 and doc["chosen"] == {"extension": "embedding_gemma2", "provider": "gemma2-embed-cpu"}
    code, out, err = probe(capsys, emb, "--tree", tree, "--feature", "linux")
    assert code == 1 and err.strip() == "error: No text provider found for model architecture 'gemma-embedding'"
    code, out, err = probe(capsys, emb, "--tree", tree, "--capability", "chat")
    assert code == 2 and "--capability" in err


def test_file_without_architecture(tree, tmp_path, capsys):
    path = write_gguf(tmp_path / "n.gguf", None, {"general.name": "x"}, {"a": [4]})
    code, out, err = probe(capsys, path, "--tree", tree, *HIP)
    assert code == 1 and "general.architecture = (missing)" in out
    assert "general.architecture is missing, not one of ['deepseek4']" in out
    assert err.strip() == ("error: No text provider found for model architecture "
                           "(none: the file has no general.architecture)")


@pytest.mark.parametrize("content", [b"", b"GGUF\x03\x00\x00\x00\x01", b"not a model at all"])
def test_bad_model_file_is_one_error_line(tree, tmp_path, content):
    path = tmp_path / "bad.gguf"
    path.write_bytes(content)
    r = subprocess.run([sys.executable, "-m", "lemonpack.cli", "probe", str(path), "--tree", str(tree)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert r.stderr.startswith(f"error: {path}: ") and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = subprocess.run([sys.executable, "-m", "lemonpack.cli", "probe", str(path), "--tree", str(tree), "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and json.loads(r.stdout)["error"] == "model-file"


def test_missing_model_file(tree, tmp_path, capsys):
    code, out, err = probe(capsys, tmp_path / "nope.gguf", "--tree", tree)
    assert code == 1 and f"model file not found: {tmp_path / 'nope.gguf'}" in err
