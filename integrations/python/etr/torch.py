"""etr for PyTorch: record every op PyTorch runs (aten ops, autograd's backward functions,
torch.profiler.record_function scopes) with its inputs and outputs.

    import torch, etr.torch

    with etr.torch.trace("trace.json"):
        loss = model(x).sum()
        loss.backward()

or, in code written for PyTorch's own observer, only the import changes:

    from etr.torch import ExecutionTraceObserver   # was: from torch.profiler import ...
    et = ExecutionTraceObserver().register_callback("trace.json")
    et.start(); ...; et.stop()
    et.unregister_callback()

The trace has the nodes PyTorch's own execution-trace observer writes for the same ops
(docs/TORCH.md of etr lists the differences). Needs the package built against libtorch
(Debian: libtorch-dev) and the same PyTorch at run time (Debian: python3-torch).
"""

import os as _os

import torch as _torch_lib  # noqa: F401  (loads libtorch before the integration)

import etr as _etr

try:
    from . import _torch
except ImportError as e:  # built without libtorch
    raise ImportError("etr was built without its PyTorch integration (libtorch-dev was not "
                      "found at build time): %s" % e) from None

__all__ = ["trace", "attach", "detach", "ExecutionTraceObserver", "ExecutionGraphObserver"]

attach = _torch.attach
detach = _torch.detach


class trace(_etr.trace):
    """etr.trace that also records PyTorch's ops: same arguments (path, timing=, schema=,
    flush_ms=, python_calls=)."""

    def __enter__(self):
        super().__enter__()
        try:
            _torch.attach()
        except BaseException:
            super().__exit__(None, None, None)  # (the trace is never left open)
            raise
        return self

    def __exit__(self, *exc):
        _torch.detach()
        return super().__exit__(*exc)


try:  # PyTorch 2.x: the interface torch.profiler.profile(execution_trace_observer=...) takes
    from torch.profiler.profiler import _ITraceObserver as _Base
except ImportError:  # PyTorch 1.13 has none
    _Base = object


class ExecutionTraceObserver(_Base):
    """A drop-in for PyTorch's ``torch.profiler.ExecutionTraceObserver`` (called
    ``ExecutionGraphObserver`` in PyTorch 1.13): the same methods with the same meaning,
    writing etr's trace instead of PyTorch's.

    ``register_callback(path)`` opens the trace (nothing is recorded yet) and returns the
    observer; ``start()`` and ``stop()`` record and pause; ``unregister_callback()`` (or
    ``cleanup()``, or deleting the observer) finalizes the file. Keyword arguments of the
    constructor are etr.trace's options but python_calls (timing=, schema=, flush_ms=,
    ring_mb=, traceback=, traceback_every=, traceback_depth=). Unlike PyTorch's, a path that cannot be opened raises EtrError
    instead of leaving the observer unregistered without a word. After unregistering,
    ``stats`` holds the trace's final counters. etr records one trace per process at a
    time, as PyTorch's observer does.
    """

    def __init__(self, **options):
        self._options = options
        self._t = None
        self._pid = None
        self._running = False
        self._output_file_path = None
        self.stats = None

    def __del__(self):
        if getattr(self, "_t", None) is not None:
            self.unregister_callback()

    def register_callback(self, output_file_path):
        """Open the trace at output_file_path (once: later calls do nothing until
        unregister_callback) and attach to PyTorch's ops. Returns the observer."""
        if self._t is None:
            if self._options.get("traceback"):
                _etr._python_frames()
            t = _etr._etr.Trace(output_file_path, **self._options)
            try:
                _torch.attach()
            except BaseException:
                t.close()
                raise
            self._t, self._output_file_path, self._pid = t, output_file_path, _os.getpid()
        return self

    def unregister_callback(self):
        """Stop, detach from PyTorch and finalize the file (in a process forked meanwhile:
        let go of the parent's trace, writing nothing)."""
        if self._t is not None:
            t, self._t = self._t, None
            _torch.detach()
            self._running = False
            if _os.getpid() != self._pid:
                _etr._close_quietly(t)
                return
            try:
                t.disable()
            finally:
                self.stats = t.close()

    @property
    def is_registered(self):
        return self._t is not None

    def is_running(self):
        return self._running

    def start(self):
        """Record from now on (registered observers only)."""
        if self._t is not None and not self._running:
            self._t.enable()
            self._running = True

    def stop(self):
        """Pause recording; an op running now is written whole."""
        if self._running:
            self._running = False
            if _os.getpid() == self._pid:  # (a forked child's copy records nothing anyway)
                self._t.disable()

    def cleanup(self):
        self.unregister_callback()

    def get_output_file_path(self):
        if self._t is None:
            raise RuntimeError("register_callback() first: no output file yet")
        return self._output_file_path


ExecutionGraphObserver = ExecutionTraceObserver  # (PyTorch 1.13's name)
