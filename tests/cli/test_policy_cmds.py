"""``lemonpack policy check``: the verdict, the scope, each requirement; exit 0 or 3."""

from __future__ import annotations

import json

import pytest

from lemonpack.cli import main
from support.trust import key_data, write_policy


@pytest.mark.slow
def test_policy_check_prints_the_verdict_scope_and_requirements(trust_world, tmp_path, capsys):
    w = trust_world
    policy = write_policy(tmp_path / "p.json", {"default": [{"type": "reject"}], "transports": {"docker": {
        f"{w.host}/ns": [{"type": "sigstoreSigned", "keyData": key_data(w.keys["a"]),
                          "signedIdentity": {"type": "matchRepository"}}]}}})
    rd = str(w.registries["on"])
    assert main(["policy", "check", f"{w.host}/ns/team/app:v1", "--policy", str(policy), "--registries.d", rd]) == 0
    out = capsys.readouterr().out
    digest = w.digests[f"{w.host}/ns/team/app:v1"]
    assert f"accepted: {w.host}/ns/team/app:v1@{digest}" in out
    assert f'scope: transports.docker["{w.host}/ns"]' in out and "ok   sigstoreSigned: signature 1 of 1" in out
    code = main(["policy", "check", f"{w.host}/ns/team/unsigned:v1", "--policy", str(policy),
                 "--registries.d", rd, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 3 and not doc["allowed"] and "no signature exists" in doc["reason"]
    assert doc["requirements"][0]["type"] == "sigstoreSigned"


def test_a_malformed_policy_is_one_line_and_exit_3(tmp_path, capsys):
    policy = write_policy(tmp_path / "p.json", '{"default": [{"type": "reject"}], "extra": 1}')
    code = main(["policy", "check", "127.0.0.1:1/x:v1", "--policy", str(policy)])
    err = capsys.readouterr().err
    assert code == 3 and f"{policy}: extra: unknown field" in err and len(err.strip().splitlines()) == 1
