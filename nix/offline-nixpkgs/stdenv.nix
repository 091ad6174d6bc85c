# stdenv.mkDerivation (nixpkgs' pkgs/stdenv/generic/make-derivation.nix, check-meta.nix and
# setup.sh, reduced).
#
# What is here: `mkDerivation attrs` or `mkDerivation (finalAttrs: attrs)`; `pname`/`version`
# or `name`; `src` (a directory or a tarball) and the phases unpack, patch, configure, build,
# check, install, fixup (per output, with fixupOutputHooks: patchShebangs), installCheck,
# each with its pre/post hooks, its `dontX`/`doCheck` switches and its overridable `xPhase`
# string (see setup.sh); `buildCommand`; `passAsFile`; `nativeBuildInputs` and `buildInputs`
# kept apart (build tools on PATH; buildInputs on PATH too unless `strictDeps`, on HOST_PATH,
# and their lib/ searched by autoPatchelfHook); setup hooks and environment hooks of inputs;
# `outputs` (each an attribute of the result, with `outputName`; `meta.outputsToInstall`);
# `passthru`, `meta` and check-meta.nix's refusal of a package that is not available on the
# host platform (`meta.platforms`, `meta.badPlatforms`; `config.allowUnsupportedSystem`) or
# has an unfree licence (`config.allowUnfree`): like nixpkgs, the name, meta and passthru
# still evaluate, the derivation (drvPath, outPath) does not; the result's `overrideAttrs`
# (a function of the old attributes, or of final and previous ones), composing with
# `lib.makeOverridable`'s `override`.
#
# What is not: cross compilation, propagated inputs, strip, structured attributes,
# config.checkMeta's meta type checks. `cc.cc` is the host's GCC runtime (Debian's libstdc++6,
# libgcc-s1, libgomp1, libatomic1 files) with a `lib` output, and `cc.libc` glibc's own
# libraries (Debian's libc6 files), each as symlinks. The tools are the host's: /bin/bash,
# coreutils, tar, g++, patchelf (the sandbox is off, as Debian ships Nix), on PATH after the
# inputs' bin/ directories.
{ lib, system, config ? { } }:
let
  shell = "/bin/bash";
  hostPath = "/usr/local/bin:/usr/bin:/bin";
  hostPlatform = {
    inherit system;
    config = { x86_64-linux = "x86_64-unknown-linux-gnu"; aarch64-linux = "aarch64-unknown-linux-gnu"; }.${system} or system;
    isLinux = lib.hasSuffix "-linux" system;
  };

  # check-meta.nix: { valid; message } of a package's meta on the host platform
  validity = attrs:
    let
      meta = attrs.meta or { };
      name = attrs.name or "${attrs.pname}-${attrs.version}";
      licenses = if builtins.isList (meta.license or [ ]) then meta.license or [ ] else [ meta.license ];
      unfree = builtins.any (l: !(l.free or true)) licenses;
    in
    if unfree && !(config.allowUnfree or false) then
      { valid = false; message = "Package ‘${name}’ has an unfree license (‘${(builtins.head licenses).shortName or "unknown"}’), refusing to evaluate."; }
    else if !(config.allowUnsupportedSystem or false) && !(lib.meta.availableOn hostPlatform { inherit meta; }) then
      {
        valid = false;
        message = "Package ‘${name}’ is not available on the requested hostPlatform:\n"
          + "  hostPlatform.config = \"${hostPlatform.config}\"\n"
          + "  package.meta.platforms = [ ${lib.concatMapStringsSep " " (p: "\"${p}\"") (meta.platforms or [ ])} ]\n"
          + "  package.meta.badPlatforms = [ ${lib.concatMapStringsSep " " (p: "\"${p}\"") (meta.badPlatforms or [ ])} ]\n"
          + ", refusing to evaluate.";
      }
    else { valid = true; message = ""; };

  # make-derivation.nix: the derivation of one set of attributes
  mkDerivationSimple = overrideAttrs: attrs:
    let
      name = attrs.name or "${attrs.pname}-${attrs.version}";
      passthru = attrs.passthru or { };
      outputs = attrs.outputs or [ "out" ];
      checked = validity attrs;
      guard = x: if checked.valid then x else builtins.throw checked.message;
      drvAttrs = removeAttrs attrs [ "passthru" "meta" ] // {
        inherit name system outputs;
        builder = shell;
        args = [ "-e" ./builder.sh ];
        stdenvSetup = ./setup.sh;
        stdenvHostPath = hostPath;
        nativeBuildInputs = attrs.nativeBuildInputs or [ ];
        buildInputs = attrs.buildInputs or [ ];
      };
      drv = derivation drvAttrs;
      meta = (attrs.meta or { }) // {
        inherit name;
        outputsToInstall = attrs.meta.outputsToInstall or [ (builtins.head outputs) ];
        available = checked.valid;
      };
      common = passthru // {
        inherit overrideAttrs passthru meta outputs;
        pname = attrs.pname or name;
        version = attrs.version or "";
        drvPath = guard drv.drvPath;
      };
      # each output: the derivation's attribute for it, with the common attributes and
      # every other output (lib/customisation.nix extendDerivation)
      outputAttr = o: drv.${o} // common // outputSet // { outPath = guard drv.${o}.outPath; outputName = o; };
      outputSet = lib.genAttrs outputs outputAttr;
    in
    outputAttr (builtins.head outputs);

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

  hostLibs = name: packages: pattern: outputs: mkDerivationSimple (_: throw "stand-in: no overrideAttrs") {
    inherit name outputs;
    dontUnpack = true;
    meta.description = "The host's ${name} (symlinks to Debian's files)";
    installPhase = ''
      mkdir -p ''$${builtins.elemAt outputs (builtins.length outputs - 1)}/lib
      for o in $outputs; do mkdir -p "''${!o}"; done
      dpkg-query -L ${lib.concatStringsSep " " packages} 2> /dev/null | grep -E '${pattern}' | sort -u | while read -r f; do
        [ -e "$f" ] && ln -sf "$f" "''$${builtins.elemAt outputs (builtins.length outputs - 1)}/lib/$(basename "$f")"
      done
    '';
  };
  # glibc's libraries (the C library autoPatchelfHook does not look up: the loader finds them)
  libc = hostLibs "glibc-host" [ "libc6" ] "^/(usr/)?lib/[^/]+-linux-gnu[^/]*/[^/]+\\.so(\\.[0-9]+)*$|^/lib(64)?/ld-linux" [ "out" ];
  # stdenv.cc.cc: GCC, whose `lib` output holds the runtime prebuilt C++ engines link
  ccUnwrapped = hostLibs "gcc-host" [ "libstdc++6" "libgcc-s1" "libgomp1" "libatomic1" ]
    "^/(usr/)?lib/[^/]+-linux-gnu/[^/]+\\.so(\\.[0-9]+)*$" [ "out" "lib" ];
in
{
  inherit system shell hostPlatform;
  buildPlatform = hostPlatform;
  cc = { cc = ccUnwrapped; inherit libc; };
  mkDerivation = fnOrAttrs:
    makeDerivationExtensible (if builtins.isFunction fnOrAttrs then fnOrAttrs else _: fnOrAttrs);
}
