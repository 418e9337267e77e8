"""The ASGI entry point: gunicorn with uvicorn workers serves it (deploy/run.sh,
`-c deploy/gunicorn.conf.py`: deploy.webserver.Worker), so a slow stream
(/v1/chat/completions with `stream: true`) is a coroutine rather than a thread or a
process.

Under ASGI Django keeps a request's database connection in that request's context,
so a persistent connection (CONN_MAX_AGE > 0) is never reused by the next request and
only piles up: the web process closes connections at the end of each request
(Celery workers, started separately, keep theirs). On PostgreSQL the connections come
from Django's connection pool (DB_POOL=1, settings.py) rather than one opened per request.

A body larger than anything the service accepts is refused before it is read
(deploy/asgibody.py)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deploy.settings")
os.environ["DB_CONN_MAX_AGE"] = "0"
os.environ.setdefault("DB_POOL", "1")

from deploy import tracing  # noqa: E402

tracing.setup("web")  # before the handler loads the middleware; off without OTLP
django_application = get_asgi_application()

from deploy.asgibody import LimitRequestBody  # noqa: E402 (after Django is set up)

application = LimitRequestBody(django_application)
