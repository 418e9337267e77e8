"""Simulation engine: LLM serving performance on wafers and GPUs, queues, calibration.

Plain Python + numpy; no Django and nothing from the rest of the project. The public
names below are what the project calls; see each object's docstring.
"""

from .errors import SimEngineError
from .hardware import HARDWARE, HardwareProfile
from .model import REFERENCE_MODELS, ModelSpec, load_catalog_models, model_spec_from_mapping
from .params import DEFAULT_PARAMS, EngineParams
from .perf import (
    Prediction,
    TaskProfile,
    TurnBreakdown,
    predict,
    token_speed,
)
from .placement import Placement, placement
from .queueing import (
    TIER_PRIORITY,
    JobStream,
    QueueResult,
    WaitEstimate,
    simulate_queue,
    synthetic_jobs,
    wait_estimate,
)
from .served import TIERS, Deployment
from .spread import (
    PROMISE_QUANTILE,
    RUN_SPREAD,
    completion_draw,
    completion_quantile,
    run_median_seconds,
)
from .step import decode_step_seconds

# The calibration's names are loaded on first use (PEP 562): the fit, the hold-outs and
# the spec reader behind them are a third of the engine's import time, and a web or
# worker process that only predicts never needs them.
_CALIBRATION = frozenset(
    {"GDPVAL_TASK", "CalibrationResult", "CalibrationRow", "calibrate", "default_deployments"}
)


def __getattr__(name: str):
    if name in _CALIBRATION:
        from . import calibration

        return getattr(calibration, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "PROMISE_QUANTILE",
    "RUN_SPREAD",
    "completion_draw",
    "completion_quantile",
    "run_median_seconds",
    "DEFAULT_PARAMS",
    "GDPVAL_TASK",
    "HARDWARE",
    "REFERENCE_MODELS",
    "TIERS",
    "TIER_PRIORITY",
    "CalibrationResult",
    "CalibrationRow",
    "Deployment",
    "EngineParams",
    "HardwareProfile",
    "JobStream",
    "ModelSpec",
    "Placement",
    "Prediction",
    "QueueResult",
    "SimEngineError",
    "TaskProfile",
    "TurnBreakdown",
    "WaitEstimate",
    "calibrate",
    "decode_step_seconds",
    "default_deployments",
    "load_catalog_models",
    "model_spec_from_mapping",
    "placement",
    "predict",
    "simulate_queue",
    "synthetic_jobs",
    "token_speed",
    "wait_estimate",
]
