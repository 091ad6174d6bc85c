"""Reading C++ source text the way the compiler's first phases do, for the two questions the
extension checks ask of a source without compiling it (ISO C++17 [lex.phases] phases 1 to 3):

- which preprocessing *directives* a file holds, each with the physical line it starts on
  (:func:`directives`): the include check refuses ``#line`` and GNU line markers in a
  community extension, since they rewrite the file names and lines the preprocessor reports;
- which *functions a file defines* (:func:`defined_functions`): an extension's ``entry``
  symbols must be defined in its sources.

What is done: line splicing (a backslash, optional blanks, then a newline, [lex.phases] 2:
GCC accepts the blanks too), comments replaced by one space ([lex.phases] 3; a block comment's
newlines kept, so lines still count), string, character and raw string literals skipped as
whole tokens (so a ``//`` or ``"`` inside one changes nothing), pp-numbers (``1'000``) kept
whole, and the digraph ``%:`` read as ``#``. What is not: macro expansion (the preprocessor's
job: a token pasted with ``##`` only exists after it, see
:func:`lemonpack.extensions.includes.entry_problems`), trigraphs (gone in C++17) and universal
character names in identifiers. Linear in the text; pure (no I/O).
"""

from __future__ import annotations

import re
from typing import Iterator

#: A line splice: backslash, optional blanks, newline ([lex.phases] 2; GCC allows the blanks).
_SPLICE = re.compile(r"\\[ \t\f\v]*\r?\n")

#: One token of phase 3, or a comment. Literal prefixes come before identifiers, pp-numbers
#: before character literals (a digit separator is not a quote), raw strings before strings.
_TOKEN = re.compile(r"""
  (?P<line_comment>//[^\n]*)
| (?P<block_comment>/\*.*?(?:\*/|\Z))
| (?P<raw>(?<![A-Za-z0-9_])(?:u8|u|U|L)?R"(?P<delim>[^ ()\\\t\v\f\n"]{0,16})\(.*?(?:\)(?P=delim)"|\Z))
| (?P<string>(?<![A-Za-z0-9_])(?:u8|u|U|L)?"(?:\\.|[^"\\\n])*(?:"|$))
| (?P<char>(?<![A-Za-z0-9_])(?:u8|u|U|L)?'(?:\\.|[^'\\\n])*(?:'|$))
| (?P<number>\.?[0-9](?:[eEpP][+-]|'[A-Za-z0-9_]|[A-Za-z0-9_.])*)
| (?P<ident>[A-Za-z_$][A-Za-z0-9_$]*)
| (?P<newline>\n)
| (?P<punct>%:|[^\sA-Za-z0-9_])
""", re.VERBOSE | re.DOTALL | re.MULTILINE)


def _spliced(text: str) -> tuple[str, list[int]]:
    """``(text with every line splice removed, lines)``: ``lines[k]`` is the physical line
    (1-based) on which logical line ``k`` of the result starts."""
    lines = [1]
    out: list[str] = []
    physical = 1
    pos = 0
    for m in _SPLICE.finditer(text):
        chunk = text[pos:m.start()]
        for _ in range(chunk.count("\n")):
            physical += 1
            lines.append(physical)
        physical += 1  # the spliced newline: same logical line, next physical one
        out.append(chunk)
        pos = m.end()
    rest = text[pos:]
    for _ in range(rest.count("\n")):
        physical += 1
        lines.append(physical)
    out.append(rest)
    return "".join(out), lines


def _tokens(text: str) -> Iterator[tuple[str, str, int]]:
    """``(kind, text, logical line index)`` of every token of spliced ``text`` (comments
    and newlines included as kinds of their own)."""
    line = 0
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup or "punct"
        if kind == "delim":  # the raw string's inner group: the match is the raw string
            kind = "raw"
        value = m.group()
        yield kind, value, line
        line += value.count("\n")


def directives(text: str) -> list[tuple[int, str]]:
    """Every preprocessing directive of ``text``: ``[(physical line it starts on, name)]``
    in order, ``name`` being the word after ``#`` (``include``, ``define``, ``line``), the
    number of a GNU line marker (``# 12 "file"``: ``name`` is ``12``), or ``""`` for a null
    directive. A directive is a ``#`` (or ``%:``) that is the first token of a logical line;
    a comment counts as a blank, even one spanning lines ([lex.phases] 3, before directives
    are read in phase 4)."""
    spliced, lines = _spliced(text)
    out: list[tuple[int, str]] = []
    at_start = True   # no token yet on this logical line
    pending: int | None = None  # the line of a '#' that opened a directive; its name is next
    for kind, value, line in _tokens(spliced):
        if kind in ("line_comment", "block_comment"):
            continue
        if kind == "newline":
            if pending is not None:
                out.append((lines[pending], ""))
                pending = None
            at_start = True
            continue
        if pending is not None:
            out.append((lines[pending], value if kind in ("ident", "number") else ""))
            pending = None
        elif at_start and kind == "punct" and value in ("#", "%:"):
            pending = line
        at_start = False
    if pending is not None:
        out.append((lines[pending], ""))
    return out


def defined_functions(text: str) -> set[str]:
    """The names ``text`` defines as functions: an identifier followed by a parenthesised
    parameter list and then, before any ``;``, ``=``, ``,`` or ``}`` outside brackets, a
    ``{`` (``extern "C" void x_register(Registry &r) noexcept {``, ``auto f() -> int try
    {``). A declaration (``void f();``), a call (``f(x);``) or a mention (``&f``) is not
    one. Directive lines are skipped: a ``#define`` body defines nothing until it is used
    (in preprocessed output the ``#`` lines are line markers and pragmas)."""
    spliced, _ = _spliced(text)
    toks: list[str] = []
    at_start = True
    in_directive = False
    for kind, value, _line in _tokens(spliced):
        if kind == "newline":
            at_start, in_directive = True, False
            continue
        if kind in ("line_comment", "block_comment"):
            continue
        if at_start and kind == "punct" and value in ("#", "%:"):
            in_directive = True
        at_start = False
        if not in_directive:
            toks.append(value if kind in ("ident", "punct") else "\0" + kind)
    out: set[str] = set()
    n = len(toks)
    for i in range(n - 1):
        if toks[i + 1] != "(" or not _is_ident(toks[i]):
            continue
        j = _skip_balanced(toks, i + 1)
        depth = 0
        while j < n:
            t = toks[j]
            if t in ("(", "["):
                depth += 1
            elif t in (")", "]"):
                depth -= 1
                if depth < 0:
                    break
            elif depth == 0 and t in (";", "=", ",", "}"):
                break
            elif depth == 0 and t == "{":
                out.add(toks[i])
                break
            j += 1
    return out


def _is_ident(token: str) -> bool:
    return bool(token) and (token[0].isalpha() or token[0] in "_$") and token.isascii()


def _skip_balanced(toks: list[str], i: int) -> int:
    """The index after the bracket group that opens at ``toks[i]`` (``(``)."""
    depth = 0
    n = len(toks)
    while i < n:
        t = toks[i]
        if t == "(":
            depth += 1
        elif t == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return n


__all__ = ["defined_functions", "directives"]
