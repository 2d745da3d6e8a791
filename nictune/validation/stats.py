"""Summary statistics for A/B runs: mean ± 95 % confidence interval and Welch's t-test."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from scipy import stats as _st

ALPHA = 0.05


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float
    sd: float
    ci_low: float
    ci_high: float

    @property
    def half_width(self) -> float:
        return (self.ci_high - self.ci_low) / 2

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "half_width": self.half_width}


def summarize(values: Sequence[float], confidence: float = 1 - ALPHA) -> Summary:
    """Mean and a two-sided t confidence interval (a single value has a zero-width one)."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(xs)
    if n == 0:
        nan = float("nan")
        return Summary(0, nan, nan, nan, nan)
    mean = sum(xs) / n
    if n == 1:
        return Summary(1, mean, 0.0, mean, mean)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = float(_st.t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
    return Summary(n, mean, sd, mean - half, mean + half)


@dataclass(frozen=True)
class Comparison:
    """Optimized (b) against default (a); `change` is relative: (b - a) / a."""

    metric: str
    default: Summary
    optimized: Summary
    change: float
    change_ci: tuple[float, float]  # 95 % CI of the relative change (difference / a's mean)
    t: float
    p_value: float
    significant: bool
    higher_is_better: bool
    verdict: str  # "improvement", "regression", "no significant difference"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "default": self.default.to_json(),
                "optimized": self.optimized.to_json(), "change_ci": list(self.change_ci)}


def compare(metric: str, default: Sequence[float], optimized: Sequence[float],
            higher_is_better: bool = True, alpha: float = ALPHA) -> Comparison:
    """Welch's two-sample t-test (unequal variances) of optimized against default."""
    a, b = summarize(default), summarize(optimized)
    nan = float("nan")
    if a.n < 2 or b.n < 2:
        t, p, dof = nan, nan, nan
    elif a.sd == 0 and b.sd == 0:
        t, p, dof = (0.0, 1.0, nan) if a.mean == b.mean else (math.copysign(math.inf,
                                                                            b.mean - a.mean),
                                                              0.0, nan)
    else:
        with warnings.catch_warnings():  # nearly identical runs: scipy warns, result stands
            warnings.simplefilter("ignore", RuntimeWarning)
            res = _st.ttest_ind(_clean(optimized), _clean(default), equal_var=False)
        t, p = float(res.statistic), float(res.pvalue)
        va, vb = a.sd ** 2 / a.n, b.sd ** 2 / b.n
        dof = (va + vb) ** 2 / (va ** 2 / (a.n - 1) + vb ** 2 / (b.n - 1))
    diff = b.mean - a.mean
    if a.n >= 2 and b.n >= 2 and math.isfinite(dof):
        half = float(_st.t.ppf(1 - alpha / 2, dof)) * math.sqrt(
            a.sd ** 2 / a.n + b.sd ** 2 / b.n)
    else:
        half = 0.0 if a.n >= 2 and b.n >= 2 else nan
    base = a.mean if a.mean else nan
    change = diff / base
    ci = ((diff - half) / base, (diff + half) / base)
    significant = bool(math.isfinite(p) and p < alpha)
    better = diff > 0 if higher_is_better else diff < 0
    if not significant:
        verdict = "no significant difference"
    else:
        verdict = "improvement" if better else "regression"
    return Comparison(metric, a, b, change, ci, t, p, significant, higher_is_better, verdict)


def _clean(values: Sequence[float]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]
