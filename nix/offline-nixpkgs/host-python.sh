#!/usr/bin/env bash
# Prepares the stand-in's host Python (see python.nix): a virtual environment of Debian's
# /usr/bin/python3 at /opt/offline-nixpkgs-python holding the dependencies of the given
# pyproject.toml ([project] dependencies), the dependencies of the packages the flake builds
# itself (nix/python-packages.nix: what nixpkgs has for typer and lightkube) and the build
# backend those builds use (pdm-backend), readable by Nix's build users (nixbld), which
# cannot enter /root (where pyenv's interpreters live).
#   usage: host-python.sh PYPROJECT.toml
set -euo pipefail
venv=/opt/offline-nixpkgs-python
[ -x "$venv/bin/python3" ] || /usr/bin/python3 -m venv "$venv"
mapfile -t deps < <(/usr/bin/python3 -c 'import sys, tomllib; print(*tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"], sep="\n")' "$1")
"$venv/bin/python3" -m pip install -q --disable-pip-version-check "${deps[@]}" \
  annotated-doc shellingham httpx2 msgspec pdm-backend
