"""Speculative decoding: tokens per verify step by acceptance rate, and what drafting costs.

A drafter proposes ``k`` tokens, the target model checks them (and yields one token of
its own) in one *verify step* of ``k + 1`` tokens per sequence. With a per-token
acceptance rate ``a`` (each draft token accepted independently, the first rejection
ends the run) the expected tokens per verify step are (Leviathan, Kalman and Matias,
"Fast Inference from Transformers via Speculative Decoding", ICML 2023, eq. 1)::

    E[tokens] = (1 - a^(k+1)) / (1 - a)        (k + 1 when a = 1)

The time per generated token is then (verify step + drafting) / E[tokens]. What the
verify step costs is the target's own roofline at ``k + 1`` tokens per sequence
(:mod:`simengine.perf` builds it): at a small batch decode is memory-bound, so the
extra tokens ride the same weight traffic nearly for free; as the batch grows the step
turns compute-bound and costs ~(k + 1) times a plain step, so the gain FALLS with the
batch (below 1 at large batches, which is why servers switch it off there).

Drafting cost depends on the method (:data:`METHODS`):

* ``draft`` - a separate small model runs ``k`` autoregressive forward passes; each
  costs its parameter share of the target's weight/FLOP terms and its depth share of
  the target's per-layer latencies (collectives, launches; on a wafer the per-layer
  latency is most of a pass).
* ``eagle`` / ``eagle3`` / ``mtp`` - one extra decoder layer on the target's features,
  run ``k`` times: 1/L of a target pass each.
* ``medusa`` - ``k`` heads (one residual block each) in one parallel pass: nearly free.
* ``ngram`` - prompt lookup on the host: free (no model).

Defaults per method (draft tokens, acceptance, drafter size) and their sources are in
:data:`METHODS`; a spec may override ``draft_tokens`` and ``acceptance``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .errors import SimEngineError

DrafterKind = Literal["model", "layer", "heads", "none"]

# Depth (layers) of a draft model against its parameter share: layers grow as about
# params^0.4 in one family (Llama 3.x: 1B 16 layers, 8B 32, 70B 80, 405B 126;
# ln(80/32) / ln(70.6/8.03) = 0.42), so a 6 % draft has ~0.06^0.4 = 32 % of the depth.
DRAFT_DEPTH_EXPONENT = 0.4
# Parameters in one Medusa head (a residual block of hidden^2, the LM head shared)
# against one decoder layer (~12 hidden^2: attention 4 h^2 + MLP 8 h^2).
MEDUSA_HEAD_LAYER_FRACTION = 1.0 / 12.0


@dataclass(frozen=True)
class Method:
    """Published defaults of one speculative-decoding method."""

    name: str
    draft_tokens: int
    acceptance: float
    drafter: DrafterKind
    # Draft model only: its parameters as a share of the target's active parameters.
    drafter_params_fraction: float
    source: str


METHODS: dict[str, Method] = {
    "draft": Method(
        "draft",
        4,
        0.75,
        "model",
        0.06,
        "Chen et al. 2023 (speculative sampling): Chinchilla-70B with a 4B draft (6 %), "
        "K = 4, 2-2.5x; Leviathan et al. 2023: alpha 0.6-0.8 for same-family drafts",
    ),
    "medusa": Method(
        "medusa",
        4,
        0.5,
        "heads",
        0.0,
        "Cai et al. 2024 (Medusa): 4-5 heads, head-1 top-1 accuracy ~0.6 falling per "
        "head; 1.5-1.9x (Medusa-1, no tree) at batch 1",
    ),
    "eagle": Method(
        "eagle",
        5,
        0.75,
        "layer",
        0.0,
        "Li et al. 2024 (EAGLE): one-layer feature drafter, acceptance ~0.75-0.8, "
        "2.7-3.5x at batch 1 (13B-70B)",
    ),
    "eagle3": Method(
        "eagle3",
        6,
        0.8,
        "layer",
        0.0,
        "Li et al. 2025 (EAGLE-3): multi-layer feature fusion, acceptance length ~4 on "
        "chains (up to ~4x with kernel work; SGLang Llama-3.1-8B H100 2.36x)",
    ),
    "mtp": Method(
        "mtp",
        1,
        0.875,
        "layer",
        0.0,
        "DeepSeek-V3 report sec. 5.4.3: one MTP module, second-token acceptance "
        "85-90 %, 1.8x tokens/s",
    ),
    "ngram": Method(
        "ngram",
        3,
        0.4,
        "none",
        0.0,
        "prompt-lookup decoding (Saxena 2023; vLLM/SGLang ngram): no model, gains "
        "only where output repeats the prompt (~1.3-1.6x on chat, more on edits)",
    ),
}

# The method ``speculative: true`` means on each kind of hardware. Cerebras serves with
# speculative decoding using a small draft model of the same family (2024-10 on; draft
# size and acceptance not published, so the generic draft-model defaults apply); on
# GPUs, EAGLE-3 is what SGLang and vLLM recommend.
PRODUCTION_METHOD: dict[str, str] = {"wafer": "draft", "gpu": "eagle3"}
# Software era from which each hardware kind is served with speculative decoding when a
# spec does not say (None: never by default). Cerebras: on since the 2024-10 release
# (the 2024-08 launch figures are plain decoding). GPUs: off (vLLM, TensorRT-LLM and
# NIM benchmarks are published without it unless they say so).
PRODUCTION_ON_FROM: dict[str, str | None] = {"wafer": "2024.10", "gpu": None}


@dataclass(frozen=True)
class Speculation:
    """A resolved speculative-decoding setting (hashable: part of a Deployment)."""

    method: str
    draft_tokens: int
    acceptance: float

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise SimEngineError(
                f"speculative.method must be one of {sorted(METHODS)}, got {self.method!r}"
            )
        k = self.draft_tokens
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise SimEngineError(f"speculative.draft_tokens must be an integer >= 1, got {k!r}")
        a = self.acceptance
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0.0 < a <= 1.0:
            raise SimEngineError(f"speculative.acceptance must be in (0, 1], got {a!r}")

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens per verify step (Leviathan et al.)."""
        return expected_tokens(self.acceptance, self.draft_tokens)


