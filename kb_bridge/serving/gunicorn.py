"""gunicorn settings for kb-bridge, all derived from the one settings reader, and the server that runs them.

Nothing here runs at import. `gunicorn_options(settings)` builds the settings when a process starts:
the top-level gunicorn.conf.py calls it (`gunicorn -c gunicorn.conf.py kb_bridge.asgi:app`), and
`kb-bridge serve` runs `BridgeServer`, a gunicorn application whose configuration comes from the same
function. Every value says why it is what it is.
"""

from __future__ import annotations

import os
import secrets
import shutil
from typing import Any

from kb_bridge.allocator import pin_malloc_thresholds
from kb_bridge.logs import configure_logging, gunicorn_logconfig
from kb_bridge.metrics import MULTIPROC_ENV, mark_worker_dead
from kb_bridge.errors import SettingsError
from kb_bridge.serving.metrics_dir import fresh_metrics_dir
from kb_bridge.settings import Settings, load_settings
from kb_bridge.uploads.factory import check_staging

ASGI_APP = "kb_bridge.asgi:app"
UVICORN_WORKER = "kb_bridge.serving.worker.BridgeUvicornWorker"


class _Master:
    """Whether gunicorn's master runs in this process (set by on_starting). gunicorn executes gunicorn.conf.py
    again in it at every SIGHUP, so a configuration error found then is a reload's."""

    running = False
    # The Prometheus multiprocess directory this server made; kept across reloads, removed when it exits.
    metrics_dir: str | None = None


