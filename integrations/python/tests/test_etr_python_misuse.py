"""The etr Python package used the way a careless or hostile program uses it (ctest
python.misuse): each case was a defect found by trying exactly that, and fails without its
fix. Every trace written is checked with `etr validate`. (Ranks and process groups:
test_etr_python_ranks.py.)

usage: test_etr_python_misuse.py ETR_TOOL   (PYTHONPATH holds <build>/python)
"""
import asyncio
import json
import os
import subprocess
import sys
import threading
import time

import etr
from etr import _etr

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "tests", "pylib"))
from etr_checks import check, run_cases, validate  # noqa: E402
from pyrun import ENV, attr, load, ops, run_py, setup  # noqa: E402

TOOL = sys.argv[1]
TMP = setup("etr-pymisuse-")


def fork_child_leaves_block():
    """A process forked inside a traced block leaves it with its own exit status (before:
    EtrError ETR_EFORKED from __exit__, exit status 1); the parent's file is whole."""
    path = os.path.join(TMP, "fork.json")
    rc, err = run_py("""
        import os, sys, etr
        with etr.trace(%r):
            with etr.record_function("before_fork"):
                pass
            pid = os.fork()
            if pid == 0:
                with etr.record_function("in_child"):
                    pass
                sys.exit(5)
            st = os.waitpid(pid, 0)[1]
        sys.exit(0 if os.waitstatus_to_exitcode(st) == 5 else 9)
    """ % path)
    check(rc == 0, "a forked child leaves etr.trace's block with its own status: %d %s"
          % (rc, err[-400:]))
    check("EtrError" not in err, "no EtrError in the child: %s" % err[-400:])
    if validate(TOOL, path):
        check(len(ops(path, "before_fork")) == 1 and not ops(path, "in_child"),
              "the parent's file holds the parent's op only")


def dash_m_arguments():
    """python3 -m etr passes everything after the script or -m MODULE to it unchanged
    (before, etr took -o, --help and unknown options from the module's arguments, and
    dropped a `--` after the script)."""
    pkg = os.path.join(TMP, "argmod.py")
    with open(pkg, "w") as f:
        f.write("import sys, json\nprint(json.dumps(sys.argv[1:]))\n")
    out = os.path.join(TMP, "dashm.json")
    cases = [
        (["-o", out, "-m", "argmod", "--flag", "x", "-o", "y"], ["--flag", "x", "-o", "y"]),
        (["-o", out, "-m", "argmod", "--help"], ["--help"]),
        (["-o", out, pkg, "--", "x"], ["--", "x"]),
        (["-o", out, "--", pkg, "-o", "z"], ["-o", "z"]),
    ]
    for argv, want in cases:
        r = subprocess.run([sys.executable, "-m", "etr", *argv], capture_output=True, text=True,
                           env=ENV, cwd=TMP, timeout=120)
        got = None
        try:
            got = json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            pass
        check(r.returncode == 0 and got == want,
              "python3 -m etr %s: the target's argv %r, want %r (rc %d: %s)"
              % (" ".join(argv), got, want, r.returncode, r.stderr[-300:]))
        check(not os.path.exists(os.path.join(TMP, "y")) and not os.path.exists(
            os.path.join(TMP, "z")), "the target's -o is not etr's")
        validate(TOOL, out)


def python_calls_launcher_quiet():
    """python3 -m etr --python-calls records the script's calls, not the launcher's (before:
    about 2 080 of 2 085 ops were runpy's and importlib's)."""
    out = os.path.join(TMP, "pc_main.json")
    script = os.path.join(TMP, "pc_script.py")
    with open(script, "w") as f:
        f.write("def f():\n    return 1\n\nfor _ in range(3):\n    f()\n")
    calls_recorded(["--python-calls", "-o", out, script], out, "f", 3)


def calls_recorded(args, out, fn, times, cwd=None):
    """python3 -m etr ARGS: the trace out holds fn's `times` calls and few other ops (the
    launcher's are not recorded); the completed process."""
    r = subprocess.run([sys.executable, "-m", "etr", *args], capture_output=True, text=True,
                       env=ENV, cwd=cwd, timeout=120)
    if check(r.returncode == 0, "python3 -m etr %s: %s" % (" ".join(args), r.stderr[-300:])) and \
            validate(TOOL, out):
        names = [n["name"] for n in load(out)["nodes"] if not n["name"].startswith("[")
                 and not n["name"].startswith("##")]
        check(names.count(fn) == times, "%d calls of %s: %r" % (times, fn, names[:20]))
        check(len(names) <= 10, "few ops beside the target's: %d (%r)" % (len(names), names[:20]))
    return r


