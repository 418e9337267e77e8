"""Settings for the model lifecycle and routing service.

Everything comes from the environment (see the README's configuration table). With
nothing set, the service runs on a bare machine: SQLite under var/ and a filesystem
broker for Celery, so `make run` needs no server.
"""

import datetime as dt
import os
import re
from pathlib import Path

import dj_database_url

from routing.core import tasknames

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DEBUG = env_bool("DEBUG", True)
# The development key only ever exists with DEBUG on; production must set its own.
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise RuntimeError("SECRET_KEY must be set when DEBUG is off")
    SECRET_KEY = "dev-only-insecure-key-change-me-0123456789-abcdefghijklmnopqrstuvwxyz"
# Clients that see Django's debug pages when DEBUG is on (httpedge/debugpage.py); the
# debug pages never show passwords, URLs with a password or DATABASES passwords.
INTERNAL_IPS = env_list("INTERNAL_IPS", "127.0.0.1,::1")
DEFAULT_EXCEPTION_REPORTER_FILTER = "httpedge.debugpage.CredentialsFilter"
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")
# Public base URL used in Link headers and problem `type` URIs when no request is at hand.
# Defaults to where `make run` serves (its PORT, as deploy/run.sh reads it).
PUBLIC_BASE_URL = os.environ.get(
    "PUBLIC_BASE_URL", f"http://127.0.0.1:{os.environ.get('PORT') or '8000'}"
).rstrip("/")

INSTALLED_APPS = [
    # Django's admin; admin.site asks staff for a second factor (ADMIN_REQUIRE_2FA below).
    "deploy.apps.AdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "axes",
    "django_otp",
    "django_otp.plugins.otp_totp",
    "django_otp.plugins.otp_static",
    "catalog",
    "routing",
]

MIDDLEWARE = [
    # x-request-id and openai-processing-ms on every response; the id in every log line.
    "httpedge.requestid.request_id",
    # /livez and /readyz (orchestrators' probes): before the host check and the HTTPS redirect.
    "httpedge.health.probes",
    "django.middleware.security.SecurityMiddleware",
    # With DEBUG on, Django's debug pages only for loopback / INTERNAL_IPS clients.
    "httpedge.debugpage.debug_page_local_only",
    "httpedge.middleware.api_input_guard",
    "httpedge.middleware.ServiceUnavailableMiddleware",
    # Sessions, Django's user and messages serve the admin: the Browser* ones are
    # Django's own, passed by on /api/ and /v1/ (httpedge/middleware.py), where a bearer
    # key authenticates.
    "httpedge.middleware.BrowserSessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    # CSRF: Django's own, by name (check --deploy looks for it by name); the API's
    # views are csrf_exempt, so on them it only looks.
    "django.middleware.csrf.CsrfViewMiddleware",
    "httpedge.middleware.BrowserAuthenticationMiddleware",
    # request.user.is_verified(): the session's second factor (django-otp), for the admin.
    "httpedge.middleware.BrowserOTPMiddleware",
    "httpedge.middleware.BrowserMessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Admin login lockout (django-axes): answers the lockout page for a locked login.
    "axes.middleware.AxesMiddleware",  # (by name: axes checks it; a look only)
    # OpenAI's x-ratelimit-* headers on every /api/v1/ and /v1/ response.
    "routing.api.throttling.RateLimitHeadersMiddleware",
    # HTTP metrics per route (django-prometheus): the latency histogram by view and
    # method and the responses by status, in /metrics beside the domain metrics.
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]
MIDDLEWARE.insert(1, "django_prometheus.middleware.PrometheusBeforeMiddleware")

# The web server serves the admin's static files itself: after `collectstatic` in
# production, straight from the apps' folders with DEBUG on (gunicorn has no runserver
# static view).
MIDDLEWARE.insert(1, "httpedge.middleware.StaticFilesMiddleware")  # WhiteNoise, sync and async
WHITENOISE_USE_FINDERS = WHITENOISE_AUTOREFRESH = DEBUG

