"""What the CLI says when it refuses (issue 26, "Messages"): a rejected manifest selected by
its ``name`` says why (shared/cases 71), a relative symlink out of the tree gets the symlink
rule however the manifest is reached (shared/cases 70; Nix's side: tests/scenarios/
test_nix_messages.py), and an entry symbol no source defines is refused at validation, naming
the manifest, the symbol and the files searched."""

from __future__ import annotations

import json

import pytest

from lemonpack.extensions.cxxscan import defined_functions, directives
from lemonpack.extensions.pipeline import ExtensionError, run_pipeline
from support.extensions import manifest, write_extension

CPU = frozenset({"linux"})


# ---------------------------------------------------------------- shared/cases 71

@pytest.mark.parametrize("dirname", ["my-ext-v2", "badapi"])
def test_a_schema_rejected_manifest_selected_by_name_says_why(tree, tmp_path, dirname):
    d = tmp_path / "c" / dirname
    d.mkdir(parents=True)
    (d / "extension.json").write_text(json.dumps(dict(manifest("badapi"), api_version="0.1")))
    with pytest.raises(ExtensionError) as e:
        run_pipeline(tree, extra_dirs=[tmp_path / "c"], select=["badapi"], features=CPU, environ={})
    message = str(e.value)
    assert message.startswith(f"cannot select badapi: extension 'badapi' was rejected: {d / 'extension.json'}: "
                              "api_version: ") and message.endswith("[schema-pattern]")
    # the directory's name still works when it differs (and an unknown name is still unknown)
    with pytest.raises(ExtensionError, match=f"extension {dirname!r} was rejected: .*schema-pattern"):
        run_pipeline(tree, extra_dirs=[tmp_path / "c"], select=[dirname], features=CPU, environ={})
    with pytest.raises(ExtensionError, match="no extension named 'other'"):
        run_pipeline(tree, extra_dirs=[tmp_path / "c"], select=["other"], features=CPU, environ={})


def test_a_manifest_without_a_readable_name_is_filed_by_its_directory(tree, tmp_path):
    d = tmp_path / "c" / "broken"
    d.mkdir(parents=True)
    (d / "extension.json").write_text("{not json")
    with pytest.raises(ExtensionError, match=r"extension 'broken' was rejected: .*json-syntax"):
        run_pipeline(tree, extra_dirs=[tmp_path / "c"], select=["broken"], features=CPU, environ={})


# ---------------------------------------------------------------- shared/cases 70

@pytest.mark.parametrize("select", ["name", "directory"])
def test_a_relative_symlink_manifest_out_of_the_tree_gets_the_symlink_rule(tree, tmp_path, select):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "symr.json").write_text(json.dumps(manifest("symr")))
    d = tmp_path / "community" / "symr"
    d.mkdir(parents=True)
    (d / "extension.json").symlink_to("../../outside/symr.json")
    what = ["symr"] if select == "name" else [str(d)]
    with pytest.raises(ExtensionError) as e:
        run_pipeline(tree, extra_dirs=[tmp_path / "community"], select=what, features=CPU, environ={})
    assert (f"{d / 'extension.json'}: symlink target '../../outside/symr.json' resolves outside the destination: "
            "a symlink in an extension must stay inside its directory") in str(e.value)
    # a copy where the link dangles (what Nix judges) gets the same reason
    (tmp_path / "outside" / "symr.json").unlink()
    with pytest.raises(ExtensionError) as again:
        run_pipeline(tree, extra_dirs=[tmp_path / "community"], select=what, features=CPU, environ={})
    assert str(again.value) == str(e.value)


# ---------------------------------------------------------------- entry symbols

ENTRY = 'extern "C" void {n}(gufo::ext::Registry &registry) {{ (void)registry; }}\n'


def ext_with(tmp_path, source: str, files: dict[str, str] | None = None, name: str = "ent"):
    d = tmp_path / "c" / name
    d.mkdir(parents=True)
    doc = manifest(name)
    (d / "extension.json").write_text(json.dumps(doc))
    (d / "extension.cpp").write_text('#include "gufo/ext/registry.hpp"\n' + source)
    for rel, text in (files or {}).items():
        (d / rel).write_text(text)
    return d


def rejected(tree, tmp_path) -> list[str]:
    sel = run_pipeline(tree, extra_dirs=[tmp_path / "c"], select="all", features=CPU, environ={})
    return [r for _, reasons in sel.rejected for r in reasons]


