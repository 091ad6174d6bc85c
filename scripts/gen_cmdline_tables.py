#!/usr/bin/env python3
"""Generate lemonpack/oci/cmdline_flags.json: the flag tables of the container CLIs.

Run on a machine with the CLIs installed (``CONTAINERS_CONF=tests/containers.conf`` for podman)::

    python scripts/gen_cmdline_tables.py > lemonpack/oci/cmdline_flags.json

It reads the cobra help pages (``<cli> --help``, ``<cli> run --help``, ``create``, ``pull``, and the
``container``/``image`` group listings) and records, per flag, whether it takes a value: a help line
``  -n, --name string   ...`` has a type word (value flag); ``      --rm   ...`` has none (boolean, only
``--rm=false`` carries a value); ``--flag type[="x"]`` has an optional value given only with ``=``.
The tool and version each table came from are written into the file. nerdctl is not installed here:
its run/create/pull tables are docker's (nerdctl's docs/command-reference.md lists its flags as the
docker-compatible ones, "unlisted docker CLI flags are unimplemented"); its global flags are written
below from the "Global Flags" of nerdctl's cobra help (nerdctl 2.x, docs/command-reference.md).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

LINE = re.compile(r"^\s{2,6}(?:-(?P<short>[A-Za-z0-9]), )?--(?P<long>[A-Za-z0-9][A-Za-z0-9-]*)(?P<rest>.*)$")


def helptext(*argv: str) -> str:
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=60)
    return r.stdout + r.stderr


def flags(text: str, section: str = "Options:") -> dict:
    """{"value": [...], "boolean": [...], "optional": [...], "short": {letter: long}}"""
    out = {"value": [], "boolean": [], "optional": [], "short": {}}
    inside = False
    for line in text.splitlines():
        if line.strip().endswith(":") and not line.startswith(" "):
            inside = line.strip() in (section, "Global Options:", "Flags:")
            continue
        if not inside:
            continue
        m = LINE.match(line)
        if not m:
            continue
        rest = m["rest"]
        if rest.startswith(" ") and not rest.startswith("  "):
            kind = "optional" if "[=" in rest.split()[0] else "value"
        else:
            kind = "boolean"
        out[kind].append(m["long"])
        if m["short"]:
            out["short"][m["short"]] = m["long"]
    for k in ("value", "boolean", "optional"):
        out[k] = sorted(set(out[k]))
    return out


def commands(text: str) -> list[str]:
    out, inside = [], False
    for line in text.splitlines():
        if re.match(r"^(Available Commands|Commands|Management Commands|Common Commands|Swarm Commands):", line):
            inside = True
            continue
        if inside and not line.strip():
            inside = False
            continue
        if inside and line.startswith("  "):
            word = line.split()[0].rstrip("*")
            out.append(word)
    return sorted(set(out))


def cli(tool: str) -> dict:
    version = helptext(tool, "--version").strip().splitlines()[0]
    table = {"source": f"{version}: `{tool} --help`, `{tool} run|create|pull --help`, "
                       f"`{tool} container --help`, `{tool} image --help`",
             "global": flags(helptext(tool, "--help"), "Options:"),
             "commands": commands(helptext(tool, "--help")),
             "groups": {g: commands(helptext(tool, g, "--help")) for g in ("container", "image")}}
    for sub in ("run", "create", "pull"):
        table[sub] = flags(helptext(tool, sub, "--help"))
    return table


NERDCTL_GLOBAL_VALUE = {"address", "host", "namespace", "snapshotter", "storage-driver", "cni-path",
                        "cni-netconfpath", "data-root", "cgroup-manager", "hosts-dir", "host-gateway-ip",
                        "cdi-spec-dirs", "userns-remap", "bridge-ip"}
NERDCTL_GLOBAL_BOOLEAN = {"debug", "debug-full", "insecure-registry", "experimental", "kube-hide-dupe", "help",
                          "version"}


def main() -> int:
    data = {"podman": cli("podman"), "docker": cli("docker")}
    # podman's global options are cobra persistent flags: accepted after the subcommand too.
    data["podman"]["persistent_globals"] = True
    data["docker"]["persistent_globals"] = False
    nerd = json.loads(json.dumps(data["docker"]))
    nerd["source"] = ("nerdctl 2.x docs/command-reference.md (Global flags; run/create/pull flags: docker's, "
                      + data["docker"]["source"] + ")")
    nerd["global"] = {"value": sorted(NERDCTL_GLOBAL_VALUE), "boolean": sorted(NERDCTL_GLOBAL_BOOLEAN),
                      "optional": [], "short": {"a": "address", "H": "host", "n": "namespace"}}
    nerd["commands"] = sorted(set(nerd["commands"]) | {"namespace", "ipfs", "apparmor", "compose"})
    nerd["persistent_globals"] = True  # cobra persistent flags, as in podman
    data["nerdctl"] = nerd
    json.dump(data, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