ROOT_URLCONF = "deploy.urls"
WSGI_APPLICATION = "deploy.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "deploy" / "templates"],  # the admin's base_site
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{VAR_DIR / 'db.sqlite3'}"),
        conn_max_age=int(os.environ.get("DB_CONN_MAX_AGE", "60")),
        # A reused connection is checked (one empty query) before it serves a request or
        # a task (or when the pool hands it out), so one the database dropped (a restart)
        # is replaced instead of failing the next request or task.
        conn_health_checks=True,
    )
}
# The web server under ASGI (deploy/asgi.py sets DB_POOL=1) cannot keep a connection
# across requests (CONN_MAX_AGE is 0 there), so it takes them from Django's connection
# pool (psycopg_pool) instead of opening one per request (~5-10 ms): per process at
# most DB_POOL_MAX, idle ones closed after DB_POOL_IDLE_SECONDS.
if os.environ.get("DB_POOL") == "1" and DATABASES["default"]["ENGINE"] == (
    "django.db.backends.postgresql"
):
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": int(os.environ.get("DB_POOL_MIN", "1")),
        "max_size": int(os.environ.get("DB_POOL_MAX", "16")),
        "max_idle": float(os.environ.get("DB_POOL_IDLE_SECONDS", "60")),
        # How long a request waits for a connection (then 503, as with the database away).
        "timeout": float(os.environ.get("DB_POOL_TIMEOUT", "5")),
        # A failed connection attempt is retried with backoff for this long, then a new
        # request starts a fresh attempt: after a database restart the pool is serving
        # again within about this long (the default, 300 s, backs off to 30 s and more).
        "reconnect_timeout": float(os.environ.get("DB_POOL_RECONNECT_SECONDS", "2")),
    }
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    # Web, worker and beat share one file in the quick start. A transaction that
    # reads and then writes cannot wait for another writer (SQLite answers "database
    # is locked" at once, whatever the timeout), so each transaction takes the write
    # lock when it begins (IMMEDIATE) and waits up to 20 s for it; WAL lets reads go
    # on while someone writes.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        timeout=20,
        transaction_mode="IMMEDIATE",
        init_command="PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    )

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Caches ---------------------------------------------------------------------------
# The cache holds the API's throttle counters, so every web process must see the same
# one: Redis when CACHE_URL (or a redis:// broker) names one, otherwise files under
# VAR_DIR (the quick start: shared by its processes, no server, no table to create).
# CACHE_URL=locmem:// keeps it in one process (counts per process).
CACHE_URL = os.environ.get("CACHE_URL") or (
    os.environ.get("CELERY_BROKER_URL", "")
    if os.environ.get("CELERY_BROKER_URL", "").startswith(("redis://", "rediss://"))
    else ""
)
if CACHE_URL.startswith(("redis://", "rediss://")):
    # Django's Redis cache, one redis-py client per pool (deploy/cache.py).
    _cache = {"BACKEND": "deploy.cache.RedisCache", "LOCATION": CACHE_URL}
elif CACHE_URL.startswith("locmem://"):
    _cache = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
elif CACHE_URL and not CACHE_URL.startswith("file://"):
    raise RuntimeError("CACHE_URL must be redis://, rediss://, file:///<folder> or locmem://")
else:
    _cache = {
        "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
        "LOCATION": CACHE_URL.removeprefix("file://") or str(VAR_DIR / "cache"),
        # Counters are a few per account and minute; culling drops entries at random.
        "OPTIONS": {"MAX_ENTRIES": 20000},
    }
CACHES = {"default": {**_cache, "KEY_PREFIX": "mlr"}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
# Dates as 2026-12-03 and times to the second in the admin (deploy/formats/en/formats.py).
FORMAT_MODULE_PATH = ["deploy.formats"]
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"
        if not DEBUG
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
MEDIA_ROOT = VAR_DIR / "media"

# --- Security (production: DEBUG=0) -------------------------------------------------
if not DEBUG:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", "31536000"))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_CONTENT_TYPE_NOSNIFF = True
    SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

# --- REST framework ----------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"]
    + (["rest_framework.renderers.BrowsableAPIRenderer"] if DEBUG else []),
    # JSON within bounds (nesting depth, finite numbers, no NUL): a hostile body is a 400.
    "DEFAULT_PARSER_CLASSES": ["routing.api.parsers.BoundedJSONParser"],
    # OPTIONS says what a resource renders and parses, without describing serializers.
    "DEFAULT_METADATA_CLASS": "httpedge.metadata.BriefMetadata",
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    "EXCEPTION_HANDLER": "httpedge.problems.problem_exception_handler",
    "UNAUTHENTICATED_USER": None,
    # Requests per account (per address without a key), and writes; rates below.
    "DEFAULT_THROTTLE_CLASSES": [
        "routing.api.throttling.RequestRateThrottle",
        "routing.api.throttling.WriteRateThrottle",
    ],
}


