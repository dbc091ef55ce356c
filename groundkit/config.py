"""Configuration from the environment. Unknown ``GROUNDKIT_*`` variables fail at startup."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import platformdirs
from pydantic import BaseModel, ConfigDict, ValidationError

from groundkit.errors import ConfigError
from groundkit.prices import PriceTable, load_price_table

ENV_PREFIX = "GROUNDKIT_"
KNOWN_ENV = {
    "GROUNDKIT_DSN": "dsn",
    "GROUNDKIT_HOME": "home",
    "GROUNDKIT_PRICES": "prices",
    "GROUNDKIT_TEST_DSN": "test_dsn",
    # read by groundkit.telemetry on its first span: query,reader (docs/telemetry.md)
    "GROUNDKIT_TELEMETRY_INCLUDE": "telemetry_include",
    # groundkit status --check: the embedding lag that alerts (docs/embedding-worker.md)
    "GROUNDKIT_EMBEDDING_LAG_ALERT_S": "embedding_lag_alert_s",
    "GROUNDKIT_EMBEDDING_LAG_ALERT_CHUNKS": "embedding_lag_alert_chunks",
}

# An active model's oldest unembedded chunk older than this alerts: ten passes of the worker.
EMBEDDING_LAG_ALERT_S = 600.0


class Settings(BaseModel):
    """groundkit's settings. Frozen; unknown keys are errors."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dsn: str | None = None
    home: Path | None = None
    prices: Path | None = None  # the price table (groundkit.prices), validated with the settings
    test_dsn: str | None = None
    telemetry_include: str | None = None
    # 0 or less: never
    embedding_lag_alert_s: float = EMBEDDING_LAG_ALERT_S
    embedding_lag_alert_chunks: int | None = None  # None: no limit on the count

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
        try:
            settings = cls.model_validate(values)
        except ValidationError as exc:
            first = exc.errors()[0]
            name = next((k for k, v in KNOWN_ENV.items() if (v,) == tuple(first["loc"])), str(first["loc"]))
            raise ConfigError(f"{name}: {first['msg']}") from None
        settings.price_table()  # a bad price table fails here, at startup
        return settings

    def price_table(self) -> PriceTable:
        """The price table ``GROUNDKIT_PRICES`` names (empty without one: every call unpriced)."""
        return load_price_table(self.prices)

    def data_home(self) -> Path:
        """Where groundkit keeps its embedded server: ``GROUNDKIT_HOME`` or the per-user data dir.
        A :class:`ConfigError` if that is something other than a directory."""
        home = (self.home.expanduser().resolve() if self.home is not None
                else platformdirs.user_data_path("groundkit", appauthor=False))
        if home.exists() and not home.is_dir():
            raise ConfigError(f"{self.home_source()} {home} is not a directory; "
                              "groundkit keeps its embedded PostgreSQL in a directory there")
        return home

    def home_source(self) -> str:
        """Where the data home comes from, for messages: the variable or the default."""
        return "GROUNDKIT_HOME" if self.home is not None else "groundkit's default data directory"
