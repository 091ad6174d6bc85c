{
  # lemonpack as Nix packages (README "Nix"):
  #
  #   nix build .#gufo               # the release lock's extensions compiled: bin/gufo-registry, lib/, include/
  #   nix build .#hello-engine       # a recipe as a package: result/bin/hello-engine
  #   nix run .#lemonpack -- --help  # the CLI
  #   gufo.override { extensions = [ "qwen" ./my-extension ]; features = [ "linux" "hip" ]; }
  #
  # Offline (no nixpkgs, no binary cache; what the tests do) the input is replaced by the
  # stand-in this repository carries:
  #   nix build .#gufo --override-input nixpkgs path:./nix/offline-nixpkgs
  description = "lemonpack: recipes as packages, Gufo with its extensions compiled in, the lemonpack CLI";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  outputs = { self, nixpkgs }:
    let
      inherit (nixpkgs) lib;
      systems = [ "x86_64-linux" "aarch64-linux" ];

      # What the gufo package reads: the official extensions, the API records and the lock
      # (a change elsewhere does not rebuild it; the C++ API comes with the lemonpack package).
      gufoTree = lib.cleanSourceWith {
        src = ./.;
        name = "gufo-tree";
        filter = path: type:
          let rel = lib.removePrefix (toString ./. + "/") (toString path); in
          builtins.elem rel [ "catalogue" "catalogue/extensions" "api" "extensions.lock" ]
          || builtins.any (top: lib.hasPrefix top rel) [ "catalogue/extensions/" "api/" ];
      };

      # The recipes shipped in nix/recipes/<recipe>/ (what `lemonpack build` writes into
      # OUT/nix/<recipe>/): { <recipe> = { <os>-<accelerator>[-<arch>] = package; }; }
      recipesFor = pkgs: import ./nix/recipes.nix { inherit pkgs; };

      # Applied to nixpkgs the overlay builds with `final`. Applied to a package set that is
      # not nixpkgs (no callPackage: e.g. a fixpoint holding only stdenv.hostPlatform and
      # fetchurl), what such a set lacks comes from this flake's nixpkgs input.
      complete = final:
        if final ? callPackage then final
        else
          let
            base = import nixpkgs { system = final.stdenv.hostPlatform.system; };
            merged = base // removeAttrs final [ "stdenv" ] // { callPackage = base.lib.callPackageWith merged; };
          in
          merged;

      overlay = final: prev:
        let pkgs = complete final; in
        {
          lemonpack = pkgs.callPackage ./nix/lemonpack.nix { src = ./.; };
          # a gufo an earlier overlay defined is kept (and one that customises a gufo not yet
          # defined fails there, instead of being silently replaced)
          gufo = prev.gufo or (pkgs.callPackage ./nix/gufo.nix { tree = gufoTree; });
          lemonpackRecipes = recipesFor pkgs;
        };

      pkgsFor = system: import nixpkgs { inherit system; overlays = [ overlay ]; };

      # packages.<system>: <recipe> (its Linux CPU build, else its first Linux one) and
      # <recipe>-<os>-<accelerator>[-<arch>], for the packages available on the system: a
      # recipe package is for its artifact's OS and CPU (meta.platforms), and nixpkgs refuses
      # to evaluate one elsewhere (check-meta.nix), so it is not offered there (it stays in
      # lemonpackRecipes, marked unsupported)
      recipePackages = pkgs:
        let
          r = pkgs.lemonpackRecipes;
          available = recipe: builtins.filter (attr: lib.meta.availableOn pkgs.stdenv.hostPlatform r.${recipe}.${attr})
            (builtins.attrNames r.${recipe});
        in
        builtins.listToAttrs (builtins.concatLists (map
          (recipe:
            let
              attrs = available recipe;
              linux = builtins.filter (a: lib.hasPrefix "linux-" a) attrs;
              main = if builtins.elem "linux-cpu" attrs then "linux-cpu" else builtins.head (linux ++ attrs);
            in
            lib.optional (attrs != [ ]) { name = recipe; value = r.${recipe}.${main}; }
            ++ map (attr: { name = "${recipe}-${attr}"; value = r.${recipe}.${attr}; }) attrs)
          (builtins.attrNames r)));
    in
    {
      overlays.default = overlay;

      packages = lib.genAttrs systems (system:
        let pkgs = pkgsFor system; in
        recipePackages pkgs // {
          inherit (pkgs) gufo lemonpack;
          default = pkgs.gufo;
        });

      apps = lib.genAttrs systems (system:
        let app = { type = "app"; program = "${self.packages.${system}.lemonpack}/bin/lemonpack"; }; in
        { lemonpack = app; default = app; });

      # `nix flake check`: the CLI imports, the release lock builds, and its registry runs.
      # Evaluating them needs no build (no import from derivation), so `nix flake check`
      # evaluates every system's checks on a machine that builds one
      checks = lib.genAttrs systems (system:
        let pkgs = pkgsFor system; in
        {
          inherit (pkgs) gufo lemonpack;
          gufo-registry = pkgs.runCommand "gufo-registry-runs" { } ''
            ${pkgs.gufo}/bin/gufo-registry --json > $out
          '';
        });
    };
}