# --- API throttling -------------------------------------------------------------------
# Fixed windows counted in the cache (routing.api.throttling): an account (or, without a key,
# a client address) past its rate gets 429 rate-limited with Retry-After. "off" (or 0)
# turns a rate off; writes (POST, DELETE) and keyless requests default to half the rate.
def env_rate(name: str, default: str | None) -> str | None:
    value = os.environ.get(name, default or "off").strip().lower()
    if value in {"", "0", "off", "none"}:
        return None
    if not re.fullmatch(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)", value):
        raise RuntimeError(f"{name} must look like 1200/min (per s, min, hour or day) or off")
    return value


def half_rate(rate: str | None) -> str | None:
    if rate is None:
        return None
    count, period = rate.split("/")
    return f"{max(1, int(count) // 2)}/{period}"


_API_RATE = env_rate("API_THROTTLE_RATE", "1200/min")
API_THROTTLE_RATES = {
    "account": _API_RATE,
    "write": env_rate("API_THROTTLE_WRITE_RATE", half_rate(_API_RATE)),
    "anon": env_rate("API_THROTTLE_ANON_RATE", half_rate(_API_RATE)),
}
# Tokens (input + output of accepted jobs and completions) per account and minute,
# across every replica; an account's or package's own limits are set in the admin.
# "off" turns the default off (routing.quota.ratelimits).
_tokens = os.environ.get("API_TOKENS_PER_MINUTE", "2000000").strip().lower()
if _tokens not in {"", "0", "off", "none"} and not _tokens.isdigit():
    raise RuntimeError("API_TOKENS_PER_MINUTE must be a whole number of tokens or off")
API_TOKENS_PER_MINUTE = int(_tokens) if _tokens.isdigit() and int(_tokens) > 0 else None

# How long a process keeps a valid API key's lookup (routing.accounts.keys): a revoked
# or deleted key, or a changed account, is refused at once by the process that made the
# change and within this many seconds by every other (about a second with a shared
# cache). 0: every request reads the key from the database.
API_KEY_CACHE_SECONDS = float(os.environ.get("API_KEY_CACHE_SECONDS", "5"))
# Reverse proxies in front of the service that append the client to X-Forwarded-For;
# 0: the client is REMOTE_ADDR and X-Forwarded-For is ignored (it could be forged).
TRUSTED_PROXY_COUNT = int(os.environ.get("TRUSTED_PROXY_COUNT", "0"))

SPECTACULAR_SETTINGS = {
    "TITLE": "Model lifecycle and routing service",
    "DESCRIPTION": (
        "Model versions and their retirements, service tiers and prices, quota and the "
        "deadline router. Errors are RFC 9457 problem details.\n\n"
        "**API keys**: every call but the model catalog needs `Authorization: Bearer "
        "<key>`. A key comes with an account: `python manage.py create_account NAME` "
        "prints one (`make run` prints a demo key), or an admin creates one under "
        "*Accounts* in /admin/.\n\n"
        "**OpenAI-compatible surface**: `/v1/` (not listed here: it is OpenAI's API) "
        "takes the official `openai` SDK, LangChain and LiteLLM unchanged: "
        '`OpenAI(base_url="http://HOST/v1", api_key=KEY)`; chat completions and '
        "responses (streaming, tool calls, structured outputs), models, files and "
        "batches. Every parameter it honours or refuses is in the README's table."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Request and response components apart, so a field the server refuses blank says
    # so (minLength 1) in requests only.
    "COMPONENT_SPLIT_REQUEST": True,
    # The problem+json responses every operation can give, documented in one place.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "httpedge.openapi.add_problem_responses",
        "httpedge.openapi.non_blank_strings",  # a string of spaces alone is blank too
        "routing.api.schema.add_links",  # created job/file/batch -> read, cancel, delete
        "routing.api.throttling.document_rate_limits",  # last: the 429 of throttled operations
    ],
    "ENUM_NAME_OVERRIDES": {
        "ModelStatusEnum": "catalog.lifecycle.STATUSES",
        "HealthStatusEnum": ["ok", "degraded"],
        # A File's purposes, and the one an upload may name (routing.api.serializers).
        "PurposeEnum": ["batch", "batch_output", "batch_error"],
        "UploadPurposeEnum": ["batch"],
    },
}

