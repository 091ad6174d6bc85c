# The Python packages lemonpack needs that nixpkgs lacks, built here with nixpkgs'
# buildPythonPackage from files pinned by hash in ./python/pins.json (fetchPypi: a
# fixed-output fetch, so a file already added with `nix-store --add-fixed sha256 FILE` is
# used without the network):
#   typer            0.28.0 (pyproject.toml pins >=0.28,<0.29; nixpkgs has 0.27.x, which its
#                    runtime-dependency check would refuse), from its sdist
#   lightkube-models the typed Kubernetes objects `lemonpack kube generate` builds, from its
#                    sdist (its `dist` output, the wheel, is installed with lightkube)
#   lightkube        whose lightkube.core.schema the models import; from its wheel (its sdist
#                    builds with uv_build, which cannot build offline here); both wheels are
#                    installed into this one output, because lightkube.models lives inside the
#                    `lightkube` package directory, which Python does not merge across the
#                    separate site-packages of two store paths
# nixpkgs has neither lightkube (no pkgs/development/python-modules/lightkube*) nor typer 0.28:
# tests/fixtures/nixpkgs_attributes.json records what was read there.
{ lib, python3Packages }:
let
  pins = builtins.fromJSON (builtins.readFile ./python/pins.json);
  inherit (python3Packages) buildPythonPackage fetchPypi;
  fetch = name: fetchPypi (removeAttrs pins.${name} [ "file" ]);
in
rec {
  typer = buildPythonPackage {
    pname = "typer";
    inherit (pins.typer) version;
    pyproject = true;
    src = fetch "typer";
    build-system = [ python3Packages.pdm-backend ];
    dependencies = [ python3Packages.annotated-doc python3Packages.rich python3Packages.shellingham ];
    pythonImportsCheck = [ "typer" ];
    meta = {
      description = "Library for building CLI applications";
      homepage = "https://typer.tiangolo.com/";
      license = lib.licenses.mit;
    };
  };

  lightkube-models = buildPythonPackage {
    pname = "lightkube-models";
    inherit (pins.lightkube-models) version;
    pyproject = true;
    src = fetch "lightkube-models";
    build-system = [ python3Packages.pdm-backend ];
    # its modules import lightkube.core: checked with lightkube below
    pythonImportsCheck = [ ];
    meta = {
      description = "Models and resources of the Kubernetes API for lightkube";
      homepage = "https://github.com/gtsystem/lightkube-models";
      license = lib.licenses.mit;
    };
  };

  lightkube = buildPythonPackage {
    pname = "lightkube";
    inherit (pins.lightkube) version;
    format = "wheel";
    src = fetch "lightkube";
    # the models' wheel joins lightkube's in dist/: the install step installs every wheel there
    preInstall = ''
      cp ${lightkube-models.dist}/*.whl dist/
    '';
    dependencies = [ python3Packages.httpx2 python3Packages.msgspec python3Packages.pyyaml ];
    pythonImportsCheck = [ "lightkube" "lightkube.models.apps_v1" ];
    meta = {
      description = "Lightweight Kubernetes client library, with the lightkube-models objects";
      homepage = "https://github.com/gtsystem/lightkube";
      license = lib.licenses.mit;
    };
  };
}
