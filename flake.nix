{
  # Gufo extensions for Nix (issue 7; seed 002 sections 3, 6, 7, 8).
  #
  #   nix build .#gufo                       # the release: extensions.lock, features [ "linux" ]
  #   gufo.override { extensions = [ "qwen" ./my-extension ]; features = [ "linux" "hip" ]; }
  #
  # No inputs: everything evaluates and builds with Nix builtins (Nix >= 2.8, no nixpkgs).
  # A consumer that has nixpkgs may pass it through the overlay (overlays.default) or
  # `lib.mkGufo { pkgs = ...; }`; recipe fetches then use pkgs.fetchurl.
  # The library lives in nix/lib.nix (documented there function by function).
  description = "lemonpack: Gufo extensions (extension.json -> generated registry) and recipe fetches";

  outputs = { self, ... }:
    let
      root = ./.;
      gufoLib = import ./nix/lib.nix;
      systems = [ "x86_64-linux" "aarch64-linux" "x86_64-darwin" "aarch64-darwin" ];
      forAllSystems = f: builtins.listToAttrs (map (system: { name = system; value = f system; }) systems);

      recipePackages = args: import ./nix/recipes.nix ({ inherit root; } // args);
      # { "<recipe>-<os>-<accelerator>" = drv; } for the flake's flat `packages` set
      flatRecipes = args:
        let r = recipePackages args; in
        builtins.listToAttrs (builtins.concatLists (map
          (recipe: map (attr: { name = "${recipe}-${attr}"; value = r.${recipe}.${attr}; })
            (builtins.attrNames r.${recipe}))
          (builtins.attrNames r)));

      gufoFor = system: gufoLib.mkGufo { inherit root system; };
    in
    {
      # The library (nix/lib.nix) plus two helpers bound to this tree:
      #   lib.mkGufo { system; root ? <this repo>; extensions ? null; features ? [ "linux" ]; ... }
      #   lib.recipes { pkgs ? null; mirror ? null; }
      lib = gufoLib // {
        inherit root;
        mkGufo = args: gufoLib.mkGufo ({ inherit root; } // args);
        recipes = recipePackages;
      };

      packages = forAllSystems (system:
        let gufo = gufoFor system; in
        flatRecipes { } // { inherit gufo; default = gufo; });

      overlays.default = final: prev: {
        gufo = gufoLib.mkGufo { inherit root; pkgs = final; };
        lemonpackRecipes = recipePackages { pkgs = final; };
      };

      # `nix flake check`: the lock evaluates (stale names, collisions, API versions,
      # dependencies) and the release package builds.
      checks = forAllSystems (system: {
        gufo = gufoFor system;
        lock = gufoLib.mkTree {
          name = "extensions-lock-check";
          inherit system;
          files = [{
            rel = "lock-ok";
            text = builtins.concatStringsSep "\n"
              (map (m: "${m.name} ${m.version}") (gufoFor system).selection.extensions) + "\n";
          }];
        };
      });
    };
}
