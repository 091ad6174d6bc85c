#!/usr/bin/env python3
"""Benchmark ``lemonpack kube generate`` for many models (a script, not a test).

Inputs: ``--models`` registered models (default 1,000), each with its own GGUF path, all served
by one variant_of llama.cpp recipe with an NVIDIA block and an sm_90 arch override, targeted
at ``cuda:sm_90`` and published on 127.0.0.1 (every feature that costs: launch plan, probes,
resources, affinity, host ports).

Measured, each the best of ``--repeat`` runs:

- ``generate``: in this process, what the command does after reading its inputs: every model's
  launch plan, its typed Deployment and Service (lightkube models), the documents, and the
  YAML stream (:func:`lemonpack.kube.generate_objects`, :func:`~lemonpack.kube.documents`,
  :func:`~lemonpack.kube.render_yaml`);
- ``command``: the whole ``lemonpack kube generate`` as a user runs it (a new Python process:
  start-up, discovery, the model registry, writing the file);
- ``command`` CPU time (user + sys of the process): what the command costs when the machine
  is shared (wall time on a loaded machine is mostly waiting for a core);
- the baseline, in the same run: ``yaml.safe_dump_all`` of the same number of plain dicts
  (the documents the generator produced, copied), with the same YAML options, so the ratio
  says what the generator adds over serialising its own output.

Target: ``command`` under 2 s for 1,000 models.

Usage: ``python bench/kube.py [--models N] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from lemonpack.contract import load_recipe_text
from lemonpack.kube import GenerateOptions, KubeModel, Target, documents, generate_objects, render_yaml
from lemonpack.runtime.launch.modelfiles import ModelSpec
from lemonpack.runtime.models.registry import ModelRegistry

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _support import best  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "registry.example.test/engines/llamacpp@sha256:" + "ab" * 32
RECIPE = {
    "recipe": "llamacpp-bench", "display_name": "bench", "api_contract_version": "1", "variant_of": "llamacpp",
    "capabilities": ["chat_completion"], "source": "https://example.invalid/x.tar.gz", "sha256": "sha256:" + "0" * 64,
    "health_probe": {"type": "http", "endpoint": "/health", "timeout_seconds": 300, "poll_interval_ms": 500},
    "platforms": {"linux": {"cuda": {"binary": "llama-server", "argv_extra": ["-ngl", "99"],
                                     "arch": {"sm_90": {"argv_extra": ["-ngl", "99", "--flash-attn", "on"]}}}}},
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    n = args.models

    recipe = load_recipe_text(json.dumps(RECIPE), "/bench/llamacpp-bench.json")
    models = [KubeModel(f"user.model-{i:05d}", ModelSpec(name=f"user.model-{i:05d}",
                                                         checkpoints={"main": f"/srv/models/m{i}/model.gguf"}), recipe)
              for i in range(n)]
    opts = GenerateOptions(images={"llamacpp-bench": IMAGE}, target=Target.parse("cuda:sm_90"),
                           publish=("127.0.0.1", 20000), liveness=False)  # the CLI drops it with --publish
    out: dict[str, bytes] = {}

    def generate() -> None:
        out["yaml"] = render_yaml(documents(generate_objects(models, opts)))

    t_gen = best(generate, args.repeat)
    plain = [copy.deepcopy(d) for d in yaml.safe_load_all(out["yaml"])]

    def baseline() -> None:
        yaml.safe_dump_all(plain, sort_keys=True, default_flow_style=False, explicit_start=True, allow_unicode=True,
                           width=4096)

    t_base = best(baseline, args.repeat)

    with tempfile.TemporaryDirectory(prefix="lemonpack-bench-kube-") as tmp:
        tmp_path = Path(tmp)
        backends = tmp_path / "backends"
        backends.mkdir(mode=0o755)
        (backends / "llamacpp-bench.json").write_text(json.dumps(RECIPE))
        os.chmod(backends / "llamacpp-bench.json", 0o644)
        registry = ModelRegistry(tmp_path / "config" / "user_models.json")
        doc = {m.name: {"recipe": "llamacpp-bench", "checkpoints": {"main": m.spec.checkpoints["main"]}}
               for m in models}
        registry.path.parent.mkdir(parents=True)
        registry.path.write_text(json.dumps(doc))
        env = {**os.environ, "LEMONPACK_BACKENDS_PATH": f"user{os.pathsep}{backends}",
               "LEMONPACK_CONFIG_DIR": str(tmp_path / "config"), "LEMONPACK_CACHE_DIR": str(tmp_path / "cache"),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        argv = [sys.executable, "-c", "from lemonpack.cli import main; main()", "kube", "generate",
                *[m.name for m in models], "--image", f"llamacpp-bench={IMAGE}", "--accelerator", "cuda:sm_90",
                "--publish", "127.0.0.1:20000", "--out", str(tmp_path / "engines.yaml")]

        cpu: list[float] = []

        def command() -> None:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            r = subprocess.run(argv, env=env, capture_output=True, text=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            if r.returncode != 0:
                raise SystemExit(f"lemonpack kube generate failed: {r.stderr}")

        t_cmd = best(command, args.repeat)
        same = (tmp_path / "engines.yaml").read_bytes() == out["yaml"]

    size = len(out["yaml"])
    print(f"kube generate, {n} models ({2 * n} objects, {size / 1e6:.1f} MB of YAML), best of {args.repeat}:")
    print(f"  generate (plans + objects + YAML, in process): {t_gen:.3f} s")
    print(f"  command (lemonpack kube generate, new process): {t_cmd:.3f} s   target < 2 s: "
          f"{'met' if t_cmd < 2 else 'NOT met'}")
    print(f"  command CPU time (user + sys, best of {args.repeat}): {min(cpu):.3f} s; load average now "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (wall time grows with the machine's load)")
    print(f"  baseline (yaml.safe_dump_all of {2 * n} plain dicts): {t_base:.3f} s")
    print(f"  ratio generate / baseline: {t_gen / t_base:.2f}x; command / baseline: {t_cmd / t_base:.2f}x")
    print(f"  the command's file equals the in-process YAML: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    from _support import run_recorded

    raise SystemExit(run_recorded("kube", main))
