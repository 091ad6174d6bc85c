"""The v1 token vocabulary and the token engine (RFC section 4.2).

A template is a string from ``command``, ``args``, ``env`` values, ``stop_command``,
``stop_command_args``, ``argv_extra``, ``working_dir`` or ``capability_enable_args``.
Every ``{`` opens a token and the next ``}`` closes it; there is no escape; a ``}`` outside
a token is literal text. Tokens are parsed when a manifest is loaded (unknown, empty,
unterminated or nested tokens, and a default on a token that takes none, are rejected) and
resolved only when a process is spawned, each into a single argv element or env value,
never through a shell.

The grammar is the prototype's (abn/lemonade ``src/cpp/server/backends/external/
token_vocabulary.cpp``: ``validate_tokens_in_string`` finds each ``{`` and the next ``}``;
``is_name`` takes a parameter name of ASCII letters, digits, ``_`` and ``-``, nothing after
it), so a name ends where that grammar ends: ``{custom:x\n}`` is refused, ``{custom:gpu-layers}``
and ``a}b`` are accepted. lemonpack's narrowings, each named in ``docs/recipes-and-policy.md``:
a default only on the tokens seed 000 gives one (``{custom:NAME:-DEFAULT}``,
``{env:NAME:-DEFAULT}``), and ``{checkpoint:NAME}`` names of ``[A-Za-z0-9_.-]`` (the model
registry's checkpoint names).
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lemonpack.errors import TokenError

#: Tokens written as a bare name, grouped as in the RFC table.
SIMPLE_TOKENS: dict[str, str] = {
    **dict.fromkeys(("port", "host", "pid", "log_level", "recipe", "model_name"), "runtime"),
    **dict.fromkeys(("resolved_path", "model_relative_path", "model_dir", "exe_dir", "hf_cache", "cache_dir"),
                    "checkpoints"),
    **dict.fromkeys(("rocm_arch", "cuda_arch", "arch_alias", "target_device", "hip_visible_devices",
                     "cuda_visible_devices", "rocr_visible_devices", "ggml_vk_visible_devices",
                     "ze_affinity_mask"), "hardware"),
    **dict.fromkeys(("ctx_size", "batch_size", "ubatch_size", "threads", "cache_type_k", "cache_type_v"),
                    "options"),
    "custom_args": "custom",
}

#: Tokens written ``{kind:NAME}``; the value says whether ``:-DEFAULT`` is allowed.
PARAM_TOKENS: dict[str, bool] = {
    "checkpoint": False,
    "checkpoint_relative": False,
    "custom": True,
    "env": True,
}

#: Parameter names, matched whole (``\Z``: a trailing newline is not part of a name). The
#: prototype's ``is_name`` (ASCII alphanumerics, ``_``, ``-``) for ``custom`` and ``env``; the
#: RFC gives no grammar. Checkpoint names also take ``.``, as the model registry's do.
_PARAM_NAME = {
    "checkpoint": re.compile(r"[A-Za-z0-9_.-]+\Z"),
    "checkpoint_relative": re.compile(r"[A-Za-z0-9_.-]+\Z"),
    "custom": re.compile(r"[A-Za-z0-9_-]+\Z"),
    "env": re.compile(r"[A-Za-z0-9_-]+\Z"),
}

_NEGATIVE_NUMBER = re.compile(r"^-(?:\d+(?:\.\d+)?|\.\d+)$")


@dataclass(frozen=True)
class Token:
    """A parsed token. ``kind`` is the bare name (``port``) or the parameterised kind
    (``custom``); ``name`` the parameter (``gpu_layers``) or None; ``default`` the text
    after ``:-`` or None; ``text`` the token as written, braces included."""

    kind: str
    name: str | None
    default: str | None
    text: str


class TokenSyntaxError(ValueError):
    """A template breaks the token grammar; ``str()`` is a sentence for the user."""


Part = str | Token


def parse_template(template: str, *, suggest: bool = True) -> tuple[Part, ...]:
    """Split ``template`` into literal strings and :class:`Token` objects.

    ``suggest``: an unknown token's message says which known one is close (``did you mean
    {port}?``); False leaves that out (a caller that only counts the error: the search costs
    far more than the parse).

    Raises :class:`TokenSyntaxError` for an unknown token, ``{}``, a ``{`` without ``}``,
    a ``{`` inside a token, a bad parameter name, or a default on a token that takes none.
    A ``}`` outside a token is literal text (the prototype's grammar).
    """
    parts: list[Part] = []
    i, n = 0, len(template)
    literal_start = 0
    while i < n:
        i = template.find("{", i)
        if i < 0:
            break
        if i > literal_start:
            parts.append(template[literal_start:i])
        j = i + 1
        while j < n and template[j] not in "{}":
            j += 1
        if j >= n:
            raise TokenSyntaxError(f"unterminated token at offset {i} in {_clip(template)!r}")
        if template[j] == "{":
            raise TokenSyntaxError(f"nested token at offset {j} in {_clip(template)!r}")
        parts.append(_parse_token(template[i + 1:j], template[i:j + 1], suggest))
        i = j + 1
        literal_start = i
    if literal_start < n:
        parts.append(template[literal_start:])
    return tuple(parts)


def _clip(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters (``...`` marks the cut): messages quote a bounded
    prefix of a template, never a whole megabyte."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


@functools.lru_cache(maxsize=1024)
def _did_you_mean(name: str) -> str:
    if len(name) > 64:
        return ""
    close = difflib.get_close_matches(name, [*SIMPLE_TOKENS, *PARAM_TOKENS], n=1, cutoff=0.7)
    if not close:
        return ""
    hint = close[0] if close[0] in SIMPLE_TOKENS else f"{close[0]}:NAME"
    return f" (did you mean {{{hint}}}?)"


def _parse_token(body: str, text: str, suggest: bool = True) -> Token:
    if not body:
        raise TokenSyntaxError("empty token '{}'")
    head, sep, rest = body.partition(":")
    if not sep:
        if body in SIMPLE_TOKENS:
            return Token(body, None, None, text)
        if body in PARAM_TOKENS:
            raise TokenSyntaxError(f"token {_clip(text)} needs a name: {{{body}:NAME}}")
        raise TokenSyntaxError(f"unknown token {_clip(text)}{_did_you_mean(body) if suggest else ''}")
    if head in SIMPLE_TOKENS:
        if rest.startswith("-"):
            raise TokenSyntaxError(f"token {{{head}}} takes no default (in {_clip(text)})")
        raise TokenSyntaxError(f"token {{{head}}} takes no parameter (in {_clip(text)})")
    if head not in PARAM_TOKENS:
        raise TokenSyntaxError(f"unknown token {_clip(text)}{_did_you_mean(head) if suggest else ''}")
    name, dsep, default = rest.partition(":-")
    if not dsep and ":" in rest:
        raise TokenSyntaxError(f"malformed token {_clip(text)}: a default is written {{{head}:NAME:-DEFAULT}}")
    if not _PARAM_NAME[head].match(name):
        raise TokenSyntaxError(f"token {_clip(text)} has an invalid name {_clip(name)!r}")
    if dsep and not PARAM_TOKENS[head]:
        raise TokenSyntaxError(f"token {{{head}:NAME}} takes no default (in {_clip(text)})")
    return Token(head, name, default if dsep else None, text)


def tokens_in(template: str) -> tuple[Token, ...]:
    """The tokens of ``template`` (raises :class:`TokenSyntaxError` like parse_template)."""
    return tuple(p for p in parse_template(template) if isinstance(p, Token))


def is_negative_number(value: str) -> bool:
    """True for a validated negative number (``-0``, ``-12``, ``-1.5``): the only
    resolved values allowed to start with ``-`` (RFC section 4.2)."""
    return bool(_NEGATIVE_NUMBER.match(value))


def render(template: str, resolve: Callable[[Token], str], *, where: str = "") -> str:
    """Resolve every token of ``template`` through ``resolve`` into one string.

    ``resolve(token)`` returns the value or raises :class:`TokenError`. A resolved value
    that begins with ``-`` is rejected unless it is a negative number (section 4.2),
    whatever the argv position. ``{custom_args}`` cannot be rendered into one string:
    use :func:`render_argv`. ``where`` names the field for messages.
    """
    out: list[str] = []
    for part in parse_template(template):
        if isinstance(part, str):
            out.append(part)
            continue
        if part.kind == "custom_args":
            raise TokenError(f"{where}: {{custom_args}} must be a whole argv element")
        try:
            value = resolve(part)
        except TokenError as e:
            raise TokenError(f"{where}: {e}" if where and not str(e).startswith(where) else str(e)) from None
        if value.startswith("-") and not is_negative_number(value):
            raise TokenError(
                f"{where}: token {part.text} resolved to {value!r}, which begins with '-' "
                "and is not a negative number")
        out.append(value)
    return "".join(out)


def render_argv(templates: Sequence[str], resolve: Callable[[Token], str],
                expand_custom_args: Callable[[], Sequence[str]] | None = None,
                *, where: str = "") -> list[str]:
    """Resolve a list of templates into argv elements.

    An element that is exactly ``{custom_args}`` expands through ``expand_custom_args()``
    into zero or more elements (the caller splits and checks them against reserved_args);
    every other element renders to exactly one element through :func:`render`.
    """
    argv: list[str] = []
    for i, template in enumerate(templates):
        if template == "{custom_args}":
            if expand_custom_args is None:
                raise TokenError(f"{where}[{i}]: {{custom_args}} is not available here")
            argv.extend(expand_custom_args())
        else:
            argv.append(render(template, resolve, where=f"{where}[{i}]"))
    return argv
