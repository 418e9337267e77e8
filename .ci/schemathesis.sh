#!/usr/bin/env bash
# Schemathesis against a live server (issue 13: "the schema tells the truth").
#
# Starts gunicorn on a throwaway SQLite database and filesystem broker (production
# settings, DEBUG off), with the catalog loaded and the demo account's API key, then runs
# schemathesis twice against /api/v1/schema/:
#   1. stateless: examples, coverage and fuzzing phases, FUZZ_EXAMPLES examples per
#      operation (default 40);
#   2. stateful: the OpenAPI links between operations (quote -> job; create a job, file
#      or batch, then read, cancel or delete it; a file -> its batch and content), for
#      FUZZ_STATEFUL_SECONDS (default 60). It prints the links it covered ("API Links:
#      N covered / M selected"); fewer than FUZZ_MIN_LINKS (default 20) runs it once
#      more, and fewer again fails the step.
# The fuzzer never revokes or rotates the key it authenticates with (a before_call hook,
# .ci/schemathesis_hooks.py), and the key is checked to still work after each phase.
# Every check runs (server errors, status codes, content types, headers, response
# schemas, negative data rejected, positive data accepted, ...); any failure fails the
# step. Reports (JUnit, and a pytest file reproducing failures) go to
# $FUZZ_REPORT_DIR (default test-artifacts/schemathesis).
#
# Usage: .ci/schemathesis.sh  (or `make fuzz`); VENV=/path/to/venv to use another venv.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
BIN=$VENV/bin
EXAMPLES=${FUZZ_EXAMPLES:-40}
STATEFUL_SECONDS=${FUZZ_STATEFUL_SECONDS:-60}
MIN_LINKS=${FUZZ_MIN_LINKS:-20}
REPORT_DIR=${FUZZ_REPORT_DIR:-test-artifacts/schemathesis}
SEED=${FUZZ_SEED:-}

work=$(mktemp -d)
web_pid=
cleanup() {
  if [[ -n $web_pid ]]; then
    kill -TERM "$web_pid" 2>/dev/null || true
    wait "$web_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

port=$("$BIN/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
unset DATABASE_URL CELERY_BROKER_URL
export VAR_DIR=$work PORT=$port DEBUG=0 SECURE_SSL_REDIRECT=0 ALLOWED_HOSTS=127.0.0.1
export SECRET_KEY=fuzz-$RANDOM-$RANDOM-$RANDOM-$RANDOM-$RANDOM-$RANDOM-$RANDOM
# No throttling in the way of the fuzzer (the variable is ignored where it does not exist).
export API_THROTTLE_RATE=${API_THROTTLE_RATE:-1000000/second}
export LOG_LEVEL=${LOG_LEVEL:-ERROR}  # 4xx are the point; a 500 logs its traceback
mkdir -p "$work/static"

"$BIN/python" manage.py migrate --noinput -v 0
"$BIN/python" manage.py loadcatalog >/dev/null
"$BIN/python" manage.py demo_setup >/dev/null
key=$(grep '^demo api key: ' "$work/demo-credentials.txt" | cut -d' ' -f4)

# The server as deployed (deploy/run.sh): gunicorn with uvicorn workers on the ASGI app.
"$BIN/gunicorn" -c deploy/gunicorn.conf.py deploy.asgi:application -b "127.0.0.1:$port" -w 2 \
  --no-control-socket --log-level warning >"$work/web.log" 2>&1 &
web_pid=$!
base="http://127.0.0.1:$port"
for _ in $(seq 1 60); do
  curl -fsS -o /dev/null "$base/api/v1/ping" 2>/dev/null && break
  sleep 0.5
done
curl -fsS -o /dev/null "$base/api/v1/ping"

# The fuzzer must not end the key it holds (.ci/schemathesis_hooks.py): its id, from the
# key list (the one whose prefix the secret starts with).
key_id=$(curl -fsS -H "Authorization: Bearer $key" "$base/api/v1/keys" | "$BIN/python" -c '
import json, sys
key = sys.argv[1]
print(next(k["id"] for k in json.load(sys.stdin)["data"] if key.startswith(k["prefix"])))
' "$key")
export FUZZ_KEY_ID=$key_id SCHEMATHESIS_HOOKS=.ci/schemathesis_hooks.py
# After each phase the key still works, or the phase tested little but 401s: say so.
key_still_works() {
  code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $key" "$base/api/v1/keys")
  echo "--- the fuzz's key (id $key_id) after $1: HTTP $code"
  [[ $code == 200 ]]
}

mkdir -p "$REPORT_DIR"
common=(
  "$base/api/v1/schema/"
  -H "Authorization: Bearer $key"
  --checks all
  --workers 2
  --request-timeout 30
  --generation-database none
  --no-color
  ${SEED:+--seed "$SEED"}
)
status=0
echo "--- stateless: $EXAMPLES examples per operation"
"$BIN/st" --config-file .ci/schemathesis.toml run "${common[@]}" --phases examples,coverage,fuzzing --max-examples "$EXAMPLES" \
  --report junit,pytest --report-junit-path "$REPORT_DIR/stateless.xml" \
  --report-pytest-path "$REPORT_DIR/stateless_repro.py" || status=1
key_still_works "the stateless phase" || status=1
# The stateful phase once covered 1 link of 71 in 2 of 3 CI runs (2026-12-06), twice in a
# row with a retry: the stateless phase had revoked the fuzz's own key (DELETE /keys/1),
# so every stateful request was a 401. The hook above now keeps that key alive and the
# key is checked after each phase. A run under the minimum is still run once more (on a
# fresh seed unless FUZZ_SEED is set; both printed): the step fails when the second
# also covers too few (a link the API lost fails both) or either fails a check.
stateful() {
  echo "--- stateful (attempt $1): at most $STATEFUL_SECONDS s, at least $MIN_LINKS links covered"
  "$BIN/st" --config-file .ci/schemathesis.toml run "${common[@]}" --phases stateful --max-time "$STATEFUL_SECONDS" \
    --report junit,pytest --report-junit-path "$REPORT_DIR/stateful.xml" \
    --report-pytest-path "$REPORT_DIR/stateful_repro.py" | tee "$work/stateful.out" || status=1
  # "API Links:    24 covered / 29 selected / 29 total (15 inferred)"
  covered=$(sed -n 's/^ *API Links: *\([0-9][0-9]*\) covered.*/\1/p' "$work/stateful.out" | tail -1)
  echo "--- stateful links covered (attempt $1): ${covered:-none} (at least $MIN_LINKS wanted)"
  key_still_works "stateful attempt $1" || status=1
  [[ -n $covered && $covered -ge $MIN_LINKS ]]
}
if ! stateful 1 && ! stateful 2; then
  status=1
fi

if grep -q 'Traceback' "$work/web.log" 2>/dev/null; then
  echo "--- the server logged tracebacks:"
  cat "$work/web.log"
  status=1
fi
exit $status
