"""The verdict step of nix/gufo.nix (run by the `gufo-selection` derivation's builder).

usage: python3 gufo-verdict.py RC STDOUT STDERR LIST_JSON RENAMES_JSON OUT

RC, STDOUT, STDERR: the exit code and output files of `lemonpack extensions generate --json`;
LIST_JSON: `lemonpack extensions list --json` of the same selection (read only when RC is 0);
RENAMES_JSON: [[store path, the path the user wrote], ...] (the store copies Nix made of the
user's directories and lock, named back in every message); OUT: the derivation's output.

RC 0: writes OUT/selection.json (api, features, extensions with their store directories,
providers, rejected manifests named as the user gave them) and OUT/dirs (one line per
selected extension: name, a tab, its directory) for the gufo build; exits 0.
Otherwise: prints the CLI's message on stderr (its JSON error for exit 1, the text after
"Error: " of a usage error for exit 2, the whole stderr for anything else), paths named as the
user gave them, and exits 1, so that the build fails with the message and nothing is kept.
"""
import json
import re
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    rc, out_file, err_file, list_file, renames_file, out = argv
    renames = json.loads(Path(renames_file).read_text())

    def shown(text: str) -> str:
        for store, given in renames:
            text = text.replace(store, given)
        return text

    stdout = Path(out_file).read_text(errors="replace")
    stderr = Path(err_file).read_text(errors="replace")
    if rc != "0":
        usage = re.search(r"Error: (?:Invalid value for [^:]*: )?([^\n]*)", stderr)
        if rc == "1" and stdout.startswith("{"):
            message = json.loads(stdout)["message"]
        elif rc == "2" and usage:
            message = usage.group(1).rstrip(" │")
        else:
            message = f"lemonpack extensions generate failed (exit {rc}): {stderr}"
        print(shown(message), file=sys.stderr)
        return 1
    generated = json.loads((Path(out) / "generated" / "extensions.json").read_text())
    listed = json.loads(Path(list_file).read_text())
    path_of = {e["name"]: e["path"] for e in listed["extensions"] if e["selected"]}
    extensions = [dict(e, path=path_of[e["name"]]) for e in generated["extensions"]]
    selection = {
        "api": generated["api_version"],
        "features": generated["features"],
        "extensions": extensions,
        "providers": [dict(p, extension=e["name"]) for e in generated["extensions"] for p in e["providers"]],
        "rejected": [{"manifest": shown(r["manifest"]), "reasons": [shown(x) for x in r["reasons"]]}
                     for r in listed["rejected"]],
    }
    (Path(out) / "selection.json").write_text(json.dumps(selection, sort_keys=True) + "\n")
    (Path(out) / "dirs").write_text("".join(f"{e['name']}\t{e['path']}\n" for e in extensions))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
