# The lemonpack command as a package (nixpkgs' python3Packages.buildPythonApplication):
# `nix run .#lemonpack -- --help`. `src` is the repository top; only pyproject.toml,
# README.md, the lemonpack/ package and the extension tree its symlinks in
# lemonpack/extensions/tree/ point at (catalogue/extensions, api/, extensions.lock) are copied
# into the store, so changing tests or Nix files does not rebuild it. Dependencies are pyproject.toml's [project] dependencies under
# their nixpkgs attribute names.
{ lib, python3Packages, src }:
python3Packages.buildPythonApplication {
  pname = "lemonpack";
  version = "0.1.0";
  pyproject = true;
  src = lib.cleanSourceWith {
    inherit src;
    name = "lemonpack-source";
    filter = path: type:
      let rel = lib.removePrefix (toString src + "/") (toString path); in
      builtins.elem rel [ "pyproject.toml" "README.md" "lemonpack" "catalogue" "catalogue/extensions" "api" "extensions.lock" ]
      || builtins.any (top: lib.hasPrefix top rel) [ "catalogue/extensions/" "api/" ]
      || lib.hasPrefix "lemonpack/" rel && !(lib.hasSuffix ".pyc" rel) && baseNameOf rel != "__pycache__";
  };
  build-system = [ python3Packages.setuptools ];
  dependencies = with python3Packages; [
    typer jsonschema fastjsonschema httpx rich platformdirs aiohttp cryptography pynacl podman
    docker gguf jinja2 markdown-it-py nh3 prometheus-client zstandard pyyaml lightkube lightkube-models
  ];
  pythonImportsCheck = [ "lemonpack" ];
  meta = {
    description = "Reproducible, verifiable, runnable out-of-tree inference engines";
    mainProgram = "lemonpack";
  };
}
