# The `gufo` package: the selected Gufo extensions compiled in (seed 002 sections 5 and 8).
#
#   gufo.override { extensions = [ "qwen" ./my-extension ]; features = [ "linux" "hip" ]; }
#
# Arguments (callPackage fills lib, stdenv, python3, lemonpack; `tree` is the
# flake's). Each is checked for its type at evaluation: a wrong one is an error naming it.
#   tree          : the Gufo tree: catalogue/extensions, api/, extensions.lock
#   extensions    : null = the release lock; "all" = every extension a target of which the
#                   features build; else a list of names (strings) and extension directories
#                   (paths, or store-path strings); [ ] = no extension
#   extensionDirs : more directories to discover (each an extension or a directory of them)
#   features      : the build's feature set, as written: the default [ "linux" ] is in this
#                   expression and [ ] is the empty set (the builder is never probed, so one
#                   expression builds the same on every machine)
#   lockFile      : the release lock (default: tree/extensions.lock)
#
# One set of rules: Nix does not read manifests itself. Every decision (schema, names, paths,
# encodings, file types, symlinks, sizes, collisions, the lock, API versions, dependencies)
# is `lemonpack extensions generate`'s, run as a build step (`verdict` below). A selection
# the CLI refuses fails that build with the CLI's message, the copied directories named back
# as the user gave them; evaluation never reads a build result (no import from derivation),
# so the package evaluates for every system on any machine. The package then compiles exactly
# what `lemonpack extensions build` compiles. `passthru.selection` shows what was selected; it
# is the one place that reads the build's result while evaluating (import from derivation),
# and nothing else depends on it.
{ lib, stdenv, python3, lemonpack, tree
, extensions ? null, extensionDirs ? [ ], features ? [ "linux" ], lockFile ? null }:
let
  inherit (builtins) fromJSON isString isList isPath match concatMap filter typeOf toJSON;

  # argument checks (nixpkgs users expect a wrong type to be an error, not a default)
  described = v: if isString v then "the string ${toJSON v}" else "a ${typeOf v}";
  argError = name: expected: v:
    builtins.throw "gufo: the argument '${name}' must be ${expected}, not ${described v}";
  isDir = v: isPath v || isString v && match ".*/.*" v != null;
  checkList = name: expected: ok: v:
    if !(isList v) then argError name "a list of ${expected}" v
    else
      let bad = filter (e: !(ok e)) v; in
      if bad == [ ] then v else argError name "a list of ${expected}" (builtins.head bad);
  extensionsChecked =
    if extensions == null || extensions == "all" then extensions
    else if isList extensions then
      checkList "extensions" "extension names (strings) and directories (paths)"
        (e: isString e || isPath e) extensions
    else argError "extensions"
      ''null (the release lock), "all", or a list of extension names and directories (one extension: [ "qwen" ])''
      extensions;
  featuresChecked = checkList "features" "feature names (strings)" isString features;
  extensionDirsChecked = checkList "extensionDirs" "directories (paths or strings)" isDir extensionDirs;
  lockChecked =
    if lockFile == null || isDir lockFile then lockFile
    else argError "lockFile" "null or a file (a path)" lockFile;

  isStorePath = s: isString s && lib.hasPrefix builtins.storeDir s;
  isDirItem = e: !(isString e) || match ".*/.*" e != null;
  # a directory (or the lock file) the user named, copied into the store (a store path is
  # used as is); the CLI judges the copy. A store cannot hold a fifo, socket or device: one
  # fails evaluation, named (the CLI rejects the manifest it belongs to)
  storable = path: type:
    type != "unknown"
    || builtins.throw "${toString path}: a fifo, socket or device: the Nix store cannot hold it (lemonpack extensions check rejects it too)";
  stored = d:
    if isStorePath d then { path = d; shown = d; }
    else
      let p = if isString d then /. + d else d; in
      {
        path = "${builtins.path { path = p; name = "gufo-input"; filter = storable; }}";
        shown = toString d;
      };

  items = if isList extensionsChecked then extensionsChecked else [ ];
  selectedDirs = map stored (filter isDirItem items);
  extraDirs = map stored extensionDirsChecked;
  lock = if lockChecked == null then null else stored lockChecked;

  # the selection, as `lemonpack extensions` options (the tree comes first, apart); the
  # features are always given (`--feature none`: the empty set), so the CLI never probes
  selectArgs =
    lib.optionals (lock != null) [ "--lock" lock.path ]
    ++ (if featuresChecked == [ ] then [ "--feature" "none" ] else concatMap (f: [ "--feature" f ]) featuresChecked)
    ++ concatMap (d: [ "--extension-dir" d.path ]) extraDirs
    ++ (if extensionsChecked == null then [ "--select" "lock" ]
        else if extensionsChecked == "all" then [ "--select" "all" ]
        else if items == [ ] then [ "--select" "none" ]
        else concatMap (e: [ "--select" (if isDirItem e then (stored e).path else e) ]) items);
  args = [ "--tree" "${tree}" ] ++ selectArgs;

  # the options reach the builders as a file (one per line: no limit on their number;
  # an environment string is limited to 128 KiB)
  lemonpackArgs = lib.concatMapStrings (a: a + "\n") args;
  readArgs = ''mapfile -t args < "$lemonpackArgsPath"'';

  # store copies -> the paths the user wrote, for the CLI's messages
  renames = toJSON (map (d: [ d.path d.shown ]) (filter (d: d != null) ([ lock ] ++ selectedDirs ++ extraDirs)));

  # the CLI's verdict on the selection: succeeds with selection.json and dirs (see
  # gufo-verdict.py) when the CLI accepts it; fails, printing the CLI's message, when the
  # CLI refuses it (exit 1 with its JSON error, or a usage error) or crashes. A stdenv build
  # with its C++ compiler, not runCommand (nixpkgs' runCommand is stdenvNoCC: no compiler),
  # because the CLI's include allowlist check runs the compiler's preprocessor on community
  # sources (lemonpack.extensions.includes)
  verdict = stdenv.mkDerivation {
    name = "gufo-selection";
    nativeBuildInputs = [ lemonpack python3 ];
    inherit lemonpackArgs renames;
    passAsFile = [ "lemonpackArgs" "renames" ];
    buildCommand = ''
      ${readArgs}
      mkdir -p $out
      rc=0
      lemonpack extensions generate --json --out $out/generated "''${args[@]}" > gen.out 2> gen.err || rc=$?
      if [ $rc -eq 0 ]; then
        lemonpack extensions list --json "''${args[@]}" > list.json 2>> gen.err || rc=$?
      fi
      cat gen.err >&2
      python3 ${./gufo-verdict.py} "$rc" gen.out gen.err list.json "$renamesPath" "$out"
    '';
  };
