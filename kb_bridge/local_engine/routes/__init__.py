"""HTTP routes, one blueprint per resource family. Each handler validates input, calls one operation,
and returns JSON; errors are exceptions, answered by http_errors.py."""

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
