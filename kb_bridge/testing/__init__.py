"""Helpers for the test suite and the benchmarks, importable as a normal package (no sys.path edits):
real processes on loopback (processes.py), raw MCP over HTTP without the MCP library (mcp_http.py), questions
asked of the engine directly (engine_http.py), an engine stand-in and a fault-injecting proxy (standin.py,
faultproxy.py), abusive clients (abuse.py) and small valid files (files.py).

Not used by the product itself. `processes.REPO` is the checkout this package lives in: the helpers start
the bridge as documented, `gunicorn -c gunicorn.conf.py`, from there.
"""
