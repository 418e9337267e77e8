"""The orchestrators' probes (httpedge/health.py): /livez says the process serves and
consults nothing; /readyz says it can work (database, broker, cache) and is 503 when one
is down. Both answer a kubelet's request as it comes: the pod's IP as Host (not in
ALLOWED_HOSTS) and plain HTTP with the production HTTPS redirect on; under ASGI too."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient

DOWN_BROKER = "redis://127.0.0.1:1/0"  # nothing listens on port 1
DOWN_CACHE = {
    "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": DOWN_BROKER}
}


def test_readyz_reports_database_broker_and_cache(client, db):
    r = client.get("/readyz")
    assert r.status_code == 200
    assert r.json() == {"status": "ok", "database": "ok", "broker": "ok", "cache": "ok"}


def test_readyz_is_503_when_the_broker_is_down_and_livez_stays_200(client, db, settings):
    settings.CELERY_BROKER_URL = DOWN_BROKER
    r = client.get("/readyz")
    assert r.status_code == 503
    body = r.json()
    assert body["status"] == "degraded" and body["broker"].startswith("unreachable")
    assert body["database"] == "ok" and body["cache"] == "ok"
    live = client.get("/livez")
    assert live.status_code == 200 and live.json() == {"status": "ok"}


def test_readyz_is_503_when_the_cache_is_down(client, db, settings):
    settings.CACHES = DOWN_CACHE
    r = client.get("/readyz")
    assert r.status_code == 503
    assert r.json()["cache"].startswith("unreachable") and r.json()["broker"] == "ok"
    assert client.get("/livez").status_code == 200


def test_livez_consults_no_database(client):
    # No `db` fixture: pytest-django refuses any query, so a query would fail this test.
    assert client.get("/livez").status_code == 200


def test_probes_answer_a_kubelet_behind_the_production_https_redirect(client, db, settings):
    settings.SECURE_SSL_REDIRECT = True
    settings.ALLOWED_HOSTS = ["lifecycle.example.com"]
    for path in ("/livez", "/readyz"):
        r = client.get(path, HTTP_HOST="10.244.1.7:8000")
        assert r.status_code == 200, (path, r.status_code)
    # Everything else still gets the host check and the redirect.
    assert client.get("/api/v1/ping", HTTP_HOST="10.244.1.7:8000").status_code == 400
    assert client.get("/api/v1/ping", HTTP_HOST="lifecycle.example.com").status_code == 301


@pytest.mark.parametrize("method", ["post", "put", "delete"])
def test_only_get_and_head_are_probes(client, db, method):
    r = getattr(client, method)("/readyz")
    assert r.status_code == 404
    assert client.head("/readyz").status_code == 200


def test_probes_under_asgi(db, settings):
    async_client = AsyncClient()
    assert async_to_sync(async_client.get)("/livez").status_code == 200
    r = async_to_sync(async_client.get)("/readyz")
    assert r.status_code == 200 and r.json()["cache"] == "ok"
    settings.CELERY_BROKER_URL = DOWN_BROKER
    assert async_to_sync(async_client.get)("/readyz").status_code == 503
