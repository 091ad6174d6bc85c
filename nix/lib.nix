# The Gufo extension library for Nix: the pipeline of seed 002 section 8 at evaluation time.
#
# Builtins only (Nix >= 2.8, no nixpkgs): builtins.readFile / fromJSON / readDir read the
# extension.json manifests and extensions.lock while Nix evaluates, so a stale lock name,
# a collision between a community and an official extension, a missing or cyclic
# dependency and an API version mismatch all fail *evaluation*, with the messages the
# Python CLI (`lemonpack extensions ...`) prints.
#
# The generated files (extensions.json, gufo_ext_registry.cpp, gufo_ext_constants.hpp)
# follow the byte format of docs/extensions-generated.md and must stay byte-identical to
# `lemonpack extensions generate` (tests/nix_flake compares them).
#
# Shapes used below:
#   manifest  = the parsed extension.json attrset plus
#               _dir  (the extension directory: a path or a store-path string),
#               _file (the manifest's file name as a string, for messages),
#               official (bool, set by `classify`).
#   selection = { api; features; extensions = [ manifest ... ] in registry order;
#                 providers = [ { extension; provider; available; reason; } ... ]; }
let
  inherit (builtins)
    attrNames concatStringsSep elem filter foldl' fromJSON genericClosure hasAttr
    head isPath isString length listToAttrs map match pathExists readDir readFile
    replaceStrings sort split stringLength tail throw toJSON;

  # ---------------------------------------------------------------- small helpers

  # ordered list without duplicates (first occurrence wins)
  unique = list: foldl' (acc: x: if elem x acc then acc else acc ++ [ x ]) [ ] list;

  # byte-wise sort of strings (Nix compares strings with std::string::compare)
  sortStrings = sort (a: b: a < b);

  joinSep = concatStringsSep;

  concatMap = f: list: builtins.concatLists (map f list);

  # trim ASCII whitespace at both ends of a string
  trim = s:
    let m = match "[ \t\r\n]*(.*[^ \t\r\n])[ \t\r\n]*" s;
    in if m == null then "" else head m;

  # "a-b.c" -> "a_b_c" (constants header identifiers)
  mangle = replaceStrings [ "-" "." ] [ "_" "_" ];

  fail = msg: throw msg;

  # ---------------------------------------------------------------- reading

  /* readManifest :: path -> manifest
     Reads DIR/extension.json (DIR: a path or a string) at evaluation time.
     Checks only what the generated files need (name, version, api_version, entry,
     providers with declared targets); the full JSON Schema check is
     `lemonpack extensions check`. */
  readManifest = dir:
    let
      file = "${toString dir}/extension.json";
      doc =
        if pathExists file then fromJSON (readFile file)
        else fail "${file}: no extension.json in this directory";
      need = k:
        if hasAttr k doc then doc.${k}
        else fail "${file}: $.${k}: required field missing";
      targetNames = map (t: t.name) (doc.targets or [ ]);
      checked = map
        (p:
          if elem p.target targetNames then p
          else fail "${file}: provider '${p.id}' names target '${p.target}', which 'targets' does not declare")
        (need "providers");
    in
    assert isString (need "name");
    doc // {
      name = need "name";
      version = need "version";
      api_version = need "api_version";
      entry = need "entry";
      providers = checked;
      options = doc.options or [ ];
      targets = need "targets";
      dependencies = doc.dependencies or [ ];
      _dir = dir;
      _file = file;
    };

  /* discover :: [ path ] -> [ manifest ]
     Each directory is an extension itself (it holds extension.json) or a folder of
     extension directories (its immediate subdirectories holding one). Sorted by path
     within a folder (readDir's order). */
  discover = dirs: concatMap
    (d:
      let s = toString d; in
      if pathExists "${s}/extension.json" then [ (readManifest d) ]
      else if pathExists s then
        let entries = readDir d;
        in map (n: readManifest (d + "/${n}"))
          (filter (n: entries.${n} == "directory" && pathExists "${s}/${n}/extension.json")
            (attrNames entries))
      else [ ])
    dirs;

  /* readLock :: path -> { schema = 1; extensions = [ name ... ]; _file; }
     The release lock (seed 002 section 6). */
  readLock = file:
    let
      doc = fromJSON (readFile file);
      f = toString file;
    in
    if (doc.schema or null) != 1 then fail "${f}: $.schema: unsupported lock schema (expected 1)"
    else if !(doc ? extensions) then fail "${f}: $.extensions: required field missing"
    else doc // { _file = f; _path = file; };

  /* apiVersion :: path -> { minor; revision; string; }
     Host extension API version 0.MINOR.REVISION (seed 002 section 7): MINOR is the
     integer in ROOT/api/minor, REVISION the number of ROOT/api/changes/*.md records. */
  apiVersion = root:
    let
      minor = fromJSON (trim (readFile (root + "/api/minor")));
      changes = readDir (root + "/api/changes");
      revision = length (filter (n: match ".*\\.md" n != null && changes.${n} == "regular") (attrNames changes));
    in
    { inherit minor revision; string = "0.${toString minor}.${toString revision}"; };

  # ">= 0.1.12" -> { minor = 1; revision = 12; }
  parseConstraint = m:
    let p = match ">= ?0\\.([0-9]+)\\.([0-9]+)" m.api_version;
    in if p == null then fail "${m._file}: $.api_version: not a '>= 0.MINOR.REVISION' constraint: '${m.api_version}'"
    else { minor = fromJSON (head p); revision = fromJSON (head (tail p)); };

  # ---------------------------------------------------------------- checks

  /* checkLock :: { lock; manifests; } -> lock
     Every name in the lock must be a discovered extension (a stale name fails). */
  checkLock = { lock, manifests }:
    let
      known = map (m: m.name) manifests;
      stale = filter (n: !(elem n known)) lock.extensions;
    in
    if stale != [ ] then
      fail "${lock._file}: extension '${head stale}' named in the lock was not found (stale lock entry)"
    else lock;

  /* checkApi :: api -> manifest -> manifest
     The extension's MINOR must equal the host's and its REVISION be at most the host's. */
  checkApi = api: m:
    let c = parseConstraint m; in
    if c.minor != api.minor || c.revision > api.revision then
      fail "${m._file}: extension '${m.name}' needs extension API ${m.api_version} but this host provides ${api.string}"
    else m;

  # what an extension claims: keys, provider ids, option names (contributed options are
  # the core's and excluded)
  claims = m:
    map (k: { kind = "key"; value = k; }) (concatMap (p: p.keys) m.providers)
    ++ map (p: { kind = "provider id"; value = p.id; }) m.providers
    ++ map (o: { kind = "option"; value = o.name; }) (filter (o: !(o ? contributes_to)) m.options);

  /* checkCollisions :: { official; community; } -> true
     A community extension may not claim a key, provider id or option name an official one
     owns (seed 002 section 4); the message names both manifests. */
  checkCollisions = { official, community }:
    let
      owned = listToAttrs (concatMap
        (m: map (c: { name = "${c.kind}\t${c.value}"; value = m; }) (claims m))
        official);
      hits = concatMap
        (m: map (c: { inherit m c; o = owned."${c.kind}\t${c.value}"; })
          (filter (c: hasAttr "${c.kind}\t${c.value}" owned) (claims m)))
        community;
    in
    if hits == [ ] then true
    else
      let h = head hits; in
      fail "${h.m._file}: community extension '${h.m.name}' claims ${h.c.kind} '${h.c.value}' owned by official extension '${h.o.name}' (${h.o._file})";

  # ---------------------------------------------------------------- selection

  /* closeDependencies :: { byName; roots = [ name ]; } -> [ name ]
     Roots plus their dependencies (depth first, each once); a missing or cyclic
     dependency fails naming the chain a -> b -> c. */
  closeDependencies = { byName, roots }:
    let
      visit = chain: acc: name:
        if elem name chain then
          fail "cyclic extension dependency: ${joinSep " -> " (chain ++ [ name ])}"
        else if !(hasAttr name byName) then
          fail "missing extension dependency: ${joinSep " -> " (chain ++ [ name ])}"
        else if elem name acc then acc
        else
          let m = byName.${name};
          in (foldl' (visit (chain ++ [ name ])) acc m.dependencies) ++ [ name ];
    in
    foldl' (visit [ ]) [ ] roots;

  /* select :: { root; lockFile ? root + "/extensions.lock"; extensions ? null;
                 extensionDirs ? [ ]; features ? [ "linux" ]; } -> selection
     root          : the Gufo tree (official extensions under catalogue/extensions, api/)
     extensions    : null = the release lock; else a list of names (strings, found in the
                     tree or extensionDirs) and extension directories (paths)
     extensionDirs : more directories to discover (GUFO_EXTENSION_DIRS for Nix)
     features      : the build's feature set (a target is built when all its requires are
                     in it)
     Registry order: lock names in lock order, then the others by name (byte-wise). */
  select =
    { root
    , lockFile ? root + "/extensions.lock"
    , extensions ? null
    , extensionDirs ? [ ]
    , features ? [ "linux" ]
    }:
    let
      api = apiVersion root;
      lock = readLock lockFile;
      explicitDirs = filter (e: !(isString e)) (if extensions == null then [ ] else extensions);
      discovered = map readManifest explicitDirs
        ++ discover ([ (root + "/catalogue/extensions") ] ++ extensionDirs);
      # one manifest per name: an explicit directory wins over a discovered one
      # (listToAttrs keeps the first occurrence)
      byName = listToAttrs (map (m: { name = m.name; value = m; }) discovered);
      _lock = checkLock { inherit lock; manifests = discovered; };
      classify = m: m // { official = elem m.name lock.extensions; };
      roots =
        if extensions == null then lock.extensions
        else map (e: if isString e then e else (readManifest e).name) extensions;
      names = closeDependencies { inherit byName roots; };
      chosen = map (n: classify byName.${n}) names;
      official = filter (m: m.official) chosen;
      lockOfficial = map (n: classify byName.${n}) lock.extensions;
      community = filter (m: !m.official) chosen;
      _coll = checkCollisions { official = lockOfficial; inherit community; };
      ordered = (filter (m: elem m.name names) lockOfficial)
        ++ sort (a: b: a.name < b.name) community;
      checkedExts = map (checkApi api) ordered;
      featureList = sortStrings (unique features);
      providers = concatMap
        (m: map
          (p:
            let
              target = head (filter (t: t.name == p.target) m.targets);
              missing = sortStrings (filter (r: !(elem r featureList)) target.requires);
            in
            {
              extension = m;
              provider = p;
              available = missing == [ ];
              reason = if missing == [ ] then null
                else "target ${target.name} not built: needs ${joinSep ", " missing}";
            })
          m.providers)
        checkedExts;
    in
    builtins.seq _lock (builtins.seq _coll {
      inherit api providers;
      features = featureList;
      extensions = checkedExts;
      lock = lock;
    });

  # ---------------------------------------------------------------- generation

  /* extensionsJson :: selection -> string
     Compact JSON, keys sorted, no trailing newline (builtins.toJSON). */
  extensionsJson = sel: toJSON {
    api_version = sel.api.string;
    schema = 1;
    features = sel.features;
    extensions = map
      (m: {
        inherit (m) name version entry official dependencies;
        options = map
          (o: { inherit (o) commands help name type; values = o.values or [ ]; })
          m.options;
        providers = map
          (s: {
            inherit (s) available reason;
            inherit (s.provider) capability entry id keys target;
          })
          (filter (s: s.extension.name == m.name) sel.providers);
      })
      sel.extensions;
  };

  cstr = s: "\"" + replaceStrings [ "\\" "\"" ] [ "\\\\" "\\\"" ] s + "\"";

  /* registryCpp :: selection -> string   (gufo_ext_registry.cpp) */
  registryCpp = sel:
    let
      available = filter (s: s.available) sel.providers;
      decl = e: "extern \"C\" void ${e}(gufo::ext::Registry &registry);\n";
      call = s:
        if s.available then "  ${s.provider.entry}(registry);\n"
        else "  registry.unavailable(${cstr s.provider.id}, ${cstr s.reason});\n";
    in
    "// Generated by lemonpack from extension.json manifests. Do not edit.\n"
    + "// Extension API ${sel.api.string}; features: ${joinSep " " sel.features}\n"
    + "#include \"gufo/ext/registry.hpp\"\n"
    + "\n"
    + builtins.concatStringsSep "" (map (m: decl m.entry) sel.extensions)
    + builtins.concatStringsSep "" (map (s: decl s.provider.entry) available)
    + "\n"
    + "void gufo_ext_register_all(gufo::ext::Registry &registry) {\n"
    + builtins.concatStringsSep "" (map (m: "  ${m.entry}(registry);\n") sel.extensions)
    + builtins.concatStringsSep "" (map call sel.providers)
    + "}\n";

  /* constantsHpp :: selection -> string   (gufo_ext_constants.hpp) */
  constantsHpp = sel:
    let
      c = "inline constexpr const char *";
      arr = xs: "{" + joinSep ", " (map cstr xs) + "}";
      block = m:
        "namespace ${m.name} {\n"
        + "${c}name = ${cstr m.name};\n"
        + "${c}version = ${cstr m.version};\n"
        + builtins.concatStringsSep "" (map
          (p: "${c}provider_${mangle p.id} = ${cstr p.id};\n"
            + "${c}provider_${mangle p.id}_keys[] = ${arr p.keys};\n")
          m.providers)
        + builtins.concatStringsSep "" (map
          (o:
            let
              id = mangle (builtins.substring 2 (stringLength o.name) o.name);
              values = o.values or [ ];
            in
            "${c}option_${id} = ${cstr o.name};\n"
            + (if values == [ ] then "" else "${c}option_${id}_values[] = ${arr values};\n"))
          m.options)
        + "}  // namespace ${m.name}\n";
    in
    "// Generated by lemonpack from extension.json manifests. Do not edit.\n"
    + "#pragma once\n"
    + "\n"
    + "namespace gufo::ext::constants {\n"
    + "${c}api_version = ${cstr sel.api.string};\n"
    + builtins.concatStringsSep "" (map block sel.extensions)
    + "}  // namespace gufo::ext::constants\n";

  /* generate :: selection -> { "extensions.json"; "gufo_ext_registry.cpp";
                                "gufo_ext_constants.hpp"; }   (file name -> contents) */
  generate = sel: {
    "extensions.json" = extensionsJson sel;
    "gufo_ext_registry.cpp" = registryCpp sel;
    "gufo_ext_constants.hpp" = constantsHpp sel;
  };

  # ---------------------------------------------------------------- the output tree

  /* treeFiles :: path -> [ { rel; path; } ]
     Every regular file under DIR (recursively, sorted, dot files skipped). */
  treeFiles = dir:
    let
      walk = prefix: d:
        let entries = readDir d; in
        concatMap
          (n:
            let
              t = entries.${n};
              rel = if prefix == "" then n else "${prefix}/${n}";
              p = d + "/${n}";
            in
            if builtins.substring 0 1 n == "." then [ ]
            else if t == "directory" then walk rel p
            else if t == "regular" then [ { inherit rel; path = p; } ]
            else fail "${toString p}: ${t} in an extension directory is not supported by the Nix package (only regular files and directories)")
          (sortStrings (attrNames entries));
    in
    walk "" dir;

  # one WARC 1.0 "resource" record (ISO 28500): libarchive's WARC reader, which Nix's
  # builtin:unpack-channel uses, turns it into a regular file at the URI's path.
  warcRecord = rel: body:
    if match ".*[ \t\r\n\"%].*" rel != null then
      fail "${rel}: file names with spaces, quotes or percent signs are not supported by the Nix package"
    else
      "WARC/1.0\r\nWARC-Type: resource\r\nWARC-Date: 1980-01-01T00:00:00Z\r\n"
      + "WARC-Target-URI: http://gufo/${rel}\r\n"
      + "Content-Length: ${toString (stringLength body)}\r\n\r\n${body}\r\n\r\n";

  /* mkTree :: { name; system; files = [ { rel; text; } ]; top ? "share"; } -> derivation
     A store directory holding FILES under $out/TOP/..., built by Nix's own
     `builtin:unpack-channel` builder (no shell, no nixpkgs): the files travel as one WARC
     archive made with builtins.toFile. Files are read-only, not executable; contents must
     be text (Nix strings hold no NUL byte). */
  mkTree = { name, system, files, top ? "share" }:
    let
      archive = builtins.toFile "${name}.warc"
        (builtins.concatStringsSep "" (map (f: warcRecord "${top}/${f.rel}" f.text) files));
    in
    derivation {
      inherit name system;
      builder = "builtin:unpack-channel";
      src = archive;
      channelName = top;
    };

  /* gufoFiles :: selection -> [ { rel; text; } ]
     What the gufo package holds under share/gufo: the three generated files, the release
     lock as read (it says which extensions are official),
     and each selected extension's directory under extensions/<name>/. */
  gufoFiles = sel:
    let gen = generate sel; in
    map (n: { rel = "gufo/${n}"; text = gen.${n}; }) (attrNames gen)
    ++ [ { rel = "gufo/extensions.lock"; text = readFile sel.lock._path; } ]
    ++ concatMap
      (m: map (f: { rel = "gufo/extensions/${m.name}/${f.rel}"; text = readFile f.path; })
        (treeFiles m._dir))
      sel.extensions;

  /* mkGufo :: { root; system; extensions ? null; features ? [ "linux" ]; extensionDirs ? [ ];
                 lockFile ? ...; pkgs ? null; } -> derivation (with .override, .selection)
     The `gufo` package: `gufo.override { extensions = [ "qwen" ./my-ext ]; features = [ ... ]; }`.
     When pkgs (nixpkgs) is given its hostPlatform system is used; the build itself always
     uses Nix's builtin builder so the output is the same with or without nixpkgs. */
  mkGufo = args:
    let
      a = { extensions = null; features = [ "linux" ]; extensionDirs = [ ]; pkgs = null; } // args;
      system = if a.pkgs != null then a.pkgs.stdenv.hostPlatform.system else a.system;
      sel = select {
        inherit (a) root extensions features extensionDirs;
        lockFile = a.lockFile or (a.root + "/extensions.lock");
      };
      drv = mkTree { name = "gufo-extensions-${sel.api.string}"; inherit system; files = gufoFiles sel; };
    in
    drv // {
      selection = sel;
      generated = generate sel;
      override = newArgs: mkGufo (args // (if builtins.isFunction newArgs then newArgs args else newArgs));
    };
in
{
  inherit readManifest discover readLock apiVersion checkLock checkApi checkCollisions
    closeDependencies select generate extensionsJson registryCpp constantsHpp
    treeFiles mkTree gufoFiles mkGufo mangle;
}
