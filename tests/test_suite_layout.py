"""tests/ mirrors lemonpack/ (docs/architecture.md, "Top-level folders"):

- ``tests/<room>/test_<module>.py`` holds the unit tests of ``lemonpack/<room>/<module>.py`` (a
  private ``_module.py`` maps to ``test_module.py``, a package's ``__init__.py`` to
  ``test_<package>.py``); a root module ``lemonpack/<module>.py`` maps to ``tests/test_<module>.py``;
- ``tests/scenarios/`` holds the scenarios and end-to-end files (a user's path through the CLI,
  ``lemonpack serve``, real registries, podman, Nix, a browser), named after their topic, and the
  scripts of replayed cases (``serve_cases/<case>/check.py``) that they run as children;
- ``tests/support/`` holds every helper and fixture (registered in ``tests/conftest.py``, the only
  conftest), ``tests/fixtures/`` data.

The checks: every module has a test file of its own or an entry in :data:`WITHOUT_OWN_FILE`
saying where it is tested (a package ``__init__.py`` that only re-exports needs neither); the
table holds no stale entry; every test file outside tests/scenarios/ is named after a module
(or is one of :data:`SUITE_CHECKS`); helpers live in tests/support/; and a test that interrupts a
child with SIGINT starts it through :mod:`support.interrupt` (a child of a background job inherits
SIGINT as ignored). Each check is a function over a tree, shown failing on a planted one.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lemonpack"
TESTS = ROOT / "tests"

#: Folders of tests/ that mirror no package: scenarios, helpers, data.
NOT_MIRRORS = ("scenarios", "support", "fixtures")

#: Test files at the root of tests/ that check the whole code base, not one module.
SUITE_CHECKS = {
    "test_architecture.py": "the room map of docs/architecture.md, both directions",
    "test_bench_results.py": "bench/_support: each bench rewrites only its own section of bench/RESULTS.md",
    "test_concept_owners.py": "each concept has one owner module (digests, media types, HTTP clients ...)",
    "test_errors_typed.py": "every room raises typed errors (and lemonpack/errors.py's family)",
    "test_references.py": "no dangling file or module references in the code and the docs",
    "test_suite_collection.py": "every test file on disk is collected",
    "test_suite_isolation.py": "no test run writes into the user's lemonpack or XDG directories",
    "test_suite_layout.py": "this file: tests/ mirrors lemonpack/",
    "test_thin_commands.py": "the CLI stays thin: commands parse and print, the rooms decide",
}

#: Modules without a test file of their own: where they are tested, or why no test is theirs.
#: Keep it short: when a module's tests sit in another file, move them to its own file instead.
WITHOUT_OWN_FILE = {
    "lemonpack": "the package's lazy attribute access; every test imports through it, "
                 "tests/test_architecture.py holds its docstring's room list",
    # builder: the build is tested end to end, through the CLI, against a real mirror
    "lemonpack.builder.artifact": "through build and install in tests/scenarios/test_artifact_errors.py",
    "lemonpack.builder.baselayers": "through build --base in tests/scenarios/test_build_base.py",
    "lemonpack.builder.caches": "through lemonpack cache in tests/scenarios/test_cache_hardening.py",
    "lemonpack.builder.install": "through lemonpack install in tests/scenarios/test_build_properties.py "
                                 "and tests/scenarios/test_cache_hardening.py",
    "lemonpack.builder.layercache": "through repeated builds in tests/scenarios/test_cache_hardening.py",
    "lemonpack.builder.pipeline": "through lemonpack build in tests/scenarios/test_build_references.py "
                                  "and tests/scenarios/test_build_properties.py",
    "lemonpack.builder.publish": "through publish RECIPE.json in tests/scenarios/test_publish_recipe.py",
    # catalogue: built, verified and updated end to end (real git repository, real HTTP mirror)
    "lemonpack.catalogue.archs": "through catalogue build in tests/catalogue/test_build.py",
    "lemonpack.catalogue.bounded": "through hostile community input in tests/scenarios/test_catalogue_trust.py",
    "lemonpack.catalogue.commands": "through the pasted commands in tests/scenarios/test_catalogue_trust.py",
    "lemonpack.catalogue.dates": "through catalogue build in tests/scenarios/test_catalogue_publishers.py "
                                 "(the reader itself is lemonpack/sourcedate.py, tests/test_sourcedate.py)",
    "lemonpack.catalogue.facts": "through catalogue build in tests/scenarios/test_catalogue_publishers.py",
    "lemonpack.catalogue.feed": "through catalogue build in tests/catalogue/test_build.py",
    "lemonpack.catalogue.fetching": "through catalogue build and verify in tests/catalogue/test_build.py",
    "lemonpack.catalogue.index": "through catalogue build in tests/catalogue/test_build.py",
    "lemonpack.catalogue.memo": "through a warm rebuild in tests/catalogue/test_build.py",
    "lemonpack.catalogue.names": "through catalogue build and search in tests/catalogue/test_build.py",
    "lemonpack.catalogue.official": "through the official entries in tests/scenarios/test_catalogue_publishers.py",
    "lemonpack.catalogue.signatures": "through signature statuses in tests/catalogue/test_build.py",
    "lemonpack.catalogue.signing": "through catalogue sign in tests/scenarios/test_catalogue_publishers.py",
    # cli: commands whose tests are the scenarios of their room
    "lemonpack.cli.__main__": "python -m lemonpack.cli, run by tests/scenarios/test_distribution_trust.py",
    "lemonpack.cli.cache_cmds": "tests/scenarios/test_cache_hardening.py (cache list, verify, clean)",
    "lemonpack.cli.catalogue_cmds": "tests/catalogue/test_build.py and tests/catalogue/test_search.py",
    "lemonpack.cli.registry_cmds": "tests/scenarios/test_publish_pull.py and tests/registry/test_pin.py",
    "lemonpack.cli.release_cmds": "tests/scenarios/test_release.py",
    "lemonpack.cli.serve_cmds": "tests/scenarios/test_serve_logs_timeouts.py and tests/server/test_management.py",
    # contract
    "lemonpack.contract": "its lint_file, through tests/contract/test_rules.py",
    "lemonpack.contract.builtins": "the built-in recipe ids, in tests/contract/test_loader.py and "
                                   "tests/runtime/launch/test_builtin.py",
    "lemonpack.contract.model": "data only: the frozen recipe model the loader builds (tests/contract/test_loader.py)",
    "lemonpack.errors": "tests/test_errors_typed.py: the family, each room's subclasses, the exit codes",
    "lemonpack.examples": "the shipped example, in tests/scenarios/test_example_walkthrough.py",
    "lemonpack.examples.__main__": "python -m lemonpack.examples, whose output "
                                   "tests/scenarios/test_example_walkthrough.py checks is shipped",
    # extensions
    "lemonpack.extensions.collisions": "the collision rules of seed 002 section 8, in tests/extensions/test_pipeline.py",
    "lemonpack.extensions.cxxscan": "the directives and entry symbols read from sources, in tests/extensions/test_includes.py "
                                    "and tests/scenarios/test_extensions_refusal_messages.py",
    "lemonpack.extensions.preprocess": "the real preprocessor deciding includes, in tests/extensions/test_includes.py",
    "lemonpack.extensions.templates": "data only: the generator's templates (tests/extensions/test_generate.py "
                                      "checks their bytes, tests/extensions/test_apilock.py their lock)",
    "lemonpack.extensions.vocabulary": "data only: names the manifest schema and the generator share "
                                       "(tests/extensions/test_manifest.py)",
    # kube
    "lemonpack.kube.inputs": "through kube generate in tests/kube/test_generate.py and tests/cli/test_kube_cmds.py",
    "lemonpack.kube.pod": "through kube generate in tests/kube/test_generate.py (golden files, the schemas)",
    "lemonpack.kube.systemd": "through kube generate --systemd in tests/cli/test_kube_cmds.py",
    # oci
    "lemonpack.oci.descriptor": "data only: the descriptor type, through tests/oci/test_layout.py",
    "lemonpack.oci.policy": "the pinning policy runtime and builder share, through tests/builder/test_checks.py",
    # registry: operations against the real docker-registry
    "lemonpack.registry.answers": "the registry's answers checked, in tests/scenarios/test_registry_malicious.py",
    "lemonpack.registry.base": "pulling a base by digest, in tests/scenarios/test_build_base.py",
    "lemonpack.release.build": "through lemonpack release in tests/scenarios/test_release.py",
    # runtime
    "lemonpack.runtime.engines.ports": "the ports engines are given, in tests/runtime/engines/test_handles.py",
    "lemonpack.runtime.engines.sentinel": "a killed runtime's leftovers, in tests/runtime/engines/test_proctable.py "
                                          "and tests/scenarios/test_container_argv.py",
    "lemonpack.runtime.launch.plan": "data only: the LaunchPlan every launch test checks "
                                     "(tests/runtime/launch/test_build.py)",
    "lemonpack.runtime.launch.tokens": "every token group through the launch plan, in tests/runtime/launch/test_build.py",
    "lemonpack.runtime.lifecycle.foreground": "lemonpack run in the foreground, in tests/scenarios/test_run.py",
    # server: a real lemonpack serve on 127.0.0.1 over real fake-engine processes
    "lemonpack.server.app": "tests/server/test_proxy.py and the tests/scenarios/test_serve_*.py files",
    "lemonpack.server.body": "request bodies, in tests/server/test_proxy.py and tests/server/test_upstream.py",
    "lemonpack.server.catalog": "tests/server/test_management.py and tests/scenarios/test_serve_trial_findings.py",
    "lemonpack.server.driver": "tests/scenarios/test_serve_idle.py and tests/scenarios/test_serve_memory_metrics.py",
    "lemonpack.server.endpoints": "tests/server/test_proxy.py and tests/server/test_management.py",
    "lemonpack.server.loadopts": "load options, in tests/scenarios/test_serve_trial_findings.py",
    "lemonpack.server.logs": "access lines, in tests/scenarios/test_serve_logs_timeouts.py",
    "lemonpack.server.main": "the listen address and the server's start, in tests/server/test_management.py",
    "lemonpack.server.metrics": "GET /metrics, in tests/scenarios/test_serve_memory_metrics.py",
    "lemonpack.server.responses": "the OpenAI error shape, in tests/scenarios/test_serve_errors.py",
    "lemonpack.signing.remote": "sign and verify against a real registry, in tests/scenarios/test_sign_verify.py",
    "lemonpack.strictjson": "any bytes and any JSON value, in tests/scenarios/test_validator_fuzz.py; "
                            "its bounds in tests/test_schemacheck.py",
}


# --- the mapping ------------------------------------------------------------------------------

def modules(package: Path) -> dict[str, Path]:
    """``{dotted name: path}`` of every module of ``package`` (``lemonpack``), except the shipped
    extension tree's files (``extensions/tree/``: links to data, not modules)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent)
        if "__pycache__" in rel.parts or rel.parts[1:3] == ("extensions", "tree"):
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def own_test_file(module: Path, package: Path, tests: Path) -> Path:
    """The test file of ``module``: ``tests/<folders>/test_<name>.py``, with a private module's
    leading ``_`` dropped and a package's ``__init__.py`` named after the package."""
    rel = module.relative_to(package)
    name = (rel.parent.name or package.name) if rel.name == "__init__.py" else rel.stem.lstrip("_")
    return tests / rel.parent / f"test_{name}.py"


