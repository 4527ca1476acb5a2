"""Keeps numba's on-disk cache of the compiled VPUNN kernels in step with the package's sources.

numba keys a kernel's cache on the kernel's own source file: a kernel that calls kernels of another module (dpu.py's
`_plan` calls the sanitizer's and the encoders') or reads its constants (the enum codes, `F`) would keep its stale
machine code after that other module changed. So before any kernel runs, the package's sources are hashed and,
where the hash differs from the one the cache was built from, the package's numba cache files are removed.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
STAMP_NAME = "numba-sources.sha256"


def sources_hash(package: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(package.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def drop_stale_cache(package: Path = _PACKAGE) -> bool:
    """Remove the numba cache files (*.nbi, *.nbc) of `package` if its sources changed since they were written;
    True if any were removed.

    The cache folder is the one numba writes beside the sources; where it cannot be written (a read-only
    install, whose sources do not change) there is nothing to keep in step.
    """
    cache = package / "__pycache__"
    stamp = cache / STAMP_NAME
    current = sources_hash(package)
    if stamp.is_file() and stamp.read_text() == current:
        return False
    if not os.access(package, os.W_OK) or (cache.exists() and not os.access(cache, os.W_OK)):
        return False
    cache.mkdir(exist_ok=True)
    stale = [p for p in cache.iterdir() if p.suffix in (".nbi", ".nbc")]
    for path in stale:
        path.unlink(missing_ok=True)  # another process may have removed it first
    tmp = stamp.with_name(f"{stamp.name}.{os.getpid()}")
    tmp.write_text(current)
    os.replace(tmp, stamp)
    return bool(stale)
