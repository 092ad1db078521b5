"""Ingestion: new work in (submissions.py, staging.py), the worker that runs it (worker.py), and what it
does to text (parsers.py: files to text; chunking.py: text to chunks; indexing.py: chunks to vectors and
into the store; notes.py)."""