def expected_tokens(acceptance: float, draft_tokens: int) -> float:
    """E[tokens per verify step] = (1 - a^(k+1)) / (1 - a); k + 1 when a = 1."""
    a, k = float(acceptance), int(draft_tokens)
    if a >= 1.0:
        return k + 1.0
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def method_default(method: str) -> Speculation:
    """The published defaults of ``method``."""
    if method not in METHODS:
        raise SimEngineError(f"speculative.method must be one of {sorted(METHODS)}, got {method!r}")
    m = METHODS[method]
    return Speculation(m.name, m.draft_tokens, m.acceptance)


def production_default(kind: str, software: str | None) -> Speculation | None:
    """How ``kind`` hardware is served when a spec omits ``speculative`` (None = off).

    ``software`` is the calibrated version in effect (None: the current one)."""
    start = PRODUCTION_ON_FROM.get(kind)
    # Versions ("2024.10") and dates ("2024-10", "2024-10-22") compare by year and month.
    if start is None or (software is not None and software[:7].replace("-", ".") < start):
        return None
    return method_default(PRODUCTION_METHOD[kind])


def resolve(value: Any, kind: str) -> Speculation | None:
    """A spec's ``speculative`` value: false | true | {"method", "draft_tokens",
    "acceptance"} -> a Speculation (None = off). ``true`` is the hardware's production
    method; an object takes the method's published defaults for what it omits."""
    if value is False or value is None:
        return None
    if value is True:
        return method_default(PRODUCTION_METHOD[kind])
    if isinstance(value, Speculation):
        return value
    if not isinstance(value, dict):
        raise SimEngineError(
            f"speculative must be true, false or an object {{method, draft_tokens, acceptance}}, "
            f"got {value!r}"
        )
    unknown = sorted(set(value) - {"method", "draft_tokens", "acceptance"})
    if unknown:
        raise SimEngineError(
            f"unknown field speculative.{unknown[0]!r}; known: "
            "['acceptance', 'draft_tokens', 'method']"
        )
    base = method_default(value.get("method", PRODUCTION_METHOD[kind]))
    return Speculation(
        base.method,
        value.get("draft_tokens", base.draft_tokens),
        value.get("acceptance", base.acceptance),
    )


@dataclass(frozen=True)
class DrafterShape:
    """What drafting costs against the target model.

    ``params_fraction``: drafter weights/FLOPs per draft pass as a share of the target's
    active parameters; ``depth_fraction``: its per-layer latencies as a share of the
    target's; ``passes``: sequential drafter passes per verify step.
    """

    params_fraction: float
    depth_fraction: float
    passes: int


def drafter_shape(spec: Speculation, layers: int) -> DrafterShape:
    """The drafter of ``spec`` for a target of ``layers`` layers."""
    m = METHODS[spec.method]
    k = spec.draft_tokens
    if m.drafter == "model":
        f = m.drafter_params_fraction
        return DrafterShape(f, f**DRAFT_DEPTH_EXPONENT, k)
    if m.drafter == "layer":
        return DrafterShape(1.0 / layers, 1.0 / layers, k)
    if m.drafter == "heads":
        return DrafterShape(k * MEDUSA_HEAD_LAYER_FRACTION / layers, 1.0 / layers, 1)
    return DrafterShape(0.0, 0.0, 0)


def seconds_per_token(verify_step: float, drafter_pass: float, spec: Speculation, passes: int):
    """(verify step + passes x drafter pass) / E[tokens] (numbers or arrays)."""
    return (verify_step + passes * drafter_pass) / spec.tokens_per_step


def gpu_drafter_seconds(
    shape: DrafterShape,
    *,
    active_params: float,
    bytes_per_param: float,
    batch,
    kv_bytes,
    attention_flops,
    mem_rate: float,
    flop_rate: float,
    attention_rate: float,
    fixed,
):
    """One drafter pass for a batch on GPUs: the drafter's roofline (its share of the
    target's active weights and FLOPs at ``flop_rate``; KV and attention by its depth
    share, attention at ``attention_rate``) plus its depth share of the target step's
    fixed latencies (collectives, launches). ``batch`` and what follows from it
    (``kv_bytes``, ``attention_flops``, ``fixed``): numbers, or arrays of one element
    per batch."""
    if not shape.passes:
        return 0.0
    mem = (shape.params_fraction * active_params * bytes_per_param
           + shape.depth_fraction * kv_bytes) / mem_rate  # fmt: skip
    flop = (2 * shape.params_fraction * active_params * batch / flop_rate
            + shape.depth_fraction * attention_flops / attention_rate)  # fmt: skip
    peak = np.maximum(mem, flop) if isinstance(flop, np.ndarray) else max(mem, flop)
    return peak + shape.depth_fraction * fixed


def wafer_drafter_seconds(
    shape: DrafterShape, *, layers: int, t_layer: float, active_bytes: float, sram_rate: float
) -> float:
    """One drafter pass on a wafer (the drafter sits on the wafer that emits tokens):
    its layers' fixed latency plus streaming its weights."""
    if not shape.passes:
        return 0.0
    return (
        shape.depth_fraction * layers * t_layer + shape.params_fraction * active_bytes / sram_rate
    )