def python_calls_module_quiet():
    """The same for python3 -m etr --python-calls -m MODULE (before: runpy's and importlib's
    calls to find the module were recorded too); its argv[0] is the module's file, as with
    python3 -m."""
    out = os.path.join(TMP, "pc_mod.json")
    with open(os.path.join(TMP, "pcmod.py"), "w") as f:
        f.write("import sys\ndef g():\n    return 2\n\nfor _ in range(4):\n    g()\n"
                "print(sys.argv[0])\n")
    r = calls_recorded(["--python-calls", "-o", out, "-m", "pcmod"], out, "g", 4, cwd=TMP)
    check(r.stdout.strip().endswith("pcmod.py"), "argv[0] is the module's file: %r" %
          r.stdout.strip())
    r = subprocess.run([sys.executable, "-m", "etr", "-o", out, "-m", "no_such_module_x"],
                       capture_output=True, text=True, env=ENV, cwd=TMP, timeout=120)
    check(r.returncode == 2 and "no_such_module_x" in r.stderr,
          "-m a module that does not exist: a usage error naming it (%d %r)" %
          (r.returncode, r.stderr[-200:]))


def dash_m_failures():
    """python3 -m etr's own failures are usage errors that touch nothing: a script that does
    not exist leaves an existing -o file as it was (before: replaced by an empty trace, then
    a FileNotFoundError traceback, exit 1), an output that cannot be written says so in one
    line without running the script (before: a traceback), a forked child that ends well
    exits 0 (before: a TypeError in the child, exit 1), and "-" reads the script from
    standard input, as python3 - does (before: a file named "-")."""
    def launch(args, stdin=None):
        return subprocess.run([sys.executable, "-m", "etr", *args], capture_output=True,
                              text=True, env=ENV, cwd=TMP, timeout=120, input=stdin)
    keep = os.path.join(TMP, "keep.json")
    with open(keep, "w") as f:
        f.write("precious\n")
    r = launch(["-o", keep, os.path.join(TMP, "no_such_script_x.py")])
    with open(keep) as f:
        kept = f.read()
    check(r.returncode == 2 and "no_such_script_x.py" in r.stderr and "Traceback" not in
          r.stderr and kept == "precious\n",
          "a missing script: usage error, -o untouched (%d %r %r)" % (r.returncode, kept,
                                                                      r.stderr[-300:]))
    empty = os.path.join(TMP, "no_main_dir")
    os.makedirs(empty, exist_ok=True)
    r = launch(["-o", keep, empty])
    with open(keep) as f:
        kept = f.read()
    check(r.returncode == 2 and "__main__" in r.stderr and "Traceback" not in r.stderr and
          kept == "precious\n",
          "a directory without __main__: usage error, -o untouched (%d %r %r)" %
          (r.returncode, kept, r.stderr[-300:]))
    ok = os.path.join(TMP, "ok_script.py")
    with open(ok, "w") as f:
        f.write("print('script ran')\n")
    for out in ("/nonexistent_dir_x/x.json", "/dev/full"):
        r = launch(["-o", out, ok])
        check(r.returncode == 2 and "cannot write the trace" in r.stderr and "Traceback" not in
              r.stderr and "script ran" not in r.stdout,
              "-o %s: a usage error, the script not run (%d %r)" % (out, r.returncode,
                                                                  r.stderr[-300:]))
    forks = os.path.join(TMP, "fork_ends.py")
    with open(forks, "w") as f:
        f.write("import os, sys\npid = os.fork()\nif pid == 0:\n    sys.exit(0)\n"
                "_, st = os.waitpid(pid, 0)\nsys.exit(os.waitstatus_to_exitcode(st) + 40)\n")
    out = os.path.join(TMP, "fork_ends.json")
    r = launch(["-o", out, forks])
    check(r.returncode == 40 and "Traceback" not in r.stderr,
          "a forked child that ends well exits 0 (parent's status %d: %r)" % (r.returncode,
                                                                            r.stderr[-300:]))
    validate(TOOL, out)
    out = os.path.join(TMP, "stdin_script.json")
    r = launch(["-o", out, "-", "a1"], stdin="import sys\nprint(sys.argv)\nsys.exit(3)\n")
    check(r.returncode == 3 and "'a1'" in r.stdout, "the script from standard input ran "
          "with its arguments (%d %r %r)" % (r.returncode, r.stdout, r.stderr[-300:]))
    validate(TOOL, out)


