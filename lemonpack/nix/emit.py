"""Nix emitter: ``sources.json``, ``recipe.json`` and a ``default.nix`` of recipe packages.

Input: a recipe id and one :class:`NixSource` per artifact (one per OS / accelerator /
GPU arch the recipe builds for). Output, in a directory:

* ``sources.json``, canonical JSON (sorted keys, 2-space indent, UTF-8, trailing newline;
  the same inputs always give the same bytes)::

      { "recipe": "<id>",
        "sources": { "<attr>": { "url": ..., "mirrorPath": "host/path", "hash": "sha256-...",
                                 "storeName": ..., "os": ..., "accelerator": ...,
                                 "gpuArch": ... | null, "binary": ... | null,
                                 "cpuArch": "<OCI architecture>", "system": "<Nix system>" } } }

  ``cpuArch`` is the OCI architecture the artifact was built for (``lemonpack build
  --cpu-arch``, default the host's) and ``system`` the Nix system of that OS and CPU
  (:func:`nix_system`): the package's ``meta.platforms``, so that nixpkgs marks it unsupported
  on every other system (``check-meta.nix``) instead of building a binary that cannot run.

  ``systems`` (only for a recipe with per-CPU artifacts; otherwise the one ``system``) maps each
  Nix system the recipe offers an artifact for to that artifact
  (``url``, ``mirrorPath``, ``hash``, ``storeName``, ``cpuArch``): the built one, plus the
  other CPUs of the recipe's per-CPU artifacts (:mod:`lemonpack.contract.cpuartifacts`). A
  package built on a system takes that system's artifact (``lemonpack unpack --cpu-arch``
  checks its executables), and its ``meta.platforms`` is every system listed.

  ``storeName`` is an addition to the brief's field list: the store-path name of the
  fetched file, computed here (from the URL basename) so that the Nix side does no
  string munging.

* ``recipe.json``: the recipe's canonical bytes (installed as
  ``$out/share/lemonpack/<recipe>.json``).

* ``default.nix``, a function ``{ pkgs ? null, lemonpack ? pkgs.lemonpack, mirror ? null }:``
  with one attribute per source. Without ``pkgs`` each is the fixed-output fetch of the
  artifact (Nix manual, "Advanced Attributes": ``outputHash``; "Fixed-output derivations")
  by Nix's own builtin fetcher ``import <nix/fetchurl.nix>`` (the corepkgs expression
  compiled into Nix; measured on Nix 2.8.0: it accepts both ``hash`` in SRI form and
  ``sha256``; we emit ``hash``). With ``pkgs`` (nixpkgs) each is a package
  (``pkgs.stdenv.mkDerivation``): the artifact from ``pkgs.fetchurl { url; hash; name; }``
  (also ``passthru.artifact``), unpacked by ``lemonpack unpack`` (the rules of
  :func:`lemonpack.fetch.archive.extract`, as ``lemonpack install``) into
  ``$out/libexec/<recipe>/``, the binary linked at ``$out/bin/<basename>``, the recipe
  installed, and ``pkgs.autoPatchelfHook`` for Linux artifacts; ``meta`` has ``description``,
  ``platforms`` (the artifact's system), ``mainProgram`` (the binary's name, when there is
  one) and no ``license``: a recipe states none, and a licence lemonpack guessed would be a
  false statement to nixpkgs' licence checks (add one with ``overrideAttrs``). ``mirror`` (a base URL
  string) replaces every URL with ``mirror + "/" + mirrorPath`` (the layout of
  :mod:`lemonpack.fetch.mirror`).

The files are written atomically: a temp file in the same directory, fsync, ``os.replace``.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from lemonpack.files import replace_file
from lemonpack.digest import is_sha256_hex
from lemonpack.nix.hashes import sri_from_hex
from lemonpack.safetree import path_problem

_ATTR = re.compile(r"[A-Za-z_][A-Za-z0-9_'-]*")
"""A Nix identifier (Nix manual, "Language: Identifiers"), usable unquoted with ``-A``."""

_STORE_BAD = re.compile(r"[^A-Za-z0-9+\-._?=]")
"""Characters not allowed in a store path name (Nix: ``checkName`` in ``path.cc``)."""

_STORE_NAME_MAX = 211

#: OCI ``architecture`` -> the CPU part of a Nix system (nixpkgs ``lib/systems/parse.nix`` cpu
#: types; the OCI names are Go's GOARCH, image-spec "Properties": ``architecture``).
NIX_CPUS = {"amd64": "x86_64", "arm64": "aarch64", "arm": "armv7l", "386": "i686", "ppc64le": "powerpc64le",
            "s390x": "s390x", "riscv64": "riscv64", "mips64le": "mips64el", "loong64": "loongarch64"}
#: OCI ``os`` -> the kernel part of a Nix system (nixpkgs ``lib/systems/doubles.nix``).
NIX_KERNELS = {"linux": "linux", "darwin": "darwin", "windows": "windows"}


def nix_system(os_name: str, cpu_arch: str) -> str:
    """The Nix system double of an OCI ``os`` and ``architecture``, e.g.
    ``nix_system("linux", "arm64") == "aarch64-linux"`` (nixpkgs ``lib/systems/doubles.nix``).
    Raises ``ValueError`` for an OS or architecture with no Nix system."""
    if cpu_arch not in NIX_CPUS or os_name not in NIX_KERNELS:
        raise ValueError(f"no Nix system for os {os_name!r}, architecture {cpu_arch!r}")
    return f"{NIX_CPUS[cpu_arch]}-{NIX_KERNELS[os_name]}"


def attr_name(os_name: str, accelerator: str, gpu_arch: str | None = None) -> str:
    """The attribute name of a source: ``"<os>-<accelerator>[-<gpu_arch>]"``.

    E.g. ``attr_name("linux", "rocm", "gfx1151") == "linux-rocm-gfx1151"``. Characters
    outside a Nix identifier are replaced with ``_``; raises ``ValueError`` if the result
    is still not an identifier (e.g. it starts with a digit).
    """
    parts = [os_name, accelerator] + ([gpu_arch] if gpu_arch else [])
    name = "-".join(re.sub(r"[^A-Za-z0-9_'-]", "_", p) for p in parts)
    if not _ATTR.fullmatch(name):
        raise ValueError(f"cannot make a Nix attribute name from {parts!r}")
    return name


def store_name(url: str, fallback: str) -> str:
    """A valid Nix store-path name for the file at ``url``.

    Takes the percent-decoded basename of the URL path, replaces every character outside
    ``[A-Za-z0-9+-._?=]`` with ``_``, strips leading dots, keeps at most 211 characters
    (Nix's limit), and uses ``fallback`` (sanitised the same way) if nothing is left.
    Follows Nix's store path name rules (Nix manual, "Store Path"; ``checkName``).
    """
    base = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
    for candidate in (base, fallback, "source"):
        name = _STORE_BAD.sub("_", candidate).lstrip(".")[:_STORE_NAME_MAX]
        if name:
            return name
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class NixArtifact:
    """Another CPU's artifact of a source (a recipe's per-CPU artifacts,
    :mod:`lemonpack.contract.cpuartifacts`): ``cpu_arch`` (OCI), ``url``, ``mirror_path``,
    ``sha256_hex``."""

    cpu_arch: str
    url: str
    mirror_path: str
    sha256_hex: str


@dataclass(frozen=True)
class NixSource:
    """One artifact of a recipe, as the Nix emitter needs it.

    ``name``: the attribute name (a Nix identifier, e.g. ``linux-rocm-gfx1151``, see
    :func:`attr_name`); ``url``: the origin URL; ``mirror_path``: ``"host/path"`` of that
    URL in a mirror (:func:`lemonpack.fetch.mirror.mirror_path`); ``sha256_hex``: 64
    lowercase hex characters; ``os``, ``accelerator``, ``gpu_arch`` (or None): the platform
    it is for; ``binary``: the executable inside the artifact (a relative path), or None;
    ``cpu_arch``: the OCI architecture it is built for (default ``amd64``). Raises
    ``ValueError`` on a bad name, digest or URL, on a mirror path or binary that is not a safe
    relative path (:func:`lemonpack.safetree.path_problem`), and on an OS/architecture with no
    Nix system (:func:`nix_system`).
    """

    name: str
    url: str
    mirror_path: str
    sha256_hex: str
    os: str
    accelerator: str
    gpu_arch: str | None = None
    binary: str | None = None
    cpu_arch: str = "amd64"
    others: tuple[NixArtifact, ...] = ()

    def __post_init__(self) -> None:
        nix_system(self.os, self.cpu_arch)
        for other in self.others:
            nix_system(self.os, other.cpu_arch)
            if not is_sha256_hex(other.sha256_hex) or urllib.parse.urlsplit(other.url).scheme not in ("http", "https") \
                    or path_problem(other.mirror_path):
                raise ValueError(f"{self.name}: bad {other.cpu_arch} artifact: {other.url!r}")
        if not _ATTR.fullmatch(self.name):
            raise ValueError(f"not a Nix attribute name: {self.name!r}")
        if not is_sha256_hex(self.sha256_hex):
            raise ValueError(f"{self.name}: not a sha256 hex digest: {self.sha256_hex!r}")
        if urllib.parse.urlsplit(self.url).scheme not in ("http", "https"):
            raise ValueError(f"{self.name}: not an http(s) URL: {self.url!r}")
        if path_problem(self.mirror_path):
            raise ValueError(f"{self.name}: bad mirror path: {self.mirror_path!r}")
        if self.binary is not None and path_problem(self.binary):
            raise ValueError(f"{self.name}: binary must be a relative path inside the artifact: "
                             f"{self.binary!r}")

    def to_json(self) -> dict[str, object]:
        """The source's entry in ``sources.json`` (camelCase keys, hash in SRI form)."""
        systems = {nix_system(self.os, a.cpu_arch): {
            "url": a.url, "mirrorPath": a.mirror_path, "hash": sri_from_hex(a.sha256_hex),
            "storeName": store_name(a.url, self.name), "cpuArch": a.cpu_arch}
            for a in (NixArtifact(self.cpu_arch, self.url, self.mirror_path, self.sha256_hex), *self.others)}
        return {
            **({"systems": systems} if self.others else {}),
            "url": self.url,
            "mirrorPath": self.mirror_path,
            "hash": sri_from_hex(self.sha256_hex),
            "storeName": store_name(self.url, self.name),
            "os": self.os,
            "accelerator": self.accelerator,
            "gpuArch": self.gpu_arch,
            "binary": self.binary,
            "cpuArch": self.cpu_arch,
            "system": nix_system(self.os, self.cpu_arch),
        }


