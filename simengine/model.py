"""Model specifications as data, plus the reference models used for cross-checks."""

from __future__ import annotations

import functools
import math
import tomllib
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from .errors import SimEngineError
from .moe import touched_fraction

# Expert layout assumed for an MoE whose expert counts are not given: DeepSeek-style
# 256 routed experts, 8 active per token (the shape used in the notes' E_uniq example).
DEFAULT_EXPERTS = 256
DEFAULT_EXPERTS_PER_TOKEN = 8


class HashOnce:
    """Base of a frozen dataclass (not slots) whose hash is computed once per object
    and kept (the engine's caches hash their key objects on every lookup); apply
    ``hash_once`` over the dataclass. The hash is kept in a slot: not in ``vars()``,
    not in the pickled state (string hashes differ between processes)."""

    __slots__ = ("_field_hash",)


def hash_once(cls):
    """Class decorator over a frozen dataclass derived from HashOnce: the dataclass's
    own hash (the fields' tuple), kept after the first call. Equality and hashing
    still follow the fields only."""
    names = tuple(f.name for f in fields(cls) if (f.compare if f.hash is None else f.hash))

    def __hash__(self) -> int:
        try:
            return self._field_hash
        except AttributeError:
            h = hash(tuple(getattr(self, n) for n in names))
            object.__setattr__(self, "_field_hash", h)
            return h

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)

    cls.__hash__ = __hash__
    cls.__getstate__ = __getstate__
    return cls


