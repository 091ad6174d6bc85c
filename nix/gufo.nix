# The `gufo` package: the selected Gufo extensions compiled in (seed 002 sections 5 and 8).
#
#   gufo.override { extensions = [ "qwen" ./my-extension ]; features = [ "linux" "hip" ]; }
#
# Arguments (callPackage fills lib, stdenv, runCommand, lemonpack; `tree` is the flake's):
#   tree          : the Gufo tree: catalogue/extensions, api/, extensions.lock
#   extensions    : null = the release lock; "all" = every extension a target of which the
#                   features build; else a list of names (strings) and extension directories
#                   (paths, or store-path strings)
#   extensionDirs : more directories to discover (each an extension or a directory of them)
#   features      : the build's feature set
#   lockFile      : the release lock (default: tree/extensions.lock)
#
# One set of rules: Nix does not read manifests itself. Every decision (schema, names, paths,
# encodings, file types, symlinks, sizes, collisions, the lock, API versions, dependencies)
# is `lemonpack extensions generate`'s, run as a build step (`selection` below) whose
# verdict evaluation reads back (import from derivation): a manifest the CLI rejects fails
# evaluation with the CLI's message, the copied directories renamed back to the paths the
# user gave. The package then compiles exactly what `lemonpack extensions build` compiles.
{ lib, stdenv, runCommand, lemonpack, tree
, extensions ? null, extensionDirs ? [ ], features ? [ "linux" ], lockFile ? null }:
let
  inherit (builtins) fromJSON isString isList match replaceStrings concatMap filter;
  # the verdict's files, read while evaluating (the build depends on `verdict` itself)
  readFile = f: builtins.unsafeDiscardStringContext (builtins.readFile f);

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

  items = if isList extensions then extensions else [ ];
  selectedDirs = map stored (filter isDirItem items);
  extraDirs = map stored extensionDirs;
  lock = if lockFile == null then null else stored lockFile;

  # the selection, as `lemonpack extensions` options (the tree comes first, apart)
  selectArgs =
    lib.optionals (lock != null) [ "--lock" lock.path ]
    ++ concatMap (f: [ "--feature" f ]) features
    ++ concatMap (d: [ "--extension-dir" d.path ]) extraDirs
    ++ (if extensions == null then [ "--select" "lock" ]
        else if extensions == "all" then [ "--select" "all" ]
        else concatMap (e: [ "--select" (if isDirItem e then (stored e).path else e) ]) items);
  args = [ "--tree" "${tree}" ] ++ selectArgs;

  # the options reach the builders as a file (one per line: no limit on their number;
  # an environment string is limited to 128 KiB)
  lemonpackArgs = lib.concatMapStrings (a: a + "\n") args;
  readArgs = ''mapfile -t args < "$lemonpackArgsPath"'';

  # the CLI's verdict on the selection, as files: this derivation succeeds when the CLI gives
  # a verdict (accepts, or refuses with its JSON error or a usage error), and fails otherwise
  # (a crash, a missing module), so that no such failure is kept in the store as a verdict
  verdict = runCommand "gufo-selection" {
    nativeBuildInputs = [ lemonpack ];
    inherit lemonpackArgs;
    passAsFile = [ "lemonpackArgs" ];
  } ''
    ${readArgs}
    mkdir -p $out
    rc=0
    lemonpack extensions generate --json --out $out/generated "''${args[@]}" > $out/stdout 2> $out/stderr || rc=$?
    if [ $rc -eq 0 ]; then
      lemonpack extensions list --json "''${args[@]}" > $out/list.json 2>> $out/stderr || rc=$?
    fi
    case "$rc:$(head -c 1 $out/stdout)" in
      0:* | "1:{") ;;
      2:*) grep -q "Error: " $out/stderr || { cat $out/stderr >&2; exit 1; } ;;
      *) cat $out/stderr >&2; exit 1 ;;
    esac
    printf %s $rc > $out/rc
  '';

  renamed = [ lock ] ++ selectedDirs ++ extraDirs;
  shown = replaceStrings
    (map (d: d.path) (filter (d: d != null) renamed))
    (map (d: d.shown) (filter (d: d != null) renamed));
  rc = readFile "${verdict}/rc";
  # the CLI's message: its JSON error (exit 1), or a usage error's text (exit 2)
  failure =
    let
      out = readFile "${verdict}/stdout";
      err = readFile "${verdict}/stderr";
      usage = match ".*Error: (Invalid value for [^:]*: )?([^\n]*)\n?" err;
    in
    if rc == "1" && lib.hasPrefix "{" out then (fromJSON out).message
    else if usage != null then builtins.elemAt usage 1
    else "lemonpack extensions generate failed (exit ${rc}): ${err}";

  selection =
    if rc != "0" then builtins.throw (shown failure)
    else
      let
        doc = fromJSON (readFile "${verdict}/generated/extensions.json");
        listed = fromJSON (readFile "${verdict}/list.json");
        pathOf = builtins.listToAttrs (map (e: { inherit (e) name; value = e.path; })
          (filter (e: e.selected) listed.extensions));
      in
      {
        api = doc.api_version;
        inherit (doc) features;
        extensions = map (e: e // { path = pathOf.${e.name}; }) doc.extensions;
        providers = concatMap (e: map (p: p // { extension = e.name; }) e.providers) doc.extensions;
        # manifests discovered but not selected that the CLI rejects (generate warns of them)
        rejected = map (r: { manifest = shown r.manifest; reasons = map shown r.reasons; }) listed.rejected;
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
  # each selected extension: its name, a tab, its directory
  extensionDirsList = lib.concatMapStrings (e: "${e.name}\t${e.path}\n") selection.extensions;
  passAsFile = [ "lemonpackArgs" "extensionDirsList" ];
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
    done < "$extensionDirsListPath"
    runHook postInstall
  '';
  passthru = {
    inherit selection;
    generated = "${verdict}/generated";
  };
  meta = {
    description = "Gufo's extension registry with the selected extensions compiled in";
    mainProgram = "gufo-registry";
  };
}
