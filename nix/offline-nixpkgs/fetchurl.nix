# pkgs/build-support/fetchurl/default.nix, reduced to what lemonpack passes (url, hash or
# sha256, name): Nix's own builtin fetcher <nix/fetchurl.nix> (a fixed-output derivation).
{ url, hash ? "", sha256 ? "", name ? baseNameOf url, executable ? false, ... }:
import <nix/fetchurl.nix> ({ inherit url name executable; }
  // (if hash != "" then { inherit hash; } else { inherit sha256; }))
