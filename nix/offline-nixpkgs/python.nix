# python3 and python3Packages.buildPythonApplication (nixpkgs'
# pkgs/development/interpreters/python and .../python/mk-python-derivation.nix, reduced).
#
# python3 is the host's interpreter: a wrapper running the first of a few usual places that
# imports the modules lemonpack needs (typer, jsonschema, httpx, rich) and tomllib. Nix's
# build users cannot enter /root (pyenv's interpreters): host-python.sh prepares a virtual
# environment of Debian's python3 at /opt/offline-nixpkgs-python for them (scripts/test.sh
# runs it). Python packages
# named as dependencies (python3Packages.typer ...) stand for what that interpreter already
# has: they are attribute sets marked `fromHost`, not derivations, and build nothing.
# buildPythonApplication copies the project's packages (pyproject.toml's
# [tool.setuptools.packages.find] include patterns) into $out/lib/python3/site-packages,
# writes one $out/bin script per [project.scripts] entry, and runs `pythonImportsCheck`.
# No wheel is built: nixpkgs builds one with pypa build and installs it with pypa installer.
{ lib, system, stdenv }:
let
  python3 = stdenv.mkDerivation {
    name = "python3-host";
    dontUnpack = true;
    installPhase = ''
      mkdir -p $out/bin
      for p in /opt/offline-nixpkgs-python/bin/python3 /usr/local/bin/python3 /usr/bin/python3; do
        if [ -x "$p" ] && "$p" -c 'import tomllib, typer, jsonschema, httpx, rich' 2> /dev/null; then
          printf '#!/bin/sh\nexec %s "$@"\n' "$p" > $out/bin/python3
          chmod +x $out/bin/python3
          exit 0
        fi
      done
      echo "no host python3 with typer, jsonschema, httpx and rich: run nix/offline-nixpkgs/host-python.sh pyproject.toml" >&2
      exit 1
    '';
    passthru = {
      sitePackages = "lib/python3/site-packages";
      executable = "python3";
      pkgs = pythonPackages;
    };
  };
  fromHost = name: { pname = name; fromHost = true; };
  pythonPackages = lib.genAttrs [
    "aiohttp" "cryptography" "docker" "fastjsonschema" "gguf" "httpx" "jinja2" "jsonschema" "lightkube"
    "lightkube-models" "markdown-it-py" "nh3"
    "oras" "platformdirs" "podman" "prometheus-client" "pynacl" "pyyaml" "rich" "setuptools" "typer" "zstandard"
  ] fromHost // {
    buildPythonApplication = attrs:
      let isDrv = d: d ? outPath; in
      stdenv.mkDerivation (removeAttrs attrs [ "dependencies" "build-system" "propagatedBuildInputs" "pyproject" "pythonImportsCheck" ] // {
        nativeBuildInputs = [ python3 ] ++ builtins.filter isDrv (attrs.nativeBuildInputs or [ ]);
        buildPhase = attrs.buildPhase or "runHook preBuild; runHook postBuild";
        installPhase = attrs.installPhase or ''
          runHook preInstall
          python3 ${./install-python-app.py} . "$out"
          runHook postInstall
        '';
        doInstallCheck = true;
        pythonImportsCheck = attrs.pythonImportsCheck or [ ];
        installCheckPhase = ''
          for m in $pythonImportsCheck; do
            PYTHONPATH="$out/lib/python3/site-packages" python3 -I -c "import sys; sys.path.insert(0, '$out/lib/python3/site-packages'); import $m; assert $m.__file__.startswith('$out/'), $m.__file__"
          done
        '';
      });
  };
in
python3
