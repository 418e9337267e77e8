"""Hold-out figures: public measurements the fit never sees, and the model's error on them.

``data/holdout.toml`` holds dated public figures (GPU serving benchmarks, Cerebras
speeds), each with its source and the workload as a ``predict`` spec. Nothing in the
fit reads them: :func:`evaluate_holdout` only predicts each figure with the given
parameters and reports the relative error, so the table measures predictive skill.
"""

from __future__ import annotations

import statistics
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .errors import SimEngineError
from .params import DEFAULT_PARAMS, EngineParams
from .spec import model_from_spec, parse_spec, predict_spec

HOLDOUT_FILE = Path(__file__).with_name("data") / "holdout.toml"
METRICS = (
    "ttft_seconds",
    "time_per_output_token_seconds",
    "tokens_per_second",
    "throughput_tokens_per_second",
    "total_throughput_tokens_per_second",
)
# A figure that counts the prompt's tokens with the generated ones: vLLM's
# benchmark_throughput.py prints (input + output) tokens / elapsed as its "tokens/s", and
# SGLang's bench_serving reports input and output throughput side by side. The engine's
# output throughput times (input + output) / output: a request brings its input tokens
# with its output tokens, so the two rates keep that ratio (exact for fixed lengths; with
# spread outputs, the mean output).
TOTAL_THROUGHPUT = "total_throughput_tokens_per_second"
_THROUGHPUTS = ("throughput_tokens_per_second", TOTAL_THROUGHPUT)  # what replicas multiply
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
        validate_figure(f, "hold-out figure")
    return figures


_COMMON_KEYS = ("id", "figure", "source", "url", "date", "metric", "published", "spec")


def validate_figure(f: Mapping[str, Any], what: str, extra: Sequence[str] = ()) -> None:
    """A published figure has its source, date, a known metric, a value > 0 and a spec."""
    for key in (*_COMMON_KEYS, *extra):
        if key not in f:
            raise SimEngineError(f"{what} {f.get('id', '?')!r} lacks {key!r}")
    if f["metric"] not in METRICS:
        raise SimEngineError(f"{what} {f['id']!r}: unknown metric {f['metric']!r}")
    if not f["published"] > 0:
        raise SimEngineError(f"{what} {f['id']!r}: published must be > 0")


def _common_fields(f: Mapping[str, Any], predicted: float | None) -> dict[str, Any]:
    # The columns both hold-out tables share: the figure, its source and the error.
    published = float(f["published"])
    return {
        "id": f["id"],
        "figure": f["figure"],
        "source": f["source"],
        "url": f["url"],
        "date": str(f["date"]),
        "model": f["spec"]["model"].get("name", "custom"),
        "metric": f["metric"],
        "published": published,
        "predicted": predicted,
        "error": None if predicted is None else predicted / published - 1.0,
    }


def figure_value(spec: Mapping[str, Any], metric: str, params: EngineParams) -> float:
    """The engine's value of ``metric`` (one of :data:`METRICS`) for a figure's spec."""
    result = predict_spec(spec, params)
    if metric != TOTAL_THROUGHPUT:
        return float(result[metric])
    _, _, workload = parse_spec(spec)
    inp, out = workload["input_tokens"], workload["output_tokens"]
    return float(result["throughput_tokens_per_second"]) * (inp + out) / out


def evaluate_holdout(
    params: EngineParams = DEFAULT_PARAMS, path: str | Path = HOLDOUT_FILE
) -> HoldoutResult:
    """Predict every hold-out figure with ``params`` and report the relative errors."""
    rows = []
    for f in load_holdout(path):
        predicted = figure_value(f["spec"], f["metric"], params)
        rows.append(HoldoutRow(**_common_fields(f, predicted)))
    return HoldoutResult(tuple(rows))


# --------------------------------------------------------------- own hold-out (issue 28)
#
# ``data/holdout_own.toml``: dated public figures gathered for issue 28 and frozen before
# the engine's physics changed. Each figure carries ``kind`` (hardware gpu|wafer, model
# dense|moe, measure latency|throughput), ``table`` (true when the value was read from a
# published table) and ``before_error``: the error of the engine as it was BEFORE issue
# 28, computed on the spec reduced to the old schema by :func:`legacy_spec` (or "n/a: why").
# The spec itself is in the issue-28 schema and is evaluated as written: rows the engine
# cannot parse yet are reported as "not expressible yet" with the engine's reason.