def reexports_only(module: Path) -> bool:
    """Whether ``module`` is a package ``__init__.py`` holding only a docstring, imports and ``__all__``."""
    if module.name != "__init__.py":
        return False
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, ast.Assign) and all(getattr(t, "id", "") == "__all__" for t in node.targets):
            continue
        return False
    return True


def layout_problems(package: Path, tests: Path, table: dict[str, str], suite: dict[str, str]) -> list[str]:
    """What breaks the mirror: modules without a test file or an entry, stale entries, test files
    named after no module outside tests/scenarios/, helper modules outside tests/support/,
    conftest files other than the root one, a test file importing another test file (or ``tests.``,
a second name for the support package). One line each."""
    mods = modules(package)
    problems = []
    owners: dict[Path, str] = {}
    for name, path in mods.items():
        own = own_test_file(path, package, tests)
        if own in owners:
            problems.append(f"{name} and {owners[own]} map to the same test file {own.relative_to(tests.parent)}")
        owners[own] = name
        if not own.exists() and not reexports_only(path) and name not in table:
            problems.append(f"{name} has no {own.relative_to(tests.parent)} and no entry in WITHOUT_OWN_FILE")
    for name, reason in table.items():
        if name not in mods:
            problems.append(f"WITHOUT_OWN_FILE names {name}, which is no module")
        elif own_test_file(mods[name], package, tests).exists():
            problems.append(f"WITHOUT_OWN_FILE names {name}, which has its own test file: drop the entry")
        if not reason.strip():
            problems.append(f"WITHOUT_OWN_FILE gives {name} no reason")
        for ref in re.findall(r"tests/[\w/*.-]+\.py", reason):
            if "*" not in ref and not (tests.parent / ref).exists():
                problems.append(f"WITHOUT_OWN_FILE's reason for {name} names {ref}, which does not exist")
    for path in sorted(tests.rglob("*.py")):
        rel = path.relative_to(tests)
        if "__pycache__" in rel.parts or rel.parts[0] == "fixtures":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                top = name.split(".")[0]
                if top in ("tests", "conftest") or top.startswith("test_"):
                    problems.append(f"tests/{rel}:{node.lineno}: imports {name}: shared code belongs in tests/support/")
        if rel.parts[0] == "support":
            continue
        where = rel.parts[0] if len(rel.parts) > 1 else ""
        if path.name == "conftest.py":
            if rel != Path("conftest.py"):
                problems.append(f"tests/{rel}: fixtures belong in tests/support/ (registered in tests/conftest.py)")
        elif not path.name.startswith("test_"):
            if not (where == "scenarios" and path.name == "check.py"):  # a case's script, run as a child
                problems.append(f"tests/{rel}: a helper module outside tests/support/")
        elif where == "scenarios":
            continue
        elif where == "" and path.name in suite:
            continue
        elif path not in owners:
            problems.append(f"tests/{rel} is named after no module of {package.name}/: "
                            "a scenario belongs in tests/scenarios/")
    return problems


