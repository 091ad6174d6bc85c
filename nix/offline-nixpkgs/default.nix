# The package set (nixpkgs' pkgs/top-level/default.nix + stage.nix, reduced): a fixpoint of
# the base set below extended by `overlays` in order, with `callPackage` and `extend`.
{ system ? builtins.currentSystem, overlays ? [ ], config ? { } }:
let
  lib = import ./lib.nix;
  base = final: {
    inherit lib system config;
    stdenv = import ./stdenv.nix { inherit lib system config; };
    # pkgs/top-level/splice.nix (callPackage): functions of a package set's attributes
    callPackage = lib.callPackageWith final;
    # pkgs/build-support/fetchurl: a fixed-output fetch (here Nix's builtin fetcher)
    fetchurl = import ./fetchurl.nix;
    # pkgs/build-support/trivial-builders: runCommand, writeText
    runCommand = name: env: buildCommand:
      final.stdenv.mkDerivation (env // {
        inherit name buildCommand;
        passAsFile = [ "buildCommand" ] ++ (env.passAsFile or [ ]);
      });
    writeText = name: text: builtins.toFile name text;
    autoPatchelfHook = import ./auto-patchelf-hook.nix { inherit (final) stdenv; inherit (final.stdenv.cc) libc; };
    python3 = import ./python.nix { inherit lib system; inherit (final) stdenv fetchurl; };
    python3Packages = final.python3.pkgs;
    # nixpkgs' pkgs.extend: this set with one more overlay
    extend = overlay: import ./. { inherit system config; overlays = overlays ++ [ overlay ]; };
  };
in
lib.fix (builtins.foldl' (f: overlay: lib.extends overlay f) base overlays)
