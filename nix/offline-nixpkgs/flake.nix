{
  # A test stand-in for nixpkgs: the small subset of its interface lemonpack's Nix code uses,
  # so the flake's tests build offline on a machine that has Nix but no nixpkgs and no binary
  # cache. Use it in place of the real input:
  #
  #   nix build .#gufo --override-input nixpkgs path:./nix/offline-nixpkgs
  #
  # It is not nixpkgs: each piece follows the nixpkgs file named in its comment, as far as
  # lemonpack needs, and builds on the host's compiler, shell, coreutils and Python (Nix's
  # sandbox is off, as Debian ships it). See README.md here for what it provides and omits.
  description = "offline stand-in for the subset of nixpkgs lemonpack uses (tests only)";

  outputs = { self }:
    let
      systems = [ "x86_64-linux" "aarch64-linux" ];
      lib = import ./lib.nix;
    in
    {
      inherit lib;
      # nixpkgs' flake.nix: legacyPackages.<system> = import ./. { inherit system; }
      legacyPackages = lib.genAttrs systems (system: import ./. { inherit system; });
    };
}
