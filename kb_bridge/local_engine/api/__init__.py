"""The engine's HTTP API (docs/engine-api.md): one blueprint per resource family (system, search, jobs,
documents), the API key check (auth.py), request input checks (validation.py), the one translation of
errors into error bodies (errors.py) and the request plumbing (request.py). Each handler validates input,
calls one operation of the engine's parts, and returns JSON; errors are exceptions."""

from __future__ import annotations

from flask import Flask, current_app

from ..engine import Engine


def current_engine() -> Engine:
    engine: Engine = current_app.extensions["kb_engine"]
    return engine


def register(app: Flask) -> None:
    from . import documents, jobs, search, system

    for module in (system, search, jobs, documents):
        app.register_blueprint(module.blueprint)