def enter_failure_releases_trace():
    """A block whose enable fails (the header cannot be written to /dev/full) leaves no open
    trace behind (before: every later etr.trace failed with ETR_EBUSY)."""
    raised = False
    try:
        with etr.trace("/dev/full"):
            pass
    except etr.EtrError:
        raised = True
    check(raised, "etr.trace('/dev/full') raises EtrError")
    path = os.path.join(TMP, "after_full.json")
    try:
        with etr.trace(path):
            pass
        validate(TOOL, path)
    except etr.EtrError as e:
        check(False, "a trace opens after the failed one: %s" % e)


def self_referencing_list():
    """A list that holds itself, or the same list at every level, is cut (before: 2^34
    values converted, hanging or exhausting memory)."""
    path = os.path.join(TMP, "cycle.json")
    loop = [None, None]
    loop[0] = loop
    loop[1] = loop
    shared = [1, 2, 3]
    for _ in range(30):
        shared = [shared, shared, shared]
    t0 = time.monotonic()
    with etr.trace(path) as t:
        with etr.record_function("cyclic", inputs=[loop, shared]):
            pass
    took = time.monotonic() - t0
    check(took < 30, "a self-referencing list takes %.1f s" % took)
    if validate(TOOL, path):
        check(len(ops(path, "cyclic")) == 1, "the op is written")
        check(t.stats["lists_cut"] + t.stats["nesting_cut"] > 0, "the cut is counted: %r"
              % {k: t.stats[k] for k in ("lists_cut", "nesting_cut")})


def gen():
    for i in range(3):
        with etr.record_function("g", inputs=[i]):
            yield i


def python_calls_generators_and_profiler():
    """python_calls: an op that spans a yield inside a generator stays whole (before: each
    was abandoned at the yield); no stray incomplete trace.__exit__ op (before: one in
    every such trace); the thread's own profile function is back after the block (before:
    sys.getprofile() was None)."""
    path = os.path.join(TMP, "pc_gen.json")
    seen = []

    def myprof(frame, event, arg):
        seen.append(event)

    sys.setprofile(myprof)
    try:
        with etr.trace(path, python_calls=True) as t:
            for _ in gen():
                pass
        check(sys.getprofile() is myprof, "the previous profile function is back: %r"
              % (sys.getprofile(),))
    finally:
        sys.setprofile(None)
    if validate(TOOL, path):
        g = ops(path, "g")
        check(len(g) == 3, "3 ops g: %d" % len(g))
        check(not any(attr(n, "etr_incomplete") for n in g), "no g is incomplete")
        check(not ops(path, "trace.__exit__") and not ops(path, "trace.__enter__"),
              "no op of etr's own frames")
        st = t.stats
        check(st["ops_abandoned"] == 0 and st["ends_out_of_order"] == 0 and
              st["ops_open_at_close"] == 0,
              "no op abandoned or open: %r" % {k: st[k] for k in (
                  "ops_abandoned", "ends_out_of_order", "ops_open_at_close")})
    # A plain trace after it records no Python calls (the profile is gone).
    path2 = os.path.join(TMP, "plain_after.json")
    with etr.trace(path2):
        (lambda: None)()
    if validate(TOOL, path2):
        names = [n["name"] for n in load(path2)["nodes"] if n["name"] == "<lambda>"]
        check(not names, "no Python calls recorded by a plain trace after python_calls")


def concurrent_close():
    """close() from three threads at once: each gets the final counters (before: one raised
    ETR_ESTATE and stats() could say 0 nodes)."""
    path = os.path.join(TMP, "cclose.json")
    t = _etr.Trace(path)
    t.enable()
    for i in range(2000):
        etr.Op("x", [i]).begin().end()
    results, errors = [], []

    def closer():
        try:
            results.append(t.close()["nodes_written"])
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=closer) for _ in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    check(not errors, "no close raises: %r" % errors)
    check(len(results) == 3 and len(set(results)) == 1 and results[0] >= 2000,
          "every close returns the same counters: %r" % results)
    check(t.stats()["nodes_written"] == results[0] if results else False,
          "stats() after: the final counters")
    validate(TOOL, path)