in
stdenv.mkDerivation {
  pname = "gufo";
  # the toolchain's version: the name needs no build (the API version is selection.api)
  inherit (lemonpack) version;
  dontUnpack = true;
  nativeBuildInputs = [ lemonpack ];
  # `lemonpack extensions build` (lemonpack.extensions.compile): the generated registry, the
  # constants header, the public API headers and the selected extensions' sources compiled
  # into bin/gufo-registry, include/ and lib/libgufo-ext.a, with the same options as the
  # selection above
  inherit lemonpackArgs;
  passAsFile = [ "lemonpackArgs" ];
  buildPhase = ''
    runHook preBuild
    ${readArgs}
    lemonpack extensions build --out build --jobs "$NIX_BUILD_CORES" "''${args[@]}"
    runHook postBuild
  '';
  # besides: share/gufo/ holds the generated files, the release lock and each selected
  # extension's directory under extensions/<name>/
  installPhase = ''
    runHook preInstall
    mkdir -p $out/share/gufo/extensions
    cp -r build/. $out/
    chmod -R u+w $out
    cp ${verdict}/generated/* $out/share/gufo/
    cp ${if lock == null then "${tree}/extensions.lock" else lock.path} $out/share/gufo/extensions.lock
    while IFS=$'\t' read -r name dir; do
      cp -r --no-preserve=mode "$dir" "$out/share/gufo/extensions/$name"
    done < ${verdict}/dirs
    runHook postInstall
  '';
  passthru = {
    # what was selected (api, features, extensions with their directories, providers, the
    # unselected manifests the CLI rejects): read from the verdict's build while evaluating
    # (import from derivation), on demand only
    selection = fromJSON (builtins.unsafeDiscardStringContext (builtins.readFile "${verdict}/selection.json"));
    inherit verdict;
    generated = "${verdict}/generated";
  };
  meta = {
    description = "Gufo's extension registry with the selected extensions compiled in";
    license = lib.licenses.asl20;
    # compiled with the C++ toolchain for Linux (lemonpack extensions build)
    platforms = lib.platforms.linux;
    mainProgram = "gufo-registry";
  };
}
