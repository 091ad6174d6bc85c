# setup hook of the stand-in autoPatchelfHook (see auto-patchelf-hook.nix)
autoPatchelfPostFixup() {
    local f found=()
    while IFS= read -r -d '' f; do
        if [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ]; then found+=("$f"); fi
    done < <(find "$out" -type f -print0 | sort -z)
    mkdir -p "$out/nix-support"
    : > "$out/nix-support/auto-patchelf"
    for f in ${found[@]+"${found[@]}"}; do
        echo "auto-patchelf: ${f#$out/}"
        echo "${f#$out/}" >> "$out/nix-support/auto-patchelf"
        if command -v patchelf > /dev/null && [ -d "$out/lib" ]; then
            chmod u+w "$f"; patchelf --add-rpath "$out/lib" "$f" || true
        fi
    done
}
postFixupHooks+=(autoPatchelfPostFixup)
