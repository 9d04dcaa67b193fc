"""The one parser of the time limits read from the environment (``rlprof.env_seconds``): every limit reads the
same way and a bad value is said in the same words, naming the variable, the value and what is allowed."""

import logging

import pytest

from rlprof.errors import ConfigError
from rlprof.runtime import finish_hook, watchdog
from rlprof_torch import writer

LIMITS = [  # (variable, how its owner reads it)
    (watchdog.ENV, lambda env: watchdog.limit_from_env(env)),
    (writer.WAIT_ENV, lambda env: writer.wait_limit_from_env(env)),
]


@pytest.mark.parametrize(("name", "read"), LIMITS)
@pytest.mark.parametrize("bad", ["soon", "nan", "inf", "-inf", "1e999"])
def test_a_bad_value_is_one_error_naming_variable_value_and_what_is_allowed(name, read, bad):
    with pytest.raises(ConfigError) as info:
        read({name: bad})
    assert info.value.key == name and repr(bad) in str(info.value) and "allowed: a finite number of seconds" in str(info.value)


def test_the_finish_hook_wait_says_a_bad_value_once_in_the_same_words_and_uses_the_default(monkeypatch, caplog):
    from rlprof import notices

    notices.forget()
    monkeypatch.setenv(finish_hook.TIMEOUT_ENV, "-5")
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        assert finish_hook.wait_limit_s() == finish_hook.DEFAULT_TIMEOUT_S
        assert finish_hook.wait_limit_s() == finish_hook.DEFAULT_TIMEOUT_S
    [said] = [r.getMessage() for r in caplog.records]
    assert said.startswith(f"rlprof: {finish_hook.TIMEOUT_ENV}: got '-5' (str); allowed: a number of seconds >= 0")
    monkeypatch.setenv(finish_hook.TIMEOUT_ENV, " 2.5 ")
    assert finish_hook.wait_limit_s() == 2.5
