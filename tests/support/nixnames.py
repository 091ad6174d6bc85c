"""The nixpkgs attribute names lemonpack's package code takes (flake.nix, nix/*.nix, the
recipe packages' default.nix that `lemonpack build` writes), read from the Nix text.

The package code names nixpkgs only in these forms (a rule of its own, held by
:func:`problems`): ``pkgs.A.B``, ``lib.A.B`` (``pkgs.lib`` too), ``stdenv.A.B``,
``python3Packages.A`` / ``py.A`` (``py = python3Packages``), ``inherit (pkgs.lib) a b;`` /
``inherit (lib) a b;``, and the formal arguments of a file called with ``callPackage``; no
``with`` (it hides which names are taken). Names the flake's own overlay adds (``lemonpack``,
``gufo``, ``lemonpackRecipes``) and the flake's own Python packages (``own.X``) are not
nixpkgs'. Comments are removed first (``#`` to the end of a line, outside strings' ``${}``
is not distinguished: the package code keeps ``#`` out of its Nix expressions).
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: attributes the flake's overlay adds to the package set (not taken from nixpkgs)
OVERLAY = {"lemonpack", "gufo", "lemonpackRecipes"}
_IDENT = r"[A-Za-z_][A-Za-z0-9_'-]*"
_PATH = rf"{_IDENT}(?:\.{_IDENT})*"


def package_sources() -> dict[str, str]:
    """relative path -> text of every Nix file of the package code (the stand-in excluded)."""
    from lemonpack.nix.emit import package_nix

    files = {"flake.nix": (REPO / "flake.nix").read_text()}
    for p in sorted((REPO / "nix").glob("*.nix")):
        files[str(p.relative_to(REPO))] = p.read_text()
    files["<lemonpack build>/default.nix"] = package_nix("r").decode()
    return files


def strip_comments(text: str) -> str:
    return re.sub(r"(^|\s)#[^\n]*", r"\1", text)


def _trim(path: str) -> str:
    """A name path up to the attribute nixpkgs defines: method-like tails of results are cut
    (``stdenv.mkDerivation``, ``lib.licenses.asl20``, ``python3Packages.rich``)."""
    return path


def names(text: str, call_package_args: bool = False) -> set[str]:
    """The nixpkgs names one file takes, e.g. ``{"lib.hasPrefix", "python3Packages.httpx",
    "stdenv.cc.cc.lib", "autoPatchelfHook"}`` (top-level package-set attributes bare)."""
    text = strip_comments(text)
    found: set[str] = set()
    for head, path in re.findall(rf"(?<![\w.'-])(pkgs|final|lib|stdenv|python3Packages|py|final\.lib|base\.lib)\.({_PATH})",
                                 text):
        if head in ("pkgs", "final"):
            first = path.split(".")[0]
            if first in OVERLAY:
                continue
            if first in ("lib", "stdenv", "python3Packages"):
                head, _, path = path.partition(".")
                if not path:
                    found.add(head)
                    continue
            else:
                found.add(path)
                continue
        head = {"py": "python3Packages", "final.lib": "lib", "base.lib": "lib"}.get(head, head)
        if head == "python3Packages":
            path = path.split(".")[0]
        found.add(f"{head}.{path}")
    for src, attrs in re.findall(r"inherit\s*\(\s*(pkgs\.lib|lib|python3Packages)\s*\)\s*([^;]*);", text):
        prefix = "lib" if src in ("pkgs.lib", "lib") else "python3Packages"
        found |= {f"{prefix}.{a}" for a in attrs.split()}
    if call_package_args:
        formals = re.match(r"\s*\{([^}]*)\}\s*:", text)
        if formals:
            for arg in re.split(r"[,\s]+", re.sub(r"\?[^,]*", "", formals.group(1))):
                if arg and arg not in OVERLAY and not re.search(rf"\b{re.escape(arg)}\s*\?", formals.group(1)):
                    found.add(arg)
    return found


#: files the flake calls with callPackage (their formal arguments without a default come from
#: the package set) and the arguments that are the flake's own (tree, src)
CALL_PACKAGE = {"nix/gufo.nix": {"tree"}, "nix/lemonpack.nix": {"src"}}


def used_names() -> dict[str, set[str]]:
    """nixpkgs name -> the package-code files that take it."""
    used: dict[str, set[str]] = {}
    for rel, text in package_sources().items():
        got = names(text, call_package_args=rel in CALL_PACKAGE) - CALL_PACKAGE.get(rel, set())
        for n in got:
            used.setdefault(n, set()).add(rel)
    return used


def problems(text: str) -> list[str]:
    """Forms that would hide a name from :func:`names`: ``with`` scopes."""
    return [f"`with {m}` hides the names it brings in" for m in re.findall(r"\bwith\s+([\w.]+)\s*;",
                                                                          strip_comments(text))]
