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


def _torch_groups(dist):
    """(name, global ranks in group-rank order, desc, backend config, group object) of each
    process group torch.distributed knows in this process (the world group, named "0", and
    the groups this rank belongs to), from its bookkeeping: module globals in PyTorch 1.x,
    ``_world`` in 2.x. Empty when neither is there."""
    c10d = dist.distributed_c10d
    world = getattr(c10d, "_world", None)
    names = getattr(world, "pg_names", None) if world is not None else None
    if names is None:
        names = getattr(c10d, "_pg_names", None)
    group_ranks = getattr(world, "pg_group_ranks", None) if world is not None else None
    if group_ranks is None:
        group_ranks = getattr(c10d, "_pg_group_ranks", None)
    if not isinstance(names, dict) or not isinstance(group_ranks, dict):
        return []
    default = dist.group.WORLD
    out = []
    for pg, name in list(names.items()):
        ranks = group_ranks.get(pg)
        if not name or not isinstance(ranks, dict):
            continue
        try:
            backend = str(dist.get_backend(pg))
        except Exception:  # (a group this rank is not part of, or an unknown backend)
            backend = ""
        device = "cuda" if backend == "nccl" else "cpu"
        out.append((str(name), [g for g, _ in sorted(ranks.items(), key=lambda kv: kv[1])],
                    "default_pg" if pg is default else "undefined",
                    "%s:%s" % (device, backend) if backend else "", pg))
    return out


def _group_address(pg):
    """The address of the C++ ProcessGroup a Python group object holds, or 0. pybind11 keeps
    it in the word after the object's header (its "simple" layout, that of a class with one
    C++ type); read only, never followed: libetr_torch compares it with the group a
    collective names, so a wrong word matches nothing. (PyTorch 1.13's ProcessGroup has no
    name, and two groups of the same members can be told apart by their address only.)"""
    import ctypes
    t = type(pg)
    if t.__basicsize__ < 24 or not any(b.__name__ == "pybind11_object" for b in t.__mro__):
        return 0
    return ctypes.c_void_p.from_address(id(pg) + 16).value or 0


_declared = {}  # (what this process declared: name -> (ranks, desc, backend); the rank)


def _declare_dist():
    """The run's rank and process groups for the trace's ``## process_group:init ##`` node
    (as PyTorch's observer writes it), from torch.distributed when it is initialized (else
    the launcher's RANK / WORLD_SIZE stay). Only what changed is declared (each declaration
    records the node while a trace is enabled). Never fails the block: what cannot be read
    is left out."""
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            rank = (dist.get_rank(), dist.get_world_size())
            if _declared.get(None) != rank:
                _etr.set_rank(*rank)
                _declared[None] = rank
            me = rank[0]
            for name, ranks, desc, backend, pg in _torch_groups(dist):
                if _declared.get(name) != (ranks, desc, backend):
                    _etr.declare_group(name, ranks, desc=desc, backend=backend)
                    _declared[name] = (ranks, desc, backend)
                if me in ranks:  # (what the collectives on it will name, by its address)
                    try:
                        _torch.name_group(_group_address(pg), name, len(ranks),
                                          ranks.index(me))
                    except Exception:  # (a name etr refused above too)
                        pass
    except Exception:  # (a PyTorch whose bookkeeping differs; a group etr refuses)
        pass


def _record_dist():
    """The process-group node, into the trace just enabled."""
    try:
        _etr.record_groups()
    except _etr.EtrError:
        pass


_watching = [0, None]  # (blocks that watch, the functions replaced)


def _watch_groups(on):
    """While a block records, torch.distributed's init_process_group and new_group declare
    what they make as they return: a group made inside the block (or the world, when the
    block began before init_process_group) is then known to the collectives that use it
    (etr chakra and PARAM look a collective's group up by name, found by its size and this
    rank's place in it: a group not declared could take an older group's name)."""
    try:
        import torch.distributed as dist
        c10d = dist.distributed_c10d
    except Exception:
        return
    _watching[0] += 1 if on else -1
    if on and _watching[0] == 1:
        saved = {}
        for mod in (dist, c10d):
            for fname in ("init_process_group", "new_group"):
                orig = getattr(mod, fname, None)
                if orig is None or getattr(orig, "_etr_watch", False):
                    continue

                def wrapped(*a, _orig=orig, **kw):
                    g = _orig(*a, **kw)
                    _declare_dist()
                    return g
                wrapped._etr_watch = True
                wrapped.__wrapped__ = orig
                wrapped.__name__ = fname
                wrapped.__doc__ = orig.__doc__
                saved[(mod, fname)] = orig
                setattr(mod, fname, wrapped)
        _watching[1] = saved
    elif not on and _watching[0] == 0 and _watching[1]:
        for (mod, fname), orig in _watching[1].items():
            setattr(mod, fname, orig)
        _watching[1] = None


