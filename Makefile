# The two commands that matter: `make run` (the whole service, embedded defaults) and
# `make test`. Both install what they need into .venv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# One test worker more than the machine has cores: many tests wait on servers they start
# (two workers on two cores left the CPU ~15 % idle; three, ~3 %). A worker that runs out
# of tests takes some of another's (worksteal), so the run does not end on one queue.
PYTEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
PYTEST_ARGS ?= -n $(PYTEST_WORKERS) --dist worksteal

.PHONY: install install-ops image compose-test k8s-check run test lint format check-migrations schema fuzz deploy-check bench bench-http bench-jobs bench-batches bench-streams bench-stack bench-queues bench-replay bench-gateway clean

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

## our /v1/chat/completions and ping vs a local LiteLLM proxy (mock model), interleaved
## (PostgreSQL: BENCH_DATABASE_URL's server). LiteLLM is a benchmark-only dependency: its
## own venv, pinned (never 1.107.0, a compromised release). Its [proxy] extra also names
## litellm-proxy, litellm-proxy-extras (the proxy's database) and litellm-enterprise at
## versions the registry does not serve; the proxy's code is in the litellm wheel, so the
## extra's other requirements are named here instead. If the install fails, the bench
## says why and measures our side only. BENCH_ARGS: the bench's options.
LITELLM_VERSION := 1.110.2
LITELLM_VENV ?= var/bench-litellm-venv
LITELLM_STAMP := $(LITELLM_VENV)/.installed-$(LITELLM_VERSION)
LITELLM_PROXY_DEPS := "gunicorn>=23.0.0,<24" "uvicorn>=0.33.0,<1" "granian>=2.7.4,<3" \
	"uvloop>=0.22.1,<1" "fastapi>=0.136.3,<1" "starlette>=1.0.1,<2" "backoff>=2.2.1,<3" \
	"pyyaml>=6.0.3,<7" "rq>=2.7.0,<3" "orjson>=3.11.6,<4" "hiredis>=3.0.0,<4" \
	"apscheduler>=3.11.2,<4" "fastapi-sso>=0.19.0,<1" "pyjwt>=2.13.0,<3" \
	"python-multipart>=0.0.27,<1" "cryptography>=49.0.0,<51" "pynacl>=1.6.2,<2" \
	"websockets>=15.0.1,<16" "azure-identity>=1.25.2,<2" "azure-storage-blob>=12.28.0,<13" \
	"mcp>=2.3.0,<3" "httpx2>=2.10.0,<3" "restrictedpython>=8.5,<9" "rich>=13.9.4,<14" \
	"inquirerpy>=0.3.4,<1" "tomlkit>=0.13.3,<1" "polars>=1.38.1,<2" "soundfile>=0.12.1,<1" \
	"pyroscope-io>=0.8.16,<1" "expression>=5.6.0,<6" "semver>=3.0.4,<4" \
	"backports-zstd>=1.0.0,<2; python_version < '3.14'"
bench-gateway: install
	@test "$(LITELLM_VERSION)" != 1.107.0 || { echo "litellm 1.107.0 is a compromised release: refused"; exit 1; }
	@test -f $(LITELLM_STAMP) || { \
	  echo "installing litellm==$(LITELLM_VERSION) into $(LITELLM_VENV) (log: $(LITELLM_VENV)-install.log)"; \
	  mkdir -p $(dir $(LITELLM_VENV)); \
	  { test -x $(LITELLM_VENV)/bin/python || $(PYTHON) -m venv $(LITELLM_VENV); } \
	  && $(LITELLM_VENV)/bin/python -m pip install "litellm==$(LITELLM_VERSION)" $(LITELLM_PROXY_DEPS) \
	    > $(LITELLM_VENV)-install.log 2>&1 \
	  && touch $(LITELLM_STAMP) \
	  || echo "LiteLLM could not be installed: see $(LITELLM_VENV)-install.log"; }
	$(PY) bench/bench_gateway.py --litellm-venv $(LITELLM_VENV) $(BENCH_ARGS)

clean:
	rm -rf var .pytest_cache test-artifacts
