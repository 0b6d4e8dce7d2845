"""python3 -m etr [-o TRACE] [--torch] [--python-calls] [--signals]
               [--no-timing | --ns-timing] script.py [args...]
python3 -m etr [options] -m module [args...]

Runs the script (or ``-m module``) as __main__ under an etr trace and writes TRACE
(default: etr-trace.json; ``%p`` in it becomes the process id, ``%r`` the rank). Under a
launcher of several ranks (WORLD_SIZE > 1) a name without %p or %r gets the rank before its
ending (t.json: t.3.json), and a file another process is writing is left to it (this one
writes t.<pid>.json): each is said on stderr. Ops are what the script records
(etr.record_function, @etr.annotate), with --torch every op PyTorch runs (aten ops,
autograd's backward functions, record_function scopes; on every thread, as etr.torch.trace
records them), and with --python-calls every Python function call of the main thread.
With --signals the trace is finalized when SIGTERM, SIGINT or a crash ends the script. The
ETR_TRACE_* variables (ETR_TRACE_TIMING, ...) set the ETR_TRACE trace only, not this one.
Everything after the script or the module's name goes to it unchanged, as with python3;
``--`` ends etr's options. The exit status is the script's, and an exception it leaves
shows the script's frames only, as with python3; the trace is closed once the script's
threads that are not daemons have ended and its atexit functions have run, as python3 does
both before it finalizes; a trace that could not be written whole is
said on stderr, and a script that ended well then exits 1.
"""

import argparse
import atexit
import builtins
import errno
import io
import os
import pkgutil
import runpy
import sys
import threading  # (imported now: the trace, with --python-calls, records the script's calls)
import traceback
import types

import etr

_FLAGS = ("--torch", "--python-calls", "--signals", "--no-timing", "--ns-timing", "-h",
          "--help")


