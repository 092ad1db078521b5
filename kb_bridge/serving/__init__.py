"""Running the bridge under gunicorn: its settings and server (gunicorn.py), the uvicorn worker (worker.py)."""