OWN_HOLDOUT_FILE = Path(__file__).with_name("data") / "holdout_own.toml"
KIND_VALUES: dict[str, tuple[str, ...]] = {
    "hardware": ("gpu", "wafer"),
    "model": ("dense", "moe"),
    "measure": ("latency", "throughput"),
}
# Issue-28 spec fields that the pre-issue-28 engine does not know (legacy_spec drops them).
_NEW_MODEL_FIELDS = ("experts", "experts_per_token", "shared_experts", "attention_dtype",
                     "expert_dtype", "activation_dtype",
                     # added after the freeze (fifteenth round; `amended` says where)
                     "sliding_window", "sliding_window_layers",
                     # seventeenth round: stated as the bytes it gives (legacy_spec)
                     "kv_latent")  # fmt: skip
_NEW_TOP_FIELDS = (
    "expert_parallel",
    "pipeline_parallel",
    "max_batch_size",
    "replicas",
    # Added to the schema (and to some figures, disclosed in their `amended`) after the
    # hold-out was frozen; the old engine could state neither, so they drop like the rest.
    "attention_data_parallel",
    "attention_dp_balance",
    "expert_load_balancer",
    "disaggregated_prefill",
    "output_tokens_cv",
    "offline_requests",
    "max_output_tokens",
    "server",
    "kv_admission",
    # twenty-fourth round: a prompt's prefix-cached tokens (the old engine prefilled all)
    "cached_input_tokens",
    # twenty-sixth round: the server's CUDA graphs and overlapped host loop (the old
    # engine had neither eager launches nor a host term)
    "cuda_graphs",
    "overlap_scheduler",
    # twenty-seventh round: the batch sizes the server captured its graphs at
    "cuda_graph_batch_sizes",
    "cuda_graph_max_batch",
)
# dtype names of the new schema that the old one spells differently.
_LEGACY_DTYPE = {"nvfp4": "fp4"}
_LEGACY_GPU_NODE = 8  # the old engine's GPUs have one 8-GPU NVLink node (max TP 8)


class NotExpressible(SimEngineError):
    """A figure's workload has no counterpart in the engine's (old) spec schema."""


def _is_date(v: Any) -> bool:
    s = str(v)
    return len(s) in (7, 10) and s[4] == "-" and s[:4].isdigit() and s[5:7].isdigit()


