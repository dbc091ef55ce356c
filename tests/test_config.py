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


def test_a_home_that_is_not_a_directory_is_a_configuration_error(tmp_path: Path) -> None:
    """GROUNDKIT_HOME naming a file (or a path through one) died with a raw FileExistsError
    (issue 39, item 11): it is a ConfigError that says what is wrong, from the library and as one
    error line from every command that would start the embedded server."""
    from typer.testing import CliRunner

    from groundkit import embedded
    from groundkit.cli import app

    file = tmp_path / "home"
    file.write_text("not a directory")
    with pytest.raises(ConfigError, match=rf"^GROUNDKIT_HOME {file} is not a directory"):
        embedded.ensure_server(Settings(home=file), quiet=True)
    with pytest.raises(ConfigError, match=rf"^GROUNDKIT_HOME {file / 'sub'} cannot be created: Not a directory"):
        embedded.ensure_server(Settings(home=file / "sub"), quiet=True)
    for command in (["db", "url"], ["db", "status"], ["status"], ["migrate"]):
        result = CliRunner().invoke(app, command, env={"GROUNDKIT_HOME": str(file), "GROUNDKIT_DSN": None})
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), (command, result.output)
        assert result.stdout == ""
        assert result.stderr.splitlines() == [f"error: GROUNDKIT_HOME {file} is not a directory; groundkit keeps "
                                              "its embedded PostgreSQL in a directory there"], command
