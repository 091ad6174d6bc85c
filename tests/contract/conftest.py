import copy

import pytest


BASE = {
    "recipe": "my-engine",
    "display_name": "My engine",
    "api_contract_version": "1",
    "capabilities": ["chat_completion", "completion"],
    "platforms": {"linux": {"cpu": {"command": "/opt/engine", "args": ["--port", "{port}"]}}},
}

VARIANT = {
    "recipe": "my-fork",
    "display_name": "My fork",
    "api_contract_version": "1",
    "variant_of": "llamacpp",
    "capabilities": ["chat_completion"],
    "source": "https://example.invalid/fork.tar.gz",
    "sha256": "sha256:" + "ab" * 32,
    "platforms": {"linux": {"rocm": {"binary": "llama-server"}}},
}


@pytest.fixture
def passthrough():
    return copy.deepcopy(BASE)


@pytest.fixture
def variant():
    return copy.deepcopy(VARIANT)


