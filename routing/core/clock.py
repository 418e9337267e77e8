"""Simulated time: SIM_TIME_SCALE simulated seconds pass per wall second."""

from __future__ import annotations

import datetime as dt

from django.conf import settings


def sim_scale() -> float:
    return settings.SIM_TIME_SCALE


def wall(seconds_simulated: float) -> dt.timedelta:
    """The wall-clock time that `seconds_simulated` of simulated time take."""
    return dt.timedelta(seconds=seconds_simulated / sim_scale())