def gunicorn_options(settings: Settings | None = None) -> dict[str, Any]:
    """Every gunicorn setting and server hook for this configuration, by gunicorn's names."""
    try:
        settings = settings or load_settings()
        check_staging(settings)
    except SettingsError as exc:
        message = f"kb-bridge: configuration error: {exc}"
        if _Master.running:
            # A SIGHUP's reload found it broken. SystemExit there ends the master alone (gunicorn lets it through
            # its loop): the workers ran on unsupervised, the old configuration, holding the port. HaltServer is
            # gunicorn's own stop: every worker gets graceful_timeout for its calls, then the master exits
            # non-zero with the reason, as a start refuses this configuration.
            from gunicorn.errors import HaltServer

            raise HaltServer(message, 1) from None
        raise SystemExit(message) from None
    server = settings.server

    # Prometheus multiprocess mode: every worker writes its samples under one directory, made here (mkdtemp:
    # 0700) and fresh for this server, set before any worker starts. A PROMETHEUS_MULTIPROC_DIR inherited from
    # the environment is not used: what an earlier run left there (never removed, as this server did not make
    # it) or anyone who can write there put there would be added to this server's figures. Those left by
    # masters killed outright are swept first (serving/metrics_dir.py).
    if settings.mcp.metrics and _Master.metrics_dir is None:
        _Master.metrics_dir = fresh_metrics_dir()
    if _Master.metrics_dir is not None:
        os.environ[MULTIPROC_ENV] = _Master.metrics_dir
    else:
        os.environ.pop(MULTIPROC_ENV, None)

    # Task ids are sealed with the deployment's secrets; OAuth alone in front of a keyless engine has none, so
    # they are sealed with a key made here, in the master before any worker starts, so that every worker of
    # this server opens the ids the others made (tools/task_ids.py). Its replicas need KB_MCP_TASK_KEY alike.
    if settings.shares_no_secret:
        os.environ.setdefault("KB_MCP_TASK_KEY", secrets.token_urlsafe(32))

    def on_starting(_server: Any) -> None:
        _Master.running = True
        configure_logging(server.log_level, server.log_json, settings.secrets())
        raise_open_file_limit()

    def post_fork(_server: Any, _worker: Any) -> None:
        configure_logging(server.log_level, server.log_json, settings.secrets())
        # Upload chunks pass through multi-MiB buffers; see kb_bridge/allocator.py.
        pin_malloc_thresholds()

    def child_exit(_server: Any, worker: Any) -> None:
        mark_worker_dead(worker.pid)

    def on_exit(_server: Any) -> None:
        if _Master.metrics_dir is not None:
            shutil.rmtree(_Master.metrics_dir, ignore_errors=True)

    return {
        # Loopback unless KB_BIND says otherwise (no auth configured is warned about at start-up).
        "bind": [server.bind],
        "workers": server.workers,
        # An ASGI worker: the MCP transport is async, tool handlers run on each worker's bounded thread
        # pool (KB_THREAD_POOL_SIZE). By default uvicorn's worker (faster, see serving/worker.py);
        # KB_WORKER_CLASS=asgi selects gunicorn's own. Both beat sync/gthread workers with an adapter.
        "worker_class": UVICORN_WORKER if server.worker_class == "uvicorn" else "asgi",
        # (gunicorn's own worker) run the app's lifespan and fail loudly if it cannot start.
        "asgi_lifespan": "on",
        # Longer than the worst case of one engine call with every retry, so gunicorn never kills a
        # worker that is only waiting for a slow engine (reliability checklist 38).
        "timeout": int(max(60.0, settings.engine.call_budget() + 30)),
        # On SIGTERM, in-flight calls get this long to finish before workers are stopped.
        "graceful_timeout": int(server.graceful_timeout),
        # Seconds an idle keep-alive connection stays open. gunicorn's graceful shutdown waits for every
        # open connection, idle ones included, so a short value keeps SIGTERM quick. Behind a load
        # balancer, set KB_KEEPALIVE above its idle timeout (e.g. 75 for a 60 s ALB) so that the
        # balancer, not the bridge, closes idle connections and never reuses a closing one.
        "keepalive": server.keepalive,
        # Each worker serves many slow clients at once; bounded so a flood cannot exhaust memory. The
        # uvicorn worker answers new requests 503 beyond it (serving/worker.py hands it to uvicorn,
        # which does not read this setting). gunicorn 27's own ASGI worker counts connections but does
        # not enforce the bound (README, KB_WORKER_CLASS).
        "worker_connections": server.max_connections,
        # Whose X-Forwarded-For/-Proto to believe: KB_FORWARDED_ALLOW_IPS, none by default. gunicorn's default
        # (loopback, or FORWARDED_ALLOW_IPS) let any client on the default loopback bind choose the address the
        # access log records for it; uvicorn's worker takes this value too.
        "forwarded_allow_ips": ",".join(server.forwarded_allow_ips),
        "loglevel": server.log_level.lower(),
        # gunicorn's own lines in the bridge's format on stderr. Access lines come from the app itself
        # (one JSON event per request, with its request id, and without the query string, which could
        # carry a misplaced key), so gunicorn's access log stays off.
        "logconfig_dict": gunicorn_logconfig(server.log_level, server.log_json),
        "accesslog": None,
        "errorlog": "-",
        # gunicorn's control socket lives at one fixed path per user; several bridges (or tests) on a
        # host would fight over it, and the bridge needs none of its commands.
        "control_socket_disable": True,
        "on_starting": on_starting,
        "post_fork": post_fork,
        "child_exit": child_exit,
        "on_exit": on_exit,
    }


def raise_open_file_limit() -> None:
    """Let the workers hold the connections KB_MAX_CONNECTIONS allows: the soft limit on open files (often
    1024) goes up to the hard one. Inherited by the workers gunicorn forks."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass  # a platform that will not: the limit stays as it was


def run_server(settings: Settings) -> int:
    """Run gunicorn in this process (it becomes the master: PID 1 in a container gets the signals)."""
    from gunicorn.app.base import BaseApplication
    from gunicorn.util import import_app

    class BridgeServer(BaseApplication):
        def load_config(self) -> None:
            for key, value in gunicorn_options(settings).items():
                self.cfg.set(key, value)

        def load(self) -> Any:
            return import_app(ASGI_APP)

    try:
        BridgeServer().run()
    except SystemExit as exit_:  # the arbiter leaves through sys.exit
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0
