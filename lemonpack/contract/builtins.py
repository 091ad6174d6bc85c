"""The built-in backends of the host server, in one place.

``BUILTIN_RECIPES`` are ids an external recipe may not take (RFC section 4.1, 8).
``LAUNCH_PLAN_BUILTINS`` are the built-ins that expose a launch plan and so are the only
valid ``variant_of`` targets in contract major 1 (section 7).
"""

from __future__ import annotations

LAUNCH_PLAN_BUILTINS: tuple[str, ...] = ("llamacpp", "whispercpp", "sd-cpp")

#: Every recipe id the reference server registers itself, so an external recipe may not
#: take it: the ``LEMON_BACKENDS`` list of the Lemonade prototype (``cmake/Backends.cmake``,
#: one ``<recipe>|<folder>`` entry per backend under ``src/cpp/server/backends/``; read
#: 2026-11) plus the ONNX Runtime GenAI ids of earlier releases (``oga-*``), which
#: existing configurations still name.
BUILTIN_RECIPES: frozenset[str] = frozenset(
    LAUNCH_PLAN_BUILTINS
    + (
        "acestep",
        "cloud",
        "flm",
        "kokoro",
        "moonshine",
        "onnxruntime",
        "openmoss",
        "ryzenai-llm",
        "thenoise",
        "thinksound",
        "trellis",
        "vllm",
        "oga-cpu",
        "oga-npu",
        "oga-hybrid",
        "oga-igpu",
    )
)

#: Contract majors this build understands (section 11). A newer one is rejected.
SUPPORTED_CONTRACT_MAJOR = 1

#: Environment keys a manifest ``env`` block may not set: dynamic-loader variables
#: (closes the gap RFC section 12 admits). Exact names, plus every ``DYLD_`` name.
LOADER_ENV_KEYS: frozenset[str] = frozenset({"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT"})
LOADER_ENV_PREFIXES: tuple[str, ...] = ("DYLD_",)


def is_loader_env_key(key: str) -> bool:
    """True when ``key`` names a dynamic-loader variable a manifest must not set."""
    return key in LOADER_ENV_KEYS or key.startswith(LOADER_ENV_PREFIXES)

#: Platform keys of contract major 1 (the schema's enums; a test keeps them equal).
OS_NAMES: tuple[str, ...] = ("linux", "darwin", "windows")
ACCELERATORS: tuple[str, ...] = ("cpu", "gpu", "rocm", "cuda", "vulkan", "metal", "oneapi", "npu", "tpu")
