"""The load a plan is for: requests/s, and how long prompts and outputs are.

A length is given one of three ways (the same in the CLI and the admin API):

    200                      every request: exactly 200 tokens
    {"mean": 200, "p99": 800}  a log-normal with that mean and 99th percentile, the
                             usual shape of prompt lengths (long right tail)
    [40, 40, 200, 1000]      an empirical list (say, from logs): drawn uniformly

Lengths are drawn from a random.Random the caller seeds, so a plan is repeatable.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

Z_99 = 2.3263478740408408  # standard normal 99th percentile
MAX_LIST = 100_000
MAX_TOKENS = 10_000_000


class LoadError(ValueError):
    """A load that cannot be planned for; `param` names the field, the message what to fix."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True, slots=True)
class Lengths:
    values: tuple[int, ...] = ()  # fixed (one value) or an empirical list
    mu: float = 0.0  # log-normal parameters, when values is empty
    sigma: float = 0.0
    mean: float = 0.0
    p99: float = 0.0

    def draw(self, rng: random.Random) -> int:
        if self.values:
            return self.values[rng.randrange(len(self.values))]
        return max(1, round(rng.lognormvariate(self.mu, self.sigma)))

    @property
    def max(self) -> float:
        """The longest a draw can be (log-normal: its 99.99th percentile, where the
        context check looks; longer draws are clipped to the context)."""
        if self.values:
            return max(self.values)
        return math.exp(self.mu + 3.719 * self.sigma)


def fixed(n: int) -> Lengths:
    return Lengths(values=(n,), mean=n, p99=n)


def empirical(values: list[int]) -> Lengths:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]
    return Lengths(values=tuple(values), mean=sum(values) / len(values), p99=p99)


def lognormal(mean: float, p99: float, param: str) -> Lengths:
    """mean = exp(mu + s^2/2) and p99 = exp(mu + z s): s is the smaller root of
    s^2/2 - z s + ln(p99/mean) = 0, which exists while p99/mean <= exp(z^2/2) (~14.9)."""
    if not 1 <= mean <= p99:
        raise LoadError(f"{param}: need 1 <= mean <= p99 (got mean {mean}, p99 {p99})", param)
    gap = math.log(p99 / mean)
    disc = Z_99 * Z_99 - 2 * gap
    if disc < 0:
        raise LoadError(
            f"{param}: a p99 over {math.exp(Z_99 * Z_99 / 2):.1f} times the mean fits no "
            "log-normal; give the lengths as a list instead",
            param,
        )
    sigma = Z_99 - math.sqrt(disc)
    return Lengths(mu=math.log(mean) - sigma * sigma / 2, sigma=sigma, mean=mean, p99=p99)


def lengths_of(raw: object, param: str) -> Lengths:
    """A length spec as the API takes it (see the module's docstring)."""
    if isinstance(raw, bool):
        raise LoadError(f"{param}: a number of tokens, a list, or {{mean, p99}}", param)
    if isinstance(raw, int):
        return fixed(_count(raw, param))
    if isinstance(raw, list):
        if not 1 <= len(raw) <= MAX_LIST:
            raise LoadError(f"{param}: a list of 1 to {MAX_LIST} lengths", param)
        return empirical([_count(v, param) for v in raw])
    if isinstance(raw, dict) and set(raw) == {"mean", "p99"}:
        mean, p99 = raw["mean"], raw["p99"]
        ok = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (mean, p99))
        if not ok or p99 > MAX_TOKENS:
            raise LoadError(f"{param}: mean and p99 are numbers of tokens", param)
        return lognormal(float(mean), float(p99), param)
    raise LoadError(
        f'{param}: give a number of tokens (200), a list ([40, 200, 1000]) or {{"mean": 200, '
        '"p99": 800}',
        param,
    )


def _count(value: object, param: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOKENS:
        raise LoadError(f"{param}: token counts are whole numbers from 1 to {MAX_TOKENS}", param)
    return value


@dataclass(frozen=True, slots=True)
class TargetLoad:
    rps: float
    prompt: Lengths
    output: Lengths


@dataclass(frozen=True, slots=True)
class SLOTarget:
    ttft_p99_s: float
    min_tokens_per_s: float  # per stream, after the first token; a p99 floor
