"""``python -m simengine [calibrate] [--write]`` refits the calibration and prints the fit and
hold-out tables (see :func:`simengine.calibration.main`);
``python -m simengine predict --spec FILE.json [--json] [--plot PNG]`` predicts any architecture
(see :mod:`simengine.spec`)."""

import sys

from .calibration import main
from .spec import predict_main

_args = sys.argv[1:]
if _args[:1] == ["predict"]:
    raise SystemExit(predict_main(_args[1:]))
if _args[:1] == ["calibrate"]:
    _args = _args[1:]
raise SystemExit(main(_args))
