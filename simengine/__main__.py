"""``python -m simengine``: refit the calibration (see :func:`simengine.calibration.main`)."""

from .calibration import main

raise SystemExit(main())
