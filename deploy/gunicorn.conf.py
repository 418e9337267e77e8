"""gunicorn's settings for the service's web server, shared by every starter:
deploy/run.sh (`make run`), tests/realparts.py (web_argv: the tests and the benchmarks)
and .ci/schemathesis.sh pass `-c deploy/gunicorn.conf.py`; the command line adds the
address, the number of workers and the grace period. What the settings mean:
deploy/webserver.py and the README ("Security": client addresses, "Reliability": the web
server's timeouts)."""

from deploy.webserver import limits

# uvicorn workers (ASGI) with the service's header/body/idle timeouts and header limit,
# never rewriting the client address from X-Forwarded-For (httpedge.clientip.client_ip
# is the one rule, after TRUSTED_PROXY_COUNT).
worker_class = "deploy.webserver.Worker"
# Trust no forwarded header here either (gunicorn's default trusts 127.0.0.1 and ::1).
forwarded_allow_ips = ""
# Idle keep-alive (the uvicorn worker passes it on; deploy.webserver.Protocol reads
# WEB_KEEPALIVE_SECONDS itself, the same value).
keepalive = max(1, round(limits().keepalive_seconds))
# A worker that does not check in for this long is killed and replaced (uvicorn
# workers check in from their event loop, so a blocked loop, not a slow stream).
timeout = 30
