#!/usr/bin/env bash
# `make k8s-check`: deploy/k8s's base and every overlay rendered with `kubectl kustomize`
# and validated offline: kubernetes-validate --strict (the Kubernetes OpenAPI schemas, no
# unknown field) for the oldest and newest Kubernetes versions it knows of that we
# support, then .ci/k8s_rules.py (the ServiceMonitor's fields, and the deployment's
# rules: separate probes, one beat, resources, secrets referenced). Fails on any error,
# and on any resource kubernetes-validate has no schema for except the ServiceMonitor
# (which k8s_rules.py checks).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
KUBECTL=${KUBECTL:-kubectl}
VERSIONS=${K8S_VERSIONS:-1.29.0 1.37.0}
command -v "$KUBECTL" >/dev/null || {
  echo "k8s-check: kubectl not found (KUBECTL=...; Debian: kubernetes-client)" >&2
  exit 1
}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0
for dir in deploy/k8s/base deploy/k8s/overlays/*/; do
  dir=${dir%/}
  rendered=$out/$(echo "$dir" | tr / _).yaml
  "$KUBECTL" kustomize "$dir" >"$rendered"
  echo "== $dir: $(grep -c '^kind:' "$rendered") resources"
  for v in $VERSIONS; do
    log=$out/validate.log
    if ! "$PY" -m kubernetes_validate --strict -k "$v" "$rendered" >"$log" 2>&1; then
      status=1
    fi
    # Only the ServiceMonitor may lack a schema (a CRD: k8s_rules.py checks it).
    if grep -v "^INFO" "$log" | grep -v "Couldn't find schema for kind ServiceMonitor" | grep -q .; then
      grep -v "^INFO" "$log" | sed "s|$rendered|$dir|" >&2
      status=1
    fi
    echo "   kubernetes $v: $(grep -c '^INFO .* passed' "$log") resources valid"
  done
  "$PY" .ci/k8s_rules.py "$rendered" | sed "s|$rendered|$dir|" || status=1
done
exit "$status"
