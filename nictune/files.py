"""Writing a file whole or not at all."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def atomic_write(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file renamed over it (after fsync): a
    crash or a full disk leaves the old file, never a cut one. Safe from several threads
    (each has its own temporary file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