def bad_arguments():
    """Mistakes get a clear error of the right kind (before: silent, wrapped around, or an
    AttributeError)."""
    path = os.path.join(TMP, "bad.json")
    with etr.trace(path):
        op = etr.Op("bad_outputs").begin()
        try:
            op.end(outputs={1: 2})
            check(False, "Op.end(outputs=dict) raises")
        except TypeError:
            pass
        try:
            etr.Op("a\0b")
            check(False, "a NUL in an op name raises")
        except ValueError:
            pass
        try:
            etr.thread_set_name(None)
            check(False, "thread_set_name(None) raises")
        except TypeError as e:
            check("str" in str(e), "thread_set_name(None): %s" % e)
    if validate(TOOL, path):
        n = ops(path, "bad_outputs")
        check(len(n) == 1 and attr(n[0], "etr_failed"), "the op is ended, marked failed")
    for opt in ("flush_ms", "ring_mb", "traceback_every", "traceback_depth"):
        try:
            etr.trace(os.path.join(TMP, "neg.json"), **{opt: -1}).__enter__()
            check(False, "%s=-1 raises" % opt)
        except ValueError as e:
            check(opt in str(e), "the error names %s: %s" % (opt, e))
    try:
        etr.trace(path, ring_mb=2**32 + 1).__enter__()
        check(False, "ring_mb=2**32+1 raises")
    except (ValueError, OverflowError):
        pass
    try:
        etr.trace(os.path.join(TMP, "no", "such", "dir", "t.json")).__enter__()
        check(False, "a missing directory raises")
    except etr.EtrError as e:
        check("No such file or directory" in str(e), "the system's reason is said: %s" % e)
    try:
        etr.trace(path).flush()
        check(False, "flush before the block raises")
    except etr.EtrError:
        pass


def async_annotate():
    """@etr.annotate on an async function times the awaited call (before: only making the
    coroutine, about 2 µs for 50 ms of work)."""
    path = os.path.join(TMP, "async.json")

    @etr.annotate("slow_coro")
    async def slow():
        await asyncio.sleep(0.05)
        return 7

    with etr.trace(path):
        check(asyncio.run(slow()) == 7, "the coroutine's value")
    if validate(TOOL, path):
        n = ops(path, "slow_coro")
        check(len(n) == 1 and n[0]["inclusive_dur"] >= 40000,
              "the op spans the await: %r" % [x.get("inclusive_dur") for x in n])


def write_error_in_block_with_exception():
    """The file cannot take the trace (RLIMIT_FSIZE, as a full disk) and the block raised:
    the block's exception goes on, with a warning, and stats is set (before: the EtrError of
    close replaced it). Under python3 -m etr: a clear line, exit status 1, no traceback
    (before: a traceback, and the script's status lost)."""
    path = os.path.join(TMP, "fsize.json")
    rc, err = run_py("""
        import resource, signal, sys, warnings, etr
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
        t = etr.trace(%r)
        mine = False
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            try:
                with t:
                    for i in range(20000):
                        with etr.record_function("x", inputs=[i, "y" * 50]):
                            pass
                    raise ValueError("mine")
            except ValueError:
                mine = True
        warned = any("etr" in str(x.message) for x in w)
        ok = mine and t.stats is not None and t.stats["write_error"] != 0 and warned
        sys.exit(0 if ok else 3)
    """ % path)
    check(rc == 0, "a failed close after the block raised: the block's exception, a warning "
          "and stats (rc %d: %s)" % (rc, err[-400:]))

    script = os.path.join(TMP, "many.py")
    with open(script, "w") as f:
        f.write("import etr\nfor i in range(20000):\n"
                "    with etr.record_function('x', inputs=[i, 'y' * 50]):\n        pass\n")

    def small_files():
        import resource
        import signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))

    r = subprocess.run([sys.executable, "-m", "etr", "-o", os.path.join(TMP, "fsize2.json"),
                        script], capture_output=True, text=True, env=ENV, timeout=120,
                       preexec_fn=small_files)
    check(r.returncode == 1 and "Traceback" not in r.stderr and "etr:" in r.stderr,
          "python3 -m etr on a file that cannot take the trace: status 1, a clear line "
          "(rc %d: %s)" % (r.returncode, r.stderr[-400:]))


