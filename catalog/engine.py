"""The bridge from catalog rows to the simulation engine's data (one place)."""

from __future__ import annotations

import simengine
from catalog.models import Deployment, HardwarePool, ModelVersion


def model_spec(model: ModelVersion) -> simengine.ModelSpec:
    return simengine.ModelSpec(
        name=model.slug,
        total_params=float(model.total_params),
        active_params_prefill=float(model.active_params_prefill),
        active_params_decode=float(model.active_params_decode),
        layers=model.layers,
        hidden_size=model.hidden_size,
        bytes_per_param=model.bytes_per_param,
        kv_bytes_per_token=float(model.kv_bytes_per_token),
        context_window=model.context_window,
    )


def engine_deployment(
    pool: HardwarePool, tier: str, *, transport: str = "reworked"
) -> simengine.Deployment:
    return simengine.Deployment(
        device=pool.device, nodes=pool.nodes, tier=tier, transport=transport
    )


def predict_on(
    model: ModelVersion,
    pool: HardwarePool,
    tier: str,
    *,
    input_tokens: int,
    output_tokens: int,
    turns: int = 1,
    tool_seconds: float = 0.0,
    load: float | None = None,
) -> simengine.Prediction:
    """The engine's prediction (no breakdown; at `load`, the pool's outside load, if
    given) for one task shape on a model's pool and tier: the call the worker, the batch
    runner and the impact view share."""
    return simengine.predict(
        model_spec(model),
        engine_deployment(pool, tier),
        simengine.TaskProfile(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            turns=turns,
            tool_seconds=tool_seconds,
        ),
        load=load,
        breakdown=False,
    )


def deployment_of(deployment: Deployment, *, transport: str = "reworked") -> simengine.Deployment:
    return engine_deployment(deployment.pool, deployment.tier.slug, transport=transport)


def calibration_inputs() -> dict:
    """Sol and Spark specs and deployments, as `simengine.calibrate` takes them."""
    sol = ModelVersion.objects.get(slug="gpt-5.6-sol")
    spark = ModelVersion.objects.get(slug="gpt-5.3-codex-spark")
    sol_deps = {
        d.tier.slug: deployment_of(d) for d in sol.deployments.select_related("tier", "pool")
    }
    spark_dep = spark.deployments.select_related("tier", "pool").first()
    return {
        "sol": model_spec(sol),
        "spark": model_spec(spark),
        "sol_deployments": sol_deps,
        "spark_deployment": deployment_of(spark_dep) if spark_dep else None,
    }
