# pkgs/stdenv/generic/setup.sh, reduced: the inputs (nativeBuildInputs and buildInputs
# kept apart, as nixpkgs' dependency offsets), their setup hooks and environment hooks,
# runHook, the generic phases with their defaults (fixup per output, with
# fixupOutputHooks), multiple outputs, genericBuild; and patchShebangs
# (pkgs/build-support/setup-hooks/patch-shebangs.sh), which nixpkgs' stdenv always loads.
set -eu
set -o pipefail
shopt -s nullglob

export HOME=/homeless-shelter
export NIX_BUILD_CORES="${NIX_BUILD_CORES:-1}"
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-315532800}"
export CC=gcc CXX=g++
: "${NIX_STORE:=/nix/store}"
export NIX_STORE

# hooks a setup hook appends to (setup.sh: arrays named after the hook)
preFixupHooks=()
postFixupHooks=()
fixupOutputHooks=()

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
stopNest() { :; }

# --- outputs (setup.sh getAllOutputNames; multiple-outputs.sh outputDev, outputLib, moveToOutput) ---
: "${outputs:=out}"
getAllOutputNames() { echo "$outputs"; }
_hasOutput() { case " $outputs " in *" $1 "*) return 0 ;; esac; return 1; }
for _o in dev lib bin; do
    _var="output${_o^}"
    if [ -z "${!_var:-}" ]; then
        if _hasOutput "$_o"; then printf -v "$_var" %s "$_o"; else printf -v "$_var" %s out; fi
    fi
done
unset _o _var
# moveToOutput PATTERN OUTPUT: move what matches PATTERN (relative to each output) into OUTPUT
moveToOutput() {
    local patt="$1" dstOut="$2" output srcPath dstPath
    for output in $(getAllOutputNames); do
        [ "${!output}" != "$dstOut" ] || continue
        for srcPath in "${!output}"/$patt; do
            [ -e "$srcPath" ] || [ -L "$srcPath" ] || continue
            dstPath="$dstOut${srcPath#"${!output}"}"
            mkdir -p "$(dirname "$dstPath")"
            mv "$srcPath" "$dstPath"
        done
    done
}

# --- dependencies: nativeBuildInputs (offsets -1 0) and buildInputs (offsets 0 1) ---
# addEnvHooks OFFSET FUNCTION: FUNCTION runs for each dependency whose host offset is OFFSET
# relative to the hook's package; without strictDeps it runs for every dependency, as
# nixpkgs does for native builds (setup.sh _addToEnv: "Apply environment hooks to all
# packages during native compilation"). Only what nativeBuildInputs' and buildInputs' hooks
# reach is kept: offset 0 from a nativeBuildInputs hook is every buildInputs entry.
envHostTargetHooks=()
envBuildHostHooks=()
addEnvHooks() {
    local offset="$1"; shift
    case "$((hostOffset + offset))" in
        0) envHostTargetHooks+=("$@") ;;
        -1) envBuildHostHooks+=("$@") ;;
    esac
}
PATH=
HOST_PATH=
for i in ${nativeBuildInputs:-}; do
    if [ -d "$i/bin" ]; then PATH="${PATH:+$PATH:}$i/bin"; fi
done
for i in ${buildInputs:-}; do
    [ -d "$i/bin" ] || continue
    HOST_PATH="${HOST_PATH:+$HOST_PATH:}$i/bin"
    # without strictDeps buildInputs are on the build's PATH too (setup.sh activatePackage)
    [ -n "${strictDeps:-}" ] || PATH="${PATH:+$PATH:}$i/bin"
done
PATH="${PATH:+$PATH:}$stdenvHostPath"
export PATH HOST_PATH
for i in ${nativeBuildInputs:-}; do
    if [ -f "$i/nix-support/setup-hook" ]; then hostOffset=-1 targetOffset=0; source "$i/nix-support/setup-hook"; fi
done
for i in ${buildInputs:-}; do
    if [ -f "$i/nix-support/setup-hook" ]; then hostOffset=0 targetOffset=1; source "$i/nix-support/setup-hook"; fi
