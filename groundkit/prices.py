"""The price table: what a model's tokens cost, from a TOML file named by ``GROUNDKIT_PRICES``.

::

    [models."gpt-4o-mini"]
    input_per_1k = 0.00015     # price of 1,000 input tokens
    output_per_1k = 0.0006     # price of 1,000 output tokens
    currency = "USD"           # ISO 4217 code

Validated when groundkit's settings are read (every CLI command starts with that): an unknown
key, a negative price or a malformed currency is a :class:`~groundkit.errors.ConfigError`.
Prices are decimals, read from the file's text without a detour through binary floats.
"""

from __future__ import annotations

import functools
import tomllib
from decimal import Decimal
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from groundkit.errors import ConfigError

__all__ = ["ModelPrice", "PriceTable", "load_price_table"]


class ModelPrice(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    input_per_1k: Decimal = Field(ge=0, allow_inf_nan=False)
    output_per_1k: Decimal = Field(ge=0, allow_inf_nan=False)
    currency: str = Field(pattern=r"^[A-Z]{3}$")

    def cost(self, tokens_in: int, tokens_out: int) -> Decimal:
        return (self.input_per_1k * tokens_in + self.output_per_1k * tokens_out) / 1000


class PriceTable(BaseModel):
    """Prices by model name. A model that is not here has no price: its calls are recorded
    with a null cost (``unpriced``), never as free."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    models: dict[str, ModelPrice] = Field(default_factory=dict)

    def price(self, model: str) -> ModelPrice | None:
        return self.models.get(model)


def parse_price_table(text: str, source: str = "price table") -> PriceTable:
    try:
        data = tomllib.loads(text, parse_float=Decimal)
        return PriceTable.model_validate(data)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML ({exc})") from None
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"{source}: {problems}") from None


@functools.cache
def _load(path: Path, mtime_ns: int) -> PriceTable:
    return parse_price_table(path.read_text(encoding="utf-8"), f"GROUNDKIT_PRICES={path}")


def load_price_table(path: Path | None) -> PriceTable:
    """The table in ``path`` (re-read when the file changes), or an empty one without a path."""
    if path is None:
        return PriceTable()
    try:
        mtime = path.stat().st_mtime_ns
    except OSError as exc:
        raise ConfigError(f"GROUNDKIT_PRICES={path}: cannot read it ({exc.strerror})") from None
    return _load(path, mtime)
