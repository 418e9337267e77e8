#!/usr/bin/env bash
# Start compose.yaml in its depends_on order, checking each gate (service_healthy: the
# container's HEALTHCHECK passes; service_completed_successfully: it exited 0) before the
# next level starts. For podman older than 4.6 (Debian bookworm's 4.3), where
# podman-compose ignores `condition: service_healthy` and `podman-compose up` cannot
# start a container whose dependency has dependencies of its own (podman's --requires):
# each level is started with `up -d --no-deps`. With newer podman or docker compose,
# `up -d` does the same by itself.
#
#   deploy/containers/compose-up.sh [-p PROJECT] [-- podman-compose up options...]
#
# PODMAN_COMPOSE (podman-compose), PY (a python3 with PyYAML; podman-compose's own has
# it), UP_SECONDS (300: how long a service may take to become healthy). Exits non-zero
# naming the service that failed its gate.
set -euo pipefail
cd "$(dirname "$0")/../.."
PODMAN_COMPOSE=${PODMAN_COMPOSE:-podman-compose}
PY=${PY:-python3}
UP_SECONDS=${UP_SECONDS:-300}
project=lifecycle # compose.yaml's name
while getopts p: opt; do
  case $opt in
    p) project=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))

say() { printf '%s compose-up: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
compose() { "$PODMAN_COMPOSE" -p "$project" -f compose.yaml "$@"; }
of_service() { # service: its containers' names
  podman ps -a --filter "label=io.podman.compose.project=$project" \
    --filter "label=com.docker.compose.service=$1" --format '{{.Names}}'
}
gate() { # service healthy|completed|started: wait until each of its containers is so
  local svc=$1 want=$2 c code restarts
  for c in $(of_service "$svc"); do
    case $want in
      completed)
        code=$(podman wait "$c")
        [[ $code == 0 ]] || {
          say "$svc ($c) exited with status $code"
          return 1
        }
        ;;
      healthy)
        until podman healthcheck run "$c" >/dev/null 2>&1; do
          restarts=$(podman inspect "$c" --format '{{.RestartCount}}')
          if [[ $(podman inspect "$c" --format '{{.State.Status}}') == exited ]] || ((restarts >= 2)); then
            say "$svc ($c) exited (restarted $restarts times)"
            return 1
          fi
          if ((SECONDS - started > UP_SECONDS)); then
            say "$svc ($c) not healthy after ${UP_SECONDS}s"
            return 1
          fi
          sleep 1
        done
        ;;
    esac
  done
  echo "  $svc: $want"
}

started=$SECONDS
log=$(mktemp)
trap 'rm -f "$log"' EXIT
order=$("$PY" deploy/containers/compose_order.py compose.yaml)
for lvl in $(cut -d' ' -f1 <<<"$order" | sort -un); do
  mapfile -t this < <(awk -v l="$lvl" '$1 == l { print $2 " " $3 }' <<<"$order")
  names=()
  for entry in "${this[@]}"; do names+=("${entry%% *}"); done
  compose up -d --no-deps "$@" "${names[@]}" >"$log" 2>&1 || {
    cat "$log" >&2
    say "podman-compose up failed for ${names[*]}"
    exit 1
  }
  for entry in "${this[@]}"; do gate "${entry% *}" "${entry#* }"; done
done
say "$project is up ($((SECONDS - started))s)"
