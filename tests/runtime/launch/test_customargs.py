"""custom_args (lemonpack/runtime/launch/customargs.py): split from a string (shell words), a JSON
list or a list; expanded against the reserved flags it must not override."""

from __future__ import annotations

import pytest

from lemonpack.errors import TokenError
from lemonpack.runtime.launch.customargs import expand_custom_args, split_custom_args


def test_custom_args_split_string_json_and_list():
    assert split_custom_args('--temp 0.7 --prompt "a b"') == ["--temp", "0.7", "--prompt", "a b"]
    assert split_custom_args('["--temp", "0.7 x"]') == ["--temp", "0.7 x"]
    assert split_custom_args(["--a", "b"]) == ["--a", "b"]
    assert split_custom_args(None) == [] and split_custom_args("") == []
    with pytest.raises(TokenError, match="cannot be split"):
        split_custom_args('--a "unclosed')


def test_expand_custom_args_checks_the_context():
    with pytest.raises(TokenError, match="'-c'"):
        expand_custom_args(["-c", "1"], ("-c",))
    assert expand_custom_args('-t 4 --jinja', ("-c",)) == ["-t", "4", "--jinja"]
