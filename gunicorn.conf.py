# gunicorn configuration for kb-bridge: `gunicorn -c gunicorn.conf.py kb_bridge.asgi:app`.
# Every value comes from environment variables through kb_bridge.settings (see the README's
# configuration table); the reasons for each setting are in kb_bridge/gunicorn_config.py.
from kb_bridge.gunicorn_config import *  # noqa: F401,F403