def signals_option():
    """etr.trace(signals=True): SIGTERM finalizes the file before the process ends."""
    path = os.path.join(TMP, "sig.json")
    rc, err = run_py("""
        import os, signal, etr
        with etr.trace(%r, signals=True, flush_ms=100000):
            for i in range(50):
                with etr.record_function("before_term"):
                    pass
            os.kill(os.getpid(), signal.SIGTERM)
    """ % path)
    check(rc == -15, "the process ends by SIGTERM: %d %s" % (rc, err[-300:]))
    if validate(TOOL, path):
        check(len(ops(path, "before_term")) == 50, "the 50 ops are in the finalized file")


def torch_observer_in_forked_child():
    """The drop-in ExecutionTraceObserver dropped in a forked child lets go of the parent's
    trace quietly (before: "Exception ignored in __del__ ... ETR_EFORKED"); skipped without
    etr.torch."""
    try:
        import etr.torch  # noqa: F401
    except ImportError:
        print("python.misuse: etr.torch not built, its case skipped")
        return
    path = os.path.join(TMP, "obs_fork.json")
    rc, err = run_py("""
        import os, sys, torch
        from etr.torch import ExecutionTraceObserver
        et = ExecutionTraceObserver().register_callback(%r)
        et.start()
        torch.ones(2) + 1
        pid = os.fork()
        if pid == 0:
            torch.ones(3) * 2
            et.stop()
            del et
            os._exit(0 if True else 1)
        st = os.waitpid(pid, 0)[1]
        et.stop()
        et.unregister_callback()
        sys.exit(os.waitstatus_to_exitcode(st))
    """ % path)
    check(rc == 0 and "Exception ignored" not in err and "EtrError" not in err,
          "the observer in a forked child: %d %s" % (rc, err[-400:]))
    if validate(TOOL, path):
        check(len(ops(path, "aten::add")) == 1 and not ops(path, "aten::mul"),
              "the parent's file holds the parent's ops only")


def forked_children_finish_trace():
    """Under ETR_TRACE with ETR_TRACE_FORKS=1, a forked child that ends with os._exit (every
    multiprocessing fork worker, and a plain os.fork child) finalizes its own file (before:
    the file held what the writer had flushed, only its header for a short worker: every op
    lost). The timed flush is put off for the whole run, so that no op reaches a file but
    through the fix, however slow the machine."""
    d = os.path.join(TMP, "forks")
    os.makedirs(d)
    env = {"ETR_TRACE": os.path.join(d, "pool.json"), "ETR_TRACE_FORKS": "1",
           "ETR_TRACE_FLUSH_MS": "86400000"}
    rc, err = run_py("""
        import multiprocessing as mp, etr

        def work(i):
            with etr.record_function("child_op_%d" % i):
                return i * i

        if __name__ == "__main__":
            with etr.record_function("parent_op"):
                pool = mp.get_context("fork").Pool(2)
                assert pool.map(work, range(8), chunksize=1) == [i * i for i in range(8)]
                pool.close()
                pool.join()
    """, env=env, cwd=d)
    check(rc == 0, "the Pool script ran: %d %s" % (rc, err[-400:]))
    kids = sorted(f for f in os.listdir(d) if f.startswith("pool.") and f != "pool.json")
    check(1 <= len(kids) <= 2, "one file per worker that recorded: %r" % kids)
    seen = []
    for f in kids:
        if validate(TOOL, os.path.join(d, f)):
            mine = [n["name"] for n in load(os.path.join(d, f))["nodes"]
                    if n["name"].startswith("child_op_")]
            check(mine, "%s holds its worker's ops" % f)
            seen += mine
    check(sorted(seen) == sorted("child_op_%d" % i for i in range(8)),
          "every task's op is in a worker's file: %r" % sorted(seen))
    if validate(TOOL, os.path.join(d, "pool.json")):
        check(len(ops(os.path.join(d, "pool.json"), "parent_op")) == 1 and
              not any(n["name"].startswith("child_op_")
                      for n in load(os.path.join(d, "pool.json"))["nodes"]),
              "the parent's file holds the parent's op only")

    # A plain os.fork child that records, then ends with os._exit; one that records
    # nothing leaves no file; the parent's file is untouched by either.
    for forks in ("1", "0"):
        d = os.path.join(TMP, "forks" + forks)
        os.makedirs(d)
        env = dict(env, ETR_TRACE=os.path.join(d, "f.json"), ETR_TRACE_FORKS=forks)
        rc, err = run_py("""
            import os, sys, etr
            with etr.record_function("parent_op"):
                pass
            recorder = os.fork()
            if recorder == 0:
                with etr.record_function("child_op"):
                    pass
                os._exit(3)
            idle = os.fork()
            if idle == 0:
                os._exit(4)
            codes = [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in (recorder, idle)]
            sys.exit(0 if codes == [3, 4] else 9)
        """, env=env, cwd=d)
        check(rc == 0, "os._exit keeps the children's status (FORKS=%s): %d %s" %
              (forks, rc, err[-400:]))
        kids = sorted(f for f in os.listdir(d) if f != "f.json")
        if forks == "1":
            check(len(kids) == 1, "one file, the recording child's: %r" % kids)
            if kids and validate(TOOL, os.path.join(d, kids[0])):
                check(len(ops(os.path.join(d, kids[0]), "child_op")) == 1,
                      "the child's op is in its file")
        else:
            check(not kids, "without ETR_TRACE_FORKS no child writes a file: %r" % kids)
        if validate(TOOL, os.path.join(d, "f.json")):
            check(len(ops(os.path.join(d, "f.json"), "parent_op")) == 1 and
                  not ops(os.path.join(d, "f.json"), "child_op"),
                  "the parent's file holds the parent's op only (FORKS=%s)" % forks)


