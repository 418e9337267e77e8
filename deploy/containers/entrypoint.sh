#!/bin/sh
# The image's entry point (Containerfile): the first argument says what this container is.
#
#   web                  gunicorn with uvicorn workers (as deploy/run.sh starts it), on $HOST:$PORT
#   worker QUEUE [args]  a Celery worker for one queue (interactive | batch | housekeeping)
#                        or a comma-separated list; named QUEUE@hostname
#   beat                 Celery beat (exactly one per deployment)
#   migrate              migrate + loadcatalog (a one-shot job; run it before the rest)
#   manage ARGS          manage.py ARGS (createsuperuser, create_account, ...)
#   anything else        run as given
#
# Each first waits until the database, the broker and the cache answer and (web, worker,
# beat) every migration is applied (deploy/containers/wait.py, WAIT_READY_SECONDS), so
# they start in the right order whatever starts them.
set -eu
role=${1:-web}
[ $# -gt 0 ] && shift
# Event metrics of this container's processes (prometheus_client multiprocess mode):
# a fresh folder each start.
mkdir -p "${PROMETHEUS_MULTIPROC_DIR:=/tmp/metrics}"
rm -f "$PROMETHEUS_MULTIPROC_DIR"/*.db
printf '%s %s\n' "$role" "${1:-}" >/tmp/role # what healthcheck.py checks

case $role in
  web)
    python deploy/containers/wait.py --migrated
    exec python -m gunicorn -c deploy/gunicorn.conf.py deploy.asgi:application \
      -b "${HOST:-0.0.0.0}:${PORT:-8000}" -w "${WEB_WORKERS:-2}" \
      --graceful-timeout "${STOP_GRACE_SECONDS:-20}" --no-control-socket "$@"
    ;;
  worker)
    queue=${1:?usage: worker QUEUE (interactive, batch, housekeeping)}
    shift
    python deploy/containers/wait.py --migrated
    exec celery -A deploy worker -Q "$queue" -n "${queue%%,*}@%h" \
      --concurrency="${WORKER_CONCURRENCY:-2}" --loglevel="${LOG_LEVEL:-INFO}" "$@"
    ;;
  beat)
    python deploy/containers/wait.py --migrated
    exec celery -A deploy beat --loglevel="${LOG_LEVEL:-INFO}" --pidfile= "$@"
    ;;
  migrate)
    python deploy/containers/wait.py
    python manage.py migrate --noinput
    exec python manage.py loadcatalog
    ;;
  manage) exec python manage.py "$@" ;;
  *) exec "$role" "$@" ;;
esac
