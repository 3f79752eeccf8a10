"""Measuring one thing at a time: faiss pinned to one core, C++ stderr kept off the progress display."""

from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def one_thread():
    """faiss searches a single query with OpenMP on every core; pin it to one for the latency loop."""
    try:
        import faiss
    except ImportError:  # pragma: no cover
        yield
        return
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


@contextmanager
def captured_stderr():
    """Collect what C++ code writes to file descriptor 2 meanwhile; yields a function returning its lines."""
    import os
    import sys
    import tempfile

    lines: list[str] = []
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, ValueError, OSError):  # pytest's capture or an odd stream: leave it alone
        yield lambda: lines
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), fd)
        try:
            yield lambda: lines
        finally:
            sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)
            tmp.seek(0)
            lines.extend(tmp.read().decode("utf-8", "replace").splitlines())
