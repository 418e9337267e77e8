import json

from django.core.management.base import BaseCommand, CommandError

import simengine
from catalog.engine import calibration_inputs
from catalog.models import ModelVersion
from simengine.calibration import ablation_checks, run_shape_checks, unfitted_gpu_points
from simengine.holdout import evaluate_holdout, evaluate_own_holdout
from simengine.report import (
    ablation_table,
    calibration_table,
    holdout_table,
    own_holdout_table,
    plot_own_holdout,
    run_shape_table,
    unfitted_points_table,
)


class Command(BaseCommand):
    help = (
        "Fit the engine's named parameters to the published figures (GPT-5.6 Sol, "
        "GPT-5.3-Codex-Spark, Cerebras Llama cross-checks, GPU serving points, GPU "
        "ceilings) and print each target, the model's value and the residual, the GPU "
        "points kept out of the fit, the finite runs' completion times beside their logs, "
        "the server features' on / off ratios beside a published ablation, "
        "then the hold-out and issue 28's own hold-out (with the error by kind: "
        "GPU/wafer, dense/MoE, latency/throughput)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--check",
            action="store_true",
            help="Evaluate the stored parameters (simengine/data/params.json) without fitting.",
        )
        parser.add_argument(
            "--json", action="store_true", help="Print the fit and the hold-out as JSON."
        )
        parser.add_argument(
            "--plot",
            metavar="PNG",
            help="Also write a chart of the own hold-out: predicted / published per figure, "
            "now and before issue 28 (default: no chart).",
        )

    def handle(self, *args, **o):
        try:
            inputs = calibration_inputs()
        except ModelVersion.DoesNotExist as exc:
            raise CommandError("Load the catalog first: manage.py loadcatalog") from exc
        try:
            result = simengine.calibrate(fit=not o["check"], **inputs)
        except simengine.SimEngineError as exc:
            raise CommandError(str(exc)) from exc
        holdout = evaluate_holdout(result.params)
        own = evaluate_own_holdout(result.params)
        unfitted = unfitted_gpu_points(result.params)
        shapes = run_shape_checks(result.params)
        ablations = ablation_checks(result.params)
        if o["json"]:
            data = {
                **result.to_dict(),
                "unfitted_gpu_points": [vars(r) for r in unfitted],
                "run_shapes": [{**vars(r), "ratio": r.ratio} for r in shapes],
                "ablations": [vars(r) for r in ablations],
                "holdout": holdout.to_dict(),
                "own_holdout": own.to_dict(),
            }
            self.stdout.write(json.dumps(data, indent=2, default=str))
        else:
            self.stdout.write(calibration_table(result))
            self.stdout.write("\n" + unfitted_points_table(unfitted))
            self.stdout.write("\n" + run_shape_table(shapes))
            self.stdout.write("\n" + ablation_table(ablations))
            self.stdout.write("\n" + holdout_table(holdout))
            self.stdout.write("\n" + own_holdout_table(own))
        if o["plot"]:
            written = plot_own_holdout(o["plot"], own)
            if not o["json"]:
                self.stdout.write(f"\nwrote {written}")
        if not result.passed:
            names = ", ".join(r.name for r in result.failures)
            raise CommandError(f"Targets outside tolerance: {names}")
