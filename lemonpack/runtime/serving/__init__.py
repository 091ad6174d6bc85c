"""Serving policy for ``lemonpack serve``: ``policy`` (admission, memory, slot policies, TTL, reloads:
pure, over an injected clock), ``gateway`` (endpoint health and choice per request, pure), ``budget`` (the
memory budget: sizes, available RAM). Imports ``runtime.lifecycle`` (the shared lifecycle states)."""