done
unset hostOffset targetOffset
if [ -z "${strictDeps:-}" ]; then
    _seen=" "
    for i in ${nativeBuildInputs:-} ${buildInputs:-}; do
        case "$_seen" in *" $i "*) continue ;; esac
        _seen+="$i "
        for hook in ${envHostTargetHooks[@]+"${envHostTargetHooks[@]}"} ${envBuildHostHooks[@]+"${envBuildHostHooks[@]}"}; do
            "$hook" "$i"
        done
    done
    unset _seen
else
    for i in ${buildInputs:-}; do
        for hook in ${envHostTargetHooks[@]+"${envHostTargetHooks[@]}"}; do "$hook" "$i"; done
    done
    for i in ${nativeBuildInputs:-}; do
        for hook in ${envBuildHostHooks[@]+"${envBuildHostHooks[@]}"}; do "$hook" "$i"; done
    done
fi

# --- patchShebangs (pkgs/build-support/setup-hooks/patch-shebangs.sh, written anew) ---
# patchShebangs [--build | --host] PATH...: each executable regular file starting with "#!"
# gets its interpreter replaced by the program of that name found on PATH (--build) or
# HOST_PATH (--host); "/usr/bin/env NAME" becomes NAME's path; an interpreter already in the
# store, or one not found, is left as it is; env with an option or an assignment fails.
isScript() { local magic; magic=$(head -c 2 "$1" 2> /dev/null | tr -d '\0') || return 1; [ "$magic" = '#!' ]; }
patchShebangs() {
    local pathName=""
    case "${1:-}" in --host) pathName=HOST_PATH; shift ;; --build) pathName=PATH; shift ;; esac
    echo "patching script interpreter paths in $*"
    [ $# -gt 0 ] || { echo "No arguments supplied to patchShebangs" >&2; return 0; }
    local f line oldPath arg0 args newPath newLine lookup stamp
    while IFS= read -r -d '' f; do
        isScript "$f" || continue
        IFS= read -r line < "$f" || true
        read -r oldPath arg0 args <<< "${line:2}" || true
        lookup="$pathName"
        if [ -z "$lookup" ]; then
            if [ -n "${strictDeps:-}" ] && [[ $f == "$NIX_STORE"* ]]; then lookup=HOST_PATH; else lookup=PATH; fi
        fi
        if [[ "$oldPath" == *"/bin/env" ]]; then
            if [[ $arg0 == "-"* || $arg0 == *"="* ]]; then
                echo "$f: unsupported interpreter directive \"$line\" (set dontPatchShebangs=1 and handle shebang patching yourself)" >&2
                exit 1
            fi
            newPath=$(PATH="${!lookup}" command -v "$arg0" || true)
        else
            [ -n "$oldPath" ] || oldPath=/bin/sh
            newPath=$(PATH="${!lookup}" command -v "$(basename "$oldPath")" || true)
            args="$arg0 $args"
        fi
        newLine="$newPath $args"
        newLine="${newLine%"${newLine##*[![:space:]]}"}"
        if [[ -n "$oldPath" && "$oldPath" != "$NIX_STORE"* && -n "$newPath" && "$newPath" != "$oldPath" ]]; then
            echo "$f: interpreter directive changed from \"$line\" to \"$newLine\""
            stamp=$(stat --printf %y "$f")
            sed -i -e "1 s|.*|#\!${newLine//\\/\\\\}|" "$f"
            touch --date "$stamp" "$f"
        fi
    done < <(find "$@" -type f -perm -0100 -print0)
}
patchShebangsAuto() {
    if [ -z "${dontPatchShebangs:-}" ] && [ -e "$prefix" ]; then
        if [ "$output" != out ] && [ "$output" = "$outputDev" ]; then patchShebangs --build "$prefix"
        else patchShebangs --host "$prefix"; fi
    fi
}
fixupOutputHooks+=(patchShebangsAuto)

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
# fixupPhase: per existing output, with $prefix and $output set, the fixupOutput hooks
# (patchShebangsAuto ...); then postFixup (where autoPatchelfHook runs)
fixupPhase() {
    local output
    for output in $(getAllOutputNames); do
        if [ -e "${!output}" ]; then chmod -R u+w "${!output}"; fi
    done
    runHook preFixup
    for output in $(getAllOutputNames); do
        [ -e "${!output}" ] || continue
        prefix="${!output}" runHook fixupOutput
    done
    runHook postFixup
}
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
