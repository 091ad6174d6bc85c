"""Gufo extensions (seed 002): ``extension.json`` manifests, the release lock
``extensions.lock``, discovery / validation / selection / collision and API-version rules
(:mod:`lemonpack.extensions.pipeline`), the generated registry, constants header and JSON
(:mod:`lemonpack.extensions.generate`) and GGUF provider probes
(:mod:`lemonpack.extensions.probe`). Imports only :mod:`lemonpack.contract` and the primitives."""
