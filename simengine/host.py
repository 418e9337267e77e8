"""Host work of a GPU decode step: the server's per-request CPU time.

Every decode step of a GPU server also runs on its host CPU: the scheduler walks the
requests in flight, prepares the step's inputs, and after the step checks each
request's stop criteria, updates its state and hands its token to the response path
(TensorRT-LLM's PyTorch executor: ``_schedule``, ``_prepare_inputs``,
``_update_requests``, ``_handle_responses``; vLLM V1's scheduler and output processor;
SGLang's scheduler). Most of it is a loop over the requests, so it grows with the
batch, and it runs on one CPU thread per scheduler: one per replica, or one per
attention rank under attention data parallelism (TensorRT-LLM's ADP and SGLang's DP
attention run a scheduler per rank over that rank's requests).

The servers overlap it with the GPU (TensorRT-LLM's overlap scheduler, on by default
since May 2025, NVIDIA/TensorRT-LLM PR #4174; SGLang's overlap scheduler, on by default
since November 2024, sgl-project/sglang PR #2067; vLLM's async scheduling, on by
default from 0.14.0, January 2026, vllm-project/vllm PR #27614): the host prepares
step n + 1 while the GPU runs step n. So a step takes the longer of the two,
max(GPU step, host work) (``simengine.perf``'s step line, ``simengine.offline``'s
finite run), and the prefills riding in a host-bound step cost nothing more; the part
of the host work that stays exposed at any batch (kernel launches, the
launch-to-finish sync) is in the GPU step's fixed overhead (params
``gpu:kernel_overhead`` per kernel the step launches, ``simengine.step.decode_kernels``).
The host binds when the GPU step is short against the batch: a small-active model (a
few billion active parameters) at hundreds to thousands of streams, above all on a
slower host CPU.

Sizes (params ``host:<host>:per_request``, fixed, not fitted: no calibration point
separates them from the GPU step):

* Grace (GB200 NVL72, Arm Neoverse V2): TensorRT-LLM measured an average host step of
  45.11 ms per iteration serving gpt-oss-120b at maximum throughput on GB200 with two
  attention-DP ranks of ``max_batch_size`` 1,536 and 3,072 clients (NVIDIA/TensorRT-LLM
  PR #10273, 2025-12-24), i.e. 45.11 ms / 1,536 = 29.4 us per request per step (an
  upper bound: the iteration's fixed host work is in it).
* x86 (DGX/HGX H100, H200, B200: Intel Xeon): the same work at the ratio of the two
  hosts' CPU time for the same PyTorch module call, 37.08 us on GB200 against 13.48 us
  on a DGX H100's Xeon Platinum 8480C (NVIDIA/TransformerEngine issue #2053,
  2025-08-11): 29.4 / 2.75 = 10.7 us. (A third-party profile of vLLM's scheduler alone
  found 12.7 us per request at its cap, the same order.)

The same order elsewhere (not used for the values): TensorRT-LLM's sampler tail alone,
~8.8 ms per iteration over 256 requests on GB200 (PR #16564, 2026-07: ~34 us per
request), and ~580 us per iteration of host time left exposed at 64 requests of
Llama-3.1-8B on B200 (issue #13957, 2026-05: ~9 us per request).
"""

from __future__ import annotations


def host_param(host: str) -> str:
    """The parameter naming a host CPU family's seconds per request per decode step."""
    return f"host:{host}:per_request"


def host_step_seconds(per_request: float, batch: float, schedulers: int = 1) -> float:
    """Host time of one decode step: ``batch`` requests in flight over ``schedulers``
    scheduler threads running side by side (attention-DP ranks; 1 otherwise), each
    ``per_request`` seconds per request."""
    return per_request * batch / max(1, schedulers)
