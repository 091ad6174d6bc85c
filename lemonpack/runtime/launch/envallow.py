"""The default-deny allowlist for the ``{env:NAME}`` token (RFC section 4.2, decision D4).

A manifest may interpolate a variable of lemonpack's own environment only when the
name passes two gates, checked in this order:

1. **Never resolvable**, whatever any allowlist says: names starting ``LEMONADE_`` or
   ``LEMONPACK_`` (the server's own configuration, admin keys included), and any name
   that contains ``API_KEY``, ``TOKEN``, ``SECRET``, ``PASS`` or ``AUTH`` compared
   case-insensitively (``HF_TOKEN``, ``hf_token``, ``PGPASSWORD``, ``OAUTH_...``).
   Proxy variables (``HTTP_PROXY``, ``https_proxy``, ``ALL_PROXY``, ``NO_PROXY``,
   ``FTP_PROXY`` in either case) are refused too: their URLs may embed credentials.
2. **Allowlisted**: the name is in :data:`DEFAULT_ALLOWLIST` (or the allowlist the
   caller passes). Names are matched exactly (POSIX names are case-sensitive).

:data:`DEFAULT_ALLOWLIST` holds credential-free cache and certificate-authority
variables only, nothing else:

- caches: ``XDG_CACHE_HOME``, ``HF_HOME``, ``HF_HUB_CACHE``, ``HUGGINGFACE_HUB_CACHE``,
  ``HF_ASSETS_CACHE``, ``HF_DATASETS_CACHE``, ``HF_XET_CACHE``, ``TRANSFORMERS_CACHE``,
  ``SENTENCE_TRANSFORMERS_HOME``, ``TORCH_HOME``, ``TORCH_EXTENSIONS_DIR``,
  ``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR``, ``CUDA_CACHE_PATH``,
  ``MIOPEN_USER_DB_PATH``, ``MIOPEN_CUSTOM_CACHE_DIR``, ``LLAMA_CACHE``,
  ``MODELSCOPE_CACHE``, ``VLLM_CACHE_ROOT``, ``PIP_CACHE_DIR``;
- certificate authorities: ``SSL_CERT_FILE``, ``SSL_CERT_DIR``, ``REQUESTS_CA_BUNDLE``,
  ``CURL_CA_BUNDLE``, ``NODE_EXTRA_CA_CERTS``, ``GIT_SSL_CAINFO``.

``HOME``, ``PATH``, ``USER``, ``TMPDIR`` and the like are deliberately absent: they are
not secrets, but the v1 default is "empty plus cache and CA variables" and nothing a
manifest needs is lost (use ``{hf_cache}``, ``{cache_dir}`` for the common paths).

Default semantics of ``{env:NAME:-DEFAULT}`` follow the shell's ``:-``:

- a **denied** name (gate 1 or gate 2) always fails with :class:`TokenError` naming the
  variable and the reason, *even when a default is written*: a manifest that asks for a
  forbidden variable is a mistake to surface, not to paper over with a default;
- an **allowed** name that is unset or empty resolves to ``DEFAULT`` when one is
  written, and fails with :class:`TokenError` otherwise.

This allowlist chooses which host values a manifest may interpolate; it is not the
Sandbox RFC's child ``env_allowlist`` (which variables a child inherits).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from lemonpack.errors import TokenError

#: Credential-free cache and CA variables a manifest may read through ``{env:NAME}``.
DEFAULT_ALLOWLIST: frozenset[str] = frozenset({
    # caches
    "XDG_CACHE_HOME", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_ASSETS_CACHE",
    "HF_DATASETS_CACHE", "HF_XET_CACHE", "TRANSFORMERS_CACHE", "SENTENCE_TRANSFORMERS_HOME",
    "TORCH_HOME", "TORCH_EXTENSIONS_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR",
    "CUDA_CACHE_PATH", "MIOPEN_USER_DB_PATH", "MIOPEN_CUSTOM_CACHE_DIR", "LLAMA_CACHE",
    "MODELSCOPE_CACHE", "VLLM_CACHE_ROOT", "PIP_CACHE_DIR",
    # certificate authorities
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO",
})

#: Prefixes that are never resolvable (the server's own configuration).
DENIED_PREFIXES: tuple[str, ...] = ("LEMONADE_", "LEMONPACK_")

#: Substrings (upper case, matched case-insensitively) that mark a secret-shaped name.
SECRET_MARKERS: tuple[str, ...] = ("API_KEY", "TOKEN", "SECRET", "PASS", "AUTH")

#: Proxy variables (matched case-insensitively): their URLs may embed credentials.
PROXY_NAMES: frozenset[str] = frozenset({"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "FTP_PROXY"})


def denial_reason(name: str, allowlist: Iterable[str] = DEFAULT_ALLOWLIST) -> str | None:
    """Why ``{env:name}`` may not resolve, as a phrase, or None when it may (section 4.2).

    The never-resolvable rules (``LEMONADE_``/``LEMONPACK_`` prefix, secret-shaped name,
    proxy variable) win over ``allowlist``, so adding a secret to the allowlist has no
    effect. Pure; raises nothing.
    """
    upper = name.upper()
    if upper.startswith(DENIED_PREFIXES):
        return f"names starting {' or '.join(DENIED_PREFIXES)} are never resolvable"
    for marker in SECRET_MARKERS:
        if marker in upper:
            return f"the name looks like a secret (contains {marker!r}) and is never resolvable"
    if upper in PROXY_NAMES:
        return "proxy variables are never resolvable (their URLs may embed credentials)"
    if name not in frozenset(allowlist):
        return "it is not on the {env:} allowlist (default-deny; see lemonpack.runtime.launch.envallow)"
    return None


def is_resolvable(name: str, allowlist: Iterable[str] = DEFAULT_ALLOWLIST) -> bool:
    """True when ``{env:name}`` may read the parent environment (section 4.2, D4; see
    :func:`denial_reason`). Raises nothing."""
    return denial_reason(name, allowlist) is None


def resolve_env(name: str, default: str | None, environ: Mapping[str, str],
                allowlist: Iterable[str] = DEFAULT_ALLOWLIST) -> str:
    """Resolve ``{env:name}`` / ``{env:name:-default}`` against the ``environ`` snapshot.

    Returns the variable's value; for an allowed name that is unset or empty, ``default``
    when one was written. Raises :class:`TokenError` naming the variable when the name is
    denied (even with a default) or allowed but unset/empty with no default (section 4.2, D4).
    """
    reason = denial_reason(name, allowlist)
    if reason is not None:
        raise TokenError(f"{{env:{name}}} cannot be resolved: {reason}")
    value = environ.get(name)
    if value:
        return value
    if default is not None:
        return default
    raise TokenError(f"{{env:{name}}} cannot be resolved: {name} is unset or empty and the token "
                     f"has no default (write {{env:{name}:-DEFAULT}})")


__all__ = ["DEFAULT_ALLOWLIST", "DENIED_PREFIXES", "PROXY_NAMES", "SECRET_MARKERS",
           "denial_reason", "is_resolvable", "resolve_env"]
