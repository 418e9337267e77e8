"""What `make k8s-check` asks of the rendered manifests beyond the Kubernetes schemas
(kubernetes-validate checks those): the ServiceMonitor against the Prometheus Operator's
fields that it uses (kubernetes-validate has no schema for that CRD), and the issue's
rules: probes on separate liveness and readiness endpoints, beat a single replica
recreated, resources on every container, secrets referenced and never inlined, a web
HPA, PDB, NetworkPolicy and migrate Job. Usage: k8s_rules.py RENDERED.yaml...; prints
each broken rule and exits 1 if any."""

from __future__ import annotations

import sys

import jsonschema
import yaml

# monitoring.coreos.com/v1 ServiceMonitor: the part of the CRD's schema the manifests use
# (names and types as in prometheus-operator's CRD; unknown fields refused).
_SECRET_KEY_SELECTOR = {
    "type": "object",
    "required": ["key"],
    "properties": {
        "name": {"type": "string"},
        "key": {"type": "string"},
        "optional": {"type": "boolean"},
    },
    "additionalProperties": False,
}
SERVICEMONITOR = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "jobLabel": {"type": "string"},
                "selector": {
                    "type": "object",
                    "properties": {
                        "matchLabels": {
                            "type": "object",
                            "additionalProperties": {"type": "string"},
                        },
                        "matchExpressions": {"type": "array"},
                    },
                    "additionalProperties": False,
                },
                "namespaceSelector": {"type": "object"},
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "targetPort": {"type": ["string", "integer"]},
                            "path": {"type": "string", "pattern": "^/"},
                            "scheme": {"enum": ["http", "https"]},
                            "interval": {
                                "type": "string",
                                "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
                            },
                            "scrapeTimeout": {"type": "string"},
                            "authorization": {
                                "type": "object",
                                "additionalProperties": False,
                                "properties": {
                                    "type": {"type": "string"},
                                    "credentials": _SECRET_KEY_SELECTOR,
                                },
                            },
                            "relabelings": {"type": "array"},
                            "metricRelabelings": {"type": "array"},
                        },
                    },
                },
            },
        },
    },
}
SECRET_NAMES = ("SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL", "METRICS_TOKEN")


def pod_spec(doc: dict) -> dict | None:
    if doc["kind"] in ("Deployment", "Job"):
        return doc["spec"]["template"]["spec"]
    return None


def broken_rules(docs: list[dict]) -> list[str]:
    out: list[str] = []
    by_kind: dict[str, list[dict]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    name = lambda d: f"{d['kind']}/{d['metadata']['name']}"  # noqa: E731
    for d in by_kind.get("ServiceMonitor", []):
        for err in jsonschema.Draft202012Validator(SERVICEMONITOR).iter_errors(d):
            out.append(f"{name(d)}: {'/'.join(map(str, err.absolute_path))}: {err.message}")
    if "Secret" in by_kind:
        out.append("a Secret is inlined: reference lifecycle-secrets instead")
    for d in by_kind.get("ConfigMap", []):
        for key in set(d.get("data", {})) & set(SECRET_NAMES):
            out.append(f"{name(d)}: {key} is a secret: it belongs in the Secret")
    for d in docs:
        spec = pod_spec(d)
        if spec is None:
            continue
        for c in spec["containers"]:
            res = c.get("resources", {})
            if not (res.get("requests") and res.get("limits", {}).get("memory")):
                out.append(f"{name(d)}: container {c['name']} lacks requests or a memory limit")
            for e in c.get("env", []):
                if e["name"] in SECRET_NAMES and "value" in e:
                    out.append(f"{name(d)}: {e['name']} inlined: take it from the Secret")
            if not any("secretRef" in src for src in c.get("envFrom", [])):
                out.append(f"{name(d)}: container {c['name']} does not reference the Secret")
    deployments = {d["metadata"]["name"]: d for d in by_kind.get("Deployment", [])}
    web = deployments.get("lifecycle-web")
    if web is None:
        out.append("no Deployment lifecycle-web")
    else:
        c = pod_spec(web)["containers"][0]
        live = c.get("livenessProbe", {}).get("httpGet", {}).get("path")
        ready = c.get("readinessProbe", {}).get("httpGet", {}).get("path")
        if not live or not ready or live == ready:
            out.append(f"web: liveness ({live}) and readiness ({ready}) need separate endpoints")
    for queue in ("interactive", "batch", "housekeeping"):
        if f"lifecycle-worker-{queue}" not in deployments:
            out.append(f"no worker Deployment for the {queue} queue")
    beat = deployments.get("lifecycle-beat")
    if (
        beat is None
        or beat["spec"].get("replicas") != 1
        or beat["spec"].get("strategy", {}).get("type") != "Recreate"
    ):
        out.append("beat: exactly one replica, strategy Recreate")
    for kind, target in (
        ("HorizontalPodAutoscaler", "lifecycle-web"),
        ("PodDisruptionBudget", "lifecycle-web"),
    ):
        if not any(d["metadata"]["name"] == target for d in by_kind.get(kind, [])):
            out.append(f"no {kind} for {target}")
    for kind in ("NetworkPolicy", "Job", "Service", "ServiceMonitor"):
        if kind not in by_kind:
            out.append(f"no {kind}")
    return out


def main(paths: list[str]) -> int:
    failed = 0
    for path in paths:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        for line in broken_rules(docs):
            print(f"{path}: {line}")
            failed = 1
        if not failed:
            print(f"{path}: {len(docs)} resources, the deployment rules hold")
    return failed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
