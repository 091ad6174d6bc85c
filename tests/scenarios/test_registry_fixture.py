"""The registry fixture itself: a real docker-registry answers the distribution API, with and without auth."""

from __future__ import annotations

import base64
import urllib.error
import urllib.request

import pytest


def _get(url, headers=None):
    req = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.status, r.headers


def test_registry_answers_v2(registry):
    status, headers = _get(f"http://{registry.host}/v2/")
    assert status == 200
    assert headers["Docker-Distribution-Api-Version"] == "registry/2.0"


def test_auth_registry_requires_basic_credentials(auth_registry):
    with pytest.raises(urllib.error.HTTPError) as e:
        _get(f"http://{auth_registry.host}/v2/")
    assert e.value.code == 401
    assert e.value.headers["WWW-Authenticate"].startswith("Basic ")
    (user, password), = auth_registry.users.items()
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    assert _get(f"http://{auth_registry.host}/v2/", {"Authorization": f"Basic {token}"})[0] == 200
    bad = base64.b64encode(f"{user}:wrong".encode()).decode()
    with pytest.raises(urllib.error.HTTPError) as e:
        _get(f"http://{auth_registry.host}/v2/", {"Authorization": f"Basic {bad}"})
    assert e.value.code == 401


def test_registry_restarts_on_same_port_and_storage(registry):
    host = registry.host
    registry.stop(hard=True)
    with pytest.raises(OSError):
        _get(f"http://{host}/v2/")
    registry.start()
    assert registry.host == host and _get(f"http://{host}/v2/")[0] == 200
