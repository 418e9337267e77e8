import json
import math

from django.core.management.base import BaseCommand, CommandError

import simengine
from catalog.engine import deployment_of, model_spec
from catalog.lifecycle import is_serving, resolve_model_reference
from catalog.models import Deployment, ModelVersion
from simengine.report import plot_tiers, prediction_table


def count(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a whole number") from None
    if n < 0:
        raise ValueError(f"{value} is negative")
    return n


count.__name__ = "token count"


def seconds(value: str) -> float:
    x = float(value)
    if not math.isfinite(x) or x < 0:
        raise ValueError(f"{value} is not a duration >= 0")
    return x


seconds.__name__ = "seconds"


def task_text(task, transport: str) -> str:
    """The task a chart shows, in words."""
    turns = f"{task.turns:,} turn" + ("s" if task.turns != 1 else "")
    text = (
        f"{task.input_tokens:,} input / {task.output_tokens:,} output tokens, {turns}, "
        f"{task.tool_seconds:g} s of tools"
    )
    if task.tool_result_tokens:
        text += f", {task.tool_result_tokens:,} tool-result tokens"
    return text + f" ({transport} transport)"


class Command(BaseCommand):
    help = (
        "Predict a task's timing for a model on a tier with the simulation engine "
        "(tokens/s, TTFT, generation, tools, queue, total, wafers)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--model", required=True, help="Model slug or family alias, e.g. sol (required)."
        )
        parser.add_argument(
            "--tier",
            default="standard",
            help="flex, standard, priority or ultrafast (default: %(default)s).",
        )
        parser.add_argument(
            "--input-tokens",
            type=count,
            default=2000,
            help="Tokens of the first prompt (default: %(default)s).",
        )
        parser.add_argument(
            "--output-tokens",
            type=count,
            default=1000,
            help="Output tokens over the whole task (default: %(default)s).",
        )
        parser.add_argument(
            "--turns", type=count, default=1, help="Agent turns (default: %(default)s)."
        )
        parser.add_argument(
            "--tool-seconds",
            type=seconds,
            default=0.0,
            help="Seconds spent in tools over the task (default: %(default)s).",
        )
        parser.add_argument(
            "--tool-result-tokens",
            type=count,
            default=0,
            help="Tokens of tool results fed back over the task (default: %(default)s).",
        )
        parser.add_argument(
            "--load",
            type=float,
            default=None,
            help="Pool utilisation rho in [0, 1) for the P90 wait (default: no queue).",
        )
        parser.add_argument(
            "--transport",
            choices=["reworked", "legacy"],
            default="reworked",
            help="Transport profile (default: %(default)s).",
        )
        parser.add_argument("--json", action="store_true", help="Print JSON.")
        parser.add_argument(
            "--plot",
            metavar="PNG",
            help="Also write a chart of tokens/s and task time on every tier of --model for "
            "the same task (default: no chart).",
        )
        parser.add_argument(
            "--plot-all-models",
            action="store_true",
            help="With --plot: chart every serving model's tiers, not only --model's.",
        )

    def handle(self, *args, **o):
        model = resolve_model_reference(o["model"])
        if model is None:
            known = ", ".join(ModelVersion.objects.order_by("slug").values_list("slug", flat=True))
            raise CommandError(f"Unknown model {o['model']!r}. Known models: {known}.")
        deployment = (
            Deployment.objects.select_related("tier", "pool")
            .filter(model=model, tier__slug=o["tier"])
            .first()
        )
        if deployment is None:
            tiers = ", ".join(model.deployments.values_list("tier__slug", flat=True)) or "none"
            raise CommandError(f"{model.slug} has no {o['tier']!r} tier. Its tiers: {tiers}.")
        try:
            task = simengine.TaskProfile(
                input_tokens=o["input_tokens"],
                output_tokens=o["output_tokens"],
                turns=o["turns"],
                tool_seconds=o["tool_seconds"],
                tool_result_tokens=o["tool_result_tokens"],
            )
            pred = simengine.predict(
                model_spec(model),
                deployment_of(deployment, transport=o["transport"]),
                task,
                load=o["load"],
            )
        except simengine.SimEngineError as exc:
            raise CommandError(str(exc)) from exc

        result = {
            "model": model.slug,
            "tier": deployment.tier.slug,
            "pool": deployment.pool.slug,
            "device": deployment.pool.device,
            **pred.summary(),
            "gpus_per_replica": pred.gpus_per_replica,
            "replicas": pred.replicas,
            "load": pred.load,
        }
        if o["json"]:
            self.stdout.write(json.dumps(result, indent=2))
        else:
            self.stdout.write(prediction_table(pred))
        if o["plot"]:
            every = o["plot_all_models"]
            described = task_text(task, o["transport"])
            title = f"{'Serving models' if every else model.slug}: {described}"
            rows = self._plot_rows(model, task, o["transport"], every=every)
            path = plot_tiers(o["plot"], rows, title=title)
            self.stderr.write(f"Chart of {title} written to {path}")
        elif o["plot_all_models"]:
            raise CommandError("--plot-all-models needs --plot PNG.")

    def _plot_rows(self, chosen, task, transport, *, every: bool):
        rows = []
        deployments = Deployment.objects.select_related("model", "tier", "pool").order_by(
            "model__slug", "tier__rank"
        )
        if not every:
            deployments = deployments.filter(model=chosen)
        for d in deployments:
            if d.model_id != chosen.pk and not is_serving(d.model):
                continue
            try:
                pred = simengine.predict(
                    model_spec(d.model), deployment_of(d, transport=transport), task
                )
            except simengine.SimEngineError:
                continue  # e.g. the task does not fit that model's context window
            rows.append(pred.to_dict() | {"model": d.model.slug})
        return rows
