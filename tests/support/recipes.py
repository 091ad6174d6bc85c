"""The one recipe builder of the tests: :func:`recipe_doc` writes a contract-1 recipe document
(RFC "External Backend Manifests"; the schema is ``lemonpack/contract/schema/recipe-v1.schema.json``)
from keyword arguments, :func:`write_recipe` puts one where discovery reads it and
:func:`load_doc` loads one through the real loader. Standard library only: the serve cases' harness,
run outside pytest, builds its recipes here too.

:data:`PASSTHROUGH` and :data:`VARIANT` are the smallest valid documents of each kind (the
``passthrough`` and ``variant`` fixtures of tests/conftest.py hand out fresh copies to mutate).
"""

from __future__ import annotations

import copy
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: The fake OpenAI-compatible engine the runtime and server tests run (a script, stdlib only).
FAKE_ENGINE = Path(__file__).with_name("fake_engine.py")


def http_probe(endpoint: str = "/health", *, timeout: int = 20, poll_ms: int = 20,
               status: int | None = 200) -> dict[str, Any]:
    """A ``health_probe`` object (RFC section 4.4): ``timeout`` seconds, polled every ``poll_ms``
    milliseconds; ``status=None`` leaves ``expected_status`` to its default."""
    probe: dict[str, Any] = {"type": "http", "endpoint": endpoint}
    if status is not None:
        probe["expected_status"] = status
    probe.update(timeout_seconds=timeout, poll_interval_ms=poll_ms)
    return probe


def fake_engine_args(*flags: str) -> list[str]:
    """The argv (after the interpreter) that runs :data:`FAKE_ENGINE` on the launch's host, port and
    model name, then ``flags`` (the fake engine's options: ``--health-delay``, ``--pid-file`` ...)."""
    return [str(FAKE_ENGINE), "--host", "{host}", "--port", "{port}", "--model", "{model_name}", *flags]


def recipe_doc(recipe: str = "fake-engine", *, display_name: str | None = None,
               capabilities: Sequence[str] = ("chat_completion",),
               command: str = "/opt/engine", args: Sequence[str] = ("--port", "{port}"),
               binary: str | None = None, block: Mapping[str, Any] | None = None,
               fake_engine: Sequence[str] | None = None,
               os_name: str = "linux", accelerator: str = "cpu",
               platforms: Mapping[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    """A recipe document (a dict, ready for ``json.dumps``), valid unless the arguments say otherwise.

    - ``recipe``: the id; ``display_name`` defaults to ``"Recipe <id>"``; ``capabilities`` as given.
    - The one exec block ``platforms.<os_name>.<accelerator>`` is ``command`` with ``args``
      (a passthrough recipe), or ``{"binary": binary}`` when ``binary`` is given (a ``variant_of``
      block), or the fake engine (``sys.executable`` running :data:`FAKE_ENGINE` with the flags
      ``fake_engine``, and an :func:`http_probe` unless ``health_probe`` is among ``fields``).
      ``block`` adds keys to that block (``env``, ``stop_command`` ...).
    - ``platforms`` replaces the whole ``platforms`` object (and the block arguments are unused).
    - ``fields``: any other top-level field (``variant_of``, ``extensions``, ``endpoints``,
      ``health_probe``, ``source``, ``sha256`` ...), set last.
    """
    doc: dict[str, Any] = {"recipe": recipe, "display_name": display_name or f"Recipe {recipe}",
                           "api_contract_version": "1", "capabilities": list(capabilities)}
    if platforms is None:
        exec_block: dict[str, Any]
        if binary is not None:
            exec_block = {"binary": binary}
        elif fake_engine is not None:
            exec_block = {"command": sys.executable, "args": fake_engine_args(*fake_engine)}
            fields.setdefault("health_probe", http_probe())
        else:
            exec_block = {"command": command, "args": list(args)}
        exec_block.update(block or {})
        platforms = {os_name: {accelerator: exec_block}}
    doc["platforms"] = copy.deepcopy(dict(platforms))
    doc.update(fields)
    return doc


def write_recipe(path: Path, doc: Mapping[str, Any] | str, mode: int = 0o644) -> Path:
    """Write ``doc`` (a dict as JSON, or text as it is) to ``path`` with ``mode``; the directory
    is created mode 0755 so that discovery's trust checks (RFC section 8) pass unless a test says
    otherwise. Returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o755)
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc, indent=2))
    os.chmod(path, mode)
    return path


def load_doc(doc: Mapping[str, Any], name: str | None = None):
    """``doc`` loaded by the real loader (``lemonpack.contract.load_recipe_text``), as if read from the
    file ``name`` (the loader's default when omitted); a :class:`~lemonpack.errors.ManifestError` when
    it is not valid."""
    from lemonpack.contract import load_recipe_text

    text = json.dumps(doc)
    return load_recipe_text(text) if name is None else load_recipe_text(text, name)


#: The smallest valid passthrough recipe the contract tests mutate.
PASSTHROUGH = recipe_doc("my-engine", display_name="My engine", capabilities=("chat_completion", "completion"))

#: The smallest valid pinned ``variant_of`` recipe the contract tests mutate.
VARIANT = recipe_doc("my-fork", display_name="My fork", binary="llama-server", accelerator="rocm",
                     variant_of="llamacpp", source="https://example.invalid/fork.tar.gz",
                     sha256="sha256:" + "ab" * 32)

