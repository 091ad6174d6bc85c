"""The install step of the stand-in buildPythonApplication (see python.nix).

usage: python3 install-python-app.py SRC OUT [PYTHON_PATH]
Copies SRC's packages (pyproject.toml [tool.setuptools.packages.find] include patterns,
directories holding __init__.py) into OUT/lib/python3/site-packages and writes
OUT/bin/<name> for each [project.scripts] entry "module:function", running this interpreter
with PYTHON_PATH (':'-separated: that site-packages directory and the built dependencies'
ones; default: the site-packages directory alone) first on sys.path (-I: no PYTHONPATH, no
user site).
"""
import fnmatch
import shutil
import sys
import tomllib
from pathlib import Path

src, out = Path(sys.argv[1]), Path(sys.argv[2])
project = tomllib.loads((src / "pyproject.toml").read_text())
patterns = project.get("tool", {}).get("setuptools", {}).get("packages", {}).get("find", {}).get("include", ["*"])
site = out / "lib" / "python3" / "site-packages"
site.mkdir(parents=True)
paths = sys.argv[3].split(":") if len(sys.argv) > 3 else [str(site)]
for entry in sorted(src.iterdir()):
    if entry.is_dir() and (entry / "__init__.py").is_file() and any(fnmatch.fnmatch(entry.name, p) for p in patterns):
        shutil.copytree(entry, site / entry.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
(out / "bin").mkdir()
for name, target in project.get("project", {}).get("scripts", {}).items():
    module, func = target.split(":")
    script = out / "bin" / name
    script.write_text(
        f"#!{sys.executable} -I\n"
        f"import sys\nsys.path[0:0] = {paths!r}\n"
        f"from {module} import {func}\nsys.exit({func}())\n")
    script.chmod(0o755)
