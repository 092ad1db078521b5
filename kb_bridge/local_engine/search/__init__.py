"""Ranking: the three search modes and related chunks over any Store (searcher.py), how hybrid search
fuses its two signals (fusion.py), takes context from adjacent notes (context.py) and, on request, spreads
its results (diversity.py)."""