def test_tests_mirror_lemonpack():
    problems = layout_problems(PACKAGE, TESTS, WITHOUT_OWN_FILE, SUITE_CHECKS)
    assert not problems, "\n".join(problems)


def test_layout_problems_of_a_planted_tree(tmp_path):
    pkg, tests = tmp_path / "pkg", tmp_path / "tests"
    for rel, text in {"__init__.py": "", "a.py": "", "_b.py": "", "room/__init__.py": "from .c import X\n",
                      "room/c.py": "", "room/d.py": "", "room/e.py": "", "other/__init__.py": "def f(): pass\n"}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    for rel in ("test_pkg.py", "test_a.py", "test_b.py", "room/test_c.py", "room/test_topic.py", "room/conftest.py",
                "room/kit.py", "scenarios/test_walk.py", "scenarios/cases/01/check.py", "test_meta.py"):
        (tests / rel).parent.mkdir(parents=True, exist_ok=True)
        (tests / rel).write_text("")
    (tests / "scenarios" / "test_walk.py").write_text("from test_a import helper\nimport support.kit\n")
    table = {"pkg.room.d": "tested through tests/scenarios/test_walk.py", "pkg.room.c": "stale",
             "pkg.gone": "x", "pkg.room.e": "in tests/scenarios/test_missing.py"}
    assert layout_problems(pkg, tests, table, {"test_meta.py": "a suite check"}) == [
        "pkg.other has no tests/other/test_other.py and no entry in WITHOUT_OWN_FILE",
        "WITHOUT_OWN_FILE names pkg.room.c, which has its own test file: drop the entry",
        "WITHOUT_OWN_FILE names pkg.gone, which is no module",
        "WITHOUT_OWN_FILE's reason for pkg.room.e names tests/scenarios/test_missing.py, which does not exist",
        "tests/room/conftest.py: fixtures belong in tests/support/ (registered in tests/conftest.py)",
        "tests/room/kit.py: a helper module outside tests/support/",
        "tests/room/test_topic.py is named after no module of pkg/: a scenario belongs in tests/scenarios/",
        "tests/scenarios/test_walk.py:1: imports test_a: shared code belongs in tests/support/",
    ]


