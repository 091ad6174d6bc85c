"""``lemonpack models add --endpoint``: models served by engines lemonpack does not spawn."""

from __future__ import annotations

import json

import pytest

from lemonpack.cli import main
from lemonpack.runtime.models.registry import ModelRegistry

from tests.cli.test_models_cli import env, registry_file  # noqa: F401 (the fixture)


def test_add_endpoints_without_checkpoint(env, capsys):  # noqa: F811
    assert main(["models", "add", "user.remote", "--recipe", "llamacpp", "--endpoint", "http://engine-svc:8080",
                 "-e", "HTTPS://Engine-2.example:8443/"]) == 0
    assert json.loads(registry_file(env).read_text()) == {"user.remote": {
        "recipe": "llamacpp", "endpoints": ["http://engine-svc:8080", "https://engine-2.example:8443"]}}
    entry = ModelRegistry(registry_file(env)).get("user.remote")
    assert entry.endpoints == ("http://engine-svc:8080", "https://engine-2.example:8443")
    capsys.readouterr()
    assert main(["models", "list"]) == 0
    assert "endpoint=http://engine-svc:8080" in capsys.readouterr().out


@pytest.mark.parametrize("url, why", [
    ("ftp://engine:21", "must use http or https"),
    ("engine-svc:8080", "must use http or https"),
    ("http://user:s3cret@engine:8080", "must not carry a user or password"),
    ("http://engine", "must give the port explicitly"),
    ("http://engine:8080/v1", "no path, query or fragment"),
    ("http://engine:8080?x=1", "no path, query or fragment"),
    ("http://:8080", "has no host"),
    ("http://engine:70000", "not a valid URL"),
    ("http://engine:0", "port must be 1-65535"),
    ("http://eng ine:80", "whitespace"),
])
def test_bad_endpoint_is_one_line_exit_1_nothing_written(env, capsys, url, why):  # noqa: F811
    assert main(["models", "add", "user.remote", "--recipe", "llamacpp", "--endpoint", "http://ok:1",
                 "--endpoint", url]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "user.remote" in err and "--endpoint" in err and why in err, err
    assert "s3cret" not in err  # a credential is never echoed
    assert not registry_file(env).exists()


def test_duplicate_endpoint_and_neither_checkpoint_nor_endpoint(env, capsys):  # noqa: F811
    assert main(["models", "add", "user.remote", "--recipe", "llamacpp", "-e", "http://a:1", "-e", "http://A:1/"]) == 1
    assert "given twice" in capsys.readouterr().err
    assert main(["models", "add", "user.remote", "--recipe", "llamacpp"]) == 2
    assert "--endpoint" in capsys.readouterr().err
    assert not registry_file(env).exists()


def test_registry_file_endpoint_problems_name_the_file_and_field(tmp_path):
    from lemonpack.errors import ManifestError

    path = tmp_path / "user_models.json"
    path.write_text(json.dumps({"user.r": {"recipe": "llamacpp", "endpoint": "http://a:1",
                                           "endpoints": ["http://b:2", "gopher://c:3"]}}))
    with pytest.raises(ManifestError) as e:
        ModelRegistry(path).load()
    assert str(path) in str(e.value) and 'endpoints[1]' in str(e.value) and "gopher" in str(e.value)
    path.write_text(json.dumps({"user.r": {"recipe": "llamacpp", "endpoint": "http://a:1",
                                           "endpoints": ["http://b:2"]}}))
    assert ModelRegistry(path).get("user.r").endpoints == ("http://a:1", "http://b:2")
    path.write_text(json.dumps({"user.r": {"recipe": "llamacpp", "endpoints": []}}))
    with pytest.raises(ManifestError, match="non-empty list"):
        ModelRegistry(path).load()


def test_run_refuses_an_endpoint_model(env, capsys):  # noqa: F811
    assert main(["models", "add", "user.remote", "--recipe", "llamacpp-vulkan-custom", "-e", "http://127.0.0.1:9"]) == 0
    capsys.readouterr()
    assert main(["run", "llamacpp-vulkan-custom", "-m", "user.remote"]) == 1
    err = capsys.readouterr().err
    assert "served by its endpoints" in err and "lemonpack serve is its gateway" in err, err
