"""What a calibration gives back: the residual table and the fitted parameters.

Plain data, one level below :mod:`simengine.report` (which prints it) and
:mod:`simengine.calibration` (which computes it and whose CLI prints it through the
report): calibration -> report -> results, no cycle. The names stay importable from
:mod:`simengine.calibration`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .params import EngineParams


@dataclass(frozen=True)
class CalibrationRow:
    """One line of the calibration table."""

    name: str
    group: str
    published: str
    target_low: float
    target_high: float
    model_value: float
    residual: float
    tolerance: float
    passed: bool
    fitted: bool


@dataclass(frozen=True)
class ParameterRow:
    """A fitted parameter: prior, fitted value, and how much the data determined it."""

    name: str
    value: float
    prior: float
    prior_sd: float
    transform: str
    data_share: float
    why: str


@dataclass(frozen=True)
class CalibrationResult:
    """Outcome of :func:`calibrate`: the parameters and the residual table."""

    params: EngineParams
    rows: tuple[CalibrationRow, ...]
    parameters: tuple[ParameterRow, ...]
    fitted: bool
    iterations: int
    cost: float
    # Rank of the fit targets' sensitivity to the fitted parameters (singular values
    # above RANK_TOLERANCE of the largest); never below the number of fitted parameters.
    rank: int = 0
    singular_values: tuple[float, ...] = ()

    @property
    def passed(self) -> bool:
        """All targets and checks within tolerance."""
        return all(r.passed for r in self.rows)

    @property
    def failures(self) -> list[CalibrationRow]:
        """Rows outside tolerance."""
        return [r for r in self.rows if not r.passed]

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict."""
        return {
            "params": self.params.to_dict(),
            "rows": [asdict(r) for r in self.rows],
            "parameters": [asdict(p) for p in self.parameters],
            "fitted": self.fitted,
            "iterations": self.iterations,
            "cost": self.cost,
            "rank": self.rank,
            "passed": self.passed,
        }
