"""Every spelling of the flags a launch plan owns, from the engines' own argument tables.

A ``{custom_args}`` element must not override what the launch plan (or the manifest's
``reserved_args``, RFC section 4.3) sets. Checking the exact flag text is not enough:
the engines accept several spellings of one option (``-mm`` and ``--mmproj``), negations
(``--no-mmproj``), and options that set the same thing another way (``-hf`` and the
``--*-default`` presets choose the model and the port). This module holds, as data, each
built-in engine's option table and answers "which reserved flag does this argument
override, and how".

Sources (transcribed, not fetched at run time):

- **llama.cpp** ``llama-server``: ``common/arg.cpp`` of ggml-org/llama.cpp at commit
  ``145b6280d6aa1890e22457143dad0badb3fd6820`` (``common_params_parser_init``: each
  ``common_arg({"-x", "--xx"}, {"--no-xx"}, ...)`` lists the spellings, then the
  negations). The parser (``common_params_parse_ex``) looks every argument up exactly,
  after replacing ``_`` by ``-`` in arguments starting with ``--`` (so ``--ctx_size`` is
  ``--ctx-size``); it accepts no ``--flag=value`` and no attached short value
  (``-c4096``). Options whose handler sets the same field as a plan flag are listed with
  that field in :attr:`EngineOption.sets` (``-hf``/``-mu``/``-dr``/``-hff`` and the
  presets such as ``--gpt-oss-20b-default`` set the model, presets also the port and the
  context size; ``--no-mmproj`` clears the projector; ``--reranking`` turns embeddings on).
  The table holds every llama-server option with more than one spelling, so a manifest's
  ``reserved_args`` naming any of them is reserved under all its spellings too.
- **whisper.cpp** ``whisper-server``: ``examples/server/server.cpp`` of
  ggml-org/whisper.cpp at commit ``c838670abc368a51f1a1640b9ede527de30c91fa``
  (``whisper_params_parse``: ``arg == "-m" || arg == "--model"`` chains; exact
  comparison, no ``=`` forms, no negations). ``-p`` is ``--processors`` there, not a port.
- **stable-diffusion.cpp** ``sd-server``: the option table printed in
  ``examples/server/README.md`` of leejet/stable-diffusion.cpp at commit
  ``7a34440effd363ab1426ca872b52c58e058424ab`` (``-l, --listen-ip``, ``--listen-port``,
  ``-m, --model``), parsed by ``parse_options`` in ``examples/common/common.hpp`` at
  commit ``40c324bf92cb9837c2cea8e7cbfe3f71f7726c39`` (exact comparison against the short
  and the long name; no ``=`` forms, no negations).

Matching (:meth:`EngineFlagTable.conflict`): an argument is reduced to the option name the
engine would read (text before the first ``=``, since a fork may accept ``--flag=value``
and lemonpack never lets that form through either; ``_`` -> ``-`` for llama.cpp long
flags), then it overrides reserved flag ``R`` when it is ``R``, a spelling or a negation of
``R``'s option, or an option setting the first field ``R``'s option sets (checked in this
order over all reserved flags, so the message names the closest relative). Attached short values
(``-mfoo``) are not matched: none of the three parsers accepts them, and ``-mm``/``-mg``
begin with ``-m``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True)
class EngineOption:
    """One option of an engine's argument table.

    ``names`` the spellings that turn it on or take its value (the engine's own order),
    ``negations`` the spellings that turn it off, ``value`` whether it takes a value,
    ``sets`` the engine settings it decides, named after the engine's parameter fields
    (``model``, ``port``, ``n_ctx``, ...); empty for options no plan flag is about.
    """

    names: tuple[str, ...]
    negations: tuple[str, ...] = ()
    value: bool = False
    sets: tuple[str, ...] = ()

    @property
    def spellings(self) -> tuple[str, ...]:
        """``names`` then ``negations``."""
        return self.names + self.negations


@dataclass(frozen=True)
class Conflict:
    """Why argument ``given`` overrides reserved flag ``reserved``: ``how`` is a phrase
    such as ``"an alias of '--mmproj'"`` naming the engine's relation."""

    given: str
    reserved: str
    how: str


@dataclass(frozen=True)
class EngineFlagTable:
    """An engine's option table: ``engine`` its name, ``binary`` the server executable's
    base name, ``source`` where the table comes from (repository, file, commit),
    ``options`` the options, ``underscore_long`` whether the parser reads ``_`` as ``-``
    in arguments starting with ``--`` (llama.cpp)."""

    engine: str
    binary: str
    source: str
    options: tuple[EngineOption, ...]
    underscore_long: bool = False
    _by_spelling: Mapping[str, EngineOption] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index: dict[str, EngineOption] = {}
        for opt in self.options:
            for s in opt.spellings:
                if s in index:
                    raise ValueError(f"{self.engine}: spelling {s!r} listed twice")
                index[s] = opt
        object.__setattr__(self, "_by_spelling", MappingProxyType(index))

    def normalize(self, arg: str) -> str:
        """The option name the engine reads from ``arg``: the text before the first ``=``,
        with ``_`` -> ``-`` for ``--`` arguments when :attr:`underscore_long`."""
        name = arg.split("=", 1)[0]
        if self.underscore_long and name.startswith("--"):
            name = name.replace("_", "-")
        return name

    def option(self, arg: str) -> EngineOption | None:
        """The option ``arg`` (any spelling, ``=value`` form allowed) selects, or None."""
        return self._by_spelling.get(self.normalize(arg))

    def spellings_of(self, flag: str) -> tuple[str, ...]:
        """Every spelling that overrides ``flag``: its option's names and negations and
        those of every option setting the first field ``flag``'s option sets. A flag the
        table does not know stands for itself alone."""
        opt = self.option(flag)
        if opt is None:
            return (self.normalize(flag),)
        out = list(opt.spellings)
        if opt.sets:
            for other in self.options:
                if other is not opt and opt.sets[0] in other.sets:
                    out.extend(other.spellings)
        return tuple(dict.fromkeys(out))

    def conflict(self, arg: str, reserved: Sequence[str]) -> Conflict | None:
        """The first of ``reserved`` that ``arg`` overrides under this engine's parser,
        or None. Raises nothing."""
        given = self.normalize(arg)
        mine = self._by_spelling.get(given)
        for flag in reserved:  # the reserved flag itself first, then its relatives
            if given == self.normalize(flag):
                return Conflict(arg, flag, f"the flag {flag!r}" if arg.split("=", 1)[0] == flag
                                else f"{self.engine}'s spelling of {flag!r}")
        if mine is None:
            return None
        for flag in reserved:  # then another spelling or a negation of its option
            if self._by_spelling.get(self.normalize(flag)) is mine:
                kind = "a negation" if given in mine.negations else "an alias"
                return Conflict(arg, flag, f"{kind} of {flag!r} in {self.engine}")
        for flag in reserved:  # then an option setting what it sets
            opt = self._by_spelling.get(self.normalize(flag))
            if opt is not None and opt.sets and opt.sets[0] in mine.sets:
                return Conflict(arg, flag, f"a {self.engine} option that also sets "
                                f"{opt.sets[0]!r}, which {flag!r} sets")
        return None


def _o(*names: str, neg: Iterable[str] = (), value: bool = False, sets: Iterable[str] = ()) -> EngineOption:
    return EngineOption(tuple(names), tuple(neg), value, tuple(sets))


_LLAMA_PRESET_SETS = ("model", "port", "n_ctx")

#: llama-server (ggml-org/llama.cpp common/arg.cpp @145b6280): the options a plan flag is
#: about, then every other server option with more than one spelling or a negation.
LLAMA_CPP = EngineFlagTable(
    engine="llama.cpp", binary="llama-server", underscore_long=True,
    source="ggml-org/llama.cpp common/arg.cpp @145b6280d6aa1890e22457143dad0badb3fd6820",
    options=(
        # --- what the llamacpp plan sets
        _o("-m", "--model", value=True, sets=("model",)),
        _o("-mu", "--model-url", value=True, sets=("model",)),
        _o("-dr", "--docker-repo", value=True, sets=("model",)),
        _o("-hf", "-hfr", "--hf-repo", value=True, sets=("model", "mmproj")),
        _o("-hff", "--hf-file", value=True, sets=("model",)),
        _o("-c", "--ctx-size", value=True, sets=("n_ctx",)),
        _o("--port", value=True, sets=("port",)),
        _o("--host", value=True, sets=("hostname",)),
        _o("--jinja", neg=("--no-jinja",), sets=("use_jinja",)),
        _o("--metrics", sets=("endpoint_metrics",)),
        _o("-mm", "--mmproj", value=True, sets=("mmproj",)),
        _o("-mmu", "--mmproj-url", value=True, sets=("mmproj",)),
        _o("--mmproj-auto", neg=("--no-mmproj", "--no-mmproj-auto"), sets=("mmproj",)),
        _o("--embedding", "--embeddings", sets=("embedding",)),
        _o("--reranking", "--rerank", sets=("embedding", "pooling_type")),
        _o("--pooling", value=True, sets=("pooling_type",)),
        # presets (set the model, the port and the context size; some also embeddings/jinja)
        _o("--embd-gemma-default", sets=_LLAMA_PRESET_SETS + ("embedding",)),
        _o("--fim-qwen-1.5b-default", sets=_LLAMA_PRESET_SETS),
        _o("--fim-qwen-3b-default", sets=_LLAMA_PRESET_SETS),
        _o("--fim-qwen-7b-default", sets=_LLAMA_PRESET_SETS),
        _o("--fim-qwen-7b-spec", sets=_LLAMA_PRESET_SETS),
        _o("--fim-qwen-14b-spec", sets=_LLAMA_PRESET_SETS),
        _o("--fim-qwen-30b-default", sets=_LLAMA_PRESET_SETS),
        _o("--gpt-oss-20b-default", sets=_LLAMA_PRESET_SETS + ("use_jinja",)),
        _o("--gpt-oss-120b-default", sets=_LLAMA_PRESET_SETS + ("use_jinja",)),
        _o("--vision-gemma-4b-default", sets=_LLAMA_PRESET_SETS + ("use_jinja",)),
        _o("--vision-gemma-12b-default", sets=_LLAMA_PRESET_SETS + ("use_jinja",)),
        # --- other server options with several spellings (a manifest may reserve them)
        _o("-h", "--help", "--usage"),
        _o("-cl", "--cache-list"),
        _o("-t", "--threads", value=True),
        _o("-tb", "--threads-batch", value=True),
        _o("-C", "--cpu-mask", value=True),
        _o("-Cr", "--cpu-range", value=True),
        _o("-Cb", "--cpu-mask-batch", value=True),
        _o("-Crb", "--cpu-range-batch", value=True),
        _o("-n", "--predict", "--n-predict", value=True),
        _o("-b", "--batch-size", value=True),
        _o("-ub", "--ubatch-size", value=True),
        _o("--ctx-checkpoints", "--swa-checkpoints", value=True),
        _o("--cache-ram", "-cram", value=True),
        _o("--kv-unified", "-kvu"),
        _o("--context-shift", neg=("--no-context-shift",)),
        _o("-fa", "--flash-attn", value=True),
        _o("--perf", neg=("--no-perf",)),
        _o("-e", "--escape", neg=("--no-escape",)),
        _o("-r", "--reverse-prompt", value=True),
        _o("-sp", "--special"),
        _o("--warmup", neg=("--no-warmup",)),
        _o("-s", "--seed", value=True),
        _o("--sampling-seq", "--sampler-seq", value=True),
        _o("-l", "--logit-bias", value=True),
        _o("-j", "--json-schema", value=True),
        _o("-jf", "--json-schema-file", value=True),
        _o("-kvo", "--kv-offload", neg=("-nkvo", "--no-kv-offload")),
        _o("--repack", neg=("-nr", "--no-repack")),
        _o("-ctk", "--cache-type-k", value=True),
        _o("-ctv", "--cache-type-v", value=True),
        _o("-dt", "--defrag-thold", value=True),
        _o("-np", "--parallel", value=True),
        _o("-cb", "--cont-batching", neg=("-nocb", "--no-cont-batching")),
        _o("--mmproj-offload", neg=("--no-mmproj-offload",)),
        _o("--mmap", neg=("--no-mmap",)),
        _o("-dev", "--device", value=True),
        _o("--override-tensor", "-ot", value=True),
        _o("--override-tensor-draft", "-otd", value=True),
        _o("--cpu-moe", "-cmoe"),
        _o("--n-cpu-moe", "-ncmoe", value=True),
        _o("--cpu-moe-draft", "-cmoed"),
        _o("--n-cpu-moe-draft", "-ncmoed", value=True),
        _o("-ngl", "--gpu-layers", "--n-gpu-layers", value=True),
        _o("-sm", "--split-mode", value=True),
        _o("-ts", "--tensor-split", value=True),
        _o("-mg", "--main-gpu", value=True),
        _o("-fit", "--fit", value=True),
        _o("-fitt", "--fit-target", value=True),
        _o("-fitc", "--fit-ctx", value=True),
        _o("--op-offload", neg=("--no-op-offload",)),
        _o("-a", "--alias", value=True),
        _o("-hfd", "-hfrd", "--hf-repo-draft", value=True),
        _o("-hfv", "-hfrv", "--hf-repo-v", value=True),
        _o("-hffv", "--hf-file-v", value=True),
        _o("-hft", "--hf-token", value=True),
        _o("--webui", neg=("--no-webui",)),
        _o("-to", "--timeout", value=True),
        _o("--slots", neg=("--no-slots",)),
        _o("--models-autoload", neg=("--no-models-autoload",)),
        _o("--prefill-assistant", neg=("--no-prefill-assistant",)),
        _o("-sps", "--slot-prompt-similarity", value=True),
        _o("-v", "--verbose", "--log-verbose"),
        _o("-lv", "--verbosity", "--log-verbosity", value=True),
        _o("-td", "--threads-draft", value=True),
        _o("-tbd", "--threads-batch-draft", value=True),
        _o("--draft-max", "--draft", "--draft-n", value=True),
        _o("--draft-min", "--draft-n-min", value=True),
        _o("-cd", "--ctx-size-draft", value=True),
        _o("-devd", "--device-draft", value=True),
        _o("-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", value=True),
        _o("-md", "--model-draft", value=True),
        _o("-ctkd", "--cache-type-k-draft", value=True),
        _o("-ctvd", "--cache-type-v-draft", value=True),
        _o("-mv", "--model-vocoder", value=True),
    ),
)

#: whisper-server (ggml-org/whisper.cpp examples/server/server.cpp @c838670a).
WHISPER_CPP = EngineFlagTable(
    engine="whisper.cpp", binary="whisper-server",
    source="ggml-org/whisper.cpp examples/server/server.cpp @c838670abc368a51f1a1640b9ede527de30c91fa",
    options=(
        _o("-m", "--model", value=True, sets=("model",)),
        _o("--port", value=True, sets=("port",)),
        _o("--host", value=True, sets=("hostname",)),
        _o("-h", "--help"),
        _o("-t", "--threads", value=True),
        _o("-p", "--processors", value=True),
        _o("-l", "--language", value=True),
        _o("-ng", "--no-gpu"),
        _o("-fa", "--flash-attn"),
    ),
)

#: sd-server (leejet/stable-diffusion.cpp examples/server/README.md @7a34440e, parsed by
#: examples/common/common.hpp parse_options @40c324bf).
SD_CPP = EngineFlagTable(
    engine="stable-diffusion.cpp", binary="sd-server",
    source=("leejet/stable-diffusion.cpp examples/server/README.md @7a34440effd363ab1426ca872b52c58e058424ab, "
            "examples/common/common.hpp @40c324bf92cb9837c2cea8e7cbfe3f71f7726c39"),
    options=(
        _o("-m", "--model", value=True, sets=("model",)),
        _o("-l", "--listen-ip", value=True, sets=("listen_ip",)),
        _o("--listen-port", value=True, sets=("listen_port",)),
        _o("-h", "--help"),
        _o("-v", "--verbose"),
        _o("-t", "--threads", value=True),
    ),
)

#: Tables by built-in recipe id (the ``variant_of`` values with a launch plan, section 7).
ENGINE_FLAGS: Mapping[str, EngineFlagTable] = MappingProxyType({
    "llamacpp": LLAMA_CPP,
    "whispercpp": WHISPER_CPP,
    "sd-cpp": SD_CPP,
})

_BY_BINARY = {t.binary: t for t in ENGINE_FLAGS.values()}


def table_for(variant_of: str | None = None, executable: str | None = None) -> EngineFlagTable | None:
    """The table of built-in ``variant_of``, else of the engine whose server binary is the
    base name of ``executable`` (``.../llama-server``), else None. Raises nothing."""
    if variant_of is not None and variant_of in ENGINE_FLAGS:
        return ENGINE_FLAGS[variant_of]
    if executable:
        return _BY_BINARY.get(executable.replace("\\", "/").rsplit("/", 1)[-1])
    return None


__all__ = ["Conflict", "ENGINE_FLAGS", "EngineFlagTable", "EngineOption", "LLAMA_CPP", "SD_CPP",
           "WHISPER_CPP", "table_for"]