def timing_ns():
    """timing="ns" gives ts_ns / dur_ns (before: taken as a truth value, whole µs without a
    word), through etr.trace, python3 -m etr --ns-timing and, when built, etr.torch; any
    value but True, False and "ns" is a ValueError."""
    path = os.path.join(TMP, "ns.json")
    with etr.trace(path, timing="ns"):
        with etr.record_function("ns_op"):
            pass
    if validate(TOOL, path):
        n = ops(path, "ns_op")
        check(len(n) == 1 and attr(n[0], "ts_ns") is not None and
              attr(n[0], "dur_ns") is not None, "timing='ns': ts_ns and dur_ns")
    for good, has_ts in ((True, True), (False, False), (1, True), (0, False)):
        with etr.trace(path, timing=good):
            with etr.record_function("t_op"):
                pass
        n = ops(path, "t_op")
        check(len(n) == 1 and ("ts" in n[0]) == has_ts and attr(n[0], "ts_ns") is None,
              "timing=%r: ts %s, no ts_ns" % (good, "kept" if has_ts else "left out"))
    for bad in ("us", "NS", "0", None, 2, 1.0):
        try:
            etr.trace(path, timing=bad).__enter__()
            check(False, "timing=%r raises" % (bad,))
        except ValueError as e:
            check("timing" in str(e), "the error names timing: %s" % e)
    script = os.path.join(TMP, "ns_script.py")
    with open(script, "w") as f:
        f.write("import etr\nwith etr.record_function('m_op'):\n    pass\n")
    out = os.path.join(TMP, "ns_m.json")
    r = subprocess.run([sys.executable, "-m", "etr", "--ns-timing", "-o", out, script],
                       capture_output=True, text=True, env=ENV, cwd=TMP, timeout=120)
    check(r.returncode == 0, "python3 -m etr --ns-timing: %d %s" % (r.returncode, r.stderr))
    if r.returncode == 0 and validate(TOOL, out):
        n = ops(out, "m_op")
        check(len(n) == 1 and attr(n[0], "ts_ns") is not None, "--ns-timing: ts_ns")
    r = subprocess.run([sys.executable, "-m", "etr", "--help"], capture_output=True,
                       text=True, env=ENV, cwd=TMP, timeout=120)
    check(".etr: the binary event log" in r.stdout and "--ns-timing" in r.stdout,
          "--help names -o x.etr and --ns-timing: %s" % r.stdout[-800:])
    try:
        import etr.torch as etr_torch  # noqa: F401
    except ImportError:
        return
    tpath = os.path.join(TMP, "ns_torch.json")
    rc, err = run_py("""
        import torch, etr.torch
        with etr.torch.trace(%r, timing="ns"):
            torch.ones(2) + 1
        et = etr.torch.ExecutionTraceObserver(timing="ns").register_callback(%r)
        et.start(); torch.ones(2) * 2; et.stop(); et.unregister_callback()
    """ % (tpath, tpath + ".obs.json"))
    check(rc == 0, "etr.torch with timing='ns': %d %s" % (rc, err[-400:]))
    for p, name in ((tpath, "aten::add"), (tpath + ".obs.json", "aten::mul")):
        if rc == 0 and validate(TOOL, p):
            n = ops(p, name)
            check(len(n) == 1 and attr(n[0], "ts_ns") is not None, "%s: ts_ns" % p)