def legacy_spec(spec: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """Reduce an issue-28 spec to the pre-issue-28 schema: (old spec, throughput factor).

    The rule is mechanical (the same for every figure, written before any error was seen):

    - model: ``experts``, ``experts_per_token``, ``shared_experts`` dropped (the old engine
      reads only ``active_params_b``); weights take ``expert_dtype`` when given (experts hold
      most bytes), else ``dtype``; ``attention_dtype`` dropped; ``nvfp4`` -> ``fp4``;
      ``kv_latent`` -> the ``kv_bytes_per_token`` it gives (where none is stated).
    - ``hardware = "gb200-nvl72"`` -> ``b200`` (one 8-GPU node); a tensor-parallel group
      larger than 8 GPUs cannot be stated: :class:`NotExpressible`. B200 stays the old
      192 GB profile (180 GB cannot be stated).
    - ``expert_parallel``, ``pipeline_parallel`` (devices = tp x pp is kept),
      ``max_batch_size``, ``attention_data_parallel``, ``expert_load_balancer``,
      ``disaggregated_prefill``,
      ``output_tokens_cv``, ``server``, ``kv_admission``, ``cached_input_tokens``,
      ``cuda_graphs``, ``overlap_scheduler``, ``cuda_graph_batch_sizes``,
      ``cuda_graph_max_batch``
      dropped; ``offline_requests`` N (a finite run, added to some figures after the
      hold-out was frozen) ->
      ``concurrency`` N, the steady-state form the frozen spec had.
    - ``replicas``: dropped; the spec describes one replica and the returned factor
      (= replicas) multiplies the throughput metrics (output and total).
    - ``rate_per_second`` (open loop): :class:`NotExpressible` (no closed-loop equivalent).
    - ``speculative``: an object -> ``true``; omitted -> the production default of the new
      schema made explicit (cs-3: ``true``, GPUs: ``false``).
    - ``software`` as a date: GPUs -> dropped (the old engine has one GPU era, its current
      one); cs-3 -> ``"YYYY.MM"`` (the engine uses the latest calibrated era not newer).
    """
    old = {k: v for k, v in spec.items() if k not in _NEW_TOP_FIELDS}
    if spec.get("offline_requests") is not None:
        old["concurrency"] = spec["offline_requests"]
    model = dict(spec["model"])
    if model.get("kv_latent") is not None and model.get("kv_bytes_per_token") is None:
        # A stated latent width: the old engine reads the cache's bytes it gives.
        model["kv_bytes_per_token"] = model_from_spec(spec["model"]).kv_bytes_per_token
    if model.get("expert_dtype"):
        model["dtype"] = model["expert_dtype"]
    for key in _NEW_MODEL_FIELDS:
        model.pop(key, None)
    for key in ("dtype", "kv_dtype"):
        if key in model:
            model[key] = _LEGACY_DTYPE.get(model[key], model[key])
    old["model"] = model
    hardware = spec.get("hardware")
    if hardware == "gb200-nvl72":
        old["hardware"] = "b200"
    wafer = old.get("hardware") == "cs-3"
    tp = spec.get("tensor_parallel") or 1
    if not wafer and tp > _LEGACY_GPU_NODE:
        raise NotExpressible(
            f"tensor/expert-parallel group of {tp} GPUs exceeds the old engine's "
            f"{_LEGACY_GPU_NODE}-GPU NVLink node"
        )
    if spec.get("rate_per_second") is not None:
        raise NotExpressible("open-loop rate_per_second has no closed-loop equivalent")
    old.pop("rate_per_second", None)
    spec_dec = spec.get("speculative")
    old["speculative"] = wafer if spec_dec is None else bool(spec_dec)
    software = spec.get("software")
    if software is not None and _is_date(software):
        if wafer:
            old["software"] = str(software)[:7].replace("-", ".")
        else:
            old.pop("software")
    return old, float(spec.get("replicas") or 1)


def _validate_own(f: Mapping[str, Any]) -> None:
    fid = f.get("id", "?")
    validate_figure(f, "own hold-out figure", ("kind", "table", "assumed"))
    kind = f["kind"]
    if not isinstance(kind, Mapping) or set(kind) != set(KIND_VALUES):
        raise SimEngineError(f"own hold-out figure {fid!r}: kind needs {sorted(KIND_VALUES)}")
    for dim, allowed in KIND_VALUES.items():
        if kind[dim] not in allowed:
            raise SimEngineError(f"own hold-out figure {fid!r}: kind.{dim} not in {allowed}")
    if not isinstance(f["table"], bool):
        raise SimEngineError(f"own hold-out figure {fid!r}: table must be true or false")
    before = f.get("before_error")
    if before is not None and not isinstance(before, (int, float)):
        if not (isinstance(before, str) and before.startswith("n/a")):
            raise SimEngineError(f"own hold-out figure {fid!r}: before_error number or 'n/a: ...'")


def load_own_holdout(path: str | Path = OWN_HOLDOUT_FILE) -> list[dict[str, Any]]:
    """The own hold-out figures as dicts (validated; ids unique)."""
    with open(path, "rb") as fh:
        figures = tomllib.load(fh).get("figure", [])
    for f in figures:
        _validate_own(f)
    ids = [f["id"] for f in figures]
    if len(set(ids)) != len(ids):
        raise SimEngineError("own hold-out figure ids must be unique")
    return figures


@dataclass(frozen=True)
class OwnHoldoutRow(HoldoutRow):
    """One own hold-out figure: published vs predicted (None when not expressible yet)."""

    predicted: float | None  # type: ignore[assignment]
    error: float | None  # type: ignore[assignment]  # None when not expressible
    kind: Mapping[str, str]
    table: bool
    reason: str  # why not expressible ("" when predicted)
    before_error: float | str | None  # recorded in the file before issue 28's physics
    amended: str = ""  # how and when the frozen spec was amended ("" = as frozen)

    @property
    def label(self) -> str:
        """The figure's id, with `` *`` when its spec was amended after the freeze."""
        return self.id + (" *" if self.amended else "")


@dataclass(frozen=True)
class KindSummary:
    """Median and max |error| of the figures of one kind (e.g. hardware = wafer)."""

    dimension: str
    value: str
    n: int
    median_abs_error: float | None
    max_abs_error: float | None


def summarise_by_kind(
    pairs: Sequence[tuple[Mapping[str, str], float | None]],
) -> list[KindSummary]:
    """Per kind value (gpu/wafer, dense/moe, latency/throughput): n, median and max |error|.

    ``pairs`` are (kind, error); errors that are None (not expressible) are left out.
    """
    out = []
    for dim, values in KIND_VALUES.items():
        for value in values:
            errs = [abs(e) for k, e in pairs if k[dim] == value and e is not None]
            out.append(
                KindSummary(dim, value, len(errs),
                            statistics.median(errs) if errs else None,
                            max(errs) if errs else None)
            )  # fmt: skip
    return out


@dataclass(frozen=True)
class OwnHoldoutResult:
    """The own hold-out rows, the overall summary and the error by kind."""

    rows: tuple[OwnHoldoutRow, ...]

    @property
    def expressible(self) -> list[OwnHoldoutRow]:
        return [r for r in self.rows if r.error is not None]

    @property
    def median_abs_error(self) -> float | None:
        errs = [abs(r.error) for r in self.expressible if r.error is not None]
        return statistics.median(errs) if errs else None

    @property
    def max_abs_error(self) -> float | None:
        errs = [abs(r.error) for r in self.expressible if r.error is not None]
        return max(errs) if errs else None

    def by_kind(self) -> list[KindSummary]:
        return summarise_by_kind([(r.kind, r.error) for r in self.rows])

    def before_by_kind(self) -> list[KindSummary]:
        return summarise_by_kind(
            [(r.kind, r.before_error if isinstance(r.before_error, float) else None)
             for r in self.rows]
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": [asdict(r) for r in self.rows],
            "median_abs_error": self.median_abs_error,
            "max_abs_error": self.max_abs_error,
            "by_kind": [asdict(k) for k in self.by_kind()],
            "before_by_kind": [asdict(k) for k in self.before_by_kind()],
        }


def _own_row(f: Mapping[str, Any], predicted: float | None, reason: str) -> OwnHoldoutRow:
    before = f.get("before_error")
    return OwnHoldoutRow(
        **_common_fields(f, predicted),
        kind=dict(f["kind"]),
        table=bool(f["table"]),
        reason=reason,
        before_error=float(before) if isinstance(before, (int, float)) else before,
        amended=str(f.get("amended", "")),
    )


def predict_own_figure(
    f: Mapping[str, Any], params: EngineParams = DEFAULT_PARAMS, *, legacy: bool = False
) -> float:
    """The engine's value for one own hold-out figure (``legacy``: via :func:`legacy_spec`).

    Raises :class:`SimEngineError` (incl. :class:`NotExpressible`) when the spec cannot be
    evaluated.
    """
    spec, factor = legacy_spec(f["spec"]) if legacy else (f["spec"], 1.0)
    value = figure_value(spec, f["metric"], params)
    return value * factor if f["metric"] in _THROUGHPUTS else value


def evaluate_own_holdout(
    params: EngineParams = DEFAULT_PARAMS,
    path: str | Path = OWN_HOLDOUT_FILE,
    *,
    legacy: bool = False,
) -> OwnHoldoutResult:
    """Predict every own hold-out figure; rows the engine cannot parse carry the reason.

    ``legacy=True`` evaluates the specs reduced by :func:`legacy_spec` (how the
    ``before_error`` column was produced, before issue 28's physics).
    """
    rows = []
    for f in load_own_holdout(path):
        try:
            rows.append(_own_row(f, predict_own_figure(f, params, legacy=legacy), ""))
        except SimEngineError as exc:
            rows.append(_own_row(f, None, str(exc)))
    return OwnHoldoutResult(tuple(rows))
