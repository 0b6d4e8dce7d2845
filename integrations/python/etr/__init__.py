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

os._exit and os.exec* finalize the traces of the process first (etr.trace's, and the
ETR_TRACE trace: under ETR_TRACE_FORKS=1 a multiprocessing fork or forkserver worker's own
file): the package replaces os._exit, os.execv and os.execve with functions that do so.
"""

import functools as _functools
import inspect as _inspect
import os as _os
import signal as _signal
import warnings as _warnings
import weakref as _weakref

from . import _etr
from ._etr import EtrError, Op

__all__ = ["trace", "record_function", "annotate", "Op", "EtrError", "thread_set_name",
           "thread_id", "set_rank", "declare_group", "record_groups", "rank", "world_size",
           "__version__"]
__version__ = _etr.version

thread_set_name = _etr.thread_set_name
thread_id = _etr.thread_id
# A distributed run (etr/dist.h): the rank, and process groups listed in the trace's
# `## process_group:init ##` node (etr.torch.trace fills them from torch.distributed).
set_rank = _etr.set_rank
declare_group = _etr.declare_group
record_groups = _etr.record_groups
rank = _etr.rank
world_size = _etr.world_size

# Scopes, as PyTorch numbers them (the "scope" attr).
SCOPE_FUNCTION = 0
SCOPE_BACKWARD_FUNCTION = 1
SCOPE_USER_SCOPE = 7


class trace:
    """Context manager: open ``path`` (``.gz``: gzip; ``.etr``: the binary event log that
    ``etr convert`` makes JSON of), record the block, close the file.

    ``timing=False`` leaves out ts/inclusive_dur/exclusive_dur, ``timing="ns"`` adds each
    op's start and duration in nanoseconds (attrs ts_ns, dur_ns; anything but True, False
    and "ns" is a ValueError); ``schema`` is "1.1.1"
    (default) or "1.1.0"; ``flush_ms`` bounds how long a finished op may stay unwritten;
    ``ring_mb=n`` makes it a flight recorder: only the latest n MiB of events are kept, and
    written as a complete trace at the end of the block and on ``dump()``;
    ``traceback=True`` (or an op-name pattern such as ``"aten::mm*"``) records where each op
    was called from, Python frames (CPython 3.11) between the native ones;
    ``traceback_every=n`` then 1 op in n per thread, ``traceback_depth`` frames kept;
    ``python_calls=True`` records each Python function call of this thread as an op (the
    thread's own profile function, sys.setprofile's or cProfile's, is suspended meanwhile
    and put back after; generator and coroutine frames are not ops, their calls are);
    ``signals=True`` finalizes the file when SIGSEGV, SIGBUS, SIGABRT, SIGTERM, SIGINT,
    SIGFPE, SIGILL, SIGHUP, SIGQUIT or SIGXCPU is about to end the process (and SIGPIPE,
    which Python ignores: an ignored signal stays so); a signal a handler installed before
    handles (Python's SIGINT handler: KeyboardInterrupt) finalizes the file the first time
    only (it is reopened when the handler returns) and nothing after, and a crash finalizes
    it before faulthandler's.
    After the block, ``stats`` holds the trace's final counters (a dict), also when closing
    failed (a write error: raised as EtrError, unless the block itself raised, which then
    goes on with a warning). A process forked inside the block leaves it without closing
    anything: the file is the parent's. The ETR_TRACE_* variables set the ETR_TRACE trace
    only, never this one.
    """

    def __init__(self, path, *, timing=True, schema="1.1.1", flush_ms=0, ring_mb=0,
                 traceback=False, traceback_every=0, traceback_depth=0, python_calls=False,
                 signals=False):
        self.path = path
        self._opts = dict(timing=timing, schema=schema, flush_ms=flush_ms, ring_mb=ring_mb,
                          traceback=traceback, traceback_every=traceback_every,
                          traceback_depth=traceback_depth, signals=signals)
        self._python_calls = python_calls
        self._t = None
        self._pid = None
        self.stats = None

    def __enter__(self):
        if self._t is not None:
            raise EtrError("this trace's block is running already")
        if self._opts["traceback"]:
            _python_frames()
        t = _etr.Trace(self.path, **self._opts)
        try:
            t.enable()
            if self._python_calls:
                _etr.profile(True, _PACKAGE_DIR)
        except BaseException:
            _close_quietly(t)  # (the one trace a process may have: never left open)
            raise
        self._t, self._pid, self.stats = t, _os.getpid(), None
        _opened(t)
        return self

    def __exit__(self, exc_type, exc, tb):
        t, self._t = self._t, None
        if t is None:
            return False
        _closed(t)
        if self._python_calls:
            _etr.profile(False)
        if _os.getpid() != self._pid:  # a forked child: nothing of the parent's to close
            _close_quietly(t)
            return False
        try:
            self.stats = t.close()
        except EtrError as e:
            self.stats = t.stats()
            if exc_type is None:
                raise
            try:  # (under -W error the warning raises: the block's exception goes on)
                _warnings.warn("etr: %s (while the block raised %s)" % (e, exc_type.__name__),
                               RuntimeWarning, stacklevel=2)
            except Warning:
                pass
        return False

    def _open(self, what):
        if self._t is None:
            raise EtrError("%s: the trace is not open (use it as `with etr.trace(...)`)" % what)
        return self._t

    def flush(self):
        """Write what is buffered now."""
        self._open("flush").flush()

    def dump(self):
        """Flight recorder: write the latest events as a complete trace now (the file is
        replaced; recording goes on). Without ``ring_mb``, the same as ``flush()``."""
        self._open("dump").dump()


_PACKAGE_DIR = _os.path.dirname(_os.path.abspath(__file__)) + _os.sep


def _close_quietly(t):
    """Close t, whatever it says (a forked child's copy, or one that failed)."""
    try:
        t.close()
    except EtrError:
        pass


# The traces this process opened through etr.trace (and etr.torch's observer) and has not
# closed: the _etr.Trace -> the pid that opened it, for os._exit and os.exec* to finalize.
# Weak: a trace whose last reference goes is closed then, as it was without this.
_open_traces = _weakref.WeakKeyDictionary()


def _opened(t):
    _open_traces[t] = _os.getpid()


def _closed(t):
    _open_traces.pop(t, None)


def _finish_traces():
    """What exit's destructors and `with` blocks would have done, for os._exit, which skips
    them: the ETR_TRACE trace (this process's own: a forked child's copy of its parent's is
    left alone) and the traces this process opened are finalized."""
    _etr.close_env_trace()
    me = _os.getpid()
    for t, pid in list(_open_traces.items()):
        if pid == me:
            _close_quietly(t)
    _open_traces.clear()


def _exit_finishing(prev):
    """os._exit that finalizes this process's traces first, then prev ends the process.
    _exit skips the library's destructor and every `with` block, so without this the
    process loses every op its writer had not flushed yet (up to flush_ms: all of a short
    multiprocessing worker's, whose Process ends with os._exit), and the file has no end."""
    def _exit(status, /):
        try:
            # (a SIGTERM now, Pool.terminate's, would cut the file short; the process ends
            # in a moment anyway, and a SIGTERM still pending then is moot)
            _signal.pthread_sigmask(_signal.SIG_BLOCK, (_signal.SIGTERM,))
            _finish_traces()
        finally:
            prev(status)
    _exit._etr_finishes = True
    _exit.__wrapped__ = prev
    _exit.__doc__ = prev.__doc__
    return _exit


def _will_exec(path):
    """Whether exec of path can start it (else, as for each directory execvp tries on PATH,
    the exec fails and the process goes on recording)."""
    if isinstance(path, int):  # (execve on a descriptor)
        return True
    try:
        return _os.access(path, _os.X_OK) and not _os.path.isdir(path)
    except (TypeError, ValueError, OSError):
        return False


def _exec_finishing(prev):
    """os.execv / os.execve that finalize this process's traces first (the new image
    replaces the process: no destructor or `with` block of this one runs), when the exec can
    start. execl, execvp and the others go through these two. An exec that fails after all
    leaves the traces closed: said with a RuntimeWarning."""
    def _exec(path, *args):
        finished = _will_exec(path) and (len(_open_traces) > 0 or _etr.env_trace_open())
        if finished:
            _finish_traces()
        try:
            return prev(path, *args)
        except OSError as e:
            if finished:
                try:  # (under -W error the warning raises: the host's OSError goes on)
                    _warnings.warn("etr: the exec failed (%s) after the traces were "
                                   "finalized: nothing is recorded from now on" % e,
                                   RuntimeWarning, 2)
                except Warning:
                    pass
            raise
    _exec._etr_finishes = True
    _exec.__wrapped__ = prev
    _exec.__doc__ = prev.__doc__
    _exec.__name__ = prev.__name__
    return _exec


def _finish_at_os_exit():
    """os._exit, os.execv and os.execve finalize the traces from now on (once per process):
    set at import, so that it holds also in a process that imported the package only after
    it was forked (multiprocessing's forkserver workers), and again after a fork, in case
    the host replaced them meanwhile."""
    if not getattr(_os._exit, "_etr_finishes", False):
        _os._exit = _exit_finishing(_os._exit)
    for name in ("execv", "execve"):
        f = getattr(_os, name, None)
        if f is not None and not getattr(f, "_etr_finishes", False):
            setattr(_os, name, _exec_finishing(f))


_finish_at_os_exit()
if hasattr(_os, "register_at_fork"):
    _os.register_at_fork(after_in_child=_finish_at_os_exit)


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
    qualified name). For an ``async def`` function the op spans the awaited call, not only
    the creation of its coroutine; ops are kept per thread, so tasks that interleave on one
    thread nest their ops as they run (an op left open by a task switch is closed by the
    enclosing one and counted in ``ends_out_of_order``). A generator function's op covers
    making the generator only."""

    def wrap(fn):
        op_name = name or fn.__qualname__

        if _inspect.iscoroutinefunction(fn):
            @_functools.wraps(fn)
            async def ainner(*args, **kwargs):
                with Op(op_name, scope=scope):
                    return await fn(*args, **kwargs)

            return ainner

        @_functools.wraps(fn)
        def inner(*args, **kwargs):
            with Op(op_name, scope=scope):
                return fn(*args, **kwargs)

        return inner

    return wrap