# --- children interrupted with SIGINT -----------------------------------------------------------

def sigint_problems(tests: Path) -> list[str]:
    """Test and support files that send SIGINT (they name ``signal.SIGINT``) and start a child with
    ``subprocess.Popen`` themselves instead of :func:`support.interrupt.popen_interruptible`: under
    ``nohup … &`` that child inherits SIGINT as ignored and never sees the test's Ctrl-C."""
    problems = []
    for path in sorted(tests.rglob("*.py")):
        if "__pycache__" in path.parts or path.name == "interrupt.py":
            continue
        tree = ast.parse(path.read_text())
        names_sigint = any(isinstance(n, ast.Attribute) and n.attr == "SIGINT" for n in ast.walk(tree))
        popens = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and (
            (isinstance(n.func, ast.Attribute) and n.func.attr == "Popen")
            or (isinstance(n.func, ast.Name) and n.func.id == "Popen"))]
        if names_sigint and popens:
            problems.append(f"{path.relative_to(tests.parent)}:{popens[0]}: a child this file may interrupt is "
                            "started with Popen: use support.interrupt.popen_interruptible")
    return problems


def test_children_a_test_interrupts_get_sigint_at_its_default():
    problems = sigint_problems(TESTS)
    assert not problems, "\n".join(problems)


