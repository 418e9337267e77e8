"""Settings for the model lifecycle and routing service.

Everything comes from the environment (see the README's configuration table). With
nothing set, the service runs on a bare machine: SQLite under var/ and a filesystem
broker for Celery, so `make run` needs no server.
"""

import os
from pathlib import Path

import dj_database_url

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
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")
# Public base URL used in Link headers and problem `type` URIs when no request is at hand.
# Defaults to where `make run` serves (its PORT, as deploy/run.sh reads it).
PUBLIC_BASE_URL = os.environ.get(
    "PUBLIC_BASE_URL", f"http://127.0.0.1:{os.environ.get('PORT') or '8000'}"
).rstrip("/")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "catalog",
    "routing",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "deploy.middleware.api_input_guard",
    "deploy.middleware.ServiceUnavailableMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

if not DEBUG:
    # Production serves the admin's static files itself (after `collectstatic`).
    MIDDLEWARE.insert(1, "whitenoise.middleware.WhiteNoiseMiddleware")

ROOT_URLCONF = "deploy.urls"
WSGI_APPLICATION = "deploy.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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
        conn_health_checks=True,
    )
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

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
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
    "DEFAULT_METADATA_CLASS": "deploy.metadata.BriefMetadata",
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    "EXCEPTION_HANDLER": "deploy.problems.problem_exception_handler",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Model lifecycle and routing service",
    "DESCRIPTION": (
        "Model versions and their retirements, service tiers and prices, quota and the "
        "deadline router. Errors are RFC 9457 problem details."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "ModelStatusEnum": "catalog.lifecycle.STATUSES",
        "HealthStatusEnum": ["ok", "degraded"],
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
    "reset-quota-periods": {"task": "routing.reset_quota_periods", "schedule": 60.0},
    "apply-retirements": {"task": "routing.apply_retirements", "schedule": 60.0},
    "announce-notices": {"task": "routing.announce_notices", "schedule": 60.0},
    "sweep-batches": {
        "task": "routing.sweep_batches",
        "schedule": float(os.environ.get("JOB_SWEEP_SECONDS", "5")),
    },
    "sweep-jobs": {
        "task": "routing.sweep_jobs",
        "schedule": float(os.environ.get("JOB_SWEEP_SECONDS", "5")),
    },
}
# Accepting a job must not hang on a broker that is down: try briefly, then leave the
# job queued in the database for the sweeper to send again.
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0.1, "interval_step": 0.2}
CELERY_BROKER_CONNECTION_TIMEOUT = 2

# --- Simulated time -------------------------------------------------------------------
# Simulated seconds per wall second: 1 is real time; demos and tests compress it.
SIM_TIME_SCALE = float(os.environ.get("SIM_TIME_SCALE", "1"))
if not SIM_TIME_SCALE > 0:
    raise RuntimeError("SIM_TIME_SCALE must be > 0")
# A job still queued this long after it was sent is sent again (the broker was down).
JOB_RESEND_AFTER_SECONDS = float(os.environ.get("JOB_RESEND_AFTER_SECONDS", "30"))

# --- Files ----------------------------------------------------------------------------
# The bytes an account's files may take in all (inputs and batch outputs); an upload past
# it is refused with 413 storage-full. 0: no cap.
FILES_MAX_BYTES_PER_ACCOUNT = int(os.environ.get("FILES_MAX_BYTES_PER_ACCOUNT", str(10 * 1024**3)))

# --- Webhooks -------------------------------------------------------------------------
# Webhook URLs must be https with public destinations (routing.core.urls_safe); an admin
# may allow plain http here (a test receiver, a private deployment).
WEBHOOK_ALLOW_HTTP = env_bool("WEBHOOK_ALLOW_HTTP", False)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

# Benchmark points are unique per (model, name, duration) with NULLs equal; PostgreSQL
# enforces it, SQLite (quick start only) cannot, and the loader matches rows anyway.
SILENCED_SYSTEM_CHECKS = ["models.W047"]
