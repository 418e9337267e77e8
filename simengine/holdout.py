"""Hold-out figures: public measurements the fit never sees, and the model's error on them.

``data/holdout.toml`` holds dated public figures (GPU serving benchmarks, Cerebras
speeds), each with its source and the workload as a ``predict`` spec. Nothing in the
fit reads them: :func:`evaluate_holdout` only predicts each figure with the given
parameters and reports the relative error, so the table measures predictive skill.
"""

from __future__ import annotations

import statistics
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .errors import SimEngineError
from .params import DEFAULT_PARAMS, EngineParams
from .spec import predict_spec

HOLDOUT_FILE = Path(__file__).with_name("data") / "holdout.toml"
METRICS = (
    "ttft_seconds",
    "time_per_output_token_seconds",
    "tokens_per_second",
    "throughput_tokens_per_second",
)
# What the tests and the table hold the hold-out to (issue 15).
MEDIAN_LIMIT = 0.15
MAX_LIMIT = 0.30


@dataclass(frozen=True)
class HoldoutRow:
    """One hold-out figure: published vs predicted."""

    id: str
    figure: str
    source: str
    url: str
    date: str
    model: str
    metric: str
    published: float
    predicted: float
    error: float  # predicted / published - 1


@dataclass(frozen=True)
class HoldoutResult:
    """All hold-out rows plus the summary the tests assert."""

    rows: tuple[HoldoutRow, ...]

    @property
    def abs_errors(self) -> list[float]:
        return [abs(r.error) for r in self.rows]

    @property
    def median_abs_error(self) -> float:
        return statistics.median(self.abs_errors)

    @property
    def max_abs_error(self) -> float:
        return max(self.abs_errors)

    @property
    def passed(self) -> bool:
        return self.median_abs_error <= MEDIAN_LIMIT and self.max_abs_error <= MAX_LIMIT

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": [asdict(r) for r in self.rows],
            "median_abs_error": self.median_abs_error,
            "max_abs_error": self.max_abs_error,
            "passed": self.passed,
        }


def load_holdout(path: str | Path = HOLDOUT_FILE) -> list[dict[str, Any]]:
    """The hold-out figures as dicts (validated: metric known, value > 0, spec present)."""
    with open(path, "rb") as fh:
        figures = tomllib.load(fh).get("figure", [])
    for f in figures:
        for key in ("id", "figure", "source", "url", "date", "metric", "published", "spec"):
            if key not in f:
                raise SimEngineError(f"hold-out figure {f.get('id', '?')!r} lacks {key!r}")
        if f["metric"] not in METRICS:
            raise SimEngineError(f"hold-out figure {f['id']!r}: unknown metric {f['metric']!r}")
        if not f["published"] > 0:
            raise SimEngineError(f"hold-out figure {f['id']!r}: published must be > 0")
    return figures


def evaluate_holdout(
    params: EngineParams = DEFAULT_PARAMS, path: str | Path = HOLDOUT_FILE
) -> HoldoutResult:
    """Predict every hold-out figure with ``params`` and report the relative errors."""
    rows = []
    for f in load_holdout(path):
        predicted = float(predict_spec(f["spec"], params)[f["metric"]])
        rows.append(
            HoldoutRow(
                id=f["id"],
                figure=f["figure"],
                source=f["source"],
                url=f["url"],
                date=str(f["date"]),
                model=f["spec"]["model"].get("name", "custom"),
                metric=f["metric"],
                published=float(f["published"]),
                predicted=predicted,
                error=predicted / float(f["published"]) - 1.0,
            )
        )
    return HoldoutResult(tuple(rows))
