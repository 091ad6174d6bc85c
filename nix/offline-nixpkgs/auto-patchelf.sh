# setup hook of the stand-in autoPatchelfHook (nixpkgs' pkgs/build-support/setup-hooks/auto-patchelf.sh,
# written anew): the lib/ of every buildInputs entry is searched (an environment hook at offset 0),
# `addAutoPatchelfSearchPath DIR...` adds directories holding shared objects, and after the fixup
# phase every output is patched (auto-patchelf.py), unless dontAutoPatchelf is set.
declare -a autoPatchelfLibs=()
declare -a extraAutoPatchelfLibs=()
gatherLibraries() { autoPatchelfLibs+=("$1/lib"); }
addEnvHooks "$targetOffset" gatherLibraries
addAutoPatchelfSearchPath() {
    local dir
    while IFS= read -r -d '' dir; do extraAutoPatchelfLibs+=("$dir"); done < <(
        find "$@" \! -type d \( -name '*.so' -o -name '*.so.*' \) -print0 | sed -z 's#/[^/]*$##' | uniq -z)
}
autoPatchelf() {
    local norecurse=
    while [ $# -gt 0 ]; do
        case "$1" in --) shift; break ;; --no-recurse) shift; norecurse=1 ;; *) break ;; esac
    done
    local ignore=(${autoPatchelfIgnoreMissingDeps:-})
    local runtimeDeps=(${runtimeDependencies:-})
    local appendRpaths=(${appendRunpaths:-})
    @python@ @script@ ${norecurse:+--no-recurse} --interpreter @interpreter@ --libc @libc@ \
        --ignore-missing ${ignore[@]+"${ignore[@]}"} --paths "$@" \
        --libs ${autoPatchelfLibs[@]+"${autoPatchelfLibs[@]}"} ${extraAutoPatchelfLibs[@]+"${extraAutoPatchelfLibs[@]}"} \
        --runtime-dependencies ${runtimeDeps[@]+"${runtimeDeps[@]/%//lib}"} \
        --append-rpaths ${appendRpaths[@]+"${appendRpaths[@]}"}
}
postFixupHooks+=('
    if [ -z "${dontAutoPatchelf-}" ]; then
        autoPatchelf -- $(for output in $(getAllOutputNames); do
            [ -e "${!output}" ] || continue
            echo "${!output}"
        done)
    fi
')
