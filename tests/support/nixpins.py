"""The files nix/python-packages.nix fetches with fetchPypi (pinned in nix/python/pins.json),
put into the Nix store beforehand the way the README's example is (``nix-store --add-fixed
sha256 FILE``), so that builds of the flake's lemonpack package fetch nothing: a fixed-output
path depends only on the file's name and hash.

The files come from PyPI through pip (``pip download --no-deps``; ``--no-binary :all:`` for a
source distribution), cached in ``~/.cache/lemonpack-test/pypi/``, and are checked against the
pinned sha256 before they are added.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from lemonpack.nix.hashes import hex_from_sri
from support.tools import need

REPO = Path(__file__).resolve().parents[2]
PINS = REPO / "nix" / "python" / "pins.json"
CACHE = Path.home() / ".cache" / "lemonpack-test" / "pypi"


def pins() -> dict[str, dict]:
    """nix/python/pins.json: distribution name -> {pname, version, format, file, hash, ...}."""
    return json.loads(PINS.read_text())


def pinned_file(name: str, pin: dict) -> Path:
    """The pinned file of ``name`` in the cache (downloaded with pip when missing); raises
    AssertionError when pip fails or the file does not have the pinned sha256."""
    path = CACHE / pin["file"]
    if not path.is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        binary = [] if pin["format"] == "wheel" else ["--no-binary", ":all:"]
        run = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", *binary,
                              f"{name}=={pin['version']}", "-d", str(CACHE)], capture_output=True, text=True,
                             timeout=600)
        assert run.returncode == 0 and path.is_file(), f"pip download {name}=={pin['version']}: {run.stderr}"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == hex_from_sri(pin["hash"]), f"{path}: sha256 {digest}, pinned {pin['hash']}"
    return path


def add_pins_to_store() -> list[str]:
    """Every pinned file added to the store; returns their store paths."""
    files = [str(pinned_file(name, pin)) for name, pin in sorted(pins().items())]
    out = subprocess.run([need("nix-store"), "--add-fixed", "sha256", *files], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()