# --- Celery ------------------------------------------------------------------------
# JSON only, late acks, prefetch 1, time limits: the database row is the truth, the
# broker only says "look at row N". Results are ignored.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://localhost//")
CELERY_BROKER_TRANSPORT_OPTIONS: dict = {"visibility_timeout": 3600}
if CELERY_BROKER_URL.startswith("filesystem://"):
    _broker_dir = VAR_DIR / "broker"
    for _sub in ("queue", "control"):
        (_broker_dir / _sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS.update(
        {
            "data_folder_in": str(_broker_dir / "queue"),
            "data_folder_out": str(_broker_dir / "queue"),
            "control_folder": str(_broker_dir / "control"),
            "store_processed": False,
            # How long the worker waits before looking at the folder again when it found
            # nothing (kombu's default, 1 s, caps a worker at a few jobs/s).
            "polling_interval": float(os.environ.get("BROKER_POLLING_INTERVAL", "0.05")),
        }
    )
    # filesystem:// is served by deploy/fsbroker.py (atomic writes and claims), registered
    # under kombu's "filesystem" alias by deploy/celery.py.
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = 300
CELERY_TASK_SOFT_TIME_LIMIT = 240
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
# Periodic work is declared here; beat's DatabaseScheduler copies it into the
# django-celery-beat tables at start, where ops can see (and pause) it in the admin.
CELERY_BEAT_SCHEDULE = {
    "reset-quota-periods": {"task": tasknames.RESET_QUOTA_PERIODS, "schedule": 60.0},
    "apply-retirements": {"task": tasknames.APPLY_RETIREMENTS, "schedule": 60.0},
    "announce-notices": {"task": tasknames.ANNOUNCE_NOTICES, "schedule": 60.0},
    "sweep-batches": {
        "task": tasknames.SWEEP_BATCHES,
        "schedule": float(os.environ.get("JOB_SWEEP_SECONDS", "5")),
    },
    "expire-files": {"task": tasknames.EXPIRE_FILES, "schedule": 3600.0},
    "reconcile-occupancy": {"task": tasknames.RECONCILE_OCCUPANCY, "schedule": 60.0},
    "sweep-webhooks": {"task": tasknames.SWEEP_WEBHOOKS, "schedule": 5.0},
    "sweep-jobs": {
        "task": tasknames.SWEEP_JOBS,
        "schedule": float(os.environ.get("JOB_SWEEP_SECONDS", "5")),
    },
}
# Queues by kind of work, so a 50,000-line batch never delays an interactive job's start:
# job steps on "interactive", batch links on "batch", beat's sweeps, notices, retirements,
# period resets and file expiry on "housekeeping" (also the default for anything new).
# `make run` starts one worker for all of them (CELERY_QUEUES_ALL); production runs a
# worker per queue (README "Queues by kind of work").
CELERY_TASK_DEFAULT_QUEUE = "housekeeping"
_QUEUE_TASKS = {
    "interactive": (tasknames.RUN_JOB, tasknames.FINISH_JOB, "deploy.noop"),
    "batch": (
        tasknames.VALIDATE_BATCH,
        tasknames.ADVANCE_BATCH,
        tasknames.FINALIZE_BATCH,
        tasknames.START_SCHEDULED_BATCH,
    ),
    "housekeeping": (
        tasknames.SWEEP_JOBS,
        tasknames.SWEEP_BATCHES,
        tasknames.RESET_QUOTA_PERIODS,
        tasknames.APPLY_RETIREMENTS,
        tasknames.ANNOUNCE_NOTICES,
        tasknames.DELIVER_NOTICE,
        tasknames.DELIVER_WEBHOOK,
        tasknames.SWEEP_WEBHOOKS,
        tasknames.EXPIRE_FILES,
        tasknames.RECONCILE_OCCUPANCY,
    ),
}
CELERY_TASK_ROUTES = {
    name: {"queue": queue} for queue, names in _QUEUE_TASKS.items() for name in names
}
CELERY_QUEUES_ALL = "interactive,batch,housekeeping"
# Accepting a job must not hang on a broker that is down: try briefly, then leave the
# job queued in the database for the sweeper to send again.
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0.1, "interval_step": 0.2}
CELERY_BROKER_CONNECTION_TIMEOUT = 2
# Redis or RabbitMQ (amqp://user:pass@host:5672/vhost) with the same settings: durable
# queues and persistent messages are kombu's defaults, and neither publisher confirms nor
# quorum queues are needed, because a message lost in a broker crash is sent again by a
# sweep (the row is the truth). A worker holds a countdown message unacked until it is
# due, which RabbitMQ allows for consumer_timeout (30 min) and Redis for the visibility
# timeout (1 h): no countdown is longer than this (a job's finish checks in again).
BROKER_MAX_COUNTDOWN_SECONDS = float(os.environ.get("BROKER_MAX_COUNTDOWN_SECONDS", "600"))

