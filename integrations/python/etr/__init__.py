"""etr for Python: record operator calls of a Python host into an execution trace.

    import etr

    with etr.trace("trace.json"):              # opened, enabled; closed at the end
        with etr.record_function("load", inputs=[path, 3]):
            ...
        step()                                 # decorated with @etr.annotate()

The trace is the JSON execution trace that PyTorch's observer writes and Chakra reads
(docs/FORMAT.md of etr). ``etr.trace(..., python_calls=True)`` also records every Python
function call of the thread as an op. ``python3 -m etr script.py`` runs a script under
tracing. Each op belongs to the thread that began it.
"""

import contextlib as _contextlib
import functools as _functools

from . import _etr
from ._etr import EtrError, Op

__all__ = ["trace", "record_function", "annotate", "Op", "EtrError", "thread_set_name",
           "thread_id", "__version__"]
__version__ = _etr.version

thread_set_name = _etr.thread_set_name
thread_id = _etr.thread_id

# Scopes, as PyTorch numbers them (the "scope" attr).
SCOPE_FUNCTION = 0
SCOPE_BACKWARD_FUNCTION = 1
SCOPE_USER_SCOPE = 7


class trace:
    """Context manager: open ``path`` (``.gz``: gzip; ``.etr``: the binary event log that
    ``etr convert`` makes JSON of), record the block, close the file.

    ``timing=False`` leaves out ts/inclusive_dur/exclusive_dur; ``schema`` is "1.1.1"
    (default) or "1.1.0"; ``flush_ms`` bounds how long a finished op may stay unwritten;
    ``ring_mb=n`` makes it a flight recorder: only the latest n MiB of events are kept, and
    written as a complete trace at the end of the block and on ``dump()``;
    ``traceback=True`` (or an op-name pattern such as ``"aten::mm*"``) records where each op
    was called from, Python frames (CPython 3.11) between the native ones;
    ``traceback_every=n`` then 1 op in n per thread, ``traceback_depth`` frames kept;
    ``python_calls=True`` records each Python function call of this thread as an op.
    After the block, ``stats`` holds the trace's final counters (a dict).
    """

    def __init__(self, path, *, timing=True, schema="1.1.1", flush_ms=0, ring_mb=0,
                 traceback=False, traceback_every=0, traceback_depth=0, python_calls=False):
        self.path = path
        self._opts = dict(timing=timing, schema=schema, flush_ms=flush_ms, ring_mb=ring_mb,
                          traceback=traceback, traceback_every=traceback_every,
                          traceback_depth=traceback_depth)
        self._python_calls = python_calls
        self._t = None
        self.stats = None

    def __enter__(self):
        if self._opts["traceback"]:
            _python_frames()
        self._t = _etr.Trace(self.path, **self._opts)
        self._t.enable()
        if self._python_calls:
            _etr.profile(True)
        return self

    def __exit__(self, *exc):
        if self._python_calls:
            _etr.profile(False)
        self.stats = self._t.close()
        return False

    def flush(self):
        """Write what is buffered now."""
        self._t.flush()

    def dump(self):
        """Flight recorder: write the latest events as a complete trace now (the file is
        replaced; recording goes on). Without ``ring_mb``, the same as ``flush()``."""
        self._t.dump()


_frames_on = None


def _python_frames():
    """Python frames in tracebacks from now on (once; undone at exit, while the interpreter
    can still take back the references etr holds)."""
    global _frames_on
    if _frames_on is None:
        _frames_on = _etr.python_frames(True)
        if _frames_on:
            import atexit
            atexit.register(_etr.python_frames, False)
    return _frames_on


def record_function(name, inputs=(), *, scope=SCOPE_USER_SCOPE, schema=None):
    """A context manager recording the block as one op named ``name`` (like PyTorch's
    ``record_function``); an exception leaving the block marks the op failed."""
    return Op(name, inputs, scope=scope, schema=schema)


def annotate(name=None, *, scope=SCOPE_USER_SCOPE):
    """Decorator: each call of the function is an op (named ``name`` or the function's
    qualified name)."""

    def wrap(fn):
        op_name = name or fn.__qualname__

        @_functools.wraps(fn)
        def inner(*args, **kwargs):
            with Op(op_name, scope=scope):
                return fn(*args, **kwargs)

        return inner

    return wrap
