"""python -m kb_bridge.local_engine: the same as `kb-bridge engine`."""

from __future__ import annotations

from .cli import main

raise SystemExit(main())
