"""Ranking: the three search modes and related chunks over any Store (searcher.py), and how hybrid search
fuses its two signals (fusion.py)."""
