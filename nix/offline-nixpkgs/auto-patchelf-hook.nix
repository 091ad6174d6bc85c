# autoPatchelfHook (nixpkgs' pkgs/build-support/setup-hooks/auto-patchelf.sh): after the fixup
# phase, every ELF executable or library under $out gets its interpreter and RUNPATH set to
# the libraries of the package set. Stand-in: it finds the same files and, when Debian's
# `patchelf` is installed, adds $out/lib to their RUNPATH; it does not change the
# interpreter (the host's loader is where Debian-built binaries expect it). The files it
# found are listed in the build log and in $out/nix-support/auto-patchelf (one per line),
# so tests can see the hook ran.
{ stdenv }:
stdenv.mkDerivation {
  name = "auto-patchelf-hook";
  dontUnpack = true;
  installPhase = ''
    mkdir -p $out/nix-support
    cp ${./auto-patchelf.sh} $out/nix-support/setup-hook
  '';
}
