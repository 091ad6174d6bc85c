# python3 and python3Packages (nixpkgs' pkgs/development/interpreters/python,
# .../python/mk-python-derivation.nix and pkgs/build-support/fetchpypi, reduced).
#
# python3 is the host's interpreter: a wrapper running the first of a few usual places that
# imports tomllib, jsonschema, httpx and rich. Nix's build users cannot enter /root (pyenv's
# interpreters): host-python.sh prepares a virtual environment of Debian's python3 at
# /opt/offline-nixpkgs-python for them (scripts/test.sh runs it), holding what the named
# nixpkgs Python packages below stand for and the build backends (pdm-backend).
#
# python3Packages:
# - the nixpkgs packages lemonpack names (python3Packages.httpx ...): attribute sets marked
#   `fromHost`, standing for what that interpreter has; they build nothing. Only names that
#   nixpkgs has are here (tests/scenarios/test_nixpkgs_names.py holds them against nixpkgs' sources);
# - fetchPypi: nixpkgs' URL scheme (mirror://pypi/<p>/<pname>/<pname>-<version>.<ext> for a
#   source distribution, files.pythonhosted.org/packages/<dist>/... for a wheel), a
#   fixed-output fetch by hash (fetchurl);
# - buildPythonPackage: outputs out and dist; a wheel (format = "wheel") is copied into dist/,
#   a source distribution is built into dist/ (pip wheel, no build isolation, no index: the
#   build backend must be in the host interpreter, as nixpkgs' build-system is in the build);
#   every wheel in dist/ is installed into $out/lib/python3/site-packages (install-wheels.py),
#   dist/ is copied to $dist, $out/nix-support/python-path lists the package's and its
#   dependencies' site-packages, and pythonImportsCheck imports each module from there;
# - buildPythonApplication: the project's packages copied (pyproject.toml's
#   [tool.setuptools.packages.find] include patterns: no wheel; nixpkgs builds one), one $out/bin
#   script per [project.scripts] entry with its own and its built dependencies' site-packages
#   first on sys.path, and pythonImportsCheck.
# Not here: runtime-dependency checks (pythonRuntimeDepsCheckHook), wrappers' PYTHONPATH
# handling, the `dist` output of applications, checkPhase (pytest).
{ lib, system, stdenv, fetchurl }:
let
  inherit (builtins) filter isList;
  isDrv = d: d ? outPath;
  python3 = stdenv.mkDerivation {
    name = "python3-host";
    dontUnpack = true;
    meta = { description = "The host's Python 3"; platforms = lib.platforms.linux; };
    installPhase = ''
      mkdir -p $out/bin
      for p in /opt/offline-nixpkgs-python/bin/python3 /usr/local/bin/python3 /usr/bin/python3; do
        if [ -x "$p" ] && "$p" -c 'import tomllib, jsonschema, httpx, rich' 2> /dev/null; then
          printf '#!/bin/sh\nexec %s "$@"\n' "$p" > $out/bin/python3
          chmod +x $out/bin/python3
          exit 0
        fi
      done
      echo "no host python3 with jsonschema, httpx and rich: run nix/offline-nixpkgs/host-python.sh pyproject.toml" >&2
      exit 1
    '';
    passthru = {
      sitePackages = "lib/python3/site-packages";
      executable = "python3";
      interpreter = "${python3}/bin/python3";
      pkgs = pythonPackages;
    };
  };
  fromHost = name: { pname = name; fromHost = true; };
  # the built dependencies' site-packages, transitively (their nix-support/python-path)
  depsOf = attrs: filter isDrv ((attrs.dependencies or [ ]) ++ (attrs.propagatedBuildInputs or [ ]));
  importsCheck = ''
    pyPath=$(cat $out/nix-support/python-path)
    for m in $pythonImportsCheck; do
      echo "pythonImportsCheck: $m"
      (cd "$out" && PYTHONPATH="$pyPath" python3 -c "import importlib, sys; f = importlib.import_module(sys.argv[1]).__file__; assert f is None or f.startswith('/nix/store/'), f" "$m")
    done
  '';
  writePythonPath = ''
    mkdir -p $out/nix-support
    { echo -n "$out/${python3.sitePackages}"
      for d in $pythonDependencies; do echo -n ":$(cat $d/nix-support/python-path)"; done
    } > $out/nix-support/python-path
  '';
  dropped = [ "dependencies" "build-system" "propagatedBuildInputs" "pyproject" "format" ];

  pythonPackages = lib.genAttrs [
    # nixpkgs' python-modules this repository names (see tests/fixtures/nixpkgs_attributes.json)
    "aiohttp" "annotated-doc" "cryptography" "docker" "fastjsonschema" "gguf" "httpx" "httpx2"
    "jinja2" "jsonschema" "markdown-it-py" "msgspec" "nh3" "pdm-backend" "platformdirs" "podman"
    "prometheus-client" "pynacl" "pyyaml" "rich" "setuptools" "shellingham" "zlib-ng" "zstandard"
  ] fromHost // {
    fetchPypi = { pname, version, hash ? "", sha256 ? "", format ? "setuptools", extension ? "tar.gz"
                , dist ? "py2.py3", python ? "py2.py3", abi ? "none", platform ? "any" }:
      let
        first = builtins.substring 0 1 pname;
        url =
          if format == "wheel" then
            "https://files.pythonhosted.org/packages/${dist}/${first}/${pname}/${pname}-${version}-${python}-${abi}-${platform}.whl"
          else if format == "setuptools" then "mirror://pypi/${first}/${pname}/${pname}-${version}.${extension}"
          else throw "Unsupported format ${format}";
      in
      fetchurl { inherit url hash sha256; };

    buildPythonPackage = attrs:
      let wheel = (attrs.format or "") == "wheel"; in
      stdenv.mkDerivation (removeAttrs attrs dropped // {
        name = "python3-${attrs.pname}-${attrs.version}";
        outputs = [ "out" "dist" ];
        nativeBuildInputs = [ python3 ] ++ filter isDrv (attrs.nativeBuildInputs or [ ]);
        pythonDependencies = depsOf attrs;
        unpackPhase = if wheel then ''
          runHook preUnpack
          mkdir dist
          cp "$src" "dist/$(basename "$src" | cut -d- -f2-)"
          runHook postUnpack
        '' else attrs.unpackPhase or "";
        buildPhase = attrs.buildPhase or (if wheel then "runHook preBuild; runHook postBuild" else ''
          runHook preBuild
          PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 python3 -m pip wheel --quiet --no-deps \
            --no-build-isolation --no-cache-dir --wheel-dir dist .
          runHook postBuild
        '');
        installPhase = attrs.installPhase or ''
          runHook preInstall
          python3 ${./install-wheels.py} "$out/${python3.sitePackages}" dist/*.whl
          mkdir -p $dist
          cp dist/*.whl $dist/
          ${writePythonPath}
          runHook postInstall
        '';
        doInstallCheck = true;
        pythonImportsCheck = attrs.pythonImportsCheck or [ ];
        installCheckPhase = importsCheck;
        meta = { platforms = python3.meta.platforms; } // attrs.meta or { };
      });

    buildPythonApplication = attrs:
      stdenv.mkDerivation (removeAttrs attrs dropped // {
        nativeBuildInputs = [ python3 ] ++ filter isDrv (attrs.nativeBuildInputs or [ ]);
        pythonDependencies = depsOf attrs;
        buildPhase = attrs.buildPhase or "runHook preBuild; runHook postBuild";
        installPhase = attrs.installPhase or ''
          runHook preInstall
          ${writePythonPath}
          python3 ${./install-python-app.py} . "$out" "$(cat $out/nix-support/python-path)"
          runHook postInstall
        '';
        doInstallCheck = true;
        pythonImportsCheck = attrs.pythonImportsCheck or [ ];
        installCheckPhase = importsCheck;
        meta = { platforms = python3.meta.platforms; } // attrs.meta or { };
      });
  };
in
python3