@hash_once
@dataclass(frozen=True)
class ModelSpec(HashOnce):
    """Architecture figures of one model (a mixture of experts when active < total).

    ``kv_bytes_per_token`` is summed over all layers (K and V). ``experts`` and
    ``experts_per_token`` only matter for MoE; 0 means "use the DeepSeek-style default".
    ``shared_experts`` are always-active experts (sizes: :mod:`simengine.moe`).
    ``attention_bytes`` / ``expert_bytes`` are the bytes per parameter of the
    non-expert weights and of the expert weights (0 = ``bytes_per_param``);
    ``attention_activation_bytes`` / ``expert_activation_bytes`` the bytes per value of
    the activations their GEMMs multiply them by (0 = quantized like the weights;
    :meth:`simengine.hardware.HardwareProfile.mma_peak`).
    """

    name: str
    total_params: float
    active_params_prefill: float
    active_params_decode: float
    layers: int
    hidden_size: int
    bytes_per_param: float
    kv_bytes_per_token: float
    context_window: int
    experts: int = 0
    experts_per_token: int = 0
    shared_experts: int = 0
    attention_bytes: float = 0.0
    expert_bytes: float = 0.0
    attention_activation_bytes: float = 0.0
    expert_activation_bytes: float = 0.0
    # Ways the KV cache splits over a tensor-parallel group (simengine.kv.
    # tp_kv_replication): the KV heads of grouped-query attention, 1 for a latent cache
    # shared by all heads (MLA); 0 = not stated (splits evenly, no replication).
    kv_shards: int = 0
    # Attention shape (0 = not stated): query heads, head dimension, bytes per cached KV
    # value. They set attention's FLOPs (attention_width, decode_attention_flops).
    heads: int = 0
    head_dim: int = 0
    kv_value_bytes: float = 0.0
    # True when the cache is a latent shared by all heads (MLA: a published cache smaller
    # than K and V per KV head); multi-query attention (one KV head) is not one.
    latent_cache: bool = False
    # Sliding-window attention (:meth:`kv_tokens`): ``window_layers`` of the layers attend
    # over (and keep KV for) only the last ``window_tokens`` tokens; 0 layers = every
    # layer attends over the whole context. A window of 0 tokens is a layer with no
    # growing cache at all (attention-free or linear-attention layers).
    window_tokens: int = 0
    window_layers: int = 0
    # A latent cache's width, stated: values per token per layer that every query head
    # attends over (DeepSeek-V3 / Kimi K2: kv_lora_rank 512 + qk_rope_head_dim 64 = 576).
    # 0 = not stated: read off ``kv_bytes_per_token`` (/ layers / ``kv_value_bytes``).
    kv_latent: int = 0

    # Derived figures are cached_property: computed once per spec (the hot path asks
    # for them per token step); they live outside the dataclass fields, so equality and
    # hashing still follow the fields only.

    def __post_init__(self) -> None:
        for field in (
            "total_params",
            "active_params_prefill",
            "active_params_decode",
            "bytes_per_param",
            "kv_bytes_per_token",
        ):
            value = getattr(self, field)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise SimEngineError(f"ModelSpec {self.name!r}: {field} must be > 0, got {value!r}")
        for field in ("heads", "head_dim", "kv_latent"):
            value = getattr(self, field)
            if isinstance(value, bool) or not (isinstance(value, int) and value >= 0):
                raise SimEngineError(
                    f"ModelSpec {self.name!r}: {field} must be an integer >= 0, got {value!r}"
                )
        value = self.kv_value_bytes
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise SimEngineError(
                f"ModelSpec {self.name!r}: kv_value_bytes must be >= 0, got {value!r}"
            )
        for field in ("window_tokens", "window_layers"):
            value = getattr(self, field)
            if isinstance(value, bool) or not (isinstance(value, int) and value >= 0):
                raise SimEngineError(
                    f"ModelSpec {self.name!r}: {field} must be an integer >= 0, got {value!r}"
                )
        if self.kv_latent and not self.latent_cache:
            raise SimEngineError(
                f"ModelSpec {self.name!r}: kv_latent ({self.kv_latent}) needs latent_cache"
            )
        if self.window_layers > self.layers:
            raise SimEngineError(
                f"ModelSpec {self.name!r}: window_layers ({self.window_layers}) exceeds "
                f"layers ({self.layers})"
            )
        for field in ("layers", "hidden_size", "context_window"):
            value = getattr(self, field)
            if not (isinstance(value, int) and value > 0):
                raise SimEngineError(
                    f"ModelSpec {self.name!r}: {field} must be a positive integer, got {value!r}"
                )
        for field in ("active_params_prefill", "active_params_decode"):
            if getattr(self, field) > self.total_params * (1 + 1e-9):
                raise SimEngineError(
                    f"ModelSpec {self.name!r}: {field} ({getattr(self, field):.3g}) exceeds "
                    f"total_params ({self.total_params:.3g})"
                )
        if self.is_moe:
            experts, k = self.expert_layout
            if not 0 < k < experts:
                raise SimEngineError(
                    f"ModelSpec {self.name!r}: need 0 < experts_per_token < experts, "
                    f"got {k} of {experts}"
                )
            if self.non_expert_params < -1e-9 * self.total_params:
                raise SimEngineError(
                    f"ModelSpec {self.name!r}: active/total parameters are inconsistent with "
                    f"{k} of {experts} experts (+{self.shared_experts} shared) active "
                    "(the non-expert part would be negative)"
                )

    @functools.cached_property
    def is_moe(self) -> bool:
        """True for a mixture of experts (decode activates fewer parameters than it stores)."""
        return self.active_params_decode < self.total_params * (1 - 1e-9)

    @functools.cached_property
    def expert_layout(self) -> tuple[int, int]:
        """(routed experts E, experts per token k).

        Unspecified counts default to 256 experts, 8 per token; when that would leave
        negative shared parameters (very sparse models: active/total < 8/256), k is
        lowered to the largest value consistent with active/total.
        """
        experts = self.experts or DEFAULT_EXPERTS
        if self.experts_per_token:
            return experts, self.experts_per_token
        ratio = self.active_params_decode / self.total_params
        return experts, max(1, min(DEFAULT_EXPERTS_PER_TOKEN, math.floor(experts * ratio)))

    @functools.cached_property
    def per_expert_params(self) -> float:
        """Parameters of one expert, e = (total - active) / (E - k) (0 when dense)."""
        if not self.is_moe:
            return 0.0
        experts, k = self.expert_layout
        return (self.total_params - self.active_params_decode) / (experts - k)

    @functools.cached_property
    def expert_params(self) -> float:
        """Parameters in routed experts X = E e (total = S + X and active = S + X k/E)."""
        return self.expert_layout[0] * self.per_expert_params if self.is_moe else 0.0

    @functools.cached_property
    def shared_params(self) -> float:
        """Parameters every token uses (attention, dense layers, embeddings, shared experts)."""
        return self.total_params - self.expert_params

    @functools.cached_property
    def shared_expert_params(self) -> float:
        """Parameters of the always-active shared experts, S e."""
        return self.shared_experts * self.per_expert_params

    @functools.cached_property
    def non_expert_params(self) -> float:
        """Attention, embeddings and dense layers: total - (E + S) e."""
        return self.shared_params - self.shared_expert_params

    @functools.cached_property
    def attention_bytes_per_param(self) -> float:
        """Bytes per non-expert parameter (``attention_dtype``)."""
        return self.attention_bytes or self.bytes_per_param

    @functools.cached_property
    def expert_bytes_per_param(self) -> float:
        """Bytes per expert parameter (``expert_dtype``)."""
        return self.expert_bytes or self.bytes_per_param

    @functools.cached_property
    def weight_bytes(self) -> float:
        """Bytes of all weights (memory capacity follows total parameters)."""
        return (
            self.non_expert_params * self.attention_bytes_per_param
            + (self.shared_expert_params + self.expert_params) * self.expert_bytes_per_param
        )

    @functools.cached_property
    def _always_read_bytes(self) -> float:
        return (
            self.non_expert_params * self.attention_bytes_per_param
            + self.shared_expert_params * self.expert_bytes_per_param
        )

    @property
    def always_read_bytes(self) -> float:
        """Bytes every decode step reads whatever the routing: the non-expert weights
        and the shared experts (all weights of a dense model)."""
        return self._always_read_bytes if self.is_moe else self.weight_bytes

    @functools.cached_property
    def _routed_traffic(self) -> tuple[float, float]:
        # (bytes of all routed experts, k/E): the hot path's constants.
        experts, k = self.expert_layout
        return self.expert_params * self.expert_bytes_per_param, k / experts

    def expert_weight_bytes(self, batch: float):
        """Routed-expert bytes a decode step of ``batch`` tokens reads: the distinct
        experts touched (:func:`simengine.moe.experts_touched`: E (1 - (1 - k/E)^B))
        times e, at the experts' bytes (a number or an array)."""
        if not self.is_moe:
            return 0.0
        full, share = self._routed_traffic
        return full * touched_fraction(share, batch)

    def decode_weight_bytes(self, batch: float) -> float:
        """Weight bytes streamed by one decode step of ``batch`` tokens.

        Dense: every weight. MoE: non-expert and shared-expert weights plus the distinct
        routed experts the batch touches (:func:`simengine.moe.experts_touched`), each
        part at its own dtype. ``batch`` may be an array (one figure per element).
        """
        if not self.is_moe:
            return self.weight_bytes
        return self._always_read_bytes + self.expert_weight_bytes(batch)

    @functools.cached_property
    def active_split(self) -> tuple[float, float]:
        """(non-expert, expert) parameters one token activates (FLOPs by dtype)."""
        if not self.is_moe:
            return self.active_params_decode, 0.0
        return self.non_expert_params, self.active_params_decode - self.non_expert_params

    @functools.cached_property
    def attention_width(self) -> int:
        """Query heads x head dimension of one layer: what attention multiplies by per
        query and context token (QK^T, then PV). With grouped-query attention it can
        differ from the hidden size (Qwen3-30B-A3B: 32 x 128 = 4096 against a hidden of
        2048; GLM-4.6: 96 x 128 = 12288 against 5120). Not stated: the hidden size."""
        if not self.heads:
            return self.hidden_size
        return self.heads * (self.head_dim or self.hidden_size // self.heads)

    @functools.cached_property
    def decode_attention_flops(self) -> float:
        """FLOPs of one decoded token's attention per context token, over all layers:
        2 (QK^T) + 2 (PV) per unit of attention width.

        A latent cache shared by all heads (multi-head latent attention decoded with the
        up-projections absorbed: DeepSeek-V2, section 2.1.3; FlashMLA) has every query
        head attend over the whole latent (576 values per token in DeepSeek-V3) instead
        of a 128-wide head: 4 x heads x latent, ten times a GQA model of the same hidden
        size, which is why MLA decode is compute-bound (FlashMLA's deep dive, 2025-04:
        2 h_q s_k (d_k + d_v) FLOPs with d_k = 576, d_v = 512, i.e. 6 % below 4 x 576;
        up to 660 TFLOPS of BF16 on an H800). The latent width is :attr:`latent_width`:
        the stated ``kv_latent``, else the cache's values per token per layer.
        """
        if self.heads and self.latent_width:
            return 4.0 * self.layers * self.heads * self.latent_width
        return 4.0 * self.layers * self.attention_width

    @functools.cached_property
    def latent_width(self) -> float:
        """Values per token per layer of a latent cache: ``kv_latent`` where stated, else
        the cache's bytes per token / layers / ``kv_value_bytes`` (0 without a latent)."""
        if not self.latent_cache:
            return 0.0
        if self.kv_latent:
            return float(self.kv_latent)
        if not self.kv_value_bytes:
            return 0.0
        return self.kv_bytes_per_token / (self.layers * self.kv_value_bytes)

    def kv_bytes(self, tokens: float) -> float:
        """KV-cache bytes of ``tokens`` whole-cache tokens (every layer's K and V; a
        stream's context counts as :meth:`kv_tokens` of them)."""
        return self.kv_bytes_per_token * tokens

    @functools.cached_property
    def window_fraction(self) -> float:
        """The share of the layers that attend over a sliding window (0: none)."""
        return self.window_layers / self.layers

    def kv_tokens(self, context):
        """Whole-cache tokens a stream at ``context`` tokens holds and its next token
        attends over (a number or an array).

        Sliding-window layers keep and read only their last ``window_tokens`` tokens
        (gpt-oss: every other layer, 128 tokens, "alternating dense and locally banded
        sparse attention", the gpt-oss model card, 2025-08; Mistral 7B, 4,096; Gemma 3,
        five of six layers, 1,024), so a stream reads, and at most holds,
        e(c) = c - f max(0, c - W) whole-cache tokens, f = ``window_layers`` / layers.
        What it takes up of the cache depends on the server's pools
        (:func:`simengine.kv.capacity_tokens`: vLLM's hybrid KV cache manager frees what
        falls out of the window, SGLang sizes the window layers' pool at 0.8 of the full
        layers', TensorRT-LLM like the full layers').
        """
        f = self.window_fraction
        if not f:
            return context
        w = self.window_tokens
        if isinstance(context, np.ndarray):
            return context - f * np.maximum(context - w, 0.0)
        return context - f * max(context - w, 0.0)

    @functools.cached_property
    def window_kv_bytes(self) -> float:
        """KV bytes of one stream holding the whole ``context_window`` (placement)."""
        return self.kv_bytes(self.kv_tokens(self.context_window))

    def kv_line(self, reference: float) -> tuple[float, float]:
        """(a, b): :meth:`kv_tokens` as the line a + b c around a stream at ``reference``
        tokens (exact on the reference's side of the window: a decode step is a line
        in its stream's context, :class:`simengine.step.StepLine`)."""
        f = self.window_fraction
        if not f or reference <= self.window_tokens:
            return 0.0, 1.0
        return f * self.window_tokens, 1.0 - f

    def attended_pairs(self, new, cached):
        """(query, key) pairs of a causal prefill of ``new`` tokens after ``cached``
        (numbers or arrays), in whole-cache layers: the integral of :meth:`kv_tokens`
        from ``cached`` to ``cached + new``, ((c + n)^2 - c^2) / 2 without windows."""
        end = cached + new
        pairs = (end * end - cached * cached) / 2.0
        f = self.window_fraction
        if not f:
            return pairs
        w = self.window_tokens
        if isinstance(end, np.ndarray) or isinstance(cached, np.ndarray):
            over_end, over_start = np.maximum(end - w, 0.0), np.maximum(cached - w, 0.0)
        else:
            over_end, over_start = max(end - w, 0.0), max(cached - w, 0.0)
        return pairs - f * (over_end * over_end - over_start * over_start) / 2.0

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the spec."""
        return asdict(self)


# The narrowest KV cache a server keeps unless told otherwise: 8 bits. A 4-bit checkpoint
# still caches K and V in FP8 (NVIDIA's ModelOpt NVFP4 checkpoints, the ones published
# benchmarks run, quantize the KV cache to FP8; a 4-bit cache is a separate, opt-in
# recipe: TensorRT-LLM's "NVFP4 KV Cache"; vLLM's kv_cache_dtype has no 4-bit choice).
MIN_DEFAULT_KV_BYTES = 1.0


def default_kv_value_bytes(weight_bytes: float) -> float:
    """Bytes per cached K/V value when only the weights' dtype is stated: the weights'
    bytes, but never below 8 bits (:data:`MIN_DEFAULT_KV_BYTES`)."""
    return max(weight_bytes, MIN_DEFAULT_KV_BYTES)


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, kv_bytes: float) -> float:
    """KV-cache bytes per token from the architecture: 2 (K and V) x layers x KV heads x
    head size x bytes per value (Llama-3.1-70B in BF16: 2 x 80 x 8 x 128 x 2 = 327,680)."""
    return 2.0 * layers * kv_heads * head_dim * kv_bytes


def _llama_kv(layers: int, kv_heads: int = 8, head_dim: int = 128, kv_bytes: int = 2) -> int:
    return int(kv_bytes_per_token(layers, kv_heads, head_dim, kv_bytes))


# Reference models for the cross-checks, as Cerebras served them at launch (2024-08):
# BF16 weights and an 8k context window (which is why 70B fits on 4 CS-3).
LLAMA_3_1_8B = ModelSpec(
    name="llama-3.1-8b",
    total_params=8.03e9,
    active_params_prefill=8.03e9,
    active_params_decode=8.03e9,
    layers=32,
    hidden_size=4096,
    bytes_per_param=2.0,
    kv_bytes_per_token=_llama_kv(32),
    context_window=8192,
)
LLAMA_3_1_70B = ModelSpec(
    name="llama-3.1-70b",
    total_params=70.6e9,
    active_params_prefill=70.6e9,
    active_params_decode=70.6e9,
    layers=80,
    hidden_size=8192,
    bytes_per_param=2.0,
    kv_bytes_per_token=_llama_kv(80),
    context_window=8192,
)
REFERENCE_MODELS: dict[str, ModelSpec] = {m.name: m for m in (LLAMA_3_1_8B, LLAMA_3_1_70B)}


# Relative difference allowed between a typed KV size and the one the architecture gives.
KV_TOLERANCE = 0.01


def architecture_kv_bytes(name: str, arch: dict[str, Any]) -> float:
    """KV bytes per token of a catalog architecture table.

    With ``kv_heads`` and ``head_dim`` (and ``kv_dtype_bytes``, default the weights'
    ``bytes_per_param`` but never below 8 bits, :func:`default_kv_value_bytes`) the size
    is computed from the architecture, and a typed
    ``kv_bytes_per_token`` must agree within 1 %. Without them the table must say
    ``kv_compressed = true`` (a published compressed-cache size, e.g. DeepSeek's ~890
    bytes) and the typed value is used. Anything else is a SimEngineError.
    """
    typed = arch.get("kv_bytes_per_token")
    if "kv_heads" in arch or "head_dim" in arch:
        try:
            derived = kv_bytes_per_token(
                int(arch["layers"]),
                int(arch["kv_heads"]),
                int(arch["head_dim"]),
                float(arch.get("kv_dtype_bytes", default_kv_value_bytes(arch["bytes_per_param"]))),
            )
        except KeyError as exc:
            raise SimEngineError(f"model {name!r}: architecture lacks {exc.args[0]!r}") from None
        if typed is not None and abs(float(typed) / derived - 1.0) > KV_TOLERANCE:
            raise SimEngineError(
                f"model {name!r}: kv_bytes_per_token {typed} disagrees with the architecture "
                f"(2 x layers x kv_heads x head_dim x kv bytes = {derived:.0f})"
            )
        return derived
    if typed is None:
        raise SimEngineError(f"model {name!r}: architecture lacks 'kv_heads'/'head_dim'")
    if not arch.get("kv_compressed"):
        raise SimEngineError(
            f"model {name!r}: give kv_heads and head_dim (KV from the architecture) or mark "
            "a published compressed-cache size with kv_compressed = true"
        )
    return float(typed)


def model_spec_from_mapping(name: str, architecture: dict[str, Any], **extra: Any) -> ModelSpec:
    """Build a ModelSpec from a catalog ``[models.architecture]`` table.

    ``extra`` may supply ``context_window`` when the catalog keeps it outside the table.
    KV bytes per token come from the architecture (:func:`architecture_kv_bytes`); a
    table with only a typed ``kv_bytes_per_token`` is still read (older catalogs).
    """
    arch = {**extra, **architecture}
    if "kv_heads" in arch or "head_dim" in arch or arch.get("kv_compressed"):
        arch["kv_bytes_per_token"] = architecture_kv_bytes(name, arch)
    try:
        return ModelSpec(
            name=name,
            total_params=float(arch["total_params"]),
            active_params_prefill=float(arch.get("active_params_prefill", arch["total_params"])),
            active_params_decode=float(arch.get("active_params_decode", arch["total_params"])),
            layers=int(arch["layers"]),
            hidden_size=int(arch["hidden_size"]),
            bytes_per_param=float(arch["bytes_per_param"]),
            kv_bytes_per_token=float(arch["kv_bytes_per_token"]),
            context_window=int(arch["context_window"]),
            experts=int(arch.get("experts", 0)),
            experts_per_token=int(arch.get("experts_per_token", 0)),
            shared_experts=int(arch.get("shared_experts", 0)),
        )
    except KeyError as exc:
        raise SimEngineError(f"model {name!r}: architecture lacks {exc.args[0]!r}") from None


def load_catalog_models(path: str | Path) -> dict[str, ModelSpec]:
    """Read ModelSpecs from a catalog TOML file (``[[models]]`` with ``[models.architecture]``).

    Models without an architecture table are skipped. Keys are the model's ``slug``,
    ``name`` or ``id`` (first present).
    """
    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    specs: dict[str, ModelSpec] = {}
    for entry in data.get("models", []):
        arch = entry.get("architecture")
        if not arch:
            continue
        name = str(entry.get("slug") or entry.get("name") or entry.get("id"))
        extra = {"context_window": entry["context_window"]} if "context_window" in entry else {}
        specs[name] = model_spec_from_mapping(name, arch, **extra)
    return specs
