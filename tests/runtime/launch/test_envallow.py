"""The {env:NAME} allowlist (RFC section 4.2, D4): default-deny, secrets never resolve."""

from __future__ import annotations

import pytest

from lemonpack.errors import TokenError
from lemonpack.runtime.launch.envallow import DEFAULT_ALLOWLIST, denial_reason, is_resolvable, resolve_env

ENV = {"HF_HOME": "/srv/hf", "SSL_CERT_FILE": "/etc/ssl/ca.pem", "HF_TOKEN": "hf_secret",
       "LEMONADE_API_KEY": "k", "HTTPS_PROXY": "http://user:pw@proxy:3128", "HOME": "/home/u",
       "TORCH_HOME": ""}


@pytest.mark.parametrize("name", ["HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME",
                                  "TRANSFORMERS_CACHE", "TORCH_HOME", "SSL_CERT_FILE", "SSL_CERT_DIR",
                                  "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"])
def test_documented_cache_and_ca_names_are_allowed(name):
    assert name in DEFAULT_ALLOWLIST
    assert is_resolvable(name)


def test_allowed_and_set_resolves():
    assert resolve_env("HF_HOME", None, ENV) == "/srv/hf"
    assert resolve_env("SSL_CERT_FILE", "/x", ENV) == "/etc/ssl/ca.pem"


def test_allowed_but_unset_uses_default_or_fails():
    assert resolve_env("HF_HUB_CACHE", "/default", ENV) == "/default"
    assert resolve_env("TORCH_HOME", "/t", ENV) == "/t"  # empty counts as unset, like the shell's :-
    with pytest.raises(TokenError, match="HF_HUB_CACHE is unset"):
        resolve_env("HF_HUB_CACHE", None, ENV)


@pytest.mark.parametrize("name", ["HOME", "PATH", "USER", "TMPDIR", "LD_LIBRARY_PATH"])
def test_not_allowlisted_is_denied_even_with_default(name):
    assert not is_resolvable(name)
    with pytest.raises(TokenError, match=f"{{env:{name}}}.*not on the {{env:}} allowlist"):
        resolve_env(name, "fallback", ENV)


@pytest.mark.parametrize("name", ["HF_TOKEN", "hf_token", "OPENAI_API_KEY", "openai_api_key", "AWS_SECRET_ACCESS_KEY",
                                  "PGPASSWORD", "DB_PASS", "OAUTH_CLIENT", "X_AUTH_HEADER", "GITHUB_TOKEN"])
def test_secret_shaped_names_never_resolve(name):
    reason = denial_reason(name)
    assert reason and "secret" in reason
    with pytest.raises(TokenError, match=name):
        resolve_env(name, "d", {name: "value"})


@pytest.mark.parametrize("name", ["LEMONADE_ADMIN", "LEMONADE_CACHE_DIR", "LEMONPACK_CACHE_DIR", "LEMONPACK_HOST_FACTS"])
def test_server_configuration_names_never_resolve(name):
    with pytest.raises(TokenError, match="never resolvable"):
        resolve_env(name, None, {name: "/x"})


@pytest.mark.parametrize("name", ["HTTP_PROXY", "https_proxy", "ALL_PROXY", "no_proxy"])
def test_proxy_variables_are_excluded(name):
    with pytest.raises(TokenError, match="proxy"):
        resolve_env(name, None, {name: "http://user:pw@proxy"})


def test_denylist_wins_over_an_extended_allowlist():
    extended = DEFAULT_ALLOWLIST | {"HF_TOKEN", "LEMONPACK_CACHE_DIR", "HTTPS_PROXY", "MY_MODELS"}
    assert resolve_env("MY_MODELS", None, {"MY_MODELS": "/m"}, extended) == "/m"
    for name in ("HF_TOKEN", "LEMONPACK_CACHE_DIR", "HTTPS_PROXY"):
        with pytest.raises(TokenError):
            resolve_env(name, None, {name: "v"}, extended)