class trace(_etr.trace):
    """etr.trace that also records PyTorch's ops: same arguments (path, timing= (True, False
    or "ns"), schema=, flush_ms=, python_calls=, ...). The trace names the run's rank and process groups (from
    torch.distributed when it is initialized as the block starts, else the launcher's
    RANK / WORLD_SIZE), as PyTorch's observer does."""

    def __enter__(self):
        _declare_dist()
        super().__enter__()
        try:
            _torch.attach()
        except BaseException:
            super().__exit__(None, None, None)  # (the trace is never left open)
            raise
        _record_dist()
        _watch_groups(True)
        return self

    def __exit__(self, *exc):
        _watch_groups(False)
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
        self.stats = None
        # PyTorch 2.7's attributes: the path given to register_callback (kept after
        # unregistering), the path written (the same: etr writes .gz itself), and the
        # directory for extra resources (etr collects none: see set_extra_resource_collection)
        self.output_file_path = ""
        self.output_file_path_observer = ""
        self.extra_resources_collection = False
        self.resources_dir = ""

    @property
    def _registered(self):  # (PyTorch's name)
        return self._t is not None

    @property
    def _execution_trace_running(self):  # (PyTorch's name)
        return self._running

    @staticmethod
    def build_execution_trace_obs_from_env():
        """As PyTorch 2.7's: an observer registered on a new temporary ``.et.json`` file when
        ENABLE_PYTORCH_EXECUTION_TRACE=1 (extra resources with
        ENABLE_PYTORCH_EXECUTION_TRACE_EXTRAS=1), else None."""
        if _os.environ.get("ENABLE_PYTORCH_EXECUTION_TRACE", "0") != "1":
            return None
        import tempfile
        fd, path = tempfile.mkstemp(suffix=".et.json")
        _os.close(fd)
        et = ExecutionTraceObserver().register_callback(path)
        et.set_extra_resource_collection(
            _os.environ.get("ENABLE_PYTORCH_EXECUTION_TRACE_EXTRAS", "0") == "1")
        return et

    def set_extra_resource_collection(self, val):
        """PyTorch 2.7 then copies the kernels its compiler generated into the resources
        directory; etr makes the directory (as PyTorch does) but collects nothing into it."""
        self.extra_resources_collection = bool(val)
        if self.extra_resources_collection:
            self.get_resources_dir(can_create=True)

    def get_resources_dir(self, can_create=False):
        """The trace's resources directory (see set_extra_resource_collection), or None."""
        if not self.extra_resources_collection:
            return None
        if not self.resources_dir:
            self.resources_dir = ExecutionTraceObserver.get_resources_dir_for_et_path(
                self.output_file_path, create_dir=can_create) or ""
        return self.resources_dir or None

    @staticmethod
    def get_resources_dir_for_et_path(trace_path, create_dir=False):
        """``<trace's directory>/<trace's name without its last extension>_resources`` when it
        exists (or, with create_dir, could be made), else None."""
        folder, name = _os.path.split(trace_path)
        where = _os.path.join(folder, _os.path.splitext(name)[0] + "_resources")
        if _os.path.isdir(where):
            return where
        if not create_dir:
            return None
        try:
            _os.mkdir(where)
        except OSError:
            return None
        return where

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
            self._t, self._pid = t, _os.getpid()
            _etr._opened(t)  # (os._exit finalizes it)
            self.output_file_path = self.output_file_path_observer = output_file_path
            self.resources_dir = ""
        return self

    def unregister_callback(self):
        """Stop, detach from PyTorch and finalize the file (in a process forked meanwhile:
        let go of the parent's trace, writing nothing)."""
        if self._t is not None:
            t, self._t = self._t, None
            _etr._closed(t)
            _torch.detach()
            if self._running:
                _watch_groups(False)
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
            _declare_dist()
            self._t.enable()
            self._running = True
            _record_dist()
            _watch_groups(True)

    def stop(self):
        """Pause recording; an op running now is written whole."""
        if self._running:
            self._running = False
            _watch_groups(False)
            if _os.getpid() == self._pid:  # (a forked child's copy records nothing anyway)
                self._t.disable()

    def cleanup(self):
        self.unregister_callback()

    def get_output_file_path(self):
        """The path given to register_callback (also once unregistered), None before: as
        PyTorch 2.7's (2.4-2.6 raised RuntimeError when not registered)."""
        return self.output_file_path or None


ExecutionGraphObserver = ExecutionTraceObserver  # (PyTorch 1.13's name)


# Under ETR_TRACE the library attached as it loaded (no block, no observer): the groups are
# declared here and as init_process_group / new_group make them, for the rest of the run,
# as a block does while it records; else a sub-group's collectives name no group.
if _torch.attached():
    _declare_dist()
    _watch_groups(True)
