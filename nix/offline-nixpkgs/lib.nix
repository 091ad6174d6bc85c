# The pieces of nixpkgs' `lib` lemonpack's Nix code uses, each written after the nixpkgs file
# named beside it (same names, arguments and results for what is here).
let
  inherit (builtins) attrNames concatStringsSep filter foldl' functionArgs intersectAttrs isAttrs
    isFunction listToAttrs map replaceStrings stringLength substring toString;
in
rec {
  # lib/fixed-points.nix
  fix = f: let x = f x; in x;
  extends = overlay: f: final: let prev = f final; in prev // overlay final prev;
  composeExtensions = f: g: final: prev:
    let fApplied = f final prev; prev' = prev // fApplied; in fApplied // g final prev';
  composeManyExtensions = foldl' (x: y: composeExtensions x y) (final: prev: { });
  toExtension = f:
    if isFunction f then final: prev: let fPrev = f prev; in if isFunction fPrev then f final prev else fPrev
    else final: prev: f;

  # lib/trivial.nix, lib/lists.nix, lib/attrsets.nix, lib/strings.nix
  id = x: x;
  optional = cond: elem: if cond then [ elem ] else [ ];
  optionals = cond: elems: if cond then elems else [ ];
  optionalString = cond: s: if cond then s else "";
  optionalAttrs = cond: as: if cond then as else { };
  concatMap = f: list: builtins.concatLists (map f list);
  inherit concatStringsSep;
  concatMapStrings = f: list: concatStringsSep "" (map f list);
  concatMapStringsSep = sep: f: list: concatStringsSep sep (map f list);
  genAttrs = names: f: listToAttrs (map (n: { name = n; value = f n; }) names);
  nameValuePair = name: value: { inherit name value; };
  mapAttrs' = f: set: listToAttrs (map (attr: f attr set.${attr}) (attrNames set));
  filterAttrs = pred: set: listToAttrs (concatMap (name: let v = set.${name}; in if pred name v then [ (nameValuePair name v) ] else [ ]) (attrNames set));
  attrValues = set: map (n: set.${n}) (attrNames set);
  hasPrefix = pref: str: substring 0 (stringLength pref) str == pref;
  hasSuffix = suffix: content:
    let lenContent = stringLength content; lenSuffix = stringLength suffix;
    in lenContent >= lenSuffix && substring (lenContent - lenSuffix) lenContent content == suffix;
  removePrefix = prefix: str:
    if hasPrefix prefix str then substring (stringLength prefix) (stringLength str - stringLength prefix) str else str;
  escapeShellArg = arg: "'${replaceStrings [ "'" ] [ "'\\''" ] (toString arg)}'";
  escapeShellArgs = concatMapStringsSep " " escapeShellArg;
  makeBinPath = paths: concatStringsSep ":" (map (p: "${p}/bin") paths);
  assertMsg = pred: msg: pred || builtins.throw msg;

  # lib/customisation.nix: makeOverridable, callPackageWith
  makeOverridable = f: origArgs:
    let
      result = f origArgs;
      overrideWith = newArgs: origArgs // (if isFunction newArgs then newArgs origArgs else newArgs);
      # a change to the result (overrideAttrs) is kept by later .override calls
      overrideResult = g: makeOverridable (args: g (f args)) origArgs;
    in
    if isAttrs result then
      result // {
        override = newArgs: makeOverridable f (overrideWith newArgs);
        overrideDerivation = fdrv: overrideResult (x: x.overrideDerivation fdrv);
      } // (if result ? overrideAttrs then { overrideAttrs = fdrv: overrideResult (x: x.overrideAttrs fdrv); } else { })
    else if isFunction result then
      { __functor = self: result; override = newArgs: makeOverridable f (overrideWith newArgs); }
    else result;

  callPackageWith = autoArgs: fn: args:
    let
      f = if isFunction fn then fn else import fn;
      fargs = functionArgs f;
      allArgs = intersectAttrs fargs autoArgs // args;
      missing = filter (n: !(fargs.${n}) && !(allArgs ? ${n})) (attrNames fargs);
    in
    if missing != [ ] then
      builtins.throw "callPackage: function called without required argument '${builtins.head missing}'"
    else makeOverridable f allArgs;

  # lib/licenses.nix: the licences lemonpack's packages name (same attribute names and
  # fields: shortName, spdxId, fullName, free)
  licenses = {
    asl20 = { shortName = "asl20"; spdxId = "Apache-2.0"; fullName = "Apache License 2.0"; free = true; redistributable = true; };
    mit = { shortName = "mit"; spdxId = "MIT"; fullName = "MIT License"; free = true; redistributable = true; };
    unfree = { shortName = "unfree"; fullName = "Unfree"; free = false; redistributable = false; };
  };

  # lib/systems/doubles.nix (a subset of the doubles; `platforms` lists are lists of doubles)
  platforms = rec {
    linux = [ "aarch64-linux" "armv7l-linux" "i686-linux" "loongarch64-linux" "mips64el-linux"
              "powerpc64le-linux" "riscv64-linux" "s390x-linux" "x86_64-linux" ];
    darwin = [ "x86_64-darwin" "aarch64-darwin" ];
    windows = [ "i686-windows" "x86_64-windows" "aarch64-windows" ];
    unix = linux ++ darwin;
    all = unix ++ windows;
  };

  # lib/meta.nix: platformMatch (a double, or a pattern attrset: here only { system = ...; }
  # style doubles are used), availableOn
  meta = {
    platformMatch = platform: elem:
      if builtins.isString elem then platform.system == elem
      else elem ? system && platform.system == elem.system;
    availableOn = platform: pkg:
      ((!pkg ? meta.platforms) || builtins.any (meta.platformMatch platform) pkg.meta.platforms)
      && builtins.all (elem: !meta.platformMatch platform elem) (pkg.meta.badPlatforms or [ ]);
  };

  # lib/sources.nix: cleanSourceWith (a filtered copy of a directory into the store)
  cleanSourceWith = { src, filter ? _path: _type: true, name ? "source" }:
    builtins.path { path = src; inherit filter name; };
}
