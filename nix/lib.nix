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
    attrNames concatStringsSep elem filter foldl' fromJSON hasAttr
    head isString length listToAttrs map match pathExists readDir readFile
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

  # The build-feature vocabulary, read from where lemonpack keeps it (the extension schema's
  # requirement enum, equal to lemonpack.extensions.manifest.REQUIREMENTS, in that order).
  featureVocabulary =
    (fromJSON (readFile ../lemonpack/extensions/schema/extension-v1.schema.json))."$defs".requirement.enum;

  /* checkFeatures :: [ string ] -> [ string ]
     The features as given, or a throw with the CLI's message (`--feature gpu`) for the
     first one outside the vocabulary: unknown feature 'gpu' (one of hip, cuda, ...). */
  checkFeatures = features:
    let bad = filter (f: !(elem f featureVocabulary)) features; in
    if bad == [ ] then features
    else fail "unknown feature ${q (toString (head bad))} (one of ${joinSep ", " featureVocabulary})";

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
     extension directories (its subdirectories holding one, sorted by name). */
  discover = dirs: concatMap (d: map readManifest (candidates d)) dirs;

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
  # Messages are those of lemonpack.extensions.pipeline (the Python CLI), word for word;
  # tests/nix_flake compares them on the same tree.

  # Python's repr of an identifier string ('name'): identifiers never hold quotes.
  q = s: "'${s}'";

  /* apiProblem :: api -> manifest -> string | null
     Why the extension's api_version does not fit the host API 0.MINOR.REVISION (seed 002
     section 7): its MINOR must equal the host's and its REVISION be at most the host's.
     (pipeline.api_problem) */
  apiProblem = api: m:
    let c = parseConstraint m; in
    if c.minor != api.minor then
      "needs extension API ${trim m.api_version} but the host API is ${api.string}: the minor numbers differ (${toString c.minor} != ${toString api.minor}), and a minor bump may break extensions"
    else if c.revision > api.revision then
      "needs extension API ${trim m.api_version} but the host API is ${api.string}: revision ${toString c.revision} is newer than the host's ${toString api.revision}"
    else null;

  /* claims :: manifest -> [ { kind; value; } ]
     What an extension claims (pipeline._claims): its name, provider ids and keys, option
     names, and the values it contributes to a core option. */
  claims = m:
    [ { kind = "extension name"; value = m.name; } ]
    ++ concatMap
      (p: [ { kind = "provider id"; value = p.id; } ] ++ map (k: { kind = "key"; value = k; }) p.keys)
      m.providers
    ++ concatMap
      (o:
        if o ? contributes_to then map (v: { kind = "value of ${o.contributes_to}"; value = v; }) (o.values or [ ])
        else [ { kind = "option"; value = o.name; } ])
      m.options;

  /* collisionProblems :: manifest -> [ manifest ] -> [ string ]
     A community extension may not claim what an official one owns (seed 002 section 4);
     each reason names both manifests. Two community extensions may share a claim.
     (pipeline.collision_problems) */
  collisionProblems = m: officials:
    let
      owners = listToAttrs (concatMap
        (o: map (c: { name = "${c.kind}\t${c.value}"; value = o; }) (claims o))
        officials); # listToAttrs keeps the first occurrence, like setdefault
    in
    concatMap
      (c:
        let k = "${c.kind}\t${c.value}"; in
        if hasAttr k owners then
          let o = owners.${k}; in
          [ "community extension ${m.name} (${m._file}) claims ${c.kind} ${q c.value}, which official extension ${o.name} (${o._file}) owns" ]
        else [ ])
      (claims m);

  # ---------------------------------------------------------------- include allowlist
  # Community extensions see only the public headers (seed 002 section 5;
  # pipeline.include_problems). The lists below are pipeline.SOURCE_SUFFIXES,
  # STANDARD_HEADERS and GENERATED_HEADERS; tests/nix_flake checks they stay equal.

  sourceSuffixes = [ ".c" ".cc" ".cpp" ".cxx" ".h" ".hh" ".hpp" ".hxx" ".inl" ".cu" ".hip" ".cuh" ];
  generatedHeaders = [ "gufo_ext_constants.hpp" ];
  standardHeaders = [
    "algorithm" "any" "array" "assert.h" "atomic" "barrier" "bit" "bitset" "cassert" "cctype"
    "cerrno" "cfenv" "cfloat" "charconv" "chrono" "cinttypes" "climits" "clocale" "cmath" "codecvt"
    "compare" "complex" "concepts" "condition_variable" "coroutine" "csetjmp" "csignal" "cstdarg"
    "cstddef" "cstdint" "cstdio" "cstdlib" "cstring" "ctime" "ctype.h" "cuchar" "cwchar" "cwctype"
    "deque" "errno.h" "exception" "execution" "expected" "fenv.h" "filesystem" "flat_map" "flat_set"
    "float.h" "format" "forward_list" "fstream" "functional" "future" "generator" "initializer_list"
    "inttypes.h" "iomanip" "ios" "iosfwd" "iostream" "istream" "iterator" "latch" "limits"
    "limits.h" "list" "locale" "locale.h" "map" "math.h" "mdspan" "memory" "memory_resource" "mutex"
    "new" "numbers" "numeric" "optional" "ostream" "print" "queue" "random" "ranges" "ratio" "regex"
    "scoped_allocator" "semaphore" "set" "setjmp.h" "shared_mutex" "signal.h" "source_location"
    "span" "spanstream" "sstream" "stack" "stacktrace" "stdarg.h" "stddef.h" "stdexcept" "stdfloat"
    "stdint.h" "stdio.h" "stdlib.h" "stop_token" "streambuf" "string" "string.h" "string_view"
    "syncstream" "system_error" "thread" "time.h" "tuple" "type_traits" "typeindex" "typeinfo"
    "uchar.h" "unordered_map" "unordered_set" "utility" "valarray" "variant" "vector" "version"
    "wchar.h" "wctype.h"
  ];

  hasSuffix = suffix: s:
    let n = stringLength s; k = stringLength suffix;
    in n >= k && builtins.substring (n - k) k s == suffix;

  # files under DIR in os.walk order (top-down; in each directory its files by name, then
  # its subdirectories by name): [ { dir = string; name; } ]
  walkFiles = dir:
    let
      entries = readDir dir;
      names = sortStrings (attrNames entries);
      s = toString dir;
    in
    map (n: { dir = s; name = n; }) (filter (n: entries.${n} != "directory") names)
    ++ concatMap (n: walkFiles (dir + "/${n}")) (filter (n: entries.${n} == "directory") names);

  # lexical path normalisation of an absolute path ("a/./b/../c" -> "a/c")
  normalise = path:
    let
      parts = filter (p: isString p && p != "" && p != ".") (split "/" path);
      step = acc: p: if p == ".." then (if acc == [ ] then [ ] else builtins.genList (i: builtins.elemAt acc i) (length acc - 1)) else acc ++ [ p ];
    in
    "/" + joinSep "/" (foldl' step [ ] parts);

  includeAllowed = header: kind: dir: root:
    let parts = filter isString (split "/" header); in
    (builtins.substring 0 9 header == "gufo/ext/" && !(elem ".." parts) && !(elem "" parts))
    || elem header standardHeaders || elem header generatedHeaders
    || (kind == "\"" &&
      (let
        full = normalise "${dir}/${header}";
        rootN = normalise root;
        inside = full == rootN || builtins.substring 0 (stringLength rootN + 1) full == rootN + "/";
        parent = builtins.dirOf full;
        base = builtins.baseNameOf full;
      in
      inside && pathExists full && (readDir parent).${base} or "" == "regular"));

  /* includeProblems :: manifest -> [ string ]
     Each #include of a source file (suffixes above) that is not a gufo/ext/... public
     header, a standard header, the generated constants header or (quoted) a file of the
     extension itself, as "file:line: ..." (pipeline.include_problems). */
  includeProblems = m:
    let root = toString m._dir; in
    concatMap
      (f:
        let
          path = "${f.dir}/${f.name}";
          lines = filter isString (split "\r\n|\n|\r" (readFile path));
          numbered = builtins.genList (i: { no = i + 1; line = builtins.elemAt lines i; }) (length lines);
        in
        concatMap
          (l:
            let mm = match "[[:space:]]*#[[:space:]]*include[[:space:]]*([<\"])([^>\"]*)[>\"].*" l.line; in
            if mm == null then [ ]
            else
              let kind = head mm; header = head (tail mm); in
              if includeAllowed header kind f.dir root then [ ]
              else [ "${path}:${toString l.no}: #include ${kind}${header}${if kind == "<" then ">" else kind} is not allowed: community extensions may include only gufo/ext/... public headers, standard headers and their own files" ])
          numbered)
      (filter (f: builtins.any (x: hasSuffix x f.name) sourceSuffixes) (walkFiles m._dir));

  # ---------------------------------------------------------------- selection

  # the directories of DIR: itself when it holds extension.json, else its subdirectories
  # holding one, sorted by name (pipeline._candidates)
  candidates = dir:
    let s = toString dir; in
    if pathExists "${s}/extension.json" then [ dir ]
    else
      let entries = readDir dir; in
      map (n: dir + "/${n}")
        (filter (n: entries.${n} != "regular" && pathExists "${s}/${n}/extension.json")
          (sortStrings (attrNames entries)));

  /* registryOrder :: [ name ] -> [ manifest ] -> [ manifest ]
     Official extensions in the lock's order, then the others by name (byte-wise). */
  registryOrder = lockNames: exts:
    let
      isOff = m: (m.official or false) && elem m.name lockNames;
      off = concatMap (n: filter (m: isOff m && m.name == n) exts) lockNames;
    in
    off ++ sort (a: b: a.name < b.name) (filter (m: !(isOff m)) exts);

  /* closure :: { roots; kept; rejectedByName; } -> { done = [ name ]; errors = [ string ]; }
     Names reachable from the roots through `dependencies` (pipeline._closure); one error
     per root whose closure hits a missing, rejected or cyclic dependency, naming the chain
     a -> b -> c. */
  closure = { roots, kept, rejectedByName }:
    let
      from = name: chain:
        if chain == [ ] then [ ] else if head chain == name then chain else from name (tail chain);
      visit = chain: st: name:
        if elem name chain then
          st // { ok = false; err = "dependency cycle: ${joinSep " -> " (from name chain ++ [ name ])}"; }
        else if elem name st.done then st // { ok = true; }
        else if !(hasAttr name kept) then
          let
            path = joinSep " -> " (chain ++ [ name ]);
            why = "was rejected: " + joinSep "; " (rejectedByName.${name} or [ ]);
          in
          st // {
            ok = false;
            err =
              if chain == [ ] then
                (if hasAttr name rejectedByName then "extension ${q name} ${why}" else "no extension named ${q name}")
              else if hasAttr name rejectedByName then "dependency ${path}: extension ${q name} ${why}"
              else "missing dependency ${path}: no extension named ${q name}";
          }
        else
          let
            r = foldl' (acc: d: if !acc.ok then acc else visit (chain ++ [ name ]) acc d)
              (st // { ok = true; }) kept.${name}.dependencies;
          in
          if r.ok then r // { done = r.done ++ [ name ]; } else r;
      step = st: root:
        let r = visit [ ] (st // { ok = true; }) root; in
        if r.ok then r else r // { errors = st.errors ++ [ "cannot select ${root}: ${r.err}" ]; errRoots = st.errRoots ++ [ root ]; };
    in
    foldl' step { done = [ ]; errors = [ ]; errRoots = [ ]; ok = true; } roots;

  /* select :: { root; lockFile ? root + "/extensions.lock"; extensions ? null;
                 extensionDirs ? [ ]; features ? [ "linux" ]; } -> selection
     The pipeline of lemonpack.extensions.pipeline.run_pipeline, at evaluation time:
     root          : the Gufo tree (official extensions under catalogue/extensions, api/)
     extensions    : null = the release lock; "all" = every extension some target of which
                     the features build; else a list of names (strings) and extension
                     directories (paths, or strings holding a "/")
     extensionDirs : more directories to discover (like GUFO_EXTENSION_DIRS); each an
                     extension directory or a directory of them
     features      : the build's feature set (a target is built when all its requires are in it)
     Official = discovered under root/catalogue/extensions and named in the lock; every
     other extension is community. Fails evaluation (throw) with the CLI's message on a
     stale lock name, a selected extension that was rejected (collision with an official
     one, API version), a missing or cyclic dependency, a feature outside the vocabulary. */
  select =
    { root
    , lockFile ? root + "/extensions.lock"
    , extensions ? null
    , extensionDirs ? [ ]
    , features ? [ "linux" ]
    }:
    let
      api = apiVersion root;
      lockPath = toString lockFile;
      hasLock = pathExists lockPath;
      lock = if hasLock then readLock lockFile else { extensions = [ ]; _path = null; _file = lockPath; };
      lockNames = lock.extensions;
      mode = if extensions == null then "lock" else if extensions == "all" then "all" else "list";
      items = if mode == "list" then extensions else [ ];
      isDirItem = e: !(isString e) || match ".*/.*" e != null;
      wantedDirs = filter isDirItem items;
      wantedNames = filter (e: !(isDirItem e)) items;
      catalogue = root + "/catalogue/extensions";
      extraRoots = map
        (d:
          if pathExists (toString d) then d
          else fail "extension directory ${toString d} does not exist or is not a directory")
        (extensionDirs ++ wantedDirs);
      foundAll = (if pathExists (toString catalogue) then map (d: { dir = d; inTree = true; }) (candidates catalogue) else [ ])
        ++ concatMap (r: map (d: { dir = d; inTree = false; }) (candidates r)) extraRoots;
      # a directory reached twice counts once (the first way wins)
      found = foldl' (acc: f: if elem (toString f.dir) (map (x: toString x.dir) acc) then acc else acc ++ [ f ]) [ ] foundAll;
      valid = map
        (f: let m = readManifest f.dir; in m // { official = f.inTree && elem m.name lockNames; })
        found;
      officials = filter (m: m.official) valid;
      officialNames = map (m: m.name) officials;
      reasonsOf = m:
        (if !m.official then
          let
            coll = collisionProblems m officials;
            twins = filter (o: o.name == m.name && !o.official && o._file != m._file) valid;
          in
          (if coll != [ ] then coll
          else map (o: "extension name ${q m.name} is used by two manifests: ${m._file} and ${o._file}") twins)
          ++ includeProblems m
        else if length (filter (o: o.official && o.name == m.name) valid) > 1 then
          [ "official extension name ${q m.name} is used by two manifests in the tree" ]
        else [ ])
        ++ (let p = apiProblem api m; in if p == null then [ ] else [ "${m._file}: extension ${m.name} ${p}" ]);
      judged = map (m: m // { reasons = reasonsOf m; }) valid;
      keptList = filter (m: m.reasons == [ ]) judged;
      rejectedList = filter (m: m.reasons != [ ]) judged;
      kept = listToAttrs (map (m: { name = m.name; value = m; }) keptList);
      rejectedByName = listToAttrs (map (m: { name = m.name; value = m.reasons; }) rejectedList);
      # stale lock names fail every mode (seed 002 section 6)
      stale = filter (x: !(elem x.n officialNames))
        (builtins.genList (i: { inherit i; n = builtins.elemAt lockNames i; }) (length lockNames));
      staleCheck =
        if stale != [ ] then
          let s = head stale; in
          fail "${lockPath}: extensions[${toString s.i}]: ${q s.n} names no extension in ${toString catalogue}"
        else if mode == "lock" && !hasLock then
          fail "no release lock at ${lockPath}; select 'all' or name the extensions"
        else true;
      supported = m: builtins.any (t: builtins.all (r: elem r features) t.requires) m.targets;
      dirRoots = map
        (d:
          let hit = filter (m: toString m._dir == toString d) keptList; in
          if hit != [ ] then (head hit).name
          else
            let
              file = "${toString d}/extension.json";
              rs = concatMap (m: if m._file == file then m.reasons else [ ]) rejectedList;
            in
            fail ("selected extension ${file} was rejected:\n  " + joinSep "\n  " (if rs == [ ] then [ "not discovered" ] else rs)))
        wantedDirs;
      roots =
        if mode == "lock" then lockNames
        else if mode == "all" then map (m: m.name) (filter supported (registryOrder lockNames keptList))
        else wantedNames ++ dirRoots;
      first = closure { inherit roots kept rejectedByName; };
      closed =
        if first.errors == [ ] then first
        else if mode == "all" then closure { roots = filter (r: !(elem r first.errRoots)) roots; inherit kept rejectedByName; }
        else fail (joinSep "\n" first.errors);
      chosen = registryOrder lockNames (map (n: kept.${n}) (unique closed.done));
      featureList = sortStrings (unique (checkFeatures features));
      providers = concatMap
        (m: map
          (p:
            let
              target = head (filter (t: t.name == p.target) m.targets);
              missing = sortStrings (unique (filter (r: !(elem r featureList)) target.requires));
            in
            {
              extension = m;
              provider = p;
              available = missing == [ ];
              reason = if missing == [ ] then null
                else "target ${target.name} not built: needs ${joinSep ", " missing}";
            })
          m.providers)
        chosen;
    in
    builtins.seq (checkFeatures features) (builtins.seq staleCheck {
      inherit api providers lock;
      features = featureList;
      extensions = chosen;
      rejected = map (m: { file = m._file; inherit (m) reasons; }) rejectedList;
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
      setExt = n: "  registry.set_extension(${cstr n});\n";
      call = s:
        if s.available then "  ${s.provider.entry}(registry);\n"
        else "  registry.unavailable(${cstr s.extension.name}, ${cstr s.provider.id}, ${cstr s.provider.capability}, {"
          + joinSep ", " (map cstr s.provider.keys) + "}, ${cstr s.reason});\n";
      providersOf = m: filter (s: s.extension.name == m.name) sel.providers;
      group = m: let ps = providersOf m; in
        if ps == [ ] then "" else setExt m.name + builtins.concatStringsSep "" (map call ps);
    in
    "// Generated by lemonpack from extension.json manifests. Do not edit.\n"
    + "// Extension API ${sel.api.string}; features: ${joinSep " " sel.features}\n"
    + "#include \"gufo/ext/registry.hpp\"\n"
    + "\n"
    + builtins.concatStringsSep "" (map (m: decl m.entry) sel.extensions)
    + builtins.concatStringsSep "" (map (s: decl s.provider.entry) available)
    + "\n"
    + "void gufo_ext_register_all(gufo::ext::Registry &registry) {\n"
    + builtins.concatStringsSep "" (map (m: setExt m.name + "  ${m.entry}(registry);\n") sel.extensions)
    + builtins.concatStringsSep "" (map group sel.extensions)
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
  inherit readManifest discover readLock apiVersion apiProblem claims collisionProblems
    includeProblems sourceSuffixes standardHeaders generatedHeaders
    registryOrder closure select generate extensionsJson registryCpp constantsHpp
    treeFiles mkTree gufoFiles mkGufo mangle featureVocabulary checkFeatures;
}
