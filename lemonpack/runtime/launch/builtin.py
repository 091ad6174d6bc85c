"""The launch-plan seam of the built-in backends (RFC section 7).

A built-in that exposes a launch plan produces ``(executable, argv, env, working_dir)``
for a model *without spawning anything*. A ``variant_of`` recipe reuses it:
:func:`lemonpack.runtime.launch.build.build_launch_plan` calls the built-in's plan, re-targets
the executable to ``<cache>/external/<recipe>/<binary>``, appends the manifest's
resolved ``argv_extra`` and merges env (plan env, then manifest env).

Contract major 1 has exactly three such built-ins, as in Lemonade:

- ``llamacpp``: ``llama-server -m <main> --ctx-size <ctx> --port <port> --host <host>
  --jinja --metrics`` plus ``--mmproj <mmproj>`` when the model has an ``mmproj``
  checkpoint, ``--embeddings`` in embeddings mode and ``--reranking`` in reranking mode;
- ``whispercpp``: ``whisper-server -m <main> --port <port> --host <host>``;
- ``sd-cpp``: ``sd-server -m <main> --listen-port <port> --listen-ip <host>``, with its
  health probe on ``/`` (sd-server has no ``/health``).

Each plan also lists the flags it builds (:attr:`BuiltinPlan.reserved_args`); they are
united with the manifest's ``reserved_args`` when ``{custom_args}`` is checked, so a
user option cannot override ``--port`` even if the manifest forgot to reserve it. The
check reads every reserved flag under all the spellings the engine accepts (aliases such
as ``-mm``, negations such as ``--no-jinja``, options setting the same thing such as
``-hf``), from the engine's own argument table (:mod:`lemonpack.runtime.launch.engine_flags`).
Inputs arrive already resolved (:class:`BuiltinInputs`), so every value has passed the
token engine's leading-dash rule before a plan sees it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from lemonpack.contract.builtins import LAUNCH_PLAN_BUILTINS
from lemonpack.contract.model import EMPTY, HealthProbe
from lemonpack.errors import LemonpackError


class UnsupportedBuiltinError(LemonpackError):
    """``variant_of`` names a backend that has no launch plan (section 7)."""

    kind = "variant-of"


@dataclass(frozen=True)
class BuiltinInputs:
    """What a built-in's plan needs, every value already resolved to text.

    ``model_path`` is the main checkpoint (absolute), ``mmproj_path`` the optional
    multimodal projector, ``port``/``host`` where to listen, ``ctx_size`` the context
    size, ``mode`` the deployment mode label (``chat``, ``embeddings``, ``reranking``,
    ``transcription``, ``image`` ...) or None.
    """

    model_path: str
    port: str
    host: str
    ctx_size: str
    mode: str | None = None
    mmproj_path: str | None = None


@dataclass(frozen=True)
class BuiltinPlan:
    """A built-in's launch plan: ``argv[0] == executable`` (a bare name the caller
    re-targets), ``env`` to set, ``working_dir`` (None: inherit), ``health_probe`` an
    override of the recipe default (None: keep it), ``reserved_args`` the flags the plan
    builds and a user's ``{custom_args}`` must not repeat."""

    executable: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    working_dir: str | None = None
    health_probe: HealthProbe | None = None
    reserved_args: tuple[str, ...] = ()


def llamacpp_plan(inputs: BuiltinInputs) -> BuiltinPlan:
    """llama.cpp's ``llama-server`` plan (Lemonade's built-in argv, section 7).

    Returns ``llama-server -m M --ctx-size C --port P --host H --jinja --metrics``
    [``--mmproj X``] [``--embeddings`` | ``--reranking``], reserving every flag it sets or
    may set by mode (and ``--pooling`` in reranking mode). Raises nothing.
    """
    argv = ["llama-server", "-m", inputs.model_path, "--ctx-size", inputs.ctx_size,
            "--port", inputs.port, "--host", inputs.host, "--jinja", "--metrics"]
    if inputs.mmproj_path:
        argv += ["--mmproj", inputs.mmproj_path]
    if inputs.mode == "embeddings":
        argv.append("--embeddings")
    elif inputs.mode == "reranking":
        argv.append("--reranking")
    reserved: tuple[str, ...] = ("-m", "--model", "-c", "--ctx-size", "--port", "--host", "--jinja", "--metrics", "--mmproj",
                "--embeddings", "--reranking")
    if inputs.mode == "reranking":
        reserved += ("--pooling",)  # --reranking sets the rank pooling; another pooling would undo it
    return BuiltinPlan("llama-server", tuple(argv), reserved_args=reserved)


def whispercpp_plan(inputs: BuiltinInputs) -> BuiltinPlan:
    """whisper.cpp's ``whisper-server -m M --port P --host H`` plan (section 7). Raises nothing."""
    argv = ("whisper-server", "-m", inputs.model_path, "--port", inputs.port, "--host", inputs.host)
    return BuiltinPlan("whisper-server", argv, reserved_args=("-m", "--model", "--port", "--host"))


def sdcpp_plan(inputs: BuiltinInputs) -> BuiltinPlan:
    """stable-diffusion.cpp's ``sd-server -m M --listen-port P --listen-ip H`` plan
    (section 7), probed over http on ``/``. Raises nothing."""
    argv = ("sd-server", "-m", inputs.model_path, "--listen-port", inputs.port, "--listen-ip", inputs.host)
    return BuiltinPlan("sd-server", argv, health_probe=HealthProbe(type="http", endpoint="/"),
                       reserved_args=("-m", "--model", "--listen-port", "--listen-ip"))


#: The built-ins exposing a launch plan, keyed by recipe id (section 7).
LAUNCH_PLANS: Mapping[str, Callable[[BuiltinInputs], BuiltinPlan]] = MappingProxyType({
    "llamacpp": llamacpp_plan,
    "whispercpp": whispercpp_plan,
    "sd-cpp": sdcpp_plan,
})

assert tuple(LAUNCH_PLANS) == LAUNCH_PLAN_BUILTINS, "launch plans and contract.builtins disagree"


def builtin_plan(builtin: str, inputs: BuiltinInputs) -> BuiltinPlan:
    """The launch plan of built-in ``builtin`` for ``inputs`` (section 7).

    Raises :class:`UnsupportedBuiltinError` naming the supported built-ins when
    ``builtin`` has no launch plan (an unknown recipe, an external one, or a built-in that
    has not grown a plan yet).
    """
    plan = LAUNCH_PLANS.get(builtin)
    if plan is None:
        raise UnsupportedBuiltinError(
            f"variant_of {builtin!r} has no launch plan; the supported built-ins are "
            f"{', '.join(LAUNCH_PLANS)}")
    return plan(inputs)


__all__ = ["BuiltinInputs", "BuiltinPlan", "LAUNCH_PLANS", "UnsupportedBuiltinError", "builtin_plan",
           "llamacpp_plan", "sdcpp_plan", "whispercpp_plan"]
