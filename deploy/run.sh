#!/usr/bin/env bash
# Web server + one Celery worker + beat, supervised in the foreground. Used by `make run`;
# expects migrations applied (make run does that first).
#
# - Worker and beat log to $LOG_DIR/worker.log and beat.log, appended (a restart keeps
#   what the last run said); a log over LOG_MAX_BYTES is rotated (.1 .. .$LOG_KEEP) when
#   its process (re)starts. The web server logs to this console.
# - A worker or beat that exits is reported here, with the end of its log, and started
#   again (after 1 s, longer while it keeps dying within RESTART_RESET_SECONDS).
#   If the web server exits, everything stops.
# - Ctrl-C, SIGTERM or SIGHUP stops all three: TERM to each (its own process group, so
#   the worker's pool goes too), then KILL what still runs after STOP_GRACE_SECONDS. A job
#   cut short is not lost: the job sweeper sends it again. The stop runs once: a second
#   signal while it runs (make forwards the TERM it got, a second Ctrl-C) is ignored, and
#   run.sh exits only when every process of every service is gone.
# - Nothing outlives run.sh, even killed outright (SIGKILL: no trap runs). Each service
#   gets SIGKILL when run.sh dies (setpriv --pdeathsig KILL), and a watchdog in a session
#   of its own kills the process group of every service still running once run.sh is
#   gone, which covers what pdeathsig does not: gunicorn's uvicorn workers keep serving
#   when their arbiter dies (Celery's pool processes set a pdeathsig of their own).
#
# Why a session per service, not run.sh's own process group: the stop is run.sh's to
# order (one TERM to each service, the grace, then KILL of the service's whole group), and
# a crashed worker's leftovers are killed by group. In run.sh's group every Ctrl-C,
# make's group TERM or the terminal's HUP would also hit each process directly: gunicorn
# takes INT as a quick shutdown (streams cut) and HUP as a reload, Celery takes HUP as a
# restart. And a group signal never covers SIGKILL of run.sh alone; the watchdog does.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
CELERY=${CELERY:-.venv/bin/celery}
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8000}
LOG_DIR=${VAR_DIR:-var}/log
LOG_MAX_BYTES=${LOG_MAX_BYTES:-10485760}
LOG_KEEP=${LOG_KEEP:-3}
STOP_GRACE_SECONDS=${STOP_GRACE_SECONDS:-5}
RESTART_RESET_SECONDS=${RESTART_RESET_SECONDS:-60}
mkdir -p "$LOG_DIR"
# Event metrics of this run's processes (prometheus_client multiprocess mode, README
# "Metrics"): a fresh folder each start, so counters of dead processes do not pile up.
export PROMETHEUS_MULTIPROC_DIR=${PROMETHEUS_MULTIPROC_DIR:-${VAR_DIR:-var}/metrics}
mkdir -p "$PROMETHEUS_MULTIPROC_DIR" && rm -f "$PROMETHEUS_MULTIPROC_DIR"/*.db

# Each service in a session (and process group) of its own, when setsid is there, and
# killed when run.sh dies, when setpriv knows --pdeathsig (util-linux 2.33+).
SETSID=$(command -v setsid || true)
PDEATHSIG=()
if setpriv --help 2>/dev/null | grep -q -- --pdeathsig; then PDEATHSIG=(setpriv --pdeathsig KILL --); fi

declare -A pid_of=() name_of=() started_at=() crashes=()
sleeper= stopping=

# The watchdog: reads "+ PGID" (a service started) and "- PGID" (reaped) from run.sh, and
# at end of file (run.sh gone, however: only run.sh and a service being started hold the
# pipe's writing end) kills the groups still listed. In a session of its own, deaf to
# INT/TERM/HUP, so the signal that takes run.sh (or make's whole group) leaves it running.
# Not waited for: it ends by itself once run.sh has closed the pipe.
watchdog() {
  trap '' INT TERM HUP QUIT
  local op pg
  declare -A live=()
  while read -r op pg; do
    case $op in +) live[$pg]=1 ;; -) unset "live[$pg]" ;; esac
  done
  ((${#live[@]})) || exit 0
  echo "run.sh: $(date -u +%Y-%m-%dT%H:%M:%SZ) run.sh is gone: killing what it left running" >&2
  for pg in "${!live[@]}"; do kill -KILL -- "-$pg" 2>/dev/null || kill -KILL "$pg" 2>/dev/null; done
  exit 0
}
if [[ -n $SETSID ]]; then
  exec {watch}> >(exec "$SETSID" bash -c "$(declare -f watchdog); watchdog")
else
  exec {watch}>/dev/null # no sessions: the services are in run.sh's group
fi

say() { echo "run.sh: $*" >&2; }
now() { date -u +%Y-%m-%dT%H:%M:%SZ; }

rotate() { # log file: shift .1 .. .LOG_KEEP when it grew over LOG_MAX_BYTES
  local log=$1 i
  [[ -f $log ]] && (($(stat -c %s "$log") > LOG_MAX_BYTES)) || return 0
  for ((i = LOG_KEEP - 1; i >= 1; i--)); do
    [[ -f $log.$i ]] && mv -f "$log.$i" "$log.$((i + 1))"
  done
  mv -f "$log" "$log.1"
}

signal() { # signal pid: the service's whole process group, else the process
  if [[ -n $SETSID ]]; then
    kill "-$1" -- "-$2" 2>/dev/null || kill "-$1" "$2" 2>/dev/null
  else
    kill "-$1" "$2" 2>/dev/null
  fi
}

alive() { # pid: anything of the service still running
  if [[ -n $SETSID ]]; then kill -0 -- "-$1" 2>/dev/null || kill -0 "$1" 2>/dev/null; else kill -0 "$1" 2>/dev/null; fi
}

tell() { # line: to the watchdog; if it is gone (killed), run.sh carries on without it
  (
    trap '' PIPE
    echo "$1" >&"$watch"
  ) 2>/dev/null
}

launch() { # log command...: run in the background, it becomes the service (same pid)
  tell "+ $BASHPID" # before the service runs: the watchdog knows it first
  exec {watch}>&-
  [[ -n $1 ]] && exec >>"$1" 2>&1
  shift
  exec $SETSID "${PDEATHSIG[@]}" "$@" # its own session (and group): the same pid
}

start() { # worker | beat | web
  local name=$1 cmd log
  case $name in
    # One worker for every queue (production: one per queue, README "Queues by kind of work").
    worker) cmd=("$CELERY" -A deploy worker --loglevel=INFO --concurrency="${WORKER_CONCURRENCY:-2}"
      -Q "${WORKER_QUEUES:-interactive,batch,housekeeping}") ;;
    beat) cmd=("$CELERY" -A deploy beat --loglevel=INFO --pidfile=) ;;
    # ASGI (uvicorn workers under gunicorn): a streaming chat completion holds a
    # coroutine, not a thread (README "Serving: ASGI").
    web) cmd=("$PY" -m gunicorn -c deploy/gunicorn.conf.py deploy.asgi:application
      -b "$HOST:$PORT" -w "${WEB_WORKERS:-2}" --graceful-timeout "$STOP_GRACE_SECONDS"
      --no-control-socket) ;; # (gunicorn 27's one per user: instances would share it)
  esac
  if [[ $name == web ]]; then
    log=
  else
    log="$LOG_DIR/$name.log"
    rotate "$log"
    echo "===== $(now) run.sh: starting $name" >>"$log"
  fi
  launch "$log" "${cmd[@]}" &
  pid_of[$name]=$!
  name_of[$!]=$name
  started_at[$name]=$SECONDS
}

stop() { # once: a second INT/TERM/HUP (or the EXIT after one) while it runs changes nothing
  [[ -n $stopping ]] && return 0
  stopping=1
  [[ -n $sleeper ]] && kill "$sleeper" 2>/dev/null
  local pid waited=0 running
  if ((${#name_of[@]})); then
    say "stopping ${name_of[*]}"
    for pid in "${!name_of[@]}"; do signal TERM "$pid"; done
    while ((waited < STOP_GRACE_SECONDS * 10)); do
      running=0
      for pid in "${!name_of[@]}"; do alive "$pid" && running=1; done
      ((running)) || break
      sleep 0.1
      ((waited++))
    done
    for pid in "${!name_of[@]}"; do
      if alive "$pid"; then
        say "${name_of[$pid]} still running after ${STOP_GRACE_SECONDS}s: killed"
        signal KILL "$pid"
      fi
    done
    # Until all are gone (a signal that arrives interrupts `wait`, not this loop).
    for ((waited = 0; waited < 100; waited++)); do
      running=0
      for pid in "${!name_of[@]}"; do alive "$pid" && running=1; done
      ((running)) || break
      sleep 0.1
    done
    wait "${!name_of[@]}" 2>/dev/null
    for pid in "${!name_of[@]}"; do alive "$pid" || tell "- $pid"; done
    name_of=()
  fi
  exec {watch}>&- # the watchdog, with nothing listed, ends
}
on_signal() { # the first INT/TERM/HUP stops everything; one during the stop is ignored
  [[ -n $stopping ]] && return 0
  stop
  exit 0
}
trap on_signal INT TERM HUP
trap stop EXIT

start worker
start beat
echo "Worker and beat started (logs in $LOG_DIR/)."
echo "Serving on http://$HOST:$PORT/  (API: /api/v1/models/, docs: /api/docs/, admin: /admin/)"
start web

while :; do
  done_pid= status=0
  wait -n -p done_pid "${!name_of[@]}" || status=$?
  [[ -n $done_pid && -n ${name_of[$done_pid]:-} ]] || continue
  name=${name_of[$done_pid]}
  unset "name_of[$done_pid]"
  if alive "$done_pid"; then signal KILL "$done_pid"; fi # what it left behind (pool)
  tell "- $done_pid"
  ran=$((SECONDS - started_at[$name]))
  if [[ $name == web ]]; then
    say "$(now) the web server exited (status $status): stopping everything"
    stop
    exit 1
  fi
  log="$LOG_DIR/$name.log"
  echo "===== $(now) run.sh: $name exited with status $status after ${ran}s" >>"$log"
  say "$(now) $name exited with status $status after ${ran}s; the end of $log:"
  tail -n 8 "$log" | sed 's/^/  | /' >&2
  if ((ran < RESTART_RESET_SECONDS)); then crashes[$name]=$((${crashes[$name]:-0} + 1)); else crashes[$name]=0; fi
  n=${crashes[$name]}
  delay=$((n <= 1 ? 1 : (n > 5 ? 30 : 1 << (n - 1)))) # 1 2 4 8 16 30 s
  say "restarting $name in ${delay}s"
  sleep "$delay" {watch}>&- &
  sleeper=$!
  wait "$sleeper"
  sleeper=
  start "$name"
  say "$name restarted (pid ${pid_of[$name]})"
done
