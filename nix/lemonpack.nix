# The lemonpack command as a package (nixpkgs' python3Packages.buildPythonApplication):
# `nix run .#lemonpack -- --help`. `src` is the repository top; only pyproject.toml,
# README.md, the lemonpack/ package and the extension tree its symlinks in
# lemonpack/extensions/tree/ point at (catalogue/extensions, api/, extensions.lock) are copied
# into the store, so changing tests or Nix files does not rebuild it. Dependencies are
# pyproject.toml's [project] dependencies: nixpkgs' python3Packages attributes (each recorded
# from nixpkgs' sources in tests/fixtures/nixpkgs_attributes.json), and what nixpkgs lacks built by
# ./python-packages.nix (typer 0.28, lightkube with lightkube-models).
{ lib, python3Packages, src }:
let
  own = import ./python-packages.nix { inherit lib python3Packages; };
  py = python3Packages;
in
py.buildPythonApplication {
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
  build-system = [ py.setuptools ];
  dependencies = [
    own.typer py.jsonschema py.fastjsonschema py.httpx py.rich py.platformdirs py.aiohttp py.cryptography
    py.pynacl py.podman py.docker py.gguf py.jinja2 py.markdown-it-py py.nh3 py.prometheus-client
    py.zstandard py.pyyaml py.zlib-ng own.lightkube
  ];
  # pyproject.toml pins zlib-ng (the layers' deflater, so that pip installs compress alike); a
  # nixpkgs revision may carry another release, whose layers are then that release's bytes
  # (the layer cache keys them by the deflater's version)
  pythonRelaxDeps = [ "zlib-ng" ];
  pythonImportsCheck = [ "lemonpack" "lemonpack.kube.generate" ];
  passthru.pythonPackages = own;
  meta = {
    description = "Reproducible, verifiable, runnable out-of-tree inference engines";
    license = lib.licenses.asl20;
    platforms = lib.platforms.linux;
    mainProgram = "lemonpack";
  };
}
