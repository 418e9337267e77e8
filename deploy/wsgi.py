import os

from django.core.wsgi import get_wsgi_application

from deploy import tracing
from deploy.bodydrain import DrainUnreadBody

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deploy.settings")
tracing.setup("web")  # before the handler loads the middleware; off without OTLP
# A body the application left unread (a 413, a 401 before reading) is drained or the
# connection closed honestly, so keep-alive clients are not cut off (deploy/bodydrain.py).
application = DrainUnreadBody(get_wsgi_application())
