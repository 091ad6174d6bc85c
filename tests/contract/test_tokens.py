"""The token engine (lemonpack/contract/tokens.py): each token one argv element, the leading-dash
rule, custom args only as a whole element, token defaults."""

import pytest

from lemonpack.contract import tokens
from lemonpack.errors import TokenError


def test_render_resolves_each_token_into_one_element():
    values = {"recipe": "r", "port": "8080"}
    out = tokens.render("lemonade-{recipe}-{port}", lambda t: values[t.kind])
    assert out == "lemonade-r-8080"


@pytest.mark.parametrize("value, ok", [("-12", True), ("-0", True), ("-1.5", True), ("--rm", False),
                                       ("-m", False), ("-1e5", False), ("- 1", False)])
def test_leading_dash_rule(value, ok):
    if ok:
        assert tokens.render("{model_name}", lambda t: value) == value
    else:
        with pytest.raises(TokenError, match="begins with '-'"):
            tokens.render("{model_name}", lambda t: value)


def test_render_argv_expands_custom_args_only_as_whole_element():
    argv = tokens.render_argv(["-m", "{custom_args}", "--port={port}"], lambda t: "9",
                              lambda: ["--a", "b"])
    assert argv == ["-m", "--a", "b", "--port=9"]
    with pytest.raises(TokenError):
        tokens.render("x{custom_args}", lambda t: "")


def test_token_defaults_parsed():
    [t] = tokens.tokens_in("{custom:vk_device:-0}")
    assert (t.kind, t.name, t.default) == ("custom", "vk_device", "0")
    [t] = tokens.tokens_in("{env:HF_HOME}")
    assert t.default is None


