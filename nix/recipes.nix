# The recipes shipped in this repository as packages: each nix/recipes/<recipe>/ holds the
# sources.json, recipe.json and default.nix that `lemonpack build` writes into
# <out>/nix/<recipe>/ (a test regenerates them with `lemonpack build --example` and compares
# the bytes; after changing a shipped recipe, copy the new files here).
#
#   { pkgs; lemonpack ? pkgs.lemonpack; mirror ? null; }
#     -> { <recipe> = { <os>-<accelerator>[-<gpu arch>] = package; }; }
#
# pkgs   : nixpkgs (with lemonpack's overlay, or pass lemonpack)
# mirror : a base URL replacing every origin (lemonpack mirror layout "<host>/<path>").
{ pkgs, lemonpack ? pkgs.lemonpack, mirror ? null }:
let
  dir = ./recipes;
  entries = builtins.readDir dir;
  recipes = builtins.filter (n: entries.${n} == "directory") (builtins.attrNames entries);
in
builtins.listToAttrs (map
  (n: { name = n; value = import (dir + "/${n}") { inherit pkgs lemonpack mirror; }; })
  recipes)
