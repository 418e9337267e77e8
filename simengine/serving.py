"""Serving figures of a replica fleet: closed loop, open loop and finite offline runs.

:func:`serving_point` answers what a benchmark measures: ``replicas`` identical
replicas serving (input, output) requests at a concurrency (a closed loop: the steady
state of continuous batching), at an offered rate (an open loop: queueing in TTFT,
:mod:`simengine.queueing`) or as a finite run of N requests queued at once
(:mod:`simengine.offline`). It reads the same served deployment, decode step and
prefill formulas the router's predictions read (:mod:`simengine.perf`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from . import kv, offline
from .eras import resolve_software, software_era
from .errors import SimEngineError
from .model import ModelSpec
from .parallel import attention_dp_batch_cap, attention_dp_in_phase
from .params import DEFAULT_PARAMS, EngineParams
from .perf import _chunks, _serve, _token_line, gpu_token_line, token_parts
from .placement import resolve_device
from .prefill import carried, interference, prefill_parts, request_steps, with_prefills
from .queueing import wait_estimate
from .served import Deployment, Served, positive_int
from .speculative import Speculation


def serving_point(
    model: ModelSpec,
    deployment: Deployment,
    *,
    concurrency: int | None = None,
    input_tokens: int,
    output_tokens: int,
    output_tokens_cv: float = 0.0,
    cached_input_tokens: int = 0,
    speculative: bool | Speculation = False,
    with_transport: bool = False,
    rate_per_second: float | None = None,
    max_batch_size: int | None = None,
    replicas: int = 1,
    disaggregated_prefill: bool = False,
    offline_requests: int | None = None,
    max_output_tokens: int | None = None,
    server: str | None = None,
    kv_admission: str | None = None,
    params: EngineParams = DEFAULT_PARAMS,
) -> dict[str, Any]:
    """``replicas`` identical replicas serving (input, output) requests.

    Closed loop (``concurrency`` streams per replica, default 1; NIM / vLLM /
    TensorRT-LLM benchmarks): the decode batch is min(concurrency, ``max_batch_size``,
    what the paged KV cache holds); streams beyond the batch wait for a slot (their
    wait is in TTFT). Open loop (``rate_per_second`` Poisson arrivals for the whole
    deployment, MLPerf's server scenario; split evenly over replicas): the batch is
    what the rate sustains (Little's law at the service time of that batch), and TTFT
    adds the queueing (:func:`open_loop`). ``max_batch_size`` None: the production
    default of ``server`` for the GPU's memory (:func:`simengine.kv.default_max_batch_size`).
    ``kv_admission`` (default: the ``server``'s, :func:`simengine.kv.kv_admission`):
    "paged" admits a stream while the tokens held fit the cache; "reserved"
    (TensorRT-LLM's GUARANTEED_NO_EVICT) only when its whole input + output fits, so the
    cache holds fewer streams (:func:`simengine.kv.admission_context`). A sliding-window
    model's window layers take up the cache the ``server``'s pools give them
    (:func:`simengine.kv.capacity_tokens`: TensorRT-LLM sizes them like full layers).
    ``output_tokens_cv`` (std / mean of the output lengths; default 0, fixed lengths)
    raises the context the streams in flight hold to the token-weighted mean
    (:func:`simengine.kv.mean_context`): their KV, hence the batch the cache holds, and
    their attention per step.

    ``cached_input_tokens`` (default 0) of each prompt are already in the server's prefix
    cache (vLLM's automatic prefix caching, SGLang's radix cache, TensorRT-LLM's KV
    block reuse: a prompt whose leading blocks match a request the server has served
    and not evicted): the request prefills only the other input - cached tokens, whose
    attention still reads the cached prefix (:func:`simengine.prefill.prefill_parts`
    of the new tokens after the cached ones), so its TTFT and the chunks riding the
    other streams' steps shrink; its KV still holds every input token. At least one
    token is computed (a server recomputes a fully cached prompt's last token for its
    logits: vLLM caps a hit at the prompt's length - 1).

    A finite Offline run (``offline_requests`` N, MLPerf's Offline scenario,
    ``trtllm-bench``): N requests per replica queued at once; the slots are
    min(``concurrency`` if given, ``max_batch_size``, what the paged KV cache holds), the
    outputs N lengths of the stated mean and spread (capped at ``max_output_tokens``),
    and the throughput is the run's tokens / its length, the drain at the end included
    (:mod:`simengine.offline`). TTFT is then the mean wait for a slot + the prefill and
    first step; ``batch`` the mean over the run's steps.

    The figures a serving benchmark reports: TTFT, time per output token, per-stream
    tokens/s and the throughput of all replicas. ``with_transport`` adds the API round
    trip and per-token overheads (a client-side measurement).

    ``disaggregated_prefill`` (GPUs): prompts are prefilled on other GPUs of the same
    kind and their KV shipped to the replica, which only decodes (prefill-decode
    disaggregation: DistServe, Zhong et al., OSDI 2024; Splitwise, Patel et al., ISCA
    2024; SGLang and NVIDIA Dynamo serve this way). Decode steps then carry no prefill
    (no chunked-prefill interference) and TTFT is the prefill on its own GPUs + the KV
    transfer over the scale-out network + the first decode step; the throughput is the
    decode replicas'.
    """
    if offline_requests is not None:
        positive_int(offline_requests, "offline_requests", 1)
        if rate_per_second is not None:
            raise SimEngineError(
                "give offline_requests (a finite run) or rate_per_second, not both"
            )
        if max_output_tokens is not None:
            positive_int(max_output_tokens, "max_output_tokens", output_tokens)
        # Every request is queued at once; concurrency (if given) is the harness's cap.
        concurrency = (
            offline_requests if concurrency is None else min(concurrency, offline_requests)
        )
        if deployment.attention_data_parallel and attention_dp_in_phase(
            offline_requests, output_tokens_cv
        ):
            # Identical requests keep the ranks in phase: as a balancing server does.
            deployment = dataclasses.replace(deployment, attention_dp_balance=True)
    if rate_per_second is None:
        concurrency = positive_int(1 if concurrency is None else concurrency, "concurrency", 1)
    else:
        if concurrency is not None:
            raise SimEngineError("give concurrency (closed loop) or rate_per_second, not both")
        if (
            isinstance(rate_per_second, bool)
            or not isinstance(rate_per_second, (int, float))
            or not math.isfinite(rate_per_second)
            or rate_per_second <= 0
        ):
            raise SimEngineError(f"rate_per_second must be a number > 0, got {rate_per_second!r}")
    positive_int(replicas, "replicas", 1)
    new_tokens = input_tokens - cached_tokens(cached_input_tokens, input_tokens)
    admission = kv.kv_admission(server, kv_admission)
    if max_batch_size is None:
        max_batch = kv.default_max_batch_size(
            resolve_device(deployment.device).memory_bytes, server
        )
    else:
        max_batch = max_batch_size
    positive_int(max_batch, "max_batch_size", 1)
    _, era = software_era(params, deployment.device, deployment.software)
    deployment = resolve_software(params, deployment)
    if speculative != deployment.speculative:
        deployment = dataclasses.replace(deployment, speculative=speculative)
    # The server's cap on sequences in a step: the benchmark's concurrency (closed loop)
    # and max_batch_size; _serve limits it to what the paged KV cache holds.
    if deployment.attention_data_parallel:
        max_batch = attention_dp_batch_cap(max_batch, deployment.nodes_per_replica or 1)
    limit = max_batch if concurrency is None else min(concurrency, max_batch)
    p = params.with_values({f"tier:{deployment.tier}:batch": float(limit)})
    output_tokens_cv = kv.output_cv(output_tokens_cv)
    # The streams in flight hold the token-weighted mean context (kv.mean_context).
    context = kv.mean_context(input_tokens, output_tokens, output_tokens_cv)
    # The cache admits streams by what each counts for under the server's rule: the
    # tokens held (paged), or the whole input + output (reserved: fewer streams).
    admit = kv.admission_context(admission, input_tokens, output_tokens, output_tokens_cv)
    # A sliding-window model's window layers take up what the server's pools give them.
    s = _serve(
        model,
        deployment,
        p,
        context=context,
        admit_context=admit,
        window_pool=kv.window_pool(server),
    )
    gpu = s.hw.kind == "gpu"
    # Streams one replica decodes at once: the GPU batch cap, or the wafer's slots.
    slots = s.batch_cap if gpu else float(s.place.streams_per_replica)
    # The prompt's uncached tokens are prefilled after its cached prefix.
    prefill, side = prefill_parts(s, new_tokens, input_tokens - new_tokens)
    chunks = _chunks(s, new_tokens)
    if disaggregated_prefill:
        if not gpu:
            raise SimEngineError(f"disaggregated_prefill applies to GPUs only, not {s.hw.key}")
        kv_transfer = model.kv_bytes(model.kv_tokens(input_tokens)) / s.hw.scaleout_bandwidth
        prefill, chunks = prefill + kv_transfer, 1
    per_token, ttft_extra = 0.0, 0.0
    if with_transport:
        per_token = s.transport("per_token")
        ttft_extra = s.transport("ttft_overhead") + s.transport("round_trip")

    elsewhere = prefill if disaggregated_prefill else 0.0
    cycle = request_steps(chunks, output_tokens)  # the steps a request spans

    def riding(batch: float) -> float:
        # The other streams' prompt chunks riding each step of a stream's cycle (chunked
        # prefill: its own prompt's chunk steps and its decode steps; none when prompts
        # are prefilled elsewhere, or on wafers).
        decoding_with_prefills = gpu and not disaggregated_prefill
        return interference(s, batch if decoding_with_prefills else None, side, new_tokens, cycle)

    # An open loop's prompts queue first come, first served (open_loop's M/D/1 prefill
    # wait; GPUs prefilling here): chunked prefill serves waiting prompts in arrival
    # order, and a prompt being chunked is running, so it takes each step's budget
    # before any prompt behind it. The prompts ahead of a request are its queue; its own
    # chunk steps then carry its chunks and the batch's decodes, and the prompts behind
    # it ride its decode steps. A closed loop has no such queue, and its mean field
    # (every step of the cycle carrying its share) stands in for it.
    queued = rate_per_second is not None and gpu and not disaggregated_prefill

    def decode_riding(batch: float) -> float:
        # The other streams' prompts riding each of a stream's decode steps: the mean
        # field's, or in an open loop the whole cycle's over its decode steps.
        extra = riding(batch)
        if queued and output_tokens > 1:
            return extra * cycle / (output_tokens - 1)
        return extra

    def at(batch: float) -> tuple[float, float, float]:
        # (TTFT without queueing, time per output token, the time a request holds a
        # decode slot: from its prefill on, or from its KV's arrival when disaggregated).
        # Closed loop: the steps carrying the prompt's own chunks (the last one yields
        # its first token) carry the other streams' riding prompts as its decode steps
        # do. Open loop: they carry none (``queued`` above).
        line = _token_line(s, batch, context) if gpu else s.token_line
        extra = decode_riding(batch)
        chunk_extra = 0.0 if queued else extra
        step = with_prefills(line, extra).at(context)
        tpot = step + per_token + extra
        chunk_step = step if chunk_extra == extra else with_prefills(line, chunk_extra).at(context)
        ttft = prefill + chunks * (chunk_step + chunk_extra) + ttft_extra
        return ttft, tpot, ttft - elsewhere + (output_tokens - 1) * tpot

    def prompt_seconds(batch: float) -> float:
        # What one prompt holds the GPU for at ``batch`` streams: riding the others'
        # decode steps (its pieces share their weight read: riding's whole cycle over
        # the B - 1 prompts it carries), or alone at one stream, whichever is less.
        c = math.floor(batch)
        if c <= 1:
            return prefill
        return min(prefill, riding(float(c)) * cycle / (c - 1))

    capacity = None
    run = None
    if offline_requests is not None:
        run = offline_run(
            s, offline_requests, input_tokens, output_tokens, output_tokens_cv,
            max_output_tokens, int(min(float(concurrency), slots)), per_token,
            0.0 if disaggregated_prefill else prefill, side, new_tokens,
        )  # fmt: skip
        streams, tpot, queue = run.mean_batch, run.step_seconds, run.mean_wait
        ttft = prefill + chunks * tpot + ttft_extra
        throughput = replicas * run.throughput
    elif rate_per_second is None:
        streams = min(float(concurrency), slots)
        ttft, tpot, held = at(streams)
        # Closed loop: the concurrency - streams clients beyond the batch wait, each
        # request cycle, for a slot (by Little's law: concurrency / (streams / held)
        # requests/s - the request's own time).
        queue = max(0.0, concurrency * held / streams - (held + elsewhere))
        throughput = replicas * streams * output_tokens / held
    else:
        streams, ttft, tpot, queue, capacity = open_loop(
            at, rate_per_second, replicas, slots,
            prompt_seconds(slots) if gpu and not disaggregated_prefill else 0.0,
        )  # fmt: skip
        throughput = rate_per_second * output_tokens
    # Where a stream's time per output token goes at the batch its TPOT was taken at
    # (perf.token_parts; an open loop's below one stream is timed at one): the steady
    # state's; a finite run's steps change as it fills and drains (its prompts ride the
    # steps after each admission, not one every mean output), so none.
    parts, bounds = None, None
    if run is None:
        timed_at = max(1.0, streams)
        parts, bounds = token_parts(s, timed_at, context, decode_riding(timed_at), per_token)
    return {
        "ttft_seconds": ttft + queue,
        "time_per_output_token_seconds": tpot,
        "tokens_per_second": 1.0 / tpot,
        "throughput_tokens_per_second": throughput,
        "queue_seconds": queue,
        "batch": streams,
        # The most streams a replica decodes at once: GPUs, min(the server's cap, what the
        # KV cache holds under its admission rule); wafers, the pipeline's slots.
        "batch_cap": slots,
        "kv_admission": admission if gpu else None,
        "capacity_requests_per_second": capacity,
        "replicas": replicas,
        "devices": s.place.nodes_per_replica,
        "tensor_parallel": s.place.tensor_parallel or 1,
        "pipeline_stages": s.place.pipeline_stages,
        "software": s.software,
        "software_era": era,
        "time_per_output_token_parts": parts,
        "time_per_output_token_bounds": bounds,
        "run_seconds": None if run is None else run.seconds,
        "drain_seconds": None if run is None else run.drain_seconds,
        **{
            f"completion_p{round(q * 100)}_seconds": None if run is None else v
            for q, v in zip(
                offline.COMPLETION_QUANTILES,
                (None,) * 3 if run is None else run.completion_quantiles,
                strict=True,
            )
        },
    }


def cached_tokens(cached: int, input_tokens: int) -> int:
    """The prompt tokens served from the prefix cache: ``cached``, checked to be a whole
    number from 0 to input_tokens - 1 (a request computes at least its last token)."""
    if isinstance(cached, bool) or not isinstance(cached, int) or not 0 <= cached < input_tokens:
        raise SimEngineError(
            f"cached_input_tokens must be an integer from 0 to input_tokens - 1 "
            f"({input_tokens - 1}): a request computes at least its last token, got {cached!r}"
        )
    return cached


def offline_run(
    s: Served,
    requests: int,
    input_tokens: int,
    output_tokens: int,
    output_cv: float,
    max_output: int | None,
    slots: int,
    per_token: float,
    prefill: float,
    side: float = 0.0,
    new_tokens: int | None = None,
) -> offline.OfflineRun:
    # A finite run on one replica (simengine.offline): the step at each batch and mean
    # context is the served deployment's, the same line the steady state reads. Each
    # prompt holds ``input_tokens`` of KV and prefills ``new_tokens`` of them (default:
    # all; fewer when a prefix is cached).
    gpu = s.hw.kind == "gpu"
    # Without speculation a GPU step is proportional to the tokens the streams attend
    # over plus a constant, both set by the batch alone (the co-batched streams' KV and
    # attention scale with those tokens; weights, GEMMs and collectives do not): one
    # (slope, constant) per batch size, not one step line per completion event. A
    # stream at context c attends over ModelSpec.kv_tokens(c) whole-cache tokens: c, or
    # fewer when sliding-window layers read only their window.
    affine = gpu and s.knobs.speculation is None

    def step(batch: float, context: float) -> float:
        # Every stream in flight holds ``context`` tokens on average (GPUs: the batch's
        # KV and attention; a wafer's step depends on neither). The GPU's step: the
        # host's work for it is ``host_many``'s.
        line = _token_line(s, batch, context) if gpu else s.token_line
        return line._replace(floor=0.0).at(context) + per_token

    per_size: list = [None, None]  # the last batch array asked for, its coefficients

    def coefficients(batch: np.ndarray) -> np.ndarray:
        # (slope, constant, host floor) of the step at each batch size the run goes
        # through, once per size (step_many and host_many ask for the same batches).
        if per_size[0] is not batch:
            sizes, which = offline.distinct(batch)
            # Every size at once: the line's batch-dependent terms as arrays (an empty
            # batch counts as one stream, as _token_line counts it).
            line = gpu_token_line(s, np.where(sizes > 0, sizes, 1.0).astype(float), 1.0)
            coef = np.empty((len(sizes), 3))
            coef[:, 0] = np.maximum(line.mem0 + line.mem1, line.flop0 + line.flop1)
            coef[:, 1] = line.fixed
            coef[:, 2] = line.floor
            per_size[:] = batch, coef[which]
        return per_size[1]

    def step_many(batch: np.ndarray, context: np.ndarray) -> np.ndarray:
        coef = coefficients(batch)
        return coef[:, 0] * s.model.kv_tokens(context) + coef[:, 1] + per_token

    def host_many(batch: np.ndarray) -> np.ndarray:
        # The host's work per step at each batch (simengine.host; the context does not
        # matter).
        return coefficients(batch)[:, 2]

    outputs = offline.output_lengths(output_tokens, output_cv, requests, max_output)
    # Chunked prefill: the prompts admitted at an event ride the next interval's decode
    # steps (carried: what the steps cannot absorb of them; a pipeline stage carries its
    # share); wafers and disaggregated prefill (``prefill`` 0) take none from the steps.
    carry = None
    if gpu and prefill > 0:
        prompt = float(input_tokens if new_tokens is None else new_tokens)

        def carry(active: np.ndarray, prompts: np.ndarray, steps: np.ndarray) -> np.ndarray:
            return steps * carried(s, active, prompts / steps, prompt, side)

    return offline.simulate(step, outputs, input_tokens, max(1, slots),
                            step_many=step_many if affine else None,
                            host_many=host_many if gpu and s.knobs.host_per_stream else None,
                            carry_many=carry)  # fmt: skip


def open_loop(
    at, total_rate: float, replicas: int, slots: float, prefill: float
) -> tuple[float, float, float, float, float]:
    """Poisson arrivals of ``total_rate`` requests/s (MLPerf's server scenario) split
    evenly over ``replicas``: one replica sees rate = total_rate / replicas.

    ``at(batch)`` gives (TTFT, time per output token, request time S) at a decode batch.
    Sustained batch (Little's law): the mean number of requests in service N solves
    N = rate x S(max(1, N)) (a fixed point; S grows with N), found by bisection on
    [0, c] with c = the replica's slots (GPU: min(max_batch_size, what paged KV holds);
    wafer: its pipeline slots). Capacity = min(c / S(c), 1 / prefill): every slot busy,
    or the GPU busy prefilling (``prefill``: what one prompt holds the GPU for with
    every slot busy: riding the decode steps, an MoE prompt's pieces share their
    experts' read, so it costs less than alone). Queueing in TTFT (means): waiting for a
    slot, an M/D/c queue (Allen-Cunneen: Erlang C x (1 + 0) / 2 for Poisson arrivals and a fixed
    request size) with c slots and service time S(c): a request waits only while all c
    slots are held, and then every holder's request time is the full batch's (with S(N)
    a compute-bound replica, whose throughput N / S(N) has levelled off, would keep N
    well below c at a rate just under capacity and hardly queue); and, on GPUs, waiting
    for the prefill (chunked prefill takes waiting prompts first come, first served
    within the step's token budget): M/D/1 on the prefill time (Pollaczek-Khinchine).
    Returns (batch, TTFT at the batch, TPOT, queue seconds, capacity of all replicas
    in requests/s). SimEngineError naming the capacity when the rate reaches it.
    """
    rate = total_rate / replicas
    c = max(1, math.floor(slots))
    full = at(float(c))[2]
    capacity = c / full
    if prefill > 0:
        capacity = min(capacity, 1.0 / prefill)
    if rate >= capacity:
        raise SimEngineError(
            f"rate_per_second {total_rate:.4g} is at or above capacity: the deployment serves "
            f"at most {capacity * replicas:.4g} requests/s ({replicas} replica(s) x "
            f"{capacity:.4g}, {c} slots each)"
        )
    lo, hi = 0.0, float(c)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if rate * at(max(1.0, mid))[2] > mid:
            lo = mid
        else:
            hi = mid
    n = hi
    batch = max(1.0, n)
    ttft, tpot, _ = at(batch)
    slot_wait = wait_estimate(c, rate, 1.0 / full, 1.0, 0.0).mean_wait
    prefill_wait = wait_estimate(1, rate, 1.0 / prefill, 1.0, 0.0).mean_wait if prefill > 0 else 0.0
    return n, ttft, tpot, slot_wait + prefill_wait, capacity * replicas
