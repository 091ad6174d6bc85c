"""The install step of the stand-in buildPythonPackage (see python.nix; nixpkgs installs
with pypa installer, pkgs/development/interpreters/python/hooks/pypa-install-hook.sh).

usage: python3 install-wheels.py SITE_PACKAGES WHEEL...
Unpacks each wheel (a zip: PEP 427) into SITE_PACKAGES, refusing a member that is absolute
or has a `..` part; the `.data/purelib` and `.data/platlib` trees go into SITE_PACKAGES too.
"""
import sys
import zipfile
from pathlib import Path, PurePosixPath

site = Path(sys.argv[1])
site.mkdir(parents=True, exist_ok=True)
for wheel in sys.argv[2:]:
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            rel = PurePosixPath(info.filename)
            if rel.is_absolute() or ".." in rel.parts:
                sys.exit(f"{wheel}: unsafe member {info.filename!r}")
            if len(rel.parts) > 2 and rel.parts[0].endswith(".data") and rel.parts[1] in ("purelib", "platlib"):
                rel = PurePosixPath(*rel.parts[2:])
            elif rel.parts and rel.parts[0].endswith(".data"):
                continue
            target = site / rel
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(info))
    print(f"installed {Path(wheel).name}")