def test_sigint_problems_of_a_planted_tree(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_bad.py").write_text("import signal, subprocess\n\n"
                                       "def test_x():\n    p = subprocess.Popen(['sleep', '9'])\n"
                                       "    p.send_signal(signal.SIGINT)\n")
    (tests / "test_good.py").write_text("import signal\nfrom support.interrupt import popen_interruptible\n\n"
                                        "def test_x():\n    p = popen_interruptible(['sleep', '9'])\n"
                                        "    p.send_signal(signal.SIGINT)\n")
    (tests / "test_term.py").write_text("import signal, subprocess\n\n"
                                        "def test_x():\n    subprocess.Popen(['x']).send_signal(signal.SIGTERM)\n")
    assert sigint_problems(tests) == ["tests/test_bad.py:4: a child this file may interrupt is started with "
                                      "Popen: use support.interrupt.popen_interruptible"]


def test_an_interruptible_child_gets_sigint_at_its_default_even_when_ours_is_ignored():
    """The helper itself: with SIGINT ignored here (as under ``nohup … &``), a plain child inherits
    the ignored disposition and the interruptible one does not (read from /proc/PID/status)."""
    import signal
    import subprocess
    import sys

    from support.interrupt import popen_interruptible

    show = [sys.executable, "-c", "import re; print(re.search(r'SigIgn:\\s*(\\S+)', "
                                  "open('/proc/self/status').read()).group(1))"]
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        plain = subprocess.run(show, capture_output=True, text=True, check=True).stdout
        reset = popen_interruptible(show, stdout=subprocess.PIPE, text=True).communicate(timeout=30)[0]
    finally:
        signal.signal(signal.SIGINT, before)
    bit = 1 << (signal.SIGINT - 1)
    assert int(plain, 16) & bit and not int(reset, 16) & bit
