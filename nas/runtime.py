"""Process-wide settings for training and evaluating on the CPU."""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

logger = logging.getLogger(__name__)

__all__ = ["keep_freed_memory"]

#: glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_ONE_GIB = 1 << 30


def keep_freed_memory() -> bool:
    """Serve large tensors from the heap and keep freed memory for the next batch (glibc `mallopt`).

    glibc maps every allocation above its mmap threshold (32 MiB at most by default) to fresh pages and unmaps
    it on free, so each batch of activations page-faults anew: scoring one subnet of the default config spent
    more time in the kernel zeroing pages than in torch (6.3 s, 3.2 s with this setting, on 2 cores). PyTorch's
    CPU tuning guides swap the allocator (jemalloc, tcmalloc) for the same reason; this needs no extra
    library. Returns whether the setting took (False off glibc).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        logger.debug("no glibc mallopt: allocator left as it is")
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _ONE_GIB)) and bool(mallopt(_M_TRIM_THRESHOLD, _ONE_GIB))
