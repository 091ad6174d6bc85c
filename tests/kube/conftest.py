"""Fixtures of the kube tests."""

from __future__ import annotations

import pytest

from support.kube import KubeEnv, make_kube_env


@pytest.fixture
def kube_env(tmp_path, monkeypatch) -> KubeEnv:
    """See :func:`support.kube.make_kube_env`."""
    return make_kube_env(tmp_path, monkeypatch)