def _parser():
    p = argparse.ArgumentParser(prog="python3 -m etr", usage=__doc__.split("\n\n")[0],
                                description=__doc__.split("\n\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--output", default="etr-trace.json", metavar="TRACE",
                   help="trace file (.gz: gzip; .etr: the binary event log, made JSON by "
                        "etr convert; %%p: the process id; %%r: the rank); default "
                        "etr-trace.json")
    p.add_argument("--torch", action="store_true",
                   help="record PyTorch's ops too (etr.torch; needs etr built with libtorch)")
    p.add_argument("--python-calls", action="store_true",
                   help="record every Python function call of the main thread as an op")
    p.add_argument("--signals", action="store_true",
                   help="finalize the trace when SIGTERM, SIGINT or a crash ends the "
                        "script (as etr.trace(signals=True))")
    timing = p.add_mutually_exclusive_group()
    timing.add_argument("--no-timing", action="store_true", help="leave out ts and durations")
    timing.add_argument("--ns-timing", action="store_true",
                        help="also each op's start and duration in ns (attrs ts_ns, dur_ns), "
                             "as ETR_TRACE_TIMING=ns gives the ETR_TRACE trace")
    p.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as python3 -m")
    return p


def split_argv(argv):
    """(etr's options, the target: ("script", path) / ("module", name) / None, its args):
    etr's options end at the first argument that is not one of them (the script), after
    ``-m MODULE``, or at ``--``; the rest is the target's, unchanged."""
    own, i = [], 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            i += 1
            break
        if a in ("-o", "--output", "-m"):
            if i + 1 >= len(argv):
                own.append(a)  # (argparse says what is missing)
                return own, None, []
            if a == "-m":
                return own, ("module", argv[i + 1]), argv[i + 2:]
            own += [a, argv[i + 1]]
            i += 2
            continue
        if a.startswith("--output=") or (a.startswith("-o") and len(a) > 2):
            own.append(a)
        elif a.startswith("-m") and len(a) > 2:  # -mMODULE
            return own, ("module", a[2:]), argv[i + 1:]
        elif a in _FLAGS or (a.startswith("-") and a != "-"):
            own.append(a)  # (an unknown option: argparse rejects it)
        else:
            break
        i += 1
    if i < len(argv):
        return own, ("script", argv[i]), argv[i + 1:]
    return own, None, []


def _as_main(code, **names):
    """A function that runs code as the module __main__ holding names (and the builtins),
    then puts the launcher's __main__ back."""
    mod = types.ModuleType("__main__")
    mod.__dict__.update(names, __builtins__=builtins)

    def run():
        saved = sys.modules.get("__main__")
        sys.modules["__main__"] = mod
        try:
            exec(code, mod.__dict__)
        finally:
            sys.modules["__main__"] = saved

    return run


def _script_runner(path):
    """A function that runs the script file path as __main__, as runpy.run_path does, with
    the file read and compiled beforehand, so that --python-calls records the script's calls
    and not the launcher's. A directory or zip file goes through runpy."""
    if path == "-":  # (the script on standard input, as python3 - reads it)
        code = compile(sys.stdin.read(), "<stdin>", "exec")
        return _as_main(code, __file__="<stdin>", __cached__=None, __loader__=None,
                        __package__=None, __spec__=None)
    if not os.path.exists(path):  # (found now, before the trace's file is made)
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
    if not os.path.isfile(path) or path.endswith((".zip", ".pyz")):
        # (a directory or zip runs its __main__: found now too, as python3 would refuse it)
        importer = pkgutil.get_importer(path)
        finder = getattr(importer, "find_spec", None)
        if finder is None or finder("__main__") is None:
            raise FileNotFoundError(errno.ENOENT, "can't find '__main__' module", path)
        return lambda: runpy.run_path(path, run_name="__main__")
    with io.open_code(path) as f:
        code = compile(f.read(), path, "exec")
    return _as_main(code, __file__=path, __cached__=None, __loader__=None, __package__=None,
                    __spec__=None)


def _module_runner(name):
    """(a function that runs module name as __main__, as runpy.run_module does, its argv[0]):
    the module found and compiled beforehand, for the same reason as a script. Through
    runpy itself where its finder (a private helper) is missing."""
    find = getattr(runpy, "_get_module_details", None)
    if find is None:
        return (lambda: runpy.run_module(name, run_name="__main__", alter_sys=True)), name
    mod_name, spec, code = find(name)
    run = _as_main(code, __file__=spec.origin, __cached__=spec.cached, __loader__=spec.loader,
                   __package__=spec.parent, __spec__=spec)
    return run, spec.origin or name


_ENDINGS = (".json.gz", ".json", ".etr")


def _insert(path, what):
    """path with ".what" before its ending (.json.gz, .json, .etr; else at its end): the
    ending chooses the format, so it stays last (as ETR_TRACE names a process's own file)."""
    for end in _ENDINGS:
        if path.endswith(end) and len(path) > len(end):
            return "%s.%s%s" % (path[:-len(end)], what, end)
    return "%s.%s" % (path, what)


def _output_path(spec):
    """The trace's path: %p the process id, %r the rank (the launcher's, etr.rank()), %% a
    %; under a launcher of several ranks, a name without %p or %r gets the rank (said)."""
    out, i, per_process = [], 0, False
    while i < len(spec):
        c = spec[i:i + 2]
        if c in ("%p", "%r", "%%"):
            out.append(str(os.getpid()) if c == "%p" else str(etr.rank()) if c == "%r" else "%")
            per_process = per_process or c != "%%"
            i += 2
        else:
            out.append(spec[i])
            i += 1
    path = "".join(out)
    if etr.world_size() > 1 and not per_process:  # (%%p is a "%p" in the name, no pid)
        path = _insert(path, str(etr.rank()))
        _say("etr: rank %d of %d: writing %s" % (etr.rank(), etr.world_size(), path))
    return path


# Where the launcher's own frames come from: this file and runpy (frozen in 3.11).
_LAUNCHER_FILES = {os.path.abspath(__file__), os.path.abspath(runpy.__file__), "<frozen runpy>"}


def _script_traceback(tb):
    """tb from the script's first frame on: python3 script.py shows none of the launcher's,
    and a traceback that begins in runpy and etr/__main__.py sends a reader to look for the
    fault there."""
    while tb is not None and (tb.tb_frame.f_code.co_filename in _LAUNCHER_FILES or
                              os.path.abspath(tb.tb_frame.f_code.co_filename) in
                              _LAUNCHER_FILES):
        tb = tb.tb_next
    return tb


def _report(e):
    """Say exception e as python3 says one the script left: through sys.excepthook (the
    script may have set its own), with the script's frames only."""
    tb = _script_traceback(e.__traceback__)
    e.__traceback__ = tb  # (what the default hook prints, whatever tb it is given)
    sys.last_type, sys.last_value, sys.last_traceback = type(e), e, tb
    try:
        sys.excepthook(type(e), e, tb)
    except BaseException as h:  # (python3's own words for a hook that fails)
        print("Error in sys.excepthook:", file=sys.stderr)
        traceback.print_exception(type(h), h, h.__traceback__)
        print("\nOriginal exception was:", file=sys.stderr)
        traceback.print_exception(type(e), e, tb)


def _end_interrupted(e):
    """Leave as python3 does after a KeyboardInterrupt the script left (said already): the
    interrupt goes on up, so that the interpreter finalizes (atexit) and then ends the
    process by SIGINT, as a shell expects of an interrupted program; the hook stays quiet
    for it."""
    hook = sys.excepthook

    def quiet(t, v, tb):
        if v is not e:
            hook(t, v, tb)
    sys.excepthook = quiet
    raise e.with_traceback(None)


def _say(line):
    """One line of the launcher's own on standard error (descriptor 2), whatever the script
    did to sys.stderr (closed it, set it to None, which print takes as stdout), and never an
    error of its own (a full disk, a closed pipe): the script's status stays its own."""
    try:
        if sys.stderr is not None:
            sys.stderr.flush()  # (what the script wrote comes first)
    except (OSError, ValueError, AttributeError):
        pass
    try:
        os.write(2, (line + "\n").encode(errors="backslashreplace"))
    except OSError:
        pass


def _wait_for_threads():
    """What python3 does first as it finalizes, so that the trace, closed after, holds what
    the script's threads record: threading's own exit hooks run (they tell a
    ThreadPoolExecutor's idle workers to stop), then the threads that are not daemons are
    waited for. Done once: the interpreter's own call then returns at once."""
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
        return
    me = threading.current_thread()  # (a Python without it: the waiting part only)
    while True:
        left = [th for th in threading.enumerate()
                if th is not me and not th.daemon and th.is_alive()]
        if not left:
            return
        for th in left:
            th.join()


class _Entered:
    """A block around a trace entered already: leaving it leaves the trace."""

    def __init__(self, t):
        self.t = t

    def __enter__(self):
        return self.t

    def __exit__(self, *exc):
        return self.t.__exit__(*exc)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    own, target, args = split_argv(argv)
    p = _parser()
    a = p.parse_args(own)
    if target is None:
        p.error("no script or -m MODULE given")
    kind, name = target
    if a.torch:
        try:
            import etr.torch as etr_torch
        except ImportError as e:
            p.error("--torch: %s" % e)
    path = _output_path(a.output)
    argv0 = name
    if kind == "script":
        try:
            run = _script_runner(name)
        except OSError as e:
            p.error("cannot read %s: %s" % (name, e.strerror or e))
        except SyntaxError as e:  # (as python3 says it: no launcher frames, exit 1)
            _report(e)
            return 1
        sys.path.insert(0, "" if name == "-" else os.path.dirname(os.path.abspath(name)))
    else:
        try:
            run, argv0 = _module_runner(name)
        except ImportError as e:  # (runpy's "No module named ...")
            p.error("-m %s: %s" % (name, e))
        except SyntaxError as e:
            _report(e)
            return 1
    sys.argv = [argv0] + args
    code, interrupted = 0, None
    tracer = etr_torch.trace if a.torch else etr.trace
    timing = False if a.no_timing else "ns" if a.ns_timing else True
    t = tracer(path, timing=timing, python_calls=a.python_calls, signals=a.signals)
    try:
        t.__enter__()
    except etr.EtrError as e:
        if getattr(e, "errno", None) != errno.EBUSY:
            p.error("cannot write the trace: %s" % e)  # (the script has not run)
        # Another process writes that file (two ranks, one name): ours goes beside it, as
        # ETR_TRACE does, and the script runs all the same.
        path = _insert(path, str(os.getpid()))
        _say("etr: %s is written by another process; this one writes %s" % (a.output, path))
        t = tracer(path, timing=timing, python_calls=a.python_calls, signals=a.signals)
        try:
            t.__enter__()
        except etr.EtrError as e:
            p.error("cannot write the trace: %s" % e)
    try:
        with _Entered(t):
            try:
                run()
            except SystemExit as e:
                code = e.code
            except BaseException as e:  # (said now, as python3 would; the trace closed after)
                _report(e)
                code = 1
                if isinstance(e, KeyboardInterrupt):
                    interrupted = e
            if interrupted is None:
                if a.python_calls:  # (the script's main thread is done: the wait is not its)
                    etr._etr.profile(False)
                try:
                    _wait_for_threads()
                except KeyboardInterrupt as e:  # (Ctrl-C while waiting: as python3 says it)
                    print("Exception ignored in: %r" % threading, file=sys.stderr)
                    traceback.print_exception(type(e), e, e.__traceback__)
                # The script's atexit functions, which python3 runs next, while the trace
                # still records what they do (they are run once: the list is emptied).
                run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
                if run_exitfuncs is not None:
                    run_exitfuncs()
    except etr.EtrError as e:  # (the script ended; its trace could not be written whole)
        _say("etr: %s: %s" % (path, e))
        code = code if code not in (0, None) else 1
    else:
        st = t.stats
        if st is not None:  # (else a process forked in the script: the trace is its parent's)
            _say("etr: %s: %d nodes, %d bytes" % (path, st["nodes_written"],
                                                 st["bytes_written"]))
    if interrupted is not None:
        _end_interrupted(interrupted)
    return code


if __name__ == "__main__":
    sys.exit(main())
