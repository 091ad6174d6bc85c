# stdenv.mkDerivation (nixpkgs' pkgs/stdenv/generic/make-derivation.nix and setup.sh, reduced).
#
# What is here: `mkDerivation attrs` or `mkDerivation (finalAttrs: attrs)`; `pname`/`version`
# or `name`; `src` (a directory or a tarball) and the phases unpack, patch, configure, build,
# check, install, fixup, installCheck, each with its pre/post hooks, its `dontX`/`doCheck`
# switches and its overridable `xPhase` string (see setup.sh); `buildCommand`; `passAsFile`;
# `nativeBuildInputs`/`buildInputs` (their bin/ on PATH, their nix-support/setup-hook sourced);
# `passthru`, `meta`; the result's `overrideAttrs` (a function of the old attributes, or of
# final and previous ones), composing with `lib.makeOverridable`'s `override`.
#
# What is not: cross compilation, propagated inputs, multiple outputs, strip, patchShebangs,
# structured attributes. `cc.cc.lib` is a marker for the host's C++ runtime. The tools are
# the host's: /bin/bash, coreutils, tar, g++ (the
# sandbox is off, as Debian ships Nix), on PATH after the inputs' bin/ directories.
{ lib, system }:
let
  shell = "/bin/bash";
  hostPath = "/usr/local/bin:/usr/bin:/bin";

  # make-derivation.nix: the derivation of one set of attributes
  mkDerivationSimple = overrideAttrs: attrs:
    let
      name = attrs.name or "${attrs.pname}-${attrs.version}";
      passthru = attrs.passthru or { };
      inputs = (attrs.nativeBuildInputs or [ ]) ++ (attrs.buildInputs or [ ]);
      drvAttrs = removeAttrs attrs [ "passthru" "meta" "nativeBuildInputs" "buildInputs" ] // {
        inherit name system;
        builder = shell;
        args = [ "-e" ./builder.sh ];
        stdenvSetup = ./setup.sh;
        stdenvHostPath = hostPath;
        nativeBuildInputs = inputs;
        buildInputs = [ ];
      };
      drv = derivation drvAttrs;
    in
    drv // passthru // {
      inherit overrideAttrs passthru;
      meta = attrs.meta or { };
      pname = attrs.pname or name;
      version = attrs.version or "";
    };

  # make-derivation.nix: makeDerivationExtensible (finalAttrs fixpoint + overrideAttrs)
  makeDerivationExtensible = rattrs:
    let
      args = rattrs (args // { inherit finalPackage overrideAttrs; });
      overrideAttrs = f0:
        let f = lib.toExtension f0; in
        makeDerivationExtensible (lib.extends f rattrs);
      finalPackage = mkDerivationSimple overrideAttrs args;
    in
    finalPackage;
  # stdenv.cc.cc.lib: the compiler's runtime libraries (libstdc++, libgomp); here the host's,
  # where its loader finds them, so the output only marks the dependency
  ccLib = mkDerivationSimple (_: throw "stand-in: no overrideAttrs") {
    name = "gcc-lib-host";
    dontUnpack = true;
    installPhase = "mkdir -p $out/lib";
  };
in
{
  inherit system shell;
  cc = { cc = { lib = ccLib; }; };
  hostPlatform = { inherit system; isLinux = true; };
  buildPlatform = { inherit system; isLinux = true; };
  mkDerivation = fnOrAttrs:
    makeDerivationExtensible (if builtins.isFunction fnOrAttrs then fnOrAttrs else _: fnOrAttrs);
}
