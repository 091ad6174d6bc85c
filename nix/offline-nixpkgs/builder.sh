# pkgs/stdenv/generic/default-builder.sh
source "$stdenvSetup"
genericBuild
