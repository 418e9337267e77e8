"""Predictions for any architecture from a small JSON spec (``python -m simengine predict``).

A spec describes one model, the hardware it runs on and a workload: closed loop
(``concurrency`` streams each sending ``input_tokens`` in and reading ``output_tokens``
out, the way NIM/vLLM/TensorRT-LLM benchmarks are run) or open loop
(``rate_per_second`` Poisson arrivals, MLPerf's server scenario)::

    {"model": {"name": "llama-3.3-70b", "layers": 80, "hidden": 8192, "heads": 64,
               "kv_heads": 8, "head_dim": 128, "params_b": 70.6,
               "active_params_b": 70.6, "dtype": "fp8"},
     "hardware": "h100", "devices": 2, "tensor_parallel": 2, "concurrency": 1,
     "input_tokens": 1000, "output_tokens": 500, "speculative": false}

A mixture of experts states its experts (``experts``, ``experts_per_token``,
``shared_experts``) and may give each component its own dtype (``attention_dtype``,
``expert_dtype``, ``kv_dtype``); a latent KV cache (multi-head latent attention) states
its width, ``kv_latent`` (576 for DeepSeek-V3), and its bytes follow ``kv_dtype``;
``expert_parallel`` splits the experts over GPUs (:mod:`simengine.moe`).
``tensor_parallel`` n with ``expert_parallel`` n is attention tensor-parallel over the n
GPUs with the experts expert-parallel; attention data
parallelism (TensorRT-LLM's ``enable_attention_dp``, "DEP"; SGLang's
``--enable-dp-attention``) is a separate, default-off flag in both servers over the same
tp/ep sizes, so it is never inferred: ``attention_data_parallel: true`` states it
(:func:`simengine.parallel.attention_dp_weight_bytes`). ``disaggregated_prefill: true``
says prompts are prefilled on other GPUs and the replica only decodes
(:func:`simengine.serving.serving_point`). ``speculative`` is false, true (the hardware's production
method) or ``{"method", "draft_tokens", "acceptance"}`` (:mod:`simengine.speculative`);
omitted, it is how the hardware is served in production (cs-3: on; GPUs: off).
``output_tokens_cv`` states how the output lengths spread (std / mean; default 0, the
fixed lengths synthetic benchmarks send): a dataset's long outputs hold slots longer, so
the streams in flight hold more context than the mean output says
(:func:`simengine.kv.mean_context`). ``offline_requests`` N makes the workload a finite
run (N requests per replica queued at once, MLPerf's Offline scenario): the throughput
is over the whole run, the drain at its end included, with N output lengths of that
mean and spread (capped at ``max_output_tokens``; :mod:`simengine.offline`).
``cached_input_tokens`` of each prompt are in the server's prefix cache: only the rest
is prefilled, after the cached prefix, while the KV holds them all
(:func:`simengine.serving.serving_point`).
``server`` (GPUs: ``vllm``, ``sglang`` or ``tensorrt-llm``) sets the defaults that
server runs with: TensorRT-LLM caps a batch at 2048 sequences and admits a request only
when its whole input + output fits the KV cache (``kv_admission: "reserved"``), where
the others admit while the tokens held fit (``"paged"``) (:func:`simengine.kv.kv_admission`);
a sliding-window model's window layers take up the cache that server's pools give them
(:func:`simengine.kv.capacity_tokens`: vLLM frees what falls out of the window, SGLang
sizes their pool at 0.8 of the full layers', TensorRT-LLM like the full layers').
It also sets, with the spec's ``software`` date, whether decode steps replay CUDA graphs
(``cuda_graphs``) and whether the host prepares the next step while the GPU runs this
one (``overlap_scheduler``): vLLM and SGLang turned each on by default at a known date
(:func:`simengine.host.server_default`); a spec may state either (TensorRT-LLM's early
PyTorch flow ran without both unless told). With graphs, a step runs the smallest graph
the server captured that holds its batch, padded, and eager above the largest: the
sizes are the server's at the date (:func:`simengine.host.server_graph_sizes`), or
stated (``cuda_graph_batch_sizes``, or the largest with ``cuda_graph_max_batch``).

Defaults for omitted fields are in ``SPEC_DEFAULTS`` / ``MODEL_DEFAULTS`` (documented
there); an unknown field anywhere is an error, as is a wrong type or range. Every
error is a :class:`SimEngineError` with a one-line message naming the field.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from .errors import SimEngineError
from .hardware import HARDWARE
from .host import (
    SERVER_FEATURES,
    graph_sizes_up_to,
    server_default,
    server_graph_sizes,
    server_prefill_budget,
)
from .kv import default_max_batch_size, kv_admission, output_cv, server_kv_value_bytes
from .model import ModelSpec, default_kv_value_bytes, kv_bytes_per_token
from .moe import expert_sizes
from .offline import longest_output
from .params import DEFAULT_PARAMS, EngineParams
from .served import Deployment, checked_graph_sizes
from .serving import cached_tokens, serving_point
from .speculative import production_default, resolve

# Bytes per value of the data types a spec may name.
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "mxfp8": 1.0,
    "int8": 1.0,
    "fp4": 0.5,
    "mxfp4": 0.5,
    "nvfp4": 0.5,
    "int4": 0.5,
}
# The activations a weight format's GEMMs multiply by where the spec does not say
# (``activation_dtype``), in bytes per value; formats not listed quantize activations like
# their weights (FP8 and INT8 W8A8, NVFP4 W4A4). MXFP4 checkpoints (gpt-oss) run with
# MXFP8 activations on Blackwell and BF16 ones on Hopper (TensorRT-LLM,
# examples/models/core/gpt_oss/README.md, "MoE Support Matrix"; Hopper, without 4-bit
# tensor cores, widens any 4-bit weight to 16 bits: HardwareProfile.mma_peak); INT4
# (AWQ, GPTQ) is weight-only quantization (W4A16).
DEFAULT_ACTIVATION_BYTES: dict[str, float] = {"mxfp4": 1.0, "int4": 2.0}
# ``hardware`` names accepted in a spec -> engine device keys.
SPEC_HARDWARE: dict[str, str] = {
    "h100": "h100",
    "h200": "h200",
    "b200": "b200",
    "gb200-nvl72": "gb200-nvl72",
    "cs-3": "wse-3",
}

# Top-level fields and their defaults (None = required, or derived as noted).
SPEC_DEFAULTS: dict[str, Any] = {
    "model": None,  # required: see MODEL_DEFAULTS
    "hardware": None,  # required: h100 | h200 | b200 | gb200-nvl72 | cs-3
    "devices": None,  # default: the fewest that hold the model (GPUs: = tensor_parallel)
    "tensor_parallel": None,  # GPUs only; default = devices (or the smallest group that fits)
    "concurrency": None,  # closed-loop streams in flight per replica; default 1
    # Issue 28 workload fields (README "Spec fields (issue 28)"):
    "pipeline_parallel": None,  # GPUs: stages over layers; devices = tensor_parallel x this
    "replicas": 1,  # identical replicas; throughput is for all of them
    "rate_per_second": None,  # open loop: Poisson requests/s for the whole deployment
    "max_batch_size": None,  # GPUs: sequences per step; default by GPU memory (kv.py)
    "input_tokens": 1000,
    "output_tokens": 500,
    # Spread of the output lengths: std / mean (0: every request the same length, as
    # synthetic benchmarks send). Streams in flight hold a length-biased share of the
    # long outputs (kv.mean_context).
    "output_tokens_cv": 0,
    # Prompt tokens each request finds in the server's prefix cache (vLLM's automatic
    # prefix caching, SGLang's radix cache, TensorRT-LLM's KV block reuse): only the
    # other input_tokens - cached_input_tokens are prefilled; the KV holds them all.
    "cached_input_tokens": 0,
    # A finite Offline run: this many requests per replica queued at once (MLPerf
    # Offline, trtllm-bench); the run ends on its last request (simengine/offline.py).
    "offline_requests": None,
    "max_output_tokens": None,  # cap on each output in an offline run (default: none)
    # false | true | {"method", "draft_tokens", "acceptance"}; omitted: the hardware's
    # production default (cs-3: the draft-model method from the 2024.10 software on;
    # GPUs: off). See simengine/speculative.py for the methods and their sources.
    "speculative": None,
    "expert_parallel": 1,  # GPUs, MoE: experts split over this many GPUs (all-to-all)
    # GPUs, MoE: each GPU of the replica attends for its own streams ("DEP"); needs
    # expert_parallel = tensor_parallel = devices. max_batch_size then holds per GPU.
    "attention_data_parallel": False,
    # GPUs, with attention_data_parallel: the server makes its ranks prefill together
    # (TensorRT-LLM attention_dp_config.enable_balance); default: prompts placed as they
    # come, and a rank prefilling holds the others (parallel.attention_dp_idle).
    "attention_dp_balance": False,
    # GPUs, expert parallelism: the server balances the experts over the GPUs (EPLB);
    # null: as served in production (on beyond 8 GPUs, simengine.moe.WIDE_EP).
    "expert_load_balancer": None,
    # GPUs: prompts prefilled on other GPUs (prefill-decode disaggregation); the replica
    # only decodes.
    "disaggregated_prefill": False,
    # GPUs: the inference server (vllm | sglang | tensorrt-llm; default: not stated, the
    # generic defaults); sets the default batch cap and KV admission (kv.py).
    "server": None,
    # GPUs: paged (admit while the tokens held fit) | reserved (admit only when the whole
    # input + output fits: TensorRT-LLM's GUARANTEED_NO_EVICT); default: the server's.
    "kv_admission": None,
    # GPUs: decode steps replay captured CUDA graphs (false: eager, the host launches each
    # kernel) and the host loop overlaps the GPU's step (false: it runs between steps);
    # default: the server's default at the software date (simengine.host.server_default).
    "cuda_graphs": None,
    "overlap_scheduler": None,
    # GPUs, with CUDA graphs: the decode batch sizes the server captured (a list,
    # ascending), or the largest of them (cuda_graph_max_batch; the server's rule fills in
    # the rest); a step pads its batch to the next size and runs eager above the largest.
    # Default: the server's at the software date (simengine.host.server_graph_sizes); no
    # server stated: every batch its own graph. Give one of the two, not both.
    "cuda_graph_batch_sizes": None,
    "cuda_graph_max_batch": None,
    # GPUs: the prompt tokens the server schedules in one step (vLLM
    # --max-num-batched-tokens, SGLang --chunked-prefill-size, TensorRT-LLM
    # max_num_tokens); a longer prompt is prefilled in pieces of it. Default: the
    # server's at the software date on the GPU (simengine.host.server_prefill_budget);
    # no server stated: the engine's generic 2,048 (param gpu:prefill_chunk_tokens).
    "prefill_chunk_tokens": None,
    "software": None,  # calibrated software version; default: the device's current one
    "transport": "none",  # none (server-side benchmark) | reworked | legacy
}
MODEL_DEFAULTS: dict[str, Any] = {
    "name": "custom",
    "layers": None,  # required
    "hidden": None,  # required
    "heads": None,  # default: hidden / head_dim
    "kv_heads": None,  # default: heads (no grouped-query attention)
    "head_dim": 128,
    "params_b": None,  # required, billions
    "active_params_b": None,  # default: params_b (dense)
    "dtype": "bf16",  # weights
    "attention_dtype": None,  # non-expert weights (attention, embeddings); default: dtype
    "expert_dtype": None,  # expert weights (MoE); default: dtype
    # KV cache; default: the server's "auto" (vllm, sglang: 16-bit, the model's data
    # type), else (tensorrt-llm, not stated) dtype, but never below 8 bits (fp4 -> fp8)
    "kv_dtype": None,
    # Activations the weight GEMMs multiply by (each GEMM runs at the wider of its weights
    # and these); default: by weight format (DEFAULT_ACTIVATION_BYTES), else like the weights.
    "activation_dtype": None,
    # Mixture of experts: routed experts (null: dense, or a 256/8 layout when
    # active_params_b < params_b), routed experts per token, always-active shared experts.
    "experts": None,
    "experts_per_token": None,
    "shared_experts": 0,
    "kv_bytes_per_token": None,  # a published compressed-cache size overrides the formula
    # A latent KV cache shared by all heads (multi-head latent attention), stated as its
    # width: values per token per layer (DeepSeek-V3/R1/V3.2, Kimi K2: 512 + 64 = 576).
    # Its bytes follow kv_dtype (576 x layers x bytes) unless kv_bytes_per_token states a
    # published layout; its width sets decode attention's FLOPs whatever the dtype.
    "kv_latent": None,
    # Sliding-window attention: sliding_window_layers of the layers attend over (and keep
    # KV for) only the last sliding_window tokens (gpt-oss: 18 of 36 layers, 128 tokens;
    # 0 tokens: layers with no growing cache, e.g. linear attention). Give both or neither.
    "sliding_window": None,
    "sliding_window_layers": None,
    # default: max(8192, input_tokens + output_tokens x (1 + output_tokens_cv^2)), the
    # least window that holds such outputs (the longest is >= E[o^2] / E[o])
    "context_window": None,
}


def _err(msg: str) -> SimEngineError:
    return SimEngineError(msg.replace("\n", " "))


def _int(data: Mapping[str, Any], key: str, where: str, minimum: int = 1) -> int:
    v = data[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise _err(f"{where}{key} must be an integer >= {minimum}, got {v!r}")
    return v


def _num(data: Mapping[str, Any], key: str, where: str) -> float:
    v = data[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise _err(f"{where}{key} must be a number > 0, got {v!r}")
    return float(v)


def _dtype(data: Mapping[str, Any], key: str, where: str) -> float:
    v = data[key]
    if v not in DTYPE_BYTES:
        raise _err(f"{where}{key} must be one of {sorted(DTYPE_BYTES)}, got {v!r}")
    return DTYPE_BYTES[v]


def _fill(data: Any, defaults: Mapping[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise _err(f"{where or 'spec'} must be a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - set(defaults))
    if unknown:
        raise _err(f"unknown field {where}{unknown[0]!r}; known: {sorted(defaults)}")
    out = {**defaults, **data}
    return out


def model_from_spec(data: Any, *, tokens: int = 0, server: str | None = None) -> ModelSpec:
    """A ModelSpec from a spec's ``model`` object (KV bytes derived from the architecture;
    a cache whose dtype and size are not stated is in the ``server``'s "auto" dtype,
    :func:`simengine.kv.server_kv_value_bytes`)."""
    m = _fill(data, MODEL_DEFAULTS, "model.")
    for key in ("layers", "hidden", "params_b"):
        if m[key] is None:
            raise _err(f"model.{key} is required")
    layers = _int(m, "layers", "model.")
    hidden = _int(m, "hidden", "model.")
    head_dim = _int(m, "head_dim", "model.")
    heads = hidden // head_dim if m["heads"] is None else _int(m, "heads", "model.")
    kv_heads = heads if m["kv_heads"] is None else _int(m, "kv_heads", "model.")
    if kv_heads > heads:
        raise _err(f"model.kv_heads ({kv_heads}) must be <= model.heads ({heads})")
    params = _num(m, "params_b", "model.") * 1e9
    active = params if m["active_params_b"] is None else _num(m, "active_params_b", "model.") * 1e9
    if active > params * (1 + 1e-9):
        raise _err(f"model.active_params_b ({active / 1e9:g}) exceeds params_b ({params / 1e9:g})")
    bpp = _dtype(m, "dtype", "model.")
    attn_b = bpp if m["attention_dtype"] is None else _dtype(m, "attention_dtype", "model.")
    expert_b = bpp if m["expert_dtype"] is None else _dtype(m, "expert_dtype", "model.")
    auto = server_kv_value_bytes(server) if m["kv_bytes_per_token"] is None else None
    if m["kv_dtype"] is not None:
        kv_b = _dtype(m, "kv_dtype", "model.")
    else:
        kv_b = auto or default_kv_value_bytes(bpp)
    act = None if m["activation_dtype"] is None else _dtype(m, "activation_dtype", "model.")
    experts, per_token, shared = _experts(m, params, active)
    per_head = kv_bytes_per_token(layers, kv_heads, head_dim, kv_b)
    kv_shards, latent = kv_heads, False
    kv_latent = _kv_latent(m, kv_heads, head_dim)
    if kv_latent:
        # A latent shared by all heads (multi-head latent attention): it does not split
        # over TP GPUs, and every query head attends over all of it.
        kv_shards, latent = 1, True
    if m["kv_bytes_per_token"] is None:
        kv = kv_latent * layers * kv_b if kv_latent else per_head
    else:
        kv = _num(m, "kv_bytes_per_token", "model.")
        if kv < per_head * (1 - 1e-6):
            # A published cache smaller than K and V per head is a latent shared by all
            # heads (multi-head latent attention): it does not split over TP GPUs.
            kv_shards, latent = 1, True
        elif kv_latent:
            raise _err(
                f"model.kv_bytes_per_token ({kv:g}) must be below K and V per KV head "
                f"({per_head:g}) for a latent cache (model.kv_latent)"
            )
    window = (
        max(8192, tokens) if m["context_window"] is None else _int(m, "context_window", "model.")
    )
    window_tokens, window_layers = _sliding_window(m, layers)
    name = m["name"]
    if not isinstance(name, str) or not name:
        raise _err(f"model.name must be a non-empty string, got {name!r}")
    return ModelSpec(
        name=name,
        total_params=params,
        active_params_prefill=active,
        active_params_decode=active,
        layers=layers,
        hidden_size=hidden,
        bytes_per_param=bpp,
        kv_bytes_per_token=kv,
        context_window=window,
        experts=experts,
        experts_per_token=per_token,
        shared_experts=shared,
        attention_bytes=attn_b,
        expert_bytes=expert_b,
        attention_activation_bytes=_activation_bytes(m, "attention_dtype", act),
        expert_activation_bytes=_activation_bytes(m, "expert_dtype", act),
        kv_shards=kv_shards,
        latent_cache=latent,
        heads=heads,
        head_dim=head_dim,
        kv_value_bytes=kv_b,
        window_tokens=window_tokens,
        window_layers=window_layers,
        kv_latent=kv_latent,
    )


def _kv_latent(m: Mapping[str, Any], kv_heads: int, head_dim: int) -> int:
    # A spec's stated latent width (0: none stated); a latent is narrower than the K and
    # V of one KV head per token and layer, or it is not one.
    if m["kv_latent"] is None:
        return 0
    width = _int(m, "kv_latent", "model.")
    if width >= 2 * kv_heads * head_dim:
        raise _err(
            f"model.kv_latent ({width}) must be below K and V per KV head (2 x kv_heads x "
            f"head_dim = {2 * kv_heads * head_dim}): a latent shared by all heads is narrower"
        )
    return width


def _sliding_window(m: Mapping[str, Any], layers: int) -> tuple[int, int]:
    # (window tokens, layers using it) of a spec's model; (0, 0): no sliding window.
    given = [key for key in ("sliding_window", "sliding_window_layers") if m[key] is not None]
    if not given:
        return 0, 0
    if len(given) == 1:
        other = ({"sliding_window", "sliding_window_layers"} - set(given)).pop()
        raise _err(f"model.{given[0]} needs model.{other} (give both or neither)")
    window_layers = _int(m, "sliding_window_layers", "model.")
    if window_layers > layers:
        raise _err(
            f"model.sliding_window_layers ({window_layers}) must be <= model.layers ({layers})"
        )
    return _int(m, "sliding_window", "model.", minimum=0), window_layers


def _activation_bytes(m: Mapping[str, Any], key: str, stated: float | None) -> float:
    # Bytes per activation value of the GEMMs of one weight component (``key``: its dtype
    # field, falling back to ``dtype``): the spec's activation_dtype, else the weight
    # format's default; 0.0 = quantized like the weights.
    if stated is not None:
        return stated
    name = m["dtype"] if m[key] is None else m[key]
    return DEFAULT_ACTIVATION_BYTES.get(name, 0.0)


def _experts(m: Mapping[str, Any], params: float, active: float) -> tuple[int, int, int]:
    # (experts, experts_per_token, shared_experts) of a model object; (0, 0, 0) for a
    # dense model or an MoE without stated experts (the engine's 256/8 layout).
    if m["experts"] is None:
        for key in ("experts_per_token",):
            if m[key] is not None:
                raise _err(f"model.{key} needs model.experts")
        if m["shared_experts"]:
            raise _err("model.shared_experts needs model.experts")
        return 0, 0, 0
    experts = _int(m, "experts", "model.", 2)
    if m["experts_per_token"] is None:
        raise _err("model.experts_per_token is required with model.experts")
    per_token = _int(m, "experts_per_token", "model.")
    shared = _int(m, "shared_experts", "model.", 0)
    if per_token >= experts:
        raise _err(f"model.experts_per_token ({per_token}) must be < model.experts ({experts})")
    if active >= params * (1 - 1e-9):
        raise _err("model.experts needs model.active_params_b < model.params_b")
    try:
        expert_sizes(params, active, experts, per_token, shared)
    except SimEngineError as exc:
        raise _err(f"model: {exc}") from None
    return experts, per_token, shared


def _graph_sizes(
    s: Mapping[str, Any], hw: Any, tensor_parallel: int, max_batch: int | None
) -> tuple[int, ...] | None:
    # The decode CUDA graphs' batch sizes: stated (a list, or the largest with the
    # server's rule), else the server's default (simengine.host.server_graph_sizes).
    listed, largest = s["cuda_graph_batch_sizes"], s["cuda_graph_max_batch"]
    if listed is None and largest is None:
        if hw.kind != "gpu":
            return None
        cap = (
            max_batch
            if max_batch is not None
            else default_max_batch_size(hw.memory_bytes, s["server"])
        )
        return server_graph_sizes(s["server"], s["software"], hw.memory_bytes, tensor_parallel, cap)
    if hw.kind != "gpu":
        name = "cuda_graph_batch_sizes" if listed is not None else "cuda_graph_max_batch"
        raise _err(f"{name} applies to GPUs only; cs-3 is served by its own stack")
    if listed is not None and largest is not None:
        raise _err("give cuda_graph_batch_sizes or cuda_graph_max_batch, not both")
    if largest is not None:
        return graph_sizes_up_to(s["server"], _int(s, "cuda_graph_max_batch", ""))
    return checked_graph_sizes(listed)  # its own SimEngineError names the field


def parse_spec(data: Any) -> tuple[ModelSpec, Deployment, dict[str, Any]]:
    """Validate a spec: (model, deployment, workload) or a one-line SimEngineError."""
    s = _fill(data, SPEC_DEFAULTS, "")
    if s["model"] is None:
        raise _err("model is required")
    if s["hardware"] not in SPEC_HARDWARE:
        raise _err(f"hardware must be one of {sorted(SPEC_HARDWARE)}, got {s['hardware']!r}")
    device = SPEC_HARDWARE[s["hardware"]]
    hw = HARDWARE[device]
    rate = s["rate_per_second"]
    if rate is not None:
        rate = _num(s, "rate_per_second", "")
        if s["concurrency"] is not None:
            raise _err("give concurrency (closed loop) or rate_per_second (open loop), not both")
    concurrency = None if s["concurrency"] is None else _int(s, "concurrency", "")
    replicas = _int(s, "replicas", "")
    max_batch = None if s["max_batch_size"] is None else _int(s, "max_batch_size", "")
    pp = None if s["pipeline_parallel"] is None else _int(s, "pipeline_parallel", "")
    inp = _int(s, "input_tokens", "")
    out = _int(s, "output_tokens", "")
    try:
        cached = cached_tokens(s["cached_input_tokens"], inp)
    except SimEngineError as exc:
        raise _err(str(exc)) from None
    try:
        cv = output_cv(s["output_tokens_cv"])
    except SimEngineError as exc:
        raise _err(str(exc)) from None
    # The longest output is at least E[o^2] / E[o] = mean x (1 + cv^2).
    longest = inp + math.ceil(out * (1.0 + cv * cv))
    requests = None if s["offline_requests"] is None else _int(s, "offline_requests", "")
    max_out = None if s["max_output_tokens"] is None else _int(s, "max_output_tokens", "")
    if max_out is not None and max_out < out:
        raise _err(f"max_output_tokens ({max_out}) must be >= output_tokens ({out}), the mean")
    if max_out is not None and requests is None:
        raise _err("max_output_tokens applies to an offline run (offline_requests)")
    if requests is not None:
        if rate is not None:
            raise _err("give offline_requests (a finite run) or rate_per_second, not both")
        # The run's own longest output must fit the window too.
        longest = max(longest, inp + longest_output(out, cv, requests, max_out))
    if s["transport"] not in ("none", "reworked", "legacy"):
        raise _err(f"transport must be none, reworked or legacy, got {s['transport']!r}")
    if s["software"] is not None and not isinstance(s["software"], str):
        raise _err(
            f"software must be a version string or a date YYYY-MM[-DD], got {s['software']!r}"
        )
    try:
        if s["speculative"] is None:
            spec_dec = production_default(hw.kind, s["software"])
        else:
            spec_dec = resolve(s["speculative"], hw.kind)
    except SimEngineError as exc:
        raise _err(str(exc)) from None
    ep = _int(s, "expert_parallel", "")
    model = model_from_spec(s["model"], tokens=longest, server=s["server"])
    devices = None if s["devices"] is None else _int(s, "devices", "")
    tp = None if s["tensor_parallel"] is None else _int(s, "tensor_parallel", "")
    if hw.kind == "wafer":
        if tp not in (None, 1):
            raise _err(f"tensor_parallel applies to GPUs only; cs-3 splits layers (got {tp})")
        if pp not in (None, 1):
            raise _err(f"pipeline_parallel applies to GPUs only; cs-3 pipelines over wafers ({pp})")
        if max_batch is not None:
            raise _err("max_batch_size applies to GPUs only; a cs-3 pipeline has its own slots")
        pp = None
        npr = devices
    else:
        if tp is not None and tp > hw.max_tensor_parallel:
            raise _err(f"tensor_parallel must be <= {hw.max_tensor_parallel} on {s['hardware']}")
        if tp is not None and devices is not None and devices % tp:
            raise _err(f"devices ({devices}) must be a multiple of tensor_parallel ({tp})")
        if pp is not None:
            if tp is not None and devices is not None and devices != tp * pp:
                raise _err(
                    f"devices ({devices}) must equal tensor_parallel x pipeline_parallel "
                    f"({tp} x {pp})"
                )
            if tp is None and devices is None:
                raise _err("pipeline_parallel needs devices or tensor_parallel")
            if tp is not None:
                devices = tp * pp
            elif devices % pp:
                raise _err(f"devices ({devices}) must be a multiple of pipeline_parallel ({pp})")
        elif tp is not None and devices is not None:
            pp = devices // tp  # the devices beyond one TP group are pipeline stages
        npr = devices if devices is not None else tp
    try:
        kv_admission(s["server"], s["kv_admission"])
    except SimEngineError as exc:
        raise _err(str(exc)) from None
    for key in ("server", "kv_admission"):
        if s[key] is not None and hw.kind == "wafer":
            raise _err(f"{key} applies to GPUs only; cs-3 is served by its own stack")
    server_features = {}
    for key in SERVER_FEATURES:
        flag = s[key]
        if flag is not None and not isinstance(flag, bool):
            raise _err(f"{key} must be true or false, got {flag!r}")
        if flag is not None and hw.kind == "wafer":
            raise _err(f"{key} applies to GPUs only; cs-3 is served by its own stack")
        if flag is None:
            flag = hw.kind == "wafer" or server_default(key, s["server"], s["software"])
        server_features[key] = flag
    graph_sizes = _graph_sizes(s, hw, tp or npr or 1, max_batch)
    adp, disagg = s["attention_data_parallel"], s["disaggregated_prefill"]
    balance = s["attention_dp_balance"]
    for key, flag in (
        ("attention_data_parallel", adp),
        ("disaggregated_prefill", disagg),
        ("attention_dp_balance", balance),
    ):
        if not isinstance(flag, bool):
            raise _err(f"{key} must be true or false, got {flag!r}")
        if flag and hw.kind == "wafer":
            raise _err(f"{key} applies to GPUs only")
    if ep > 1:
        if hw.kind == "wafer":
            raise _err(
                f"expert_parallel applies to GPUs only; cs-3 places experts itself (got {ep})"
            )
        if not model.is_moe:
            raise _err(
                f"expert_parallel ({ep}) needs a mixture of experts (active_params_b < params_b)"
            )
        if npr is None:
            npr = ep
        if npr % ep:
            raise _err(f"devices ({npr}) must be a multiple of expert_parallel ({ep})")
    balancer = s["expert_load_balancer"]  # checked by Deployment
    budget = s["prefill_chunk_tokens"]
    if budget is not None:
        if hw.kind == "wafer":
            raise _err("prefill_chunk_tokens applies to GPUs only; cs-3 is served by its own stack")
        budget = _int(s, "prefill_chunk_tokens", "")
    elif hw.kind == "gpu":
        budget = server_prefill_budget(
            s["server"], s["software"], device, hw.memory_bytes, (npr or 1) if adp else 1
        )
    if adp and (ep <= 1 or npr != ep or (pp or 1) > 1):
        raise _err(
            "attention_data_parallel needs a mixture of experts with expert_parallel = "
            f"devices = tensor_parallel (got expert_parallel {ep}, devices {npr}, "
            f"pipeline_parallel {pp or 1})"
        )
    try:
        deployment = Deployment(
            device,
            npr or 1,
            "standard",
            "reworked" if s["transport"] == "none" else s["transport"],
            software=s["software"],
            nodes_per_replica=npr,
            expert_parallel=ep,
            pipeline_parallel=pp,
            attention_data_parallel=adp,
            attention_dp_balance=balance,
            expert_load_balancer=balancer,
            cuda_graph_batch_sizes=graph_sizes if server_features["cuda_graphs"] else None,
            prefill_chunk_tokens=budget,
            **server_features,
        )
    except SimEngineError as exc:
        raise _err(str(exc)) from None
    workload = {
        "concurrency": concurrency,
        "rate_per_second": rate,
        "max_batch_size": max_batch,
        "replicas": replicas,
        "input_tokens": inp,
        "output_tokens": out,
        "output_tokens_cv": cv,
        "cached_input_tokens": cached,
        "offline_requests": requests,
        "max_output_tokens": max_out,
        "speculative": spec_dec or False,
        "transport": s["transport"],
        "disaggregated_prefill": disagg,
        "server": s["server"],
        "kv_admission": s["kv_admission"],
    }
    if inp + out > model.context_window:
        raise _err(
            f"input_tokens + output_tokens ({inp + out}) exceed model.context_window "
            f"({model.context_window})"
        )
    if longest > model.context_window:
        raise _err(
            f"output_tokens_cv {cv} implies outputs of at least {longest - inp} tokens "
            f"(mean x (1 + cv^2)); with input_tokens they exceed model.context_window "
            f"({model.context_window})"
        )
    return model, deployment, workload


def predict_spec(data: Any, params: EngineParams = DEFAULT_PARAMS) -> dict[str, Any]:
    """Predicted serving figures for a spec (see module docstring).

    Returns ``ttft_seconds`` (mean, queueing included), ``time_per_output_token_seconds``,
    ``tokens_per_second`` (one stream), ``throughput_tokens_per_second`` (all streams of
    all replicas), ``queue_seconds`` (the wait in TTFT), ``batch`` (the decode batch per
    replica), ``batch_cap`` (the most it can be: GPUs, min(the server's cap, what the KV
    cache holds under ``kv_admission``, also returned); wafers, the pipeline's slots),
    ``capacity_requests_per_second`` (open loop; None in a closed loop),
    ``kv_bytes_per_token``, ``software`` / ``software_era`` (the calibrated era used and
    why), ``cuda_graphs`` / ``overlap_scheduler`` (GPUs: what the server ran with, stated or
    its default at the software date; None on wafers), ``cuda_graph_max_batch`` (the
    largest batch with a captured graph, above which a step runs eager; None: no sizes
    stated or defaulted, or no graphs) plus the placement used (replicas,
    devices, tensor_parallel, pipeline_stages),
    and where a stream's time per output token goes: ``time_per_output_token_parts``
    (seconds by part, summing to ``time_per_output_token_seconds``) and
    ``time_per_output_token_bounds`` (which side of each roofline binds;
    :func:`simengine.perf.token_parts`), both None for a finite run (``offline_requests``),
    whose steps change as it fills and drains.
    """
    model, deployment, w = parse_spec(data)
    if deployment.nodes_per_replica is None:
        # Let placement choose the smallest replica, then pool = one replica.
        from .placement import placement

        place = placement(model, deployment.device, context_tokens=model.context_window)
        deployment = dataclasses.replace(
            deployment, nodes=place.nodes_per_replica, nodes_per_replica=place.nodes_per_replica
        )
    point = serving_point(
        model,
        deployment,
        concurrency=w["concurrency"],
        input_tokens=w["input_tokens"],
        output_tokens=w["output_tokens"],
        output_tokens_cv=w["output_tokens_cv"],
        cached_input_tokens=w["cached_input_tokens"],
        offline_requests=w["offline_requests"],
        max_output_tokens=w["max_output_tokens"],
        speculative=w["speculative"],
        with_transport=w["transport"] != "none",
        rate_per_second=w["rate_per_second"],
        max_batch_size=w["max_batch_size"],
        replicas=w["replicas"],
        disaggregated_prefill=w["disaggregated_prefill"],
        server=w["server"],
        kv_admission=w["kv_admission"],
        params=params,
    )
    point["kv_bytes_per_token"] = model.kv_bytes_per_token
    gpu = HARDWARE[deployment.device].kind == "gpu"
    for key in SERVER_FEATURES:  # what the GPU server ran with (stated or its default)
        point[key] = getattr(deployment, key) if gpu else None
    sizes = deployment.cuda_graph_batch_sizes
    point["cuda_graph_max_batch"] = sizes[-1] if sizes else None
    # The prompt tokens a step schedules (stated, the server's default, or the generic
    # budget); None on wafers.
    point["prefill_chunk_tokens"] = int(deployment.prefill_budget(params)) if gpu else None
    return point


_OUTPUT_KEYS = (
    "ttft_seconds",
    "time_per_output_token_seconds",
    "tokens_per_second",
    "throughput_tokens_per_second",
    "queue_seconds",
    "batch",
    "batch_cap",
    "capacity_requests_per_second",
    "kv_bytes_per_token",
    "run_seconds",
    "drain_seconds",
    "completion_p50_seconds",
    "completion_p90_seconds",
    "completion_p99_seconds",
)


def _parts_sweep(data: Mapping[str, Any], result: Mapping[str, Any]) -> list[tuple[str, Any]]:
    # (label, time per output token by part) at the spec's own load and, for a closed
    # loop, at 1, 2, 4, ... streams below it (each a prediction of its own).
    concurrency = data.get("concurrency")
    rows = []
    if isinstance(concurrency, int) and data.get("rate_per_second") is None:
        n = 1
        while n < concurrency and len(rows) < 12:
            r = predict_spec({**data, "concurrency": n})
            rows.append((f"{n} stream{'s' if n > 1 else ''}", r["time_per_output_token_parts"]))
            n *= 2
    own = "the spec's load"
    if concurrency:
        own = f"{concurrency} stream{'s' if concurrency != 1 else ''} (the spec)"
    rows.append((own, result["time_per_output_token_parts"]))
    return rows


def predict_main(argv: list[str] | None = None) -> int:
    """CLI: ``predict --spec FILE.json [--json] [--plot PNG]``; bad input is one line on stderr, exit 2."""
    import argparse
    import json
    import sys

    ap = argparse.ArgumentParser(
        prog="python -m simengine predict", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--spec", required=True, help="JSON file (see simengine/spec.py)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.add_argument(
        "--plot",
        metavar="PNG",
        help="also write a chart of where a stream's time per output token goes, at the "
        "spec's load and, for a closed loop, at 1, 2, 4, ... streams up to it",
    )
    args = ap.parse_args(argv)
    try:
        with open(args.spec, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        print(f"error: cannot read {args.spec}: {exc.strerror}", file=sys.stderr)
        return 2
    except json.JSONDecodeError as exc:
        print(
            f"error: {args.spec} is not valid JSON: {exc.msg} at line {exc.lineno}", file=sys.stderr
        )
        return 2
    try:
        result = predict_spec(data)
    except SimEngineError as exc:
        print(f"error: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    if args.plot:
        if result["time_per_output_token_parts"] is None:
            print("error: a finite run (offline_requests) has no single step to chart",
                  file=sys.stderr)  # fmt: skip
            return 2
        from .token_chart import plot_token_parts

        plot_token_parts(args.plot, _parts_sweep(data, result),
                         title=f"{data['model'].get('name', 'model')} on {data['hardware']}")  # fmt: skip
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        keys = (*_OUTPUT_KEYS, "replicas", "devices", "tensor_parallel", "pipeline_stages")
        server = ("kv_admission", *SERVER_FEATURES, "cuda_graph_max_batch", "prefill_chunk_tokens")
        for key in (*keys, *server, "software", "software_era"):
            v = result[key]
            if v is None:
                continue
            print(f"{key:32s} {v:.6g}" if isinstance(v, float) else f"{key:32s} {v}")
        parts = result["time_per_output_token_parts"]
        bounds = result["time_per_output_token_bounds"]
        if parts is not None:
            print(f"time per output token by part (ms; step bound: {bounds['step']})")
            for part, seconds in parts.items():
                if seconds > 0:
                    bound = f"  ({bounds[part]})" if part in bounds else ""
                    print(f"  {part:30s} {seconds * 1e3:.4g}{bound}")
    return 0
