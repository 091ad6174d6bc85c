# Per-recipe packages: the fixed-output fetches `lemonpack build` emits, for the recipes
# shipped in this repository. Each nix/recipes/<recipe>/ holds the sources.json and
# default.nix that `lemonpack build` writes into <out>/nix/<recipe>/ (a test regenerates them
# with `lemonpack build --example` and compares the bytes; after changing a shipped recipe,
# copy the new pair here).
#
#   { root; pkgs ? null; mirror ? null; } -> { <recipe> = { <os>-<accelerator>[-<gpu arch>] = drv; }; }
#
# pkgs   : nixpkgs; when given pkgs.fetchurl fetches, else Nix's builtin <nix/fetchurl.nix>.
# mirror : a base URL replacing every origin (lemonpack mirror layout "<host>/<path>").
{ root, pkgs ? null, mirror ? null }:
let
  dir = root + "/nix/recipes";
  entries = builtins.readDir dir;
  recipes = builtins.filter (n: entries.${n} == "directory") (builtins.attrNames entries);
in
builtins.listToAttrs (map
  (n: { name = n; value = import (dir + "/${n}") { inherit pkgs mirror; }; })
  recipes)