def dash_m_script_exception():
    """An exception the script leaves is said as python3 says it, with the script's frames
    only (before: runpy's and etr/__main__.py's first), and the status is python3's: 1, the
    SystemExit's code, death by SIGINT after a KeyboardInterrupt; the trace is finalized in
    every case."""
    cases = (("raise_value", "def f():\n    raise ValueError('boom')\n\nf()\n", 1),
             ("chained", "try:\n    1/0\nexcept Exception as e:\n"
              "    raise KeyError('k') from e\n", 1),
             ("interrupt", "raise KeyboardInterrupt\n", -2),
             ("exit_code", "import sys\nsys.exit(7)\n", 7),
             ("exit_text", "import sys\nsys.exit('bye')\n", 1),
             ("syntax", "def f(:\n", 1))
    for name, code, status in cases:
        script = os.path.join(TMP, "exc_%s.py" % name)
        with open(script, "w") as f:
            f.write(code)
        plain = subprocess.run([sys.executable, script], capture_output=True, text=True,
                               env=ENV, cwd=TMP, timeout=120)
        out = os.path.join(TMP, "exc_%s.json" % name)
        r = subprocess.run([sys.executable, "-m", "etr", "-o", out, script],
                           capture_output=True, text=True, env=ENV, cwd=TMP, timeout=120)
        said = "".join(line for line in r.stderr.splitlines(True)
                       if not line.startswith("etr: %s:" % out))
        check(plain.returncode == status and r.returncode == status,
              "%s: status %d as python3's %d" % (name, r.returncode, plain.returncode))
        check(said == plain.stderr, "%s: said as python3 says it:\n%s\nnot:\n%s" %
              (name, plain.stderr, r.stderr))
        if name != "syntax":  # (a script that does not compile never opens the trace)
            validate(TOOL, out)


def dash_m_busy_file():
    """python3 -m etr -o FILE while another process writes FILE (holds its lock): the script
    runs, its trace goes to FILE.<pid>.json (said), and FILE keeps its bytes (before: FILE
    was truncated and written by both)."""
    import fcntl
    script = os.path.join(TMP, "busy_script.py")
    with open(script, "w") as f:
        f.write("import etr\nwith etr.record_function('work'):\n    pass\n")
    out = os.path.join(TMP, "busy.json")
    with open(out, "w") as held:
        held.write("someone else's")
        held.flush()
        fcntl.flock(held, fcntl.LOCK_EX)
        r = subprocess.run([sys.executable, "-m", "etr", "-o", out, script], capture_output=True,
                           text=True, env=ENV, cwd=TMP, timeout=120)
    check(r.returncode == 0 and "is written by another process" in r.stderr,
          "the script ran, the other file said: %d %s" % (r.returncode, r.stderr[-300:]))
    with open(out) as f:
        check(f.read() == "someone else's", "the other process's file kept its bytes")
    own = [f for f in os.listdir(TMP) if f.startswith("busy.") and f != "busy.json"]
    check(len(own) == 1 and validate(TOOL, os.path.join(TMP, own[0])),
          "its own file beside: %s" % own)
    with etr.trace(out):  # (the other process let go: the name is free again)
        pass
    check(validate(TOOL, out), "the name is written once let go")


def main():
    cases = (
        fork_child_leaves_block, dash_m_arguments, python_calls_launcher_quiet,
        python_calls_module_quiet, dash_m_failures, enter_failure_releases_trace,
        self_referencing_list, python_calls_generators_and_profiler, concurrent_close,
        bad_arguments, async_annotate, write_error_in_block_with_exception, signals_option,
        torch_observer_in_forked_child, dash_m_busy_file, forked_children_finish_trace,
        timing_ns, dash_m_script_exception)
    return run_cases(cases, "python.misuse: passed")


if __name__ == "__main__":
    sys.exit(main())
