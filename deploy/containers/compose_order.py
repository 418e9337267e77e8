"""compose.yaml's start order, for deploy/containers/compose-up.sh: one line per
service, in levels (a service after everything it depends on), with the gate its
dependents wait for:

    LEVEL SERVICE GATE     GATE: healthy | completed | started

compose-up.sh starts each level with `podman-compose up --no-deps` and waits for each
gate itself: podman-compose honours `condition: service_healthy` only with podman >= 4.6
(Debian bookworm has 4.3, which also cannot start a container whose dependency has
dependencies of its own through --requires). So the file's depends_on is what orders
the start there, each gate checked rather than trusted. Usage: compose_order.py FILE"""

from __future__ import annotations

import sys

import yaml

GATES = {
    "service_healthy": "healthy",
    "service_completed_successfully": "completed",
    "service_started": "started",
}
STRENGTH = ["started", "healthy", "completed"]


def order(services: dict) -> list[tuple[int, str, str]]:
    deps = {}
    gate = dict.fromkeys(services, "started")
    for name, svc in services.items():
        d = svc.get("depends_on") or {}
        if isinstance(d, list):
            d = {n: {"condition": "service_started"} for n in d}
        deps[name] = set(d)
        for dep, spec in d.items():
            g = GATES[(spec or {}).get("condition", "service_started")]
            if STRENGTH.index(g) > STRENGTH.index(gate[dep]):
                gate[dep] = g
    level: dict[str, int] = {}
    while len(level) < len(services):
        ready = [n for n in services if n not in level and deps[n] <= set(level)]
        if not ready:
            raise SystemExit(f"a cycle in depends_on: {sorted(set(services) - set(level))}")
        for n in ready:
            level[n] = max((level[d] for d in deps[n]), default=-1) + 1
    return sorted(((level[n], n, gate[n]) for n in services), key=lambda t: (t[0], t[1]))


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        doc = yaml.safe_load(f)
    for lvl, name, g in order(doc["services"]):
        print(lvl, name, g)
