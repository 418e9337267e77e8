"""The deployment's own checkers can fail: .ci/k8s_rules.py finds each broken rule in
manifests rendered from deploy/k8s, and deploy/containers/compose_order.py starts compose.yaml's
services after what they depend on. (`make k8s-check` and `make compose-test` run the
artifacts themselves, in .ci/run.)"""

from __future__ import annotations

import copy
import importlib.util
import shutil
import subprocess

import pytest
import yaml

from tests.realparts import ROOT


def ci_module(name: str, folder: str = ".ci"):
    spec = importlib.util.spec_from_file_location(name, ROOT / folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rendered() -> list[dict]:
    kubectl = shutil.which("kubectl")
    if not kubectl:
        pytest.skip("needs kubectl (kubectl kustomize)")
    out = subprocess.run(
        [kubectl, "kustomize", str(ROOT / "deploy/k8s/overlays/production")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def named(docs: list[dict], kind: str, name: str) -> dict:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def test_the_production_overlay_keeps_every_rule(rendered):
    assert ci_module("k8s_rules").broken_rules(rendered) == []


def test_each_broken_rule_is_found(rendered):
    rules = ci_module("k8s_rules")
    docs = copy.deepcopy(rendered)
    named(docs, "Deployment", "lifecycle-beat")["spec"]["replicas"] = 2
    web = named(docs, "Deployment", "lifecycle-web")["spec"]["template"]["spec"]["containers"][0]
    web["readinessProbe"]["httpGet"]["path"] = web["livenessProbe"]["httpGet"]["path"]
    web["env"].append({"name": "SECRET_KEY", "value": "inlined"})
    del named(docs, "Deployment", "lifecycle-worker-batch")["spec"]["template"]["spec"][
        "containers"
    ][0]["resources"]["limits"]
    named(docs, "ServiceMonitor", "lifecycle")["spec"]["endpoints"][0]["intervall"] = "30s"
    docs.append({"kind": "Secret", "apiVersion": "v1", "metadata": {"name": "x"}})
    found = "\n".join(rules.broken_rules(docs))
    for expected in (
        "beat: exactly one replica",
        "liveness (/livez) and readiness (/livez) need separate endpoints",
        "SECRET_KEY inlined",
        "lifecycle-worker-batch: container worker lacks requests or a memory limit",
        "'intervall' was unexpected",
        "a Secret is inlined",
    ):
        assert expected in found, found


def test_compose_services_start_after_what_they_depend_on():
    order = ci_module("compose_order", "deploy/containers").order(
        yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    )
    level = {name: lvl for lvl, name, _ in order}
    gate = {name: g for _, name, g in order}
    assert level["postgres"] == level["redis"] == 0
    assert gate["postgres"] == gate["redis"] == "healthy"
    assert level["migrate"] == 1 and gate["migrate"] == "completed"
    for svc in ("web", "worker-interactive", "worker-batch", "worker-housekeeping", "beat"):
        assert level[svc] == 2, svc
    assert level["proxy"] == 3 and gate["web"] == "healthy"


def test_a_dependency_cycle_is_refused():
    cyclic = {
        "a": {"depends_on": ["b"]},
        "b": {"depends_on": {"a": {"condition": "service_healthy"}}},
    }
    with pytest.raises(SystemExit, match="cycle"):
        ci_module("compose_order", "deploy/containers").order(cyclic)
