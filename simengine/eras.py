"""Software eras: which calibrated software version a dated figure or deployment uses.

Parameters are calibrated per software version ("YYYY.MM", e.g. ``gpu@2025.04:eta_mem``);
a deployment may name a version or a date, and a date selects the era in effect then
(:func:`software_era`).
"""

from __future__ import annotations

import dataclasses
import re

from .errors import SimEngineError
from .params import EngineParams
from .placement import resolve_device
from .served import Deployment

# A software date: "YYYY-MM" or "YYYY-MM-DD" (a figure's publication date).
_SOFTWARE_DATE = re.compile(r"^(\d{4})-(\d{2})(?:-(\d{2}))?$")


def era_key(version: str) -> tuple[int, ...] | None:
    # A calibrated version "YYYY.MM" (or a date "YYYY-MM[-DD]") as (year, month), for
    # comparing eras by date, not as strings ("2026-08" < "2026.08" as strings).
    m = re.match(r"^(\d{4})[.-](\d{2})(?:[.-]\d{2})?$", version)
    return None if m is None else (int(m.group(1)), int(m.group(2)))


def software_era(params: EngineParams, device: str, software: str | None) -> tuple[str | None, str]:
    """(calibrated software version, how it was chosen) for a device.

    ``software`` None: the device's current version. A calibrated version: itself. A
    date "YYYY-MM" / "YYYY-MM-DD": the era in effect at that date, i.e. the latest
    calibrated version released on or before it; a date before every calibrated era
    resolves to the earliest one, and the note says so. Any other version string: the
    latest calibrated version not newer than it (e.g. "2024.11" -> the 2024.10 fit), or
    itself when none is older (``_serve`` then names the missing version).
    """
    hw = resolve_device(device)
    if software is None:
        version = params.software_for(hw.key)
        return version, f"{version} (current {hw.key} software)"
    probe = "t_layer" if hw.kind == "wafer" else "eta_mem"
    known = sorted(
        {
            k.split("@", 1)[1].split(":", 1)[0]
            for k in params.values
            if k.endswith(f":{probe}") and k.split("@", 1)[0] in (hw.key, hw.kind)
        },
        key=lambda v: (era_key(v) or (0, 0), v),
    )
    if software in known:
        return software, software
    date = _SOFTWARE_DATE.match(software)
    key = era_key(software)
    if date is not None and not (1 <= key[1] <= 12):
        raise SimEngineError(f"software date {software!r} has no month {key[1]}")
    earlier = [v for v in known if key is not None and (era_key(v) or (0, 0)) <= key]
    if earlier:
        return earlier[-1], f"{earlier[-1]} (the {hw.key} era in effect at {software})"
    if date is not None and known:
        return known[0], (
            f"{known[0]} (earliest calibrated {hw.key} era; {software} predates it, "
            "no earlier fit exists)"
        )
    return software, software


def resolve_software(params: EngineParams, deployment: Deployment) -> Deployment:
    # A figure dated in a software era the parameters do not name uses the era in
    # effect at that date (software_era).
    if deployment.software is None:
        return deployment
    version, _ = software_era(params, deployment.device, deployment.software)
    if version == deployment.software:
        return deployment
    return dataclasses.replace(deployment, software=version)