# --- Metrics (GET /metrics, Prometheus text; README "Metrics") ---------------------------
# With METRICS_TOKEN set, a scrape must send `Authorization: Bearer <token>`; without it,
# only loopback clients (the address as httpedge.clientip.client_ip sees it) may scrape.
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")
# Event counters of every process on this machine (prometheus_client multiprocess mode).
METRICS_DIR = Path(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or VAR_DIR / "metrics")
# Every metric in multiprocess mode (routing.core.metrics; django-prometheus's HTTP
# metrics, built when the middleware loads): the folder is known before the first one.
METRICS_DIR.mkdir(parents=True, exist_ok=True)
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(METRICS_DIR))

# --- Simulated time -------------------------------------------------------------------
# Simulated seconds per wall second: 1 is real time; demos and tests compress it.
SIM_TIME_SCALE = float(os.environ.get("SIM_TIME_SCALE", "1"))
if not SIM_TIME_SCALE > 0:
    raise RuntimeError("SIM_TIME_SCALE must be > 0")
# A job still queued this long after it was sent is sent again (the broker was down).
JOB_RESEND_AFTER_SECONDS = float(os.environ.get("JOB_RESEND_AFTER_SECONDS", "30"))

# --- Request bodies ---------------------------------------------------------------------
# A body the application did not read (a 413 over DATA_UPLOAD_MAX_MEMORY_SIZE, a 401) is
# read and discarded up to this size so the keep-alive connection stays usable; a larger
# one, or one stalling this long, closes the connection (deploy/bodydrain.py).
# Under ASGI (make run, production): a body over this is refused with 413 before it is
# read (deploy/asgibody.py); the largest accepted upload is a 200 MB batch file.
REQUEST_MAX_BYTES = int(os.environ.get("REQUEST_MAX_BYTES", str(256 * 1024**2)))
REQUEST_DRAIN_MAX_BYTES = int(os.environ.get("REQUEST_DRAIN_MAX_BYTES", str(16 * 1024**2)))
REQUEST_DRAIN_TIMEOUT_SECONDS = float(os.environ.get("REQUEST_DRAIN_TIMEOUT_SECONDS", "10"))

# --- Files ----------------------------------------------------------------------------
# The bytes an account's files may take in all (inputs and batch outputs); an upload past
# it is refused with 413 storage-full. 0: no cap.
FILES_MAX_BYTES_PER_ACCOUNT = int(os.environ.get("FILES_MAX_BYTES_PER_ACCOUNT", str(10 * 1024**3)))

# Days a batch's output and error files are kept (their `expires_at`); then the
# housekeeping task routing.expire_files deletes their content. 0: kept for good.
BATCH_OUTPUT_EXPIRES_DAYS = float(os.environ.get("BATCH_OUTPUT_EXPIRES_DAYS", "30"))

