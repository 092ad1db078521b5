"""The tools: each declared once as data (spec.py), with a typed argument model (arguments.py) checked by
validation.py, grouped by family (search, notes, documents, browse, related, uploads, status; uploads.py stages
through kb_bridge/uploads/), and the registry that selects what a configuration offers (registry.py)."""
