"""The exact commands the catalogue shows for an entry (``catalogue show``, the entry page,
``commands`` in ``catalogue.json``): safe to paste, and installing what was verified.

- Every value taken from an entry (URL, commit, path, OCI reference, name) is quoted with
  :func:`shlex.quote` (POSIX shell), so a URL holding ``$(...)``, backquotes or ``;`` is one
  word, never code.
- The download step is ``lemonpack catalogue fetch``, which fetches by digest exactly as
  the build did and writes the file (or the extension directory) only when the digest
  matches: content swapped at the URL after the build fails with exit 3 and leaves nothing
  for the next command to install.
- Official entries need no download: their commands name what the installed package (the
  shipped example) or the source tree (``nix build .#...``) already holds.
- The Nix command of a community extension passes an absolute flake reference
  (``"path:" + toString ./.``): Nix 2.8 refuses the relative ``path:.``.

Keys: ``fetch`` (when there is a download), ``install``, ``run``, ``nix``; their order on a
page is :data:`ORDER`.
"""

from __future__ import annotations

from shlex import quote

#: Display order and labels of the commands.
ORDER: tuple[tuple[str, str], ...] = (("fetch", "Download (checks the digest)"), ("install", "Install"),
                                      ("run", "Run"), ("nix", "Nix build"))


def fetch_command(src: dict, digest: str, out: str, kind: str = "recipe") -> str:
    """``lemonpack catalogue fetch`` of the source ``src`` (https or git) of an entry of
    ``kind`` checked against ``digest`` into ``out``; every value shell-quoted."""
    args = ["lemonpack", "catalogue", "fetch", quote(src["url"])]
    if src["type"] == "git":
        args += ["--commit", quote(src["commit"]), "--path", quote(src["path"])]
    args += ["--sha256", quote(digest), f"--{kind}", "--out", quote(out)]
    return " ".join(args)


def recipe_commands(name: str, recipe, source: dict, official: bool, digest: str = "",
                    shipped_example: bool = False) -> dict:
    """The commands shown for a recipe entry ``name`` (``recipe``: its model, for the Nix
    output name; ``source``: the entry's source; ``digest``: the verified digest;
    ``shipped_example``: the recipe is lemonpack's installed example)."""
    q = quote  # (recipe ids, OS and accelerator names are [a-z0-9_-]: safe unquoted in '.#ID-OS-ACCEL')
    first = next((f"{o}-{a}" for o, bs in recipe.platforms.items() for a in bs), "") if recipe else ""
    if official:
        if shipped_example:
            return {"install": "lemonpack install --example", "run": "lemonpack run --example",
                    "nix": f"nix build .#{name}-{first}"}
        path = q(source.get("path", f"{name}.json"))
        return {"install": f"lemonpack install {path}", "run": f"lemonpack run {path} -m MODEL.gguf",
                "nix": f"nix build .#{name}-{first}"}
    if source["type"] == "oci":
        bare = str(source["ref"]).removeprefix("oci://")  # the entry may spell the scheme or not
        return {"install": f"lemonpack install {q('oci://' + bare)}", "run": f"lemonpack run {q(name)} -m MODEL.gguf",
                "nix": f"lemonpack pull {q(bare)} --out {q(name + '-oci')}"}
    file = f"{name}.json"
    return {"fetch": fetch_command(source, digest, file), "install": f"lemonpack install {q(file)}",
            "run": f"lemonpack run {q(file)} -m MODEL.gguf", "nix": f"lemonpack build {q(file)} --out {q(name + '-oci')}"}


def extension_commands(name: str, official: bool, source: dict | None = None, digest: str = "") -> dict:
    """The commands shown for an extension entry ``name`` (community: downloaded into
    ``./NAME`` by ``catalogue fetch``, then selected from there)."""
    q = quote
    if official:
        return {"install": f"lemonpack extensions generate --select {q(name)} --out gufo-generated",
                "run": "lemonpack extensions check", "nix": "nix build .#gufo"}
    cmds = {}
    if source is not None and source.get("type") in ("https", "git"):
        cmds["fetch"] = fetch_command(source, digest, name, "extension")
    cmds["install"] = f"lemonpack extensions generate --extension-dir {q('./' + name)} --select {q(name)} --out gufo-generated"
    cmds["run"] = "lemonpack extensions check"
    # the extension's directory name is checked against [a-z0-9_] by the extension schema
    cmds["nix"] = ("nix build --impure --expr '(builtins.getFlake (\"path:\" + toString ./.))"
                   f".packages.x86_64-linux.gufo.override {{ extensions = [ ./{name} ]; }}'")
    return cmds
