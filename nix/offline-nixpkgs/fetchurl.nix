# pkgs/build-support/fetchurl/default.nix, reduced to what lemonpack passes (url, hash or
# sha256, name): Nix's own builtin fetcher <nix/fetchurl.nix> (a fixed-output derivation:
# its store path depends on the name and the hash only, so a file added beforehand with
# `nix-store --add-fixed sha256 FILE` under that name is used without fetching). A
# mirror:// URL is resolved as pkgs/build-support/fetchurl/mirrors.nix lists it (first
# mirror only: the builtin fetcher takes one URL).
{ url, hash ? "", sha256 ? "", name ? baseNameOf url, executable ? false, ... }:
let
  mirrors = { pypi = "https://files.pythonhosted.org/packages/source/"; };
  parts = builtins.match "mirror://([a-z]+)/(.*)" url;
  resolved = if parts == null then url else mirrors.${builtins.head parts} + builtins.elemAt parts 1;
in
import <nix/fetchurl.nix> ({ url = resolved; inherit name executable; }
  // (if hash != "" then { inherit hash; } else { inherit sha256; }))
