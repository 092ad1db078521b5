# kb-bridge images. Two targets:
#   docker build -t kb-bridge .                        the bridge (the default, last stage): small, no torch
#   docker build -t kb-engine --target engine .        the bundled local engine (ONNX Runtime + the model
#                                                      inside kb-bridge, no torch; psycopg for KB_ENGINE_DATABASE_URL)
# Both: a slim base, dependencies installed in a build stage into /opt/kb and copied over (no
# compilers or pip caches in the final image), a non-root user, the server as PID 1 (exec form).
ARG PYTHON=3.11

FROM python:${PYTHON}-slim AS build
WORKDIR /src
COPY setup.py setup.cfg README.md ./
COPY kb_bridge ./kb_bridge
RUN python -m venv /opt/kb && /opt/kb/bin/pip install --no-cache-dir '.[redis]'

FROM python:${PYTHON}-slim AS engine-build
WORKDIR /src
COPY setup.py setup.cfg README.md ./
COPY kb_bridge ./kb_bridge
# The engine embeds with ONNX Runtime and its model ships inside kb-bridge: the `engine` extra needs no torch.
RUN python -m venv /opt/kb && /opt/kb/bin/pip install --no-cache-dir '.[engine,postgres]'

FROM python:${PYTHON}-slim AS engine
RUN useradd --system --uid 10001 --home-dir /var/lib/kb-engine --create-home kb
COPY --from=engine-build /opt/kb /opt/kb
ENV PATH=/opt/kb/bin:$PATH PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 \
    KB_ENGINE_DATA=/var/lib/kb-engine/data KB_ENGINE_BIND=0.0.0.0:8000
USER kb
VOLUME ["/var/lib/kb-engine/data"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status != 200)"]
# Binding beyond loopback needs KB_API_KEY (the engine refuses otherwise); compose sets it.
CMD ["kb-bridge", "engine"]

FROM python:${PYTHON}-slim AS bridge
RUN useradd --system --uid 10001 --home-dir /var/lib/kb-bridge --create-home kb \
 && mkdir -p /var/lib/kb-bridge/uploads && chown kb /var/lib/kb-bridge/uploads
COPY --from=build /opt/kb /opt/kb
COPY gunicorn.conf.py /app/gunicorn.conf.py
WORKDIR /app
ENV PATH=/opt/kb/bin:$PATH PYTHONUNBUFFERED=1 \
    KB_BIND=0.0.0.0:8765 KB_UPLOAD_DIR=/var/lib/kb-bridge/uploads
USER kb
VOLUME ["/var/lib/kb-bridge/uploads"]
EXPOSE 8765
# /healthz says the process serves; the port follows KB_BIND.
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
  CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('KB_BIND', '0.0.0.0:8765').rpartition(':')[2]; sys.exit(urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=4).status != 200)"]
# Exec form: gunicorn is PID 1 and receives SIGTERM directly (graceful shutdown).
CMD ["gunicorn", "-c", "gunicorn.conf.py", "kb_bridge.asgi:app"]
