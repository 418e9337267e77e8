"""The image's HEALTHCHECK: is this container's process alive (not: are its
dependencies up; /readyz says that). The entry point writes the role to /tmp/role.

web: GET /livez answers 200. worker: the worker answers a Celery ping (through the
broker). beat, migrate, anything else: the process runs (this runs at all)."""

from __future__ import annotations

import os
import socket
import sys
import urllib.request


def main() -> int:
    try:
        with open("/tmp/role") as f:
            role, _, arg = f.read().strip().partition(" ")
    except OSError:
        role, arg = "web", ""
    if role == "web":
        url = f"http://127.0.0.1:{os.environ.get('PORT', '8000')}/livez"
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return 0 if r.status == 200 else 1
        except OSError as exc:
            print(f"healthcheck: {url}: {exc}", file=sys.stderr)
            return 1
    if role == "worker":
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deploy.settings")
        from deploy.celery import app

        name = f"{arg.split(',')[0]}@{socket.gethostname()}"
        replies = app.control.ping(destination=[name], timeout=5)
        if not replies:
            print(f"healthcheck: no reply from {name}", file=sys.stderr)
        return 0 if replies else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
