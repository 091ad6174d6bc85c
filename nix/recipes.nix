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
#
# A generated package has no meta.license (a recipe states none); the recipes shipped here
# are this repository's examples, under its licence, which is added here.
{ pkgs, lemonpack ? pkgs.lemonpack, mirror ? null }:
let
  dir = ./recipes;
  entries = builtins.readDir dir;
  recipes = builtins.filter (n: entries.${n} == "directory") (builtins.attrNames entries);
  licensed = pkg: pkg.overrideAttrs (old: { meta = old.meta // { license = pkgs.lib.licenses.asl20; }; });
in
builtins.listToAttrs (map
  (n: { name = n; value = builtins.mapAttrs (_: licensed) (import (dir + "/${n}") { inherit pkgs lemonpack mirror; }); })
  recipes)
