# pkgs/stdenv/generic/setup.sh, reduced: PATH from the inputs, setup hooks, runHook, the
# generic phases with their defaults, genericBuild.
set -eu
set -o pipefail
shopt -s nullglob

export PATH=
for i in $nativeBuildInputs; do
    if [ -d "$i/bin" ]; then PATH="${PATH:+$PATH:}$i/bin"; fi
done
PATH="${PATH:+$PATH:}$stdenvHostPath"
export PATH
export HOME=/homeless-shelter
export NIX_BUILD_CORES="${NIX_BUILD_CORES:-1}"
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-315532800}"
export CC=gcc CXX=g++

# hooks a setup hook appends to (setup.sh: "addHook"-style arrays)
preFixupHooks=()
postFixupHooks=()

# runHook NAME: the hook arrays NAMEs and the attribute $NAME (a string of shell code)
runHook() {
    local hookName="$1"; shift
    local hooksSlice="${hookName%Hook}Hooks[@]"
    local hook
    for hook in "_callImplicitHook 0 $hookName" ${!hooksSlice+"${!hooksSlice}"}; do
        _eval "$hook" "$@"
    done
    return 0
}
_callImplicitHook() {
    local def="$1" hookName="$2"
    if declare -F "$hookName" > /dev/null; then "$hookName"
    elif [ -n "${!hookName:-}" ]; then eval "${!hookName}"
    else return "$def"; fi
}
_eval() {
    if declare -F "$1" > /dev/null 2>&1; then "$@"; else eval "$1"; fi
}

for i in $nativeBuildInputs; do
    if [ -f "$i/nix-support/setup-hook" ]; then source "$i/nix-support/setup-hook"; fi
done

unpackPhase() {
    runHook preUnpack
    if [ -z "${src:-}" ]; then echo "variable \$src must be set"; exit 1; fi
    if [ -d "$src" ]; then
        cp -r --no-preserve=mode,ownership "$src" ./source
        sourceRoot=source
    else
        mkdir unpacked && tar -xf "$src" -C unpacked
        sourceRoot=unpacked
        local entries=(unpacked/*)
        if [ "${#entries[@]}" -eq 1 ] && [ -d "${entries[0]}" ]; then sourceRoot="${entries[0]}"; fi
    fi
    runHook postUnpack
}
patchPhase() { runHook prePatch; runHook postPatch; }
configurePhase() { runHook preConfigure; runHook postConfigure; }
buildPhase() {
    runHook preBuild
    if [ -f Makefile ]; then make -j"$NIX_BUILD_CORES"; else echo "no Makefile, doing nothing"; fi
    runHook postBuild
}
checkPhase() { runHook preCheck; runHook postCheck; }
installPhase() {
    runHook preInstall
    if [ -f Makefile ]; then make install; fi
    runHook postInstall
}
fixupPhase() { runHook preFixup; runHook fixupOutput; runHook postFixup; }
installCheckPhase() { runHook preInstallCheck; runHook postInstallCheck; }

genericBuild() {
    if [ -n "${buildCommandPath:-}" ]; then source "$buildCommandPath"; return; fi
    if [ -n "${buildCommand:-}" ]; then eval "$buildCommand"; return; fi
    cd "$(mktemp -d "${TMPDIR:-/tmp}/build.XXXXXX")"
    local curPhase
    for curPhase in ${phases:-unpackPhase patchPhase configurePhase buildPhase checkPhase installPhase fixupPhase installCheckPhase}; do
        case "$curPhase" in
            unpackPhase) [ -z "${dontUnpack:-}" ] || continue ;;
            patchPhase) [ -z "${dontPatch:-}" ] || continue ;;
            configurePhase) [ -z "${dontConfigure:-}" ] || continue ;;
            buildPhase) [ -z "${dontBuild:-}" ] || continue ;;
            checkPhase) [ -n "${doCheck:-}" ] || continue ;;
            installPhase) [ -z "${dontInstall:-}" ] || continue ;;
            fixupPhase) [ -z "${dontFixup:-}" ] || continue ;;
            installCheckPhase) [ -n "${doInstallCheck:-}" ] || continue ;;
        esac
        echo "Running phase: $curPhase"
        if [ -n "${!curPhase:-}" ]; then eval "${!curPhase}"; else "$curPhase"; fi
        if [ "$curPhase" = unpackPhase ] && [ -n "${sourceRoot:-}" ]; then cd "$sourceRoot"; fi
    done
}
