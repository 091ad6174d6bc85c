"""The include allowlist's table (issue 26, "What to build" 5; seed 002 sections 5 and 8):
community extensions whose sources reach a header outside the allowlist, directly or by a
way around a line-by-line reading, and extensions using only what it allows. The CLI's test
(tests/extensions/test_includes.py) and the Nix package's
(tests/scenarios/test_nix_includes.py) run the same table.

Each case is one community extension ``inc_<case>`` written by :func:`write_cases`: the stub
``extension.cpp`` of :func:`support.extensions.write_extension` (two includes, then the
case's ``source`` from line 3, then the entry points), plus the case's other ``files``.
``refused``: fragments each found in one of the extension's reasons (paths relative to the
extension directory); None: the extension is accepted (and compiles).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from support.extensions import manifest, write_extension

MMAN = "#include <sys/mman.h> is not allowed"


@dataclass(frozen=True)
class Case:
    name: str
    source: str
    files: dict[str, str] = field(default_factory=dict)
    refused: tuple[str, ...] | None = None

    @property
    def extension(self) -> str:
        return f"inc_{self.name}"


CASES = [
    # ---- refused: the direct form, then each way around a line-by-line reading
    Case("direct", "#include <sys/mman.h>\n", refused=(f"extension.cpp:3: {MMAN}",)),
    Case("macro", "#define HDR <sys/mman.h>\n#include HDR\n", refused=(f"extension.cpp:4: {MMAN}",)),
    Case("macro_from_own_header", '#include "names.h"\n#include HDR\n', {"names.h": "#define HDR <sys/mman.h>\n"},
         refused=(f"extension.cpp:4: {MMAN}",)),
    Case("comment_before_name", "#include /**/ <sys/mman.h>\n", refused=(f"extension.cpp:3: {MMAN}",)),
    Case("comment_around_hash", "/* a */ # /* b */ include <sys/mman.h>\n", refused=(f"extension.cpp:3: {MMAN}",)),
    Case("continuation", "#inc\\\nlude <sys/mman.h>\n", refused=(f"extension.cpp:3: {MMAN}",)),
    Case("continuation_in_name", "#include <sys/mm\\\nan.h>\n", refused=(f"extension.cpp:3: {MMAN}",)),
    Case("digraph", "%:include <sys/mman.h>\n", refused=(f"extension.cpp:3: {MMAN}",)),
    Case("include_next", "#include_next <sys/mman.h>\n",
         refused=("extension.cpp:3: #include_next <sys/mman.h> is not allowed",)),
    Case("include_next_standard", "#include_next <vector>\n",
         refused=("extension.cpp:3: #include_next <vector> is not allowed: #include_next is a GCC extension",)),
    Case("import", "#import <sys/mman.h>\n", refused=("extension.cpp:3: #import <sys/mman.h> is not allowed",)),
    Case("own_txt", '#include "impl.txt"\n', {"impl.txt": "#include <sys/mman.h>\n"},
         refused=(f"impl.txt:1: {MMAN}", "(included from ", "extension.cpp:3)")),
    Case("own_no_suffix", '#include "kernel"\n', {"kernel": "#include <dlfcn.h>\n"},
         refused=("kernel:1: #include <dlfcn.h> is not allowed",)),
    Case("system_header_pragma", '#include "sys.h"\n', {"sys.h": "#pragma GCC system_header\n#include <sys/mman.h>\n"},
         refused=(f"sys.h:2: {MMAN}",)),
    # <cstdlib> already read <sys/types.h>: the guarded re-include opens nothing, and is refused
    Case("guarded_reinclude", "#include <cstdlib>\n#include <sys/types.h>\n",
         refused=("extension.cpp:4: #include <sys/types.h> is not allowed",)),
    Case("private_headers", '#include <gufo/core/scheduler.hpp>\n#include "server/internal.hpp"\n',
         refused=("extension.cpp:3: #include <gufo/core/scheduler.hpp> is not allowed",
                  'extension.cpp:4: #include "server/internal.hpp" is not allowed')),
    Case("public_dotdot", '#include "gufo/ext/../../server.hpp"\n',
         refused=('extension.cpp:3: #include "gufo/ext/../../server.hpp" is not allowed',)),
    Case("line_directive", '#line 1 "/usr/include/stdio.h"\n#include <sys/mman.h>\n',
         refused=("extension.cpp:3: #line is not allowed",)),
    Case("line_marker", '# 1 "/usr/include/stdio.h" 1 3 4\n#include <sys/mman.h>\n# 5 "extension.cpp" 2\n',
         refused=("extension.cpp:3: # 1 is not allowed", "extension.cpp:5: # 5 is not allowed")),
    # a macro cannot write a line marker: the preprocessor prints its expansion after a blank
    Case("macro_marker", '#define FAKE # 1 "/usr/include/stdio.h" 1 3 4\nFAKE\n#include <sys/mman.h>\n',
         refused=(f"extension.cpp:5: {MMAN}",)),
    # ---- accepted
    Case("public", '#include <gufo/ext/provider.hpp>\n#include "gufo/ext/artifact.hpp"\n'),
    Case("standard", '#include <vector>\n#include <cstdio>\n#include <stdint.h>\n#include "string"\n'),
    Case("own_headers", '#include "own.hpp"\n#include "sub/deep.hpp"\n#include "own.hpp"\n',
         {"own.hpp": "#pragma once\n#include <map>\n", "sub/deep.hpp": '#pragma once\n#include "../own.hpp"\n'}),
    Case("own_any_suffix", '#include "table.inc"\n',
         {"table.inc": "#include <array>\ninline std::array<int, 2> table() { return {1, 2}; }\n"}),
    Case("computed_allowed", "#define HDR <vector>\n#include HDR\n"),
    Case("skipped_block", '#if 0\n#include <sys/mman.h>\n#endif\n#ifdef NOT_DEFINED\n#include "server/internal.hpp"\n#endif\n'),
    Case("mentions_only", '#include <vector> // not <sys/mman.h>\n/* #include <sys/mman.h> */\n'
                          'inline const char *text() { return "#include <sys/mman.h>"; }\n'),
    Case("has_include", "#if __has_include(<sys/mman.h>)\n#endif\n"),
    # a file the compiler never reads is never judged
    Case("unused_file", "", {"unused.h": "#include <sys/mman.h>\n"}),
]


def write_cases(root: Path, cases=CASES) -> dict[str, Case]:
    """Write every case as ``root/inc_<name>/``; returns ``{extension name: case}``."""
    out = {}
    for case in cases:
        d = write_extension(root / case.extension, manifest(case.extension), extra_source=case.source)
        for rel, text in case.files.items():
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_text(text)
        out[case.extension] = case
    return out


def verdict_problems(cases: dict[str, Case], root: Path, selected, rejected: dict[str, list[str]]) -> list[str]:
    """What differs between a run's verdict and the table: ``selected`` extension names,
    ``rejected`` manifest path -> reasons (paths as under ``root``). Empty: it holds."""
    out = []
    for name, case in cases.items():
        m = str(root / name / "extension.json")
        if case.refused is None:
            if name not in selected:
                out.append(f"{name}: not selected (rejected: {rejected.get(m)})")
            continue
        if name in selected or m not in rejected:
            out.append(f"{name}: accepted, but the table refuses it")
            continue
        reasons = [r.replace(f"{root / name}/", "") for r in rejected[m]]
        for fragment in case.refused:
            if not any(fragment in r for r in reasons):
                out.append(f"{name}: no reason holds {fragment!r}: {reasons}")
    return out
