# gunicorn configuration for kb-bridge: `gunicorn -c gunicorn.conf.py kb_bridge.asgi:app`.
# gunicorn executes this file when it starts: that is when the settings are read (from KB_*
# environment variables, see the README's configuration table). The reasons for each value are
# in kb_bridge/serving/gunicorn.py.
from kb_bridge.serving.gunicorn import gunicorn_options

globals().update(gunicorn_options())
