"""Keep large transient buffers from ratcheting a worker's memory up.

A chunk upload passes through several multi-megabyte buffers (the request body, its JSON string,
the decoded bytes) that live for one request. glibc's malloc raises its mmap threshold after the
first such buffer is freed, after which these buffers come from the heap, which fragments and is
rarely returned: peak RSS then grows with the number of chunks a worker has seen. Pinning the
threshold makes every buffer above it a private mapping, handed back to the OS when freed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

logger = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 512 * 1024


def pin_malloc_thresholds() -> bool:
    """Fix glibc's mmap and trim thresholds for this process; False where there is no glibc."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    ok = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD) == 1
    if not ok:
        logger.debug("mallopt refused the thresholds; memory behaviour unchanged")
    return ok
