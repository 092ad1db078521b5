"""Where the engine keeps everything: the Store interface (base.py); its two backends, each holding all of
its SQL (sqlite/ and postgres/); the write and read patterns they share (sql_writes.py, sql_reads.py, and the
statements both run: job_tags.py, adjacent.py); the derived indexes kept in step through the change log
(derived.py: the full-text index, text_index.py, and the vector index, vector_index.py); and the choice between
the backends (backends.py: `open_store(config)`; nothing else names a backend)."""
