# autoPatchelfHook (nixpkgs' pkgs/top-level/all-packages.nix: makeSetupHook over
# pkgs/build-support/setup-hooks/auto-patchelf.sh, running auto-patchelf.py): after the fixup
# phase every ELF file of every output gets the C library's dynamic loader as its
# interpreter and a RUNPATH naming where each NEEDED library was found (the outputs
# themselves, then the lib/ of each buildInputs entry); a library found nowhere fails the
# build. Stand-in: the written-anew auto-patchelf.py with Debian's `patchelf` (scripts/test.sh
# installs it); the loader is the host's (the interpreter of /bin/sh) and the C library is
# `libc` (glibc's own libraries only, see stdenv.nix), so a library the host has but the
# package does not list is not found, as on NixOS.
{ stdenv, libc }:
stdenv.mkDerivation {
  name = "auto-patchelf-hook";
  dontUnpack = true;
  meta.description = "Stand-in of nixpkgs' autoPatchelfHook";
  installPhase = ''
    mkdir -p $out/nix-support
    command -v patchelf > /dev/null || { echo "autoPatchelfHook needs patchelf (apt-get install patchelf)" >&2; exit 1; }
    interpreter=$(patchelf --print-interpreter /bin/sh)
    sed -e "s|@python@|/usr/bin/python3|" -e "s|@script@|${./auto-patchelf.py}|" \
        -e "s|@interpreter@|$interpreter|" -e "s|@libc@|${libc}/lib|" ${./auto-patchelf.sh} > $out/nix-support/setup-hook
  '';
}
