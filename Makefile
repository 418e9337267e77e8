# The two commands that matter: `make run` (the whole service, embedded defaults) and
# `make test`. Both install what they need into .venv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?= -n 2

.PHONY: install install-ops image compose-test k8s-check run test lint format check-migrations schema fuzz deploy-check bench bench-http bench-jobs bench-batches bench-streams bench-stack bench-queues bench-replay clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

# Deployment checks' tools (podman-compose, kubernetes-validate): the `ops` extra.
OPS_STAMP := $(VENV)/.installed-ops
$(OPS_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e ".[dev,ops]"
	touch $(OPS_STAMP)

install-ops: $(OPS_STAMP)

## make run: web + Celery worker + beat on SQLite and a filesystem broker (or whatever
## DATABASE_URL / CELERY_BROKER_URL say), with the catalog loaded and a demo admin.
run: install
	$(PY) manage.py migrate --noinput
	$(PY) manage.py loadcatalog
	$(PY) manage.py demo_setup
	exec bash deploy/run.sh

## make test: the whole suite (SQLite unless DATABASE_URL points elsewhere).
test: install
	$(PY) -m pytest $(PYTEST_ARGS)

## make lint: ruff, the import contracts in pyproject.toml ([tool.importlinter], drawn in
## docs/architecture.md) over every top-level package, and no import cycle among or inside
## them (deploy, routing, catalog, httpedge, simengine), package level and module level.
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	@# both checks run, so one pass shows every broken contract and every cycle
	$(VENV)/bin/lint-imports --no-cache --no-logo; status=$$?; \
	$(PY) .ci/import_cycles.py && exit $$status

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

check-migrations: install
	$(PY) manage.py makemigrations --check --dry-run

schema: install
	$(PY) manage.py spectacular --validate --fail-on-warn --file /dev/null

## make fuzz: schemathesis against a live server (throwaway SQLite), stateless + stateful
fuzz: install
	VENV=$(VENV) bash .ci/schemathesis.sh

deploy-check: install
	DEBUG=0 SECRET_KEY=$$($(PY) -c 'import secrets;print(secrets.token_urlsafe(50))') \
	ALLOWED_HOSTS=lifecycle.example.com $(PY) manage.py check --deploy --fail-level WARNING

## make image: the service's image with podman (Containerfile; IMAGE, BASE_IMAGE: README
## "Deploying"). On a machine without podman or a base image, .ci/containers.sh makes both.
IMAGE ?= localhost/lifecycle:latest
image: install
	IMAGE=$(IMAGE) PY=$(PY) bash .ci/containers.sh image

## make compose-test: compose.yaml up (podman-compose), the README walk and the OpenAI SDK
## against it, then down (always)
compose-test: image install-ops
	PY=$(PY) bash .ci/containers.sh services
	LIFECYCLE_IMAGE=$(IMAGE) PY=$(PY) PODMAN_COMPOSE=$(VENV)/bin/podman-compose bash .ci/compose-test.sh

## make k8s-check: deploy/k8s rendered (kubectl kustomize) and validated offline against
## the Kubernetes schemas (kubernetes-validate)
k8s-check: install-ops
	PY=$(PY) bash .ci/k8s-check.sh

bench: install
	$(PY) bench/bench_simengine.py
	$(PY) bench/bench_router.py

## needs PostgreSQL (BENCH_DATABASE_URL, default postgres://postgres@127.0.0.1:5432/lifecycle_bench)
bench-http: install
	$(PY) bench/bench_quotes_http.py

## starts its own throwaway PostgreSQL and Redis
bench-jobs: install
	$(PY) bench/bench_jobs.py

## validating and planning 50,000 lines, then a batch through real workers (throwaway servers)
bench-batches: install
	$(PY) bench/bench_batches.py

## chat completion latency vs a bare endpoint, 200 concurrent streams (ASGI web server, SQLite)
bench-streams: install
	$(PY) bench/bench_streams.py

## the quick start's own stack (deploy/run.sh, SQLite): embedded broker vs Redis, 25 jobs/s
bench-stack: install
	$(PY) bench/bench_stack.py

## interactive job start latency, idle and beside large batches: one worker vs a worker per queue
bench-queues: install
	$(PY) bench/bench_queues.py

## the replay's speed: 5,000 requests of the shipped trace through the real path (throwaway database)
bench-replay: install
	$(PY) bench/bench_replay.py

clean:
	rm -rf var .pytest_cache test-artifacts