@pytest.mark.parametrize("what, source", [
    ("absent", ENTRY.format(n="ent_register")),
    ("declared only", ENTRY.format(n="ent_register") + 'extern "C" void ent_provider_register(gufo::ext::Registry &);\n'),
    ("in a comment", ENTRY.format(n="ent_register") + "// " + ENTRY.format(n="ent_provider_register")),
    ("in a string", ENTRY.format(n="ent_register") + 'const char *s = "void ent_provider_register() {}";\n'),
    ("in an unused macro", ENTRY.format(n="ent_register") + "#define M " + ENTRY.format(n="ent_provider_register")),
    ("called only", ENTRY.format(n="ent_register") + "void f(gufo::ext::Registry &r) { ent_provider_register(r); }\n"),
])
def test_an_undefined_entry_symbol_is_refused_at_validation(tree, tmp_path, what, source):
    d = ext_with(tmp_path, source)
    (reason,) = rejected(tree, tmp_path)
    assert reason == (f"{d / 'extension.json'}: providers[0].entry: entry symbol 'ent_provider_register' is defined in "
                      "none of the extension's sources, so linking the registry would fail; searched: extension.cpp "
                      "(and what they include) [undefined-entry]")


@pytest.mark.parametrize("what, source, files", [
    ("plainly", ENTRY.format(n="ent_register") + ENTRY.format(n="ent_provider_register"), {}),
    ("by a macro pasting its name",
     '#define ENTRY(n) extern "C" void n##_register(gufo::ext::Registry &r) { (void)r; }\nENTRY(ent)\nENTRY(ent_provider)\n',
     {}),
    ("in an own header", '#include "entries.hpp"\n', {"entries.hpp": ENTRY.format(n="ent_register")
                                                     + ENTRY.format(n="ent_provider_register")}),
    ("after a line splice and a comment", 'extern "C" void ent_reg\\\nister(gufo::ext::Registry &) /* x */ {}\n'
                                          'extern "C" void ent_provider_register(gufo::ext::Registry &) noexcept {}\n',
     {}),
])
def test_a_defined_entry_symbol_is_found(tree, tmp_path, what, source, files):
    ext_with(tmp_path, source, files)
    assert rejected(tree, tmp_path) == []


def test_an_extension_without_sources_names_none_searched(tree, tmp_path):
    d = tmp_path / "c" / "nosrc"
    d.mkdir(parents=True)
    doc = manifest("nosrc")
    del doc["files"]
    (d / "extension.json").write_text(json.dumps(doc))
    reasons = rejected(tree, tmp_path)
    assert [r.split(": ")[1] for r in reasons] == ["entry", "providers[0].entry"]
    assert all("searched: none: 'files' lists no .cpp/.cc/.cxx and there is none at the top" in r for r in reasons)


def test_the_entry_check_names_every_unit_searched(tree, tmp_path):
    d = write_extension(tmp_path / "c" / "two", dict(manifest("two"), files=["extension.cpp", "more.cc", "k.hip"]))
    (d / "more.cc").write_text("int more;\n")
    (d / "k.hip").write_text("// kernels\n")
    (d / "extension.cpp").write_text('#include "gufo/ext/registry.hpp"\n' + ENTRY.format(n="two_register"))
    (reason,) = rejected(tree, tmp_path)
    assert "'two_provider_register'" in reason and "searched: extension.cpp, more.cc (and what they include)" in reason


def test_an_official_extension_is_checked_too(tree):
    cpp = tree / "catalogue/extensions/qwen/provider_cpu.cpp"
    cpp.write_text(cpp.read_text().replace("qwen_guard_provider_register(gufo", "qwen_guardx_provider_register(gufo"))
    with pytest.raises(ExtensionError, match=r"extension 'qwen' was rejected: .*qwen/extension.json: providers\[2\]\.entry: "
                                             r"entry symbol 'qwen_guard_provider_register' is defined in none"):
        run_pipeline(tree, select="lock", features=CPU, environ={})


# ---------------------------------------------------------------- the text reader

def test_directives_follow_the_translation_phases():
    text = ('#include <a>\n /* c */ # line 5 "f"\nint a; # not one\n%:include <b>\n#/*\n*/ 7 "z"\n#\\\nline 9\n'
            '// #line 3\nconst char *s = "#line 4";\nR"x(\n#line 1 "raw"\n)x";\nint n = 1\'000; # no\n#\n')
    assert directives(text) == [(1, "include"), (2, "line"), (4, "include"), (5, "7"), (7, "line"), (15, "")]


def test_defined_functions_tells_definitions_from_the_rest():
    text = ('void decl(int);\nint call() { return decl(1), 0; }\nauto g() -> int try { return 1; } catch (...) { return 0; }\n'
            'extern "C" void e(gufo::ext::Registry &r) noexcept { r.x(); }\nint v = f(2);\n#define M void m() {}\n'
            "int digits = 1'000; void after_digits() {}\n")
    assert {"call", "g", "e", "after_digits"} <= defined_functions(text)
    assert not {"decl", "f", "m", "x"} & defined_functions(text)
