#!/usr/bin/env bash
# `make compose-test`: compose.yaml for real. Brings the stack up with podman-compose
# (images from `make image` and `.ci/containers.sh services`), on a free port, with a
# throwaway env file (fresh secrets) and project (its own volumes), then:
#   - started in compose.yaml's depends_on order, each gate checked
#     (deploy/containers/compose-up.sh); the migrate job exited 0, every container's
#     HEALTHCHECK passes (podman runs them on request here: podman 4.3 without systemd
#     runs none by itself);
#   - the README's quick-start walk (curl: models, a retired model's headers, a quote,
#     a job submitted and followed until it succeeded) through the proxy;
#   - the OpenAI SDK: models, a chat completion, a stream, a batch run by the batch
#     worker (.ci/compose_smoke.py);
#   - both web replicas answer /readyz;
# and always tears it down (trap: containers, network, volumes), printing the
# containers' logs first when something failed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
PODMAN_COMPOSE=${PODMAN_COMPOSE:-.venv/bin/podman-compose}
UP_SECONDS=${UP_SECONDS:-300}
project=lifecycle-ci-$$
work=$(mktemp -d)
say() { printf '%s compose-test: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
compose() { "$PODMAN_COMPOSE" -p "$project" -f compose.yaml "$@"; }
containers() { podman ps -a --filter "label=io.podman.compose.project=$project" --format '{{.Names}}'; }

teardown() {
  local status=$?
  trap - EXIT INT TERM
  if ((status)); then
    say "FAILED (status $status): the containers' state and logs"
    podman ps -a --filter "label=io.podman.compose.project=$project" \
      --format '{{.Names}}  {{.Status}}' >&2 || true
    for c in $(containers); do
      echo "----- $c" >&2
      podman logs --tail 40 "$c" >&2 2>&1 || true
    done
  fi
  say "tearing down $project"
  compose down -v -t 5 >/dev/null 2>&1 || true
  # Whatever compose left (a container of a half-started stack, its volumes).
  for c in $(containers); do podman rm -f -t 0 "$c" >/dev/null 2>&1 || true; done
  podman volume ls -q --filter "label=io.podman.compose.project=$project" |
    xargs -r podman volume rm -f >/dev/null 2>&1 || true
  rm -rf "$work"
  exit "$status"
}
trap teardown EXIT
trap 'exit 130' INT TERM

port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base=http://127.0.0.1:$port
pgpass=$("$PY" -c 'import secrets; print(secrets.token_hex(16))')
# The committed example with fresh secrets, the test's address and compressed time.
sed -e "s|^SECRET_KEY=.*|SECRET_KEY=$("$PY" -c 'import secrets; print(secrets.token_urlsafe(50))')|" \
  -e "s|^POSTGRES_PASSWORD=.*|POSTGRES_PASSWORD=$pgpass|" \
  -e "s|^DATABASE_URL=postgres://lifecycle:[^@]*@|DATABASE_URL=postgres://lifecycle:$pgpass@|" \
  -e "s|^METRICS_TOKEN=.*|METRICS_TOKEN=$("$PY" -c 'import secrets; print(secrets.token_hex(16))')|" \
  -e "s|^PUBLIC_BASE_URL=.*|PUBLIC_BASE_URL=$base|" \
  -e "s|^CSRF_TRUSTED_ORIGINS=.*|CSRF_TRUSTED_ORIGINS=$base|" \
  deploy/compose.env.example >"$work/compose.env"
echo "SIM_TIME_SCALE=1000" >>"$work/compose.env"
# Trying a failure: COMPOSE_TEST_UNSET="SECRET_KEY ..." leaves those settings out.
for name in ${COMPOSE_TEST_UNSET:-}; do sed -i "/^$name=/d" "$work/compose.env"; done
export LIFECYCLE_ENV_FILE=$work/compose.env HTTP_PORT=$port

say "up: project $project on $base, in compose.yaml's order, each gate checked"
started=$SECONDS
PODMAN_COMPOSE=$PODMAN_COMPOSE PY=$PY UP_SECONDS=$UP_SECONDS \
  deploy/containers/compose-up.sh -p "$project" -- --no-build

say "waiting for $base/readyz through the proxy"
until [[ $(curl -s -o /dev/null -w '%{http_code}' "$base/readyz") == 200 ]]; do
  if ((SECONDS - started > UP_SECONDS)); then
    say "not ready after ${UP_SECONDS}s"
    exit 1
  fi
  sleep 1
done
say "ready after $((SECONDS - started))s"

[[ $(podman inspect "${project}_migrate_1" --format '{{.State.ExitCode}}') == 0 ]]

say "health checks (each container's HEALTHCHECK, run now)"
for c in $(containers); do
  [[ $c == *_migrate_* ]] && continue
  ok=
  for _ in $(seq 1 20); do # a worker answers pings once it has connected
    if podman healthcheck run "$c" >/dev/null 2>&1; then ok=1 && break; fi
    sleep 2
  done
  [[ -n $ok ]] || {
    say "$c: unhealthy"
    exit 1
  }
  echo "  $c: healthy"
done

say "every web replica ready on its own"
replicas=0
for c in $(containers); do
  [[ $c == *_web_* ]] || continue
  podman exec "$c" python -c 'import json, urllib.request as u; r = json.load(u.urlopen("http://127.0.0.1:8000/readyz", timeout=5)); assert r["status"] == "ok", r; print("  '"$c"'", r)'
  replicas=$((replicas + 1))
done
((replicas == 2)) || {
  say "expected 2 web replicas, found $replicas"
  exit 1
}

say "an account and its key (manage.py create_account in a web container)"
KEY=$(podman exec "${project}_web_1" python manage.py create_account "ci-$project" --json |
  "$PY" -c 'import json, sys; print(json.load(sys.stdin)["api_key"])')

say "the README's quick-start walk (curl)"
CURL=(curl -sS --fail-with-body --max-time 30)
"${CURL[@]}" "$base/api/v1/models/?status=retired" | "$PY" -c 'import json, sys; d = json.load(sys.stdin); assert d["data"], d; print("  retired models:", len(d["data"]))'
"${CURL[@]}" -i "$base/api/v1/models/gpt-5.3-codex-spark/" | grep -iE '^(HTTP|deprecation|sunset|link)' | sed 's/^/  /'
"${CURL[@]}" -i "$base/api/v1/models/gpt-5.3-codex-spark/" | grep -qi '^sunset:'
quote=$("${CURL[@]}" -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
  -d '{"model": "sol", "input_tokens": 8000, "output_tokens": 22000, "turns": 30,
       "tool_seconds": 15, "deadline_seconds": 400}' "$base/api/v1/quotes")
echo "$quote" | "$PY" -c 'import json, sys; q = json.load(sys.stdin); print("  quote:", {k: q[k] for k in list(q)[:4]})'
job=$("${CURL[@]}" -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
  -d '{"model": "sol", "input_tokens": 8000, "output_tokens": 22000, "turns": 30,
       "tool_seconds": 15, "deadline_seconds": 400}' "$base/api/v1/jobs")
id=$(echo "$job" | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["id"])')
for _ in $(seq 1 60); do
  state=$("${CURL[@]}" -H "Authorization: Bearer $KEY" "$base/api/v1/jobs/$id" |
    "$PY" -c 'import json, sys; print(json.load(sys.stdin)["status"])')
  [[ $state == succeeded || $state == failed || $state == cancelled ]] && break
  sleep 1
done
echo "  job $id: $state"
[[ $state == succeeded ]]

say "the OpenAI SDK"
"$PY" .ci/compose_smoke.py "$base/v1" "$KEY"

say "metrics (the bearer token)"
token=$(grep '^METRICS_TOKEN=' "$work/compose.env" | cut -d= -f2)
metrics=$("${CURL[@]}" -H "Authorization: Bearer $token" "$base/metrics")
grep -q '^routing_jobs' <<<"$metrics"

say "passed in $((SECONDS - started))s"
