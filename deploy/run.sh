#!/usr/bin/env bash
# Web server + one Celery worker + beat, in the foreground; Ctrl-C stops all three.
# Used by `make run`; expects migrations applied (make run does that first).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
CELERY=${CELERY:-.venv/bin/celery}
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8000}
LOG_DIR=${VAR_DIR:-var}/log
mkdir -p "$LOG_DIR"

pids=()
cleanup() {
  trap - INT TERM EXIT
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup INT TERM EXIT

"$CELERY" -A deploy worker --loglevel=INFO --concurrency="${WORKER_CONCURRENCY:-2}" \
  >"$LOG_DIR/worker.log" 2>&1 &
pids+=($!)
"$CELERY" -A deploy beat --loglevel=INFO --pidfile= >"$LOG_DIR/beat.log" 2>&1 &
pids+=($!)

echo "Worker and beat started (logs in $LOG_DIR/)."
echo "Serving on http://$HOST:$PORT/  (API: /api/v1/models/, docs: /api/docs/, admin: /admin/)"
"$PY" manage.py runserver --noreload "$HOST:$PORT" &
pids+=($!)
wait -n "${pids[@]}"
