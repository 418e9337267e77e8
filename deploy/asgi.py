"""The ASGI entry point: gunicorn with uvicorn workers serves it (deploy/run.sh,
`-c deploy/gunicorn.conf.py`: deploy.webserver.Worker), so a slow stream
(/v1/chat/completions with `stream: true`) is a coroutine rather than a thread or a
process.

Under ASGI Django keeps a request's database connection in that request's context,
so a persistent connection (CONN_MAX_AGE > 0) is never reused by the next request and
only piles up: the web process closes connections at the end of each request
(Celery workers, started separately, keep theirs). On PostgreSQL the connections come
from Django's connection pool (DB_POOL=1, settings.py) rather than one opened per request.

A request for a plain (sync) view, which is every view but the streaming ones, runs its
whole middleware chain and view in one thread hop (`Handler`, issue 29); the async views
keep Django's async chain.

A body larger than anything the service accepts is refused before it is read
(deploy/asgibody.py)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deploy.settings")
os.environ["DB_CONN_MAX_AGE"] = "0"
os.environ.setdefault("DB_POOL", "1")

import django  # noqa: E402

from deploy import tracing  # noqa: E402

tracing.setup("web")  # before the handler loads the middleware; off without OTLP
django.setup(set_prefix=False)  # what get_asgi_application does

from django.core.handlers.asgi import ASGIHandler  # noqa: E402 (after Django is set up)

from deploy.asgibody import LimitRequestBody  # noqa: E402
from deploy.asgihandler import Handler  # noqa: E402

# WEB_HANDLER=django: Django's own handler, as before issue 29 (bench/bench_ping.py
# runs both side by side as its baseline).
django_application = ASGIHandler() if os.environ.get("WEB_HANDLER") == "django" else Handler()
application = LimitRequestBody(django_application)