# --- Webhooks -------------------------------------------------------------------------
# Webhook URLs must be https with public destinations (routing.core.urls_safe); an admin
# may allow plain http here (a test receiver, a private deployment).
WEBHOOK_ALLOW_HTTP = env_bool("WEBHOOK_ALLOW_HTTP", False)
# Exact `host` or `host:port` entries (comma-separated) whose addresses need not be
# public: an internal receiver, a test's. Empty (the default): none.
WEBHOOK_ALLOW_HOSTS = frozenset(
    h.strip().lower() for h in os.environ.get("WEBHOOK_ALLOW_HOSTS", "").split(",") if h.strip()
)
# Seconds between a failed webhook delivery and its next attempt (routing.webhooks), one
# entry per retry: Standard Webhooks' schedule (5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h);
# after the last, the delivery is failed (the admin and the API can send it again).
WEBHOOK_RETRY_SCHEDULE = [
    float(x)
    for x in os.environ.get("WEBHOOK_RETRY_SCHEDULE", "5,300,1800,7200,18000,36000,36000").split(
        ","
    )
]
# A rotated endpoint secret keeps signing (next to the new one) this long by default.
WEBHOOK_SECRET_OVERLAP_SECONDS = float(os.environ.get("WEBHOOK_SECRET_OVERLAP_SECONDS", "86400"))

# --- Admin login lockout (django-axes) -----------------------------------------------
# ADMIN_LOGIN_FAILURES failed logins for one username from one address lock that pair out
# for ADMIN_LOCKOUT_MINUTES (attempts during the lockout do not extend it; a successful
# login clears the count): the real admin, from another address, is never locked out by
# someone guessing. Unlock early: `manage.py axes_reset_username <name>` or delete the
# attempt in the admin (Axes > Access attempts).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = int(os.environ.get("ADMIN_LOGIN_FAILURES", "5"))
AXES_COOLOFF_TIME = dt.timedelta(minutes=float(os.environ.get("ADMIN_LOCKOUT_MINUTES", "15")))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_CLIENT_IP_CALLABLE = "httpedge.clientip.client_ip"
AXES_LOCKOUT_TEMPLATE = "admin/login_locked.html"  # in routing/templates
AXES_VERBOSE = False

# --- Staff two-factor (django-otp; routing/staffauth.py, README "Staff two-factor") ------
# On: the admin's login asks for an authenticator's code (TOTP) or a backup code after the
# password, and staff without a second factor cannot reach /admin/ (an operator enrols
# one: `manage.py staff_2fa enrol NAME`). A wrong code counts toward the lockout above.
# Default: on whenever DEBUG is off; `make run` (DEBUG on) keeps its password-only demo.
ADMIN_REQUIRE_2FA = env_bool("ADMIN_REQUIRE_2FA", not DEBUG)
# The name authenticator apps show beside the account.
OTP_TOTP_ISSUER = os.environ.get("ADMIN_2FA_ISSUER", "Model lifecycle & routing")

# Log lines: `console` (readable, `make run`'s default) or `json` (one JSON object per
# line: timestamp, level, logger, message, request_id, and in a worker task_id and
# task_name; the default when DEBUG is off). README "Observability".
LOG_FORMAT = os.environ.get("LOG_FORMAT", "console" if DEBUG else "json").strip().lower()
if LOG_FORMAT not in {"console", "json"}:
    raise RuntimeError("LOG_FORMAT must be console or json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "console": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"},
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "format": "%(levelname)s %(name)s %(request_id)s %(message)s",
            "rename_fields": {"levelname": "level", "name": "logger"},
            "timestamp": True,  # ISO 8601, UTC, microseconds
        },
    },
    "filters": {"request_id": {"()": "httpedge.requestid.RequestIdFilter"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["request_id"],
        }
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

# Benchmark points are unique per (model, name, duration) with NULLs equal; PostgreSQL
# enforces it, SQLite (quick start only) cannot, and the loader matches rows anyway.
SILENCED_SYSTEM_CHECKS = ["models.W047"]
