"""`python -m kb_bridge` is the `kb-bridge` command."""

from kb_bridge.cli import main

raise SystemExit(main())
