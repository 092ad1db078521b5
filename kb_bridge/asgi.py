"""The gunicorn target: `gunicorn -c gunicorn.conf.py kb_bridge.asgi:app`.

The one module where building the app at import is the point: gunicorn imports it in each
worker. Everything else builds nothing at import time.
"""

from kb_bridge.protocol.app import create_app

app = create_app()
