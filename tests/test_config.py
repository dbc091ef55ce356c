"""Configuration: unknown GROUNDKIT_* variables fail at startup instead of being ignored."""

from __future__ import annotations

from pathlib import Path

import pytest

from groundkit import ConfigError
from groundkit.config import Settings


def test_unknown_groundkit_env_var_raises_config_error() -> None:
    for env in ({"GROUNDKIT_DNS": "postgresql://localhost/x"},  # a typo of GROUNDKIT_DSN
                {"GROUNDKIT_DSN": "postgresql://localhost/x", "GROUNDKIT_BM25_K1": "1.2"},
                {"GROUNDKIT_": ""}):
        with pytest.raises(ConfigError) as info:
            Settings.from_env(env)
        assert next(k for k in env if k != "GROUNDKIT_DSN") in str(info.value)


def test_known_env_vars_are_read() -> None:
    s = Settings.from_env({"GROUNDKIT_DSN": "postgresql://localhost/x", "GROUNDKIT_HOME": "/tmp/gk",
                           "PATH": "/bin", "GROUNDKITDSN": "not ours"})
    assert s.dsn == "postgresql://localhost/x"
    assert s.home == Path("/tmp/gk")
    assert Settings.from_env({}).dsn is None
    assert Settings.from_env({"GROUNDKIT_DSN": ""}).dsn is None