def sources_document(recipe_id: str, sources: Iterable[NixSource]) -> bytes:
    """The canonical bytes of ``sources.json`` (see the module docstring).

    Raises ``ValueError`` if two sources share a name (naming both URLs).
    """
    table: dict[str, NixSource] = {}
    for src in sources:
        if src.name in table:
            raise ValueError(
                f"duplicate Nix source {src.name!r}: {table[src.name].url} and {src.url}")
        table[src.name] = src
    doc = {"recipe": recipe_id, "sources": {n: s.to_json() for n, s in table.items()}}
    return (json.dumps(doc, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def write_sources_json(out_dir: Path | str, recipe_id: str, sources: Iterable[NixSource]) -> Path:
    """Write ``out_dir/sources.json`` atomically; returns its path.

    Deterministic: same ``recipe_id`` and sources (in any order) give the same bytes.
    Raises ``ValueError`` on duplicate source names, ``OSError`` on write failure.
    """
    path = Path(out_dir) / "sources.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, sources_document(recipe_id, sources), mode=0o644)
    return path


def nix_string(value: str) -> str:
    """A Nix double-quoted string literal for ``value`` (escapes ``\\``, ``"``, ``${``, newlines).

    Follows the Nix manual, "Language: String literals".
    """
    out = (value.replace("\\", "\\\\").replace('"', '\\"').replace("${", "\\${")
           .replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t"))
    return f'"{out}"'


_PACKAGE_NIX = """\
# Generated by lemonpack for recipe {comment}. Do not edit: regenerate instead.
#
# One attribute per artifact listed in ./sources.json (the recipe is ./recipe.json).
#   pkgs      : nixpkgs. When given, each attribute is a package: the artifact fetched by
#               its pinned hash (pkgs.fetchurl), unpacked by `lemonpack unpack` (the safety
#               rules of `lemonpack install`, every executable checked against the CPU the
#               source is for) into $out/libexec/<recipe>/, the engine linked
#               at $out/bin/<binary>, the recipe at $out/share/lemonpack/<recipe>.json, and
#               autoPatchelfHook run over it on Linux (against the C++ runtime in
#               buildInputs) so prebuilt engines run on NixOS.
#   lemonpack : the package that unpacks (default: pkgs.lemonpack, which the overlay of
#               lemonpack's flake adds).
#   mirror    : a base URL; when given, each URL becomes mirror + "/" + mirrorPath.
# Without pkgs (Nix builtins only, no nixpkgs) each attribute is the fetched artifact file
# itself, fetched by Nix's builtin fetcher (import <nix/fetchurl.nix>).
{{ pkgs ? null, lemonpack ? (if pkgs == null then null else pkgs.lemonpack or null), mirror ? null }}:
let
  manifest = builtins.fromJSON (builtins.readFile ./sources.json);
  recipe = manifest.recipe;
  base =
    if mirror == null then null
    else if builtins.substring (builtins.stringLength mirror - 1) 1 mirror == "/"
    then builtins.substring 0 (builtins.stringLength mirror - 1) mirror
    else mirror;
  urlOf = src: if base == null then src.url else base + "/" + src.mirrorPath;
  fetch = _attr: src:
    let
      args = {{ url = urlOf src; hash = src.hash; name = src.storeName; }};
    in
    if pkgs == null then import <nix/fetchurl.nix> args else pkgs.fetchurl args;
  package = attr: entry:
    let
      inherit (pkgs.lib) escapeShellArg optional optionalString;
      # the artifact for the system building it (a recipe may offer one per CPU); on a system
      # it offers none for, the built one, and meta.platforms marks the package unsupported
      systems = entry.systems or {{ ${{entry.system}} = {{ }}; }};
      src = entry // (systems.${{pkgs.stdenv.hostPlatform.system}} or {{ }});
      bin = if src.binary == null then null else baseNameOf src.binary;
    in
    assert pkgs.lib.assertMsg (lemonpack != null)
      "${{recipe}}: pass lemonpack (lemonpack's flake: packages.<system>.lemonpack, or apply its overlays.default)";
    pkgs.stdenv.mkDerivation {{
      name = "${{recipe}}-${{attr}}";
      src = fetch attr src;
      dontUnpack = true;
      nativeBuildInputs = [ lemonpack ]
        ++ optional (src.os == "linux" && pkgs.stdenv.hostPlatform.isLinux) pkgs.autoPatchelfHook;
      # the C++ runtime (libstdc++, libgomp) prebuilt engines link; add others with
      # overrideAttrs (o: {{ buildInputs = o.buildInputs ++ [ pkgs.openssl ]; }})
      buildInputs = [ pkgs.stdenv.cc.cc.lib ];
      installPhase = ''
        runHook preInstall
        lemonpack unpack "$src" --out "$out/libexec/"${{escapeShellArg recipe}} \\
          --name ${{escapeShellArg src.storeName}} --label ${{escapeShellArg src.url}} \\
          --cpu-arch ${{escapeShellArg src.cpuArch}} \\
          ${{optionalString (src.binary != null) "--binary ${{escapeShellArg src.binary}}"}}
        mkdir -p $out/bin $out/share/lemonpack
        ${{optionalString (bin != null) ''
          ln -s ../libexec/${{escapeShellArg recipe}}/${{escapeShellArg src.binary}} $out/bin/${{escapeShellArg bin}}
        ''}}
        cp ${{./recipe.json}} $out/share/lemonpack/${{escapeShellArg recipe}}.json
        runHook postInstall
      '';
      passthru = {{ inherit recipe; artifact = fetch attr src; inherit (src) os accelerator gpuArch cpuArch; }};
      # no license: the recipe states none (add one with overrideAttrs); platforms: the
      # systems the recipe offers an artifact for, so nixpkgs marks the package unsupported
      # on any other system
      meta = {{
        description = "${{recipe}} engine (${{attr}}), built by lemonpack";
        platforms = builtins.attrNames systems;
      }} // (if bin == null then {{ }} else {{ mainProgram = bin; }});
    }};
in
assert recipe == {recipe};
builtins.mapAttrs (if pkgs == null then fetch else package) manifest.sources
"""


def package_nix(recipe_id: str) -> bytes:
    """The bytes of ``default.nix`` for ``recipe_id`` (see the module docstring)."""
    comment = re.sub(r"[^\x20-\x7e]", "?", recipe_id)
    return _PACKAGE_NIX.format(comment=comment, recipe=nix_string(recipe_id)).encode("utf-8")


def write_recipe_json(out_dir: Path | str, canonical: bytes) -> Path:
    """Write ``out_dir/recipe.json`` (the recipe's canonical bytes) atomically; returns its path.

    ``default.nix`` installs it as ``$out/share/lemonpack/<recipe>.json``. Raises ``OSError``
    on write failure.
    """
    path = Path(out_dir) / "recipe.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, canonical, mode=0o644)
    return path


def write_package_nix(out_dir: Path | str, recipe_id: str) -> Path:
    """Write ``out_dir/default.nix`` atomically; returns its path.

    The expression reads ``./sources.json`` (write it with :func:`write_sources_json`)
    and asserts that its ``recipe`` is ``recipe_id``. Raises ``OSError`` on write failure.
    """
    path = Path(out_dir) / "default.nix"
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, package_nix(recipe_id), mode=0o644)
    return path


__all__ = ["NIX_CPUS", "NIX_KERNELS", "NixArtifact", "NixSource", "nix_system", "attr_name", "store_name", "nix_string", "sources_document",
           "write_sources_json", "write_recipe_json", "package_nix", "write_package_nix"]
