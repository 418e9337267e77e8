"""Requirements the image's Python needs beyond what this host's resolved.

`pip wheel` on the host evaluates environment markers for the host's interpreter, and
the image's may be another patch release: redis needs async-timeout below Python 3.11.3,
say. Reads every wheel's Requires-Dist in the folder and prints those whose markers hold
for the image's Python version (argv[2]) but not for this one, so .ci/containers.sh
builds their wheels too. Usage: marker_extras.py WHEEL_DIR IMAGE_PYTHON_VERSION"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement


def extras_needed(folder: Path, version: str) -> set[str]:
    host = default_environment()
    image = {
        **host,
        "python_full_version": version,
        "python_version": ".".join(version.split(".")[:2]),
    }
    found = set()
    for wheel in folder.glob("*.whl"):
        with zipfile.ZipFile(wheel) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            lines = z.read(meta).decode("utf-8", "replace").splitlines()
        for line in lines:
            if not line.startswith("Requires-Dist:"):
                continue
            req = Requirement(line.removeprefix("Requires-Dist:").strip())
            if req.marker is None or "extra" in str(req.marker):
                continue
            if req.marker.evaluate(image) and not req.marker.evaluate(host):
                req.marker = None
                found.add(str(req))
    return found


if __name__ == "__main__":
    print("\n".join(sorted(extras_needed(Path(sys.argv[1]), sys.argv[2]))))
