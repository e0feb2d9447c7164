"""Model call prices in USD per million tokens, cached and cache-written input apart."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from saga_runtime._planning import TokenUsage

__all__ = ["Price", "PriceTable"]

logger = logging.getLogger("saga_runtime")

Price = tuple[float, float] | Mapping[str, float]


@dataclass(frozen=True, slots=True)
class _Rate:
    """USD per million tokens."""

    input: float
    output: float
    cached_input: float
    cache_write: float


def _number(model: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"prices[{model!r}]: {name} must be a number of USD per million tokens, got {value!r}")
    return float(value)


def _rate(model: str, price: Any) -> _Rate:
    if isinstance(price, Mapping):
        unknown = set(price) - {"input", "output", "cached_input", "cache_write"}
        if unknown or "input" not in price or "output" not in price:
            raise ValueError(
                f"prices[{model!r}] must have 'input' and 'output' and may have 'cached_input' and 'cache_write'; "
                f"got the keys {sorted(price)}"
            )
        given = {name: _number(model, name, value) for name, value in price.items()}
        return _Rate(
            given["input"],
            given["output"],
            given.get("cached_input", given["input"]),
            given.get("cache_write", given["input"]),
        )
    if isinstance(price, tuple | list) and len(price) == 2:
        price_in, price_out = _number(model, "input", price[0]), _number(model, "output", price[1])
        return _Rate(price_in, price_out, price_in, price_in)
    raise ValueError(f"prices[{model!r}] must be (input, output) or a mapping of prices, got {price!r}")


class PriceTable:
    """Find a model's price (exact, else longest prefix) and cost a call's usage."""

    def __init__(self, prices: Mapping[str, Price] | None) -> None:
        self._rates = {str(model): _rate(str(model), price) for model, price in (prices or {}).items()}
        self._warned: set[str] = set()

    def rate(self, model: str) -> _Rate | None:
        """Return `model`'s price, else its longest prefix's."""
        if model in self._rates:
            return self._rates[model]
        family = max((key for key in self._rates if model.startswith(key)), key=len, default=None)
        return None if family is None else self._rates[family]

    def cost(self, usage: TokenUsage, *models: str) -> float:
        """Return `usage`'s USD cost at the first priced of `models` (else 0)."""
        for model in models:
            rate = self.rate(model)
            if rate is not None:
                return (
                    usage.uncached_tokens * rate.input
                    + usage.cached_tokens * rate.cached_input
                    + usage.cache_write_tokens * rate.cache_write
                    + usage.completion_tokens * rate.output
                ) / 1_000_000
        name = models[0] if models else "?"
        if name not in self._warned:
            self._warned.add(name)
            logger.warning("model %r has no price in the price table: its calls are counted at 0 USD", name)
        return 0.0
