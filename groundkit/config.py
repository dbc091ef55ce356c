"""Configuration from the environment. Unknown ``GROUNDKIT_*`` variables fail at startup."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import platformdirs
from pydantic import BaseModel, ConfigDict

from groundkit.errors import ConfigError

ENV_PREFIX = "GROUNDKIT_"
KNOWN_ENV = {
    "GROUNDKIT_DSN": "dsn",
    "GROUNDKIT_HOME": "home",
    "GROUNDKIT_TEST_DSN": "test_dsn",
    # read by groundkit.telemetry on its first span: query,reader (docs/telemetry.md)
    "GROUNDKIT_TELEMETRY_INCLUDE": "telemetry_include",
}


class Settings(BaseModel):
    """groundkit's settings. Frozen; unknown keys are errors."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dsn: str | None = None
    home: Path | None = None
    test_dsn: str | None = None
    telemetry_include: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        unknown = sorted(k for k in env if k.startswith(ENV_PREFIX) and k not in KNOWN_ENV)
        if unknown:
            raise ConfigError(
                f"unknown configuration variable(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(KNOWN_ENV))}"
            )
        values: dict[str, str] = {KNOWN_ENV[k]: v for k, v in env.items() if k in KNOWN_ENV and v != ""}
        return cls.model_validate(values)

    def data_home(self) -> Path:
        """Where groundkit keeps its embedded server: ``GROUNDKIT_HOME`` or the per-user data dir."""
        if self.home is not None:
            return self.home.expanduser().resolve()
        return platformdirs.user_data_path("groundkit", appauthor=False)
