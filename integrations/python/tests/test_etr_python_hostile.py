"""The etr Python package under a hostile but legitimate host (ctest python.hostile): ways a
Python program ends or drops what it traced (os._exit, multiprocessing's start methods,
generators dropped on another thread, ...). Each case was a defect found by doing exactly
that, and fails without its fix; every trace written is checked with `etr validate`.

usage: test_etr_python_hostile.py ETR_TOOL   (PYTHONPATH holds <build>/python)
"""
import multiprocessing
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "tests", "pylib"))
from etr_checks import check, run_cases, validate  # noqa: E402
from pyrun import ENV, attr, load, ops, run_py, setup  # noqa: E402

TOOL = sys.argv[1]
TMP = setup("etr-pyhostile-")
NO_FLUSH = "86400000"  # (a timed flush never comes: only the fix writes the ops)


def names(path, prefix):
    return sorted(n["name"] for n in load(path)["nodes"] if n["name"].startswith(prefix))


def os_exit_finishes_trace():
    """os._exit inside an etr.trace block, in a script run by python3 -m etr, and in a
    process recorded through ETR_TRACE finalizes the file with every op (before: the file
    held its header only, which etr validate refuses, and every op was lost); the exit
    status is os._exit's."""
    path = os.path.join(TMP, "exit_block.json")
    rc, err = run_py("""
        import os, etr
        with etr.trace(%r, flush_ms=%s):
            for i in range(5):
                with etr.record_function("op_%%d" %% i):
                    pass
            with etr.record_function("open_at_exit"):
                os._exit(4)
    """ % (path, NO_FLUSH))
    check(rc == 4, "os._exit(4) in etr.trace's block: status %d %s" % (rc, err[-300:]))
    if validate(TOOL, path):
        check(names(path, "op_") == ["op_%d" % i for i in range(5)],
              "the block's ops are in the file: %r" % names(path, "op_"))

    script = os.path.join(TMP, "exit_script.py")
    with open(script, "w") as f:
        f.write("import os, etr\nfor i in range(3):\n    with etr.record_function('s_%d' % i):"
                "\n        pass\nos._exit(5)\n")
    out = os.path.join(TMP, "exit_script.json")
    r = subprocess.run([sys.executable, "-m", "etr", "-o", out, script], capture_output=True,
                       text=True, env=ENV, cwd=TMP, timeout=120)
    check(r.returncode == 5, "python3 -m etr on a script that calls os._exit(5): status %d %s"
          % (r.returncode, r.stderr[-300:]))
    if validate(TOOL, out):
        check(names(out, "s_") == ["s_0", "s_1", "s_2"], "the script's ops: %r" % names(out, "s_"))

    d = os.path.join(TMP, "exit_env")
    os.makedirs(d)
    rc, err = run_py("""
        import os, etr
        with etr.record_function("env_op"):
            pass
        os._exit(6)
    """, env={"ETR_TRACE": os.path.join(d, "e.json"), "ETR_TRACE_FLUSH_MS": NO_FLUSH}, cwd=d)
    check(rc == 6, "os._exit(6) under ETR_TRACE: status %d %s" % (rc, err[-300:]))
    if validate(TOOL, os.path.join(d, "e.json")):
        check(len(ops(os.path.join(d, "e.json"), "env_op")) == 1, "the op is in ETR_TRACE's file")


def dropped_trace_closes():
    """A trace whose last reference goes (etr.trace(...).__enter__() not kept) is closed
    then, and the next one opens (the package's own list of open traces, kept for os._exit,
    must not keep it alive: with a strong reference the next open failed ETR_EBUSY)."""
    first, second = os.path.join(TMP, "dropped1.json"), os.path.join(TMP, "dropped2.json")
    rc, err = run_py("""
        import gc, etr
        etr.trace(%r).__enter__()
        gc.collect()
        with etr.trace(%r):
            with etr.record_function("second"):
                pass
    """ % (first, second))
    check(rc == 0, "a trace opens after a dropped one: %d %s" % (rc, err[-300:]))
    if validate(TOOL, first) and validate(TOOL, second):
        check(len(ops(second, "second")) == 1, "the second trace recorded")


def forkserver_workers_finish_trace():
    """Under ETR_TRACE with ETR_TRACE_FORKS=1, multiprocessing's forkserver workers (which
    import etr only after they were forked, and end with os._exit) finalize their own files
    (before: each file held its header only, every op lost); ProcessPoolExecutor on the
    forkserver too. Skipped where the forkserver start method is missing."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        print("python.hostile: no forkserver start method, its case skipped")
        return
    for kind in ("process", "executor"):
        d = os.path.join(TMP, "fs_" + kind)
        os.makedirs(d)
        env = {"ETR_TRACE": os.path.join(d, "fs.json"), "ETR_TRACE_FORKS": "1",
               "ETR_TRACE_FLUSH_MS": NO_FLUSH}
        rc, err = run_py("""
            import concurrent.futures as cf, multiprocessing as mp, sys, etr

            def work(i):
                with etr.record_function("child_op_%%d" %% i):
                    return i * i

            if __name__ == "__main__":
                ctx = mp.get_context("forkserver")
                if %r == "process":
                    ps = [ctx.Process(target=work, args=(i,)) for i in range(3)]
                    for p in ps:
                        p.start()
                    for p in ps:
                        p.join()
                    sys.exit(0 if [p.exitcode for p in ps] == [0, 0, 0] else 9)
                with cf.ProcessPoolExecutor(2, mp_context=ctx) as ex:
                    assert list(ex.map(work, range(3))) == [0, 1, 4]
        """ % kind, env=env, cwd=d)
        check(rc == 0, "forkserver %s script: %d %s" % (kind, rc, err[-400:]))
        seen = []
        for f in sorted(os.listdir(d)):
            if f.endswith(".json") and f != "fs.json" and validate(TOOL, os.path.join(d, f)):
                seen += names(os.path.join(d, f), "child_op_")
        check(sorted(seen) == ["child_op_0", "child_op_1", "child_op_2"],
              "forkserver %s: every worker's op is in a valid file: %r" % (kind, seen))


def generator_resumed_on_another_thread():
    """A generator whose annotated block spans a yield, resumed or closed on another thread
    (a shared iterator that worker threads pull from under a lock; a generator dropped there):
    the block ends without an exception, traced or not, and the op is counted as ended on
    another thread (before: EtrError "an op must end on the thread it began on" from inside
    the generator, even with no trace open, and "Exception ignored" when the collector closed
    it there)."""
    path = os.path.join(TMP, "gen_threads.json")
    rc, err = run_py("""
        import gc, sys, threading, etr

        def batches():
            for i in range(2):
                with etr.record_function("batch", inputs=[i]):
                    yield i

        def on_thread(fn):
            out = []
            th = threading.Thread(target=lambda: out.append(fn()))
            th.start()
            th.join()
            return out[0]

        def run():
            it = batches()
            assert next(it) == 0
            assert on_thread(lambda: next(it)) == 1        # the first block ends there
            assert on_thread(lambda: next(it, "end")) == "end"
            dropped = batches()
            next(dropped)
            on_thread(dropped.close)                        # GeneratorExit there
            dropped = batches()
            next(dropped)
            holder = [dropped]
            del dropped
            on_thread(lambda: (holder.clear(), gc.collect()))  # collected there

        run()                                   # no trace open
        with etr.trace(%r) as t:
            run()
        print(t.stats["ends_cross_thread"], file=sys.stderr)
    """ % path)
    check(rc == 0 and "Exception ignored" not in err and "EtrError" not in err,
          "a generator's block ended on another thread: %d %s" % (rc, err[-600:]))
    if validate(TOOL, path):
        check(len(ops(path, "batch")) == 4, "the 4 blocks begun are written: %d" %
              len(ops(path, "batch")))
        # (the 3 blocks begun on the main thread; the one begun on a thread that has exited
        # since may be counted either way, as the thread's end raced with it)
        last = err.strip().splitlines()[-1:]
        check(last and last[0].isdigit() and int(last[0]) >= 3,
              "the ends on other threads are counted in ends_cross_thread: %r" % err[-200:])


def dash_m_waits_for_threads():
    """python3 -m etr on a script whose (non-daemon) threads go on recording after its main
    body ends: the trace holds their ops, since python3 itself waits for those threads before
    it finalizes (before: the trace was closed as the body ended, the threads' ops lost, one
    left incomplete). Daemon threads are not waited for, as python3 does not wait for them."""
    script = os.path.join(TMP, "threads_outlive.py")
    with open(script, "w") as f:
        f.write("import threading, time, etr\n"
                "body_done = threading.Event()\n"
                "def worker():\n"
                "    body_done.wait()\n"
                "    for i in range(20):\n"
                "        with etr.record_function('late_op'):\n"
                "            time.sleep(0.005)\n"
                "def forever():\n"
                "    while True:\n"
                "        time.sleep(0.01)\n"
                "threading.Thread(target=worker).start()\n"
                "threading.Thread(target=forever, daemon=True).start()\n"
                "with etr.record_function('main_op'):\n"
                "    pass\n"
                "body_done.set()\n")
    out = os.path.join(TMP, "threads_outlive.json")
    r = subprocess.run([sys.executable, "-m", "etr", "-o", out, script], capture_output=True,
                       text=True, env=ENV, cwd=TMP, timeout=120)
    check(r.returncode == 0, "python3 -m etr, threads outliving the body: %d %s"
          % (r.returncode, r.stderr[-300:]))
    if validate(TOOL, out):
        check(len(ops(out, "late_op")) == 20 and len(ops(out, "main_op")) == 1,
              "the thread's 20 ops are in the trace: %d" % len(ops(out, "late_op")))

    # A ThreadPoolExecutor left running: python3 tells its idle workers to stop (threading's
    # own exit hooks) before it waits for them; so must the launcher (a first version of
    # the wait joined them without that, and hung).
    script = os.path.join(TMP, "pool_left.py")
    with open(script, "w") as f:
        f.write("import concurrent.futures as cf, etr\n"
                "ex = cf.ThreadPoolExecutor(2)\n"
                "def f():\n"
                "    with etr.record_function('pool_op'):\n"
                "        return 1\n"
                "assert ex.submit(f).result() == 1\n")
    out = os.path.join(TMP, "pool_left.json")
    try:
        r = subprocess.run([sys.executable, "-m", "etr", "-o", out, script],
                           capture_output=True, text=True, env=ENV, cwd=TMP, timeout=120)
        check(r.returncode == 0, "a ThreadPoolExecutor left running: %d %s"
              % (r.returncode, r.stderr[-300:]))
        if validate(TOOL, out):
            check(len(ops(out, "pool_op")) == 1, "the pool's op is in the trace")
    except subprocess.TimeoutExpired:
        check(False, "python3 -m etr hangs on a ThreadPoolExecutor left running")


def exec_finishes_trace():
    """os.execv (and execvp, execl...: they go through it) inside an etr.trace block, under
    python3 -m etr and under ETR_TRACE finalizes the file before the new image replaces the
    process (before: the file held its header only, every op lost); an exec that cannot
    start (a command not found on PATH) leaves the trace recording."""
    path = os.path.join(TMP, "exec_block.json")
    rc, err = run_py("""
        import os, etr
        with etr.trace(%r, flush_ms=%s):
            for i in range(3):
                with etr.record_function("x_%%d" %% i):
                    pass
            try:
                os.execvp("etr-no-such-command-x", ["etr-no-such-command-x"])
            except FileNotFoundError:
                pass
            with etr.record_function("after_failed_exec"):
                pass
            os.execv("/bin/sh", ["sh", "-c", "exit 7"])
    """ % (path, NO_FLUSH))
    check(rc == 7, "the exec'd image's status: %d %s" % (rc, err[-300:]))
    if validate(TOOL, path):
        check(names(path, "x_") + names(path, "after_") ==
              ["x_0", "x_1", "x_2", "after_failed_exec"],
              "the ops before the exec: %r" % (names(path, "x_") + names(path, "after_")))

    script = os.path.join(TMP, "exec_script.py")
    with open(script, "w") as f:
        f.write("import os, etr\nwith etr.record_function('s_op'):\n    pass\n"
                "os.execl('/bin/sh', 'sh', '-c', 'exit 8')\n")
    out = os.path.join(TMP, "exec_script.json")
    r = subprocess.run([sys.executable, "-m", "etr", "-o", out, script], capture_output=True,
                       text=True, env=ENV, cwd=TMP, timeout=120)
    check(r.returncode == 8, "python3 -m etr, a script that execs: %d %s" % (r.returncode,
                                                                          r.stderr[-300:]))
    if validate(TOOL, out):
        check(len(ops(out, "s_op")) == 1, "the script's op is in the trace")

    d = os.path.join(TMP, "exec_env")
    os.makedirs(d)
    rc, err = run_py("""
        import os, sys, etr
        with etr.record_function("image_" + (sys.argv[1] if len(sys.argv) > 1 else "0")):
            pass
        if len(sys.argv) == 1:
            os.execv(sys.executable, [sys.executable, __file__, "1"])
    """, env={"ETR_TRACE": os.path.join(d, "e.json"), "ETR_TRACE_FLUSH_MS": NO_FLUSH}, cwd=d)
    check(rc == 0, "ETR_TRACE, a Python that execs itself: %d %s" % (rc, err[-300:]))
    if validate(TOOL, os.path.join(d, "e.json")):
        check(names(os.path.join(d, "e.json"), "image_") == ["image_0"],
              "ETR_TRACE's file holds the first image's op: %r" %
              names(os.path.join(d, "e.json"), "image_"))
    other = [f for f in os.listdir(d) if f != "e.json"]
    check(len(other) == 1 and validate(TOOL, os.path.join(d, other[0])) and
          names(os.path.join(d, other[0]), "image_") == ["image_1"],
          "the new image writes its own file: %r" % other)


def dash_m_script_takes_stderr():
    """python3 -m etr's own lines after the script (the trace's summary) do not depend on
    what the script did to sys.stderr: a script that closes it and exits 4 exits 4 (before:
    1, and "lost sys.stderr"), one that sets it to None keeps its standard output its own
    (before: the summary went to stdout, print's fallback), and one whose stderr is a full
    disk exits 0 as under python3 (before: 1)."""
    cases = (("closed", "import sys\nsys.stderr.close()\nsys.exit(4)\n", None, 4, ""),
             ("none", "import sys\nsys.stderr = None\nprint('out')\n", None, 0, "out\n"),
             ("full", "print('out')\n", "/dev/full", 0, "out\n"))
    for name, code, err_to, status, stdout in cases:
        script = os.path.join(TMP, "stderr_%s.py" % name)
        with open(script, "w") as f:
            f.write(code)
        out = os.path.join(TMP, "stderr_%s.json" % name)
        with open(err_to or os.devnull, "w") as errf:
            r = subprocess.run([sys.executable, "-m", "etr", "-o", out, script], text=True,
                               stdout=subprocess.PIPE, stderr=errf if err_to else
                               subprocess.PIPE, env=ENV, cwd=TMP, timeout=120)
        check(r.returncode == status and r.stdout == stdout,
              "%s stderr: status %d (want %d), stdout %r (want %r) %s" %
              (name, r.returncode, status, r.stdout, stdout, (r.stderr or "")[-300:]))
        validate(TOOL, out)


def python_calls_keep_annotations():
    """python_calls=True and annotations made by a context manager's __enter__ / __exit__ (a
    class that begins an etr.Op in __enter__, etr.record_function inside a
    @contextlib.contextmanager, torch.profiler.record_function under etr.torch): the
    annotation's op is whole and holds the block's calls (before: __enter__'s call op ended
    with the annotation still open inside it, so the annotation was written etr_incomplete
    at once, the block's calls came after it, and its real end was counted
    ends_without_begin)."""
    path = os.path.join(TMP, "pc_cm.json")
    rc, err = run_py("""
        import contextlib, sys, etr

        class timed:
            def __init__(self, name):
                self.name = name

            def __enter__(self):
                self.op = etr.Op(self.name)
                self.op.begin()
                return self

            def __exit__(self, *exc):
                self.op.end()

        @contextlib.contextmanager
        def region(name):
            with etr.record_function(name):
                yield

        def work():
            return sum(range(10))

        with etr.trace(%r, python_calls=True) as t:
            with timed("class_region"):
                work()
            with region("cm_region"):
                work()
        st = t.stats
        print(st["ops_abandoned"], st["ends_out_of_order"], st["ends_without_begin"],
              file=sys.stderr)
    """ % path)
    check(rc == 0, "python_calls with annotations: %d %s" % (rc, err[-300:]))
    check(err.strip().splitlines()[-1:] == ["0 0 0"],
          "no op abandoned, out of order or ended twice: %r" % err[-200:])
    if validate(TOOL, path):
        nodes = load(path)["nodes"]
        for name in ("class_region", "cm_region"):
            mine = [n for n in nodes if n["name"] == name]
            kids = [n["name"] for n in nodes if mine and n["ctrl_deps"] == mine[0]["id"]]
            check(len(mine) == 1 and not attr(mine[0], "etr_incomplete") and "work" in kids,
                  "%s is whole and holds work(): %r" % (name, kids))
    try:
        import etr.torch  # noqa: F401
    except ImportError:
        print("python.hostile: etr.torch not built, its python_calls case skipped")
        return
    tpath = os.path.join(TMP, "pc_torch.json")
    rc, err = run_py("""
        import sys, torch, etr.torch

        def step():
            return torch.ones(3) + 1

        with etr.torch.trace(%r, python_calls=True) as t:
            with torch.profiler.record_function("rf_region"):
                step()
        st = t.stats
        print(st["ops_abandoned"], st["ends_out_of_order"], st["ends_without_begin"],
              file=sys.stderr)
    """ % tpath)
    check(rc == 0 and err.strip().splitlines()[-1:] == ["0 0 0"],
          "torch.profiler.record_function with python_calls: %d %r" % (rc, err[-300:]))
    if validate(TOOL, tpath):
        nodes = load(tpath)["nodes"]
        rf = [n for n in nodes if n["name"] == "rf_region"]
        kids = [n["name"] for n in nodes if rf and n["ctrl_deps"] == rf[0]["id"]]
        check(len(rf) == 1 and not attr(rf[0], "etr_incomplete") and "step" in kids,
              "rf_region is whole and holds step(): %r" % kids)


def dash_m_signals():
    """python3 -m etr --signals: a script ended by SIGTERM (a job scheduler's, `timeout`'s)
    leaves a finalized trace, as etr.trace(signals=True) does (before: no way to ask for it
    from the command line, and the file held its header only); the status is death by
    SIGTERM, as without etr."""
    script = os.path.join(TMP, "term.py")
    with open(script, "w") as f:
        f.write("import os, signal, etr\nfor i in range(5):\n"
                "    with etr.record_function('before_term'):\n        pass\n"
                "os.kill(os.getpid(), signal.SIGTERM)\n")
    out = os.path.join(TMP, "term.json")
    r = subprocess.run([sys.executable, "-m", "etr", "--signals", "-o", out, script],
                       capture_output=True, text=True, env=ENV, cwd=TMP, timeout=120)
    check(r.returncode == -15, "python3 -m etr --signals, SIGTERM: status %d %s" %
          (r.returncode, r.stderr[-300:]))
    if validate(TOOL, out):
        check(len(ops(out, "before_term")) == 5, "the 5 ops are in the finalized file")


def huge_ints():
    """An int past a double's range among an op's inputs or outputs is recorded as an
    infinite double ("inf", "-inf"), as an int past int64 is a double (before: begin raised
    OverflowError, so a traced block failed where the untraced one ran, and end() raised
    it after ending the op failed)."""
    path = os.path.join(TMP, "huge_ints.json")
    rc, err = run_py("""
        import etr
        with etr.trace(%r):
            with etr.record_function("big_in", inputs=[10 ** 400, [-(10 ** 400)], 2 ** 64]):
                pass
            op = etr.Op("big_out")
            op.begin()
            op.end([10 ** 400])
    """ % path)
    check(rc == 0, "huge ints in a traced op: %d %s" % (rc, err[-300:]))
    if validate(TOOL, path):
        bi, bo = ops(path, "big_in"), ops(path, "big_out")
        check(len(bi) == 1 and bi[0]["inputs"]["values"] == ["inf", ["-inf"], 2.0 ** 64],
              "the inputs: %r" % (bi and bi[0]["inputs"]["values"]))
        check(len(bo) == 1 and bo[0]["outputs"]["values"] == ["inf"] and
              not attr(bo[0], "etr_failed"), "the outputs: %r" % (bo and bo[0]["outputs"]))


def bad_inputs_in_any_run():
    """Inputs that are not a list or a tuple (a dict, a generator) are a TypeError when the
    op is made, traced or not, as bad outputs are (before: accepted untraced and a TypeError
    from begin when traced, so a block failed only under tracing)."""
    import etr
    for bad in ({1: 2}, (i for i in range(2)), "abc", 3):
        for traced in (False, True):
            raised = None
            try:
                if traced:
                    with etr.trace(os.path.join(TMP, "bad_inputs.json")):
                        etr.Op("x", bad)
                else:
                    etr.Op("x", bad)
            except TypeError as e:
                raised = e
            check(raised is not None and "list or a tuple" in str(raised),
                  "Op('x', %r) %s: %r" % (type(bad).__name__,
                                          "traced" if traced else "untraced", raised))
    with etr.trace(os.path.join(TMP, "good_inputs.json")):
        for good in (None, [], (), [1, (2, 3)]):
            etr.Op("ok", good).begin().end()
    validate(TOOL, os.path.join(TMP, "good_inputs.json"))


def dash_m_runs_atexit_traced():
    """python3 -m etr: what the script's atexit functions record is in the trace, as under
    ETR_TRACE (before: the trace was closed before the interpreter ran them, and their ops
    were lost without a word); they run once, after the script's threads, as python3 runs
    them."""
    script = os.path.join(TMP, "atexit_script.py")
    with open(script, "w") as f:
        f.write("import atexit, etr\n"
                "def bye():\n"
                "    with etr.record_function('at_exit_op'):\n"
                "        print('bye')\n"
                "atexit.register(bye)\n"
                "with etr.record_function('main_op'):\n"
                "    pass\n")
    out = os.path.join(TMP, "atexit.json")
    r = subprocess.run([sys.executable, "-m", "etr", "-o", out, script], capture_output=True,
                       text=True, env=ENV, cwd=TMP, timeout=120)
    check(r.returncode == 0 and r.stdout == "bye\n", "the atexit function ran once: %d %r %s"
          % (r.returncode, r.stdout, r.stderr[-300:]))
    if validate(TOOL, out):
        check(len(ops(out, "at_exit_op")) == 1, "its op is in the trace")


def fifo_without_reader_said():
    """etr.trace on a FIFO that nobody reads says so (before: only the system's "No such
    device or address", ENXIO, which names neither the FIFO nor what to do)."""
    import etr
    fifo = os.path.join(TMP, "fifo")
    os.mkfifo(fifo)
    said = None
    try:
        with etr.trace(fifo):
            pass
    except etr.EtrError as e:
        said = str(e)
    check(said is not None and "FIFO" in said and "reader" in said,
          "a FIFO without a reader: %r" % said)


def failed_exec_said():
    """An exec that fails after the traces were finalized for it (an executable script whose
    interpreter is missing) says so with a RuntimeWarning, and under -W error the host still
    gets its OSError (before: nothing said, so the rest of the run went unrecorded without a
    word)."""
    bad = os.path.join(TMP, "bad_interp.sh")
    with open(bad, "w") as f:
        f.write("#!/nonexistent-etr-interpreter\n")
    os.chmod(bad, 0o755)
    path = os.path.join(TMP, "failed_exec.json")
    for args in ([], ["-W", "error"]):
        rc, err = run_py("""
            import os, etr
            with etr.trace(%r):
                try:
                    os.execv(%r, ["x"])
                except OSError:
                    print("OSError")
        """ % (path, bad), *args)
        check(rc == 0 and ("RuntimeWarning" in err and "exec failed" in err) == (not args),
              "a failed exec %s: %d %r" % (" ".join(args), rc, err[-300:]))
        validate(TOOL, path)


def close_error_under_w_error():
    """Under -W error (as test suites run), a block that raised and whose trace then could
    not be closed (a file size limit, as a full disk) still raises the block's exception
    (before: the close's RuntimeWarning, made an error, replaced it)."""
    path = os.path.join(TMP, "werror_fsize.json")
    rc, err = run_py("""
        import resource, signal, sys, etr
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
        t = etr.trace(%r)
        try:
            with t:
                for i in range(20000):
                    with etr.record_function("x", inputs=[i, "y" * 50]):
                        pass
                raise ValueError("mine")
        except ValueError:
            sys.exit(0 if t.stats and t.stats["write_error"] else 3)
    """ % path, "-W", "error")
    check(rc == 0, "-W error, a failed close after the block raised: the block's exception "
          "(rc %d: %s)" % (rc, err[-400:]))


def main():
    cases = (
        os_exit_finishes_trace, dropped_trace_closes, forkserver_workers_finish_trace,
        generator_resumed_on_another_thread, dash_m_waits_for_threads, exec_finishes_trace,
        dash_m_script_takes_stderr, python_calls_keep_annotations, dash_m_signals, huge_ints,
        bad_inputs_in_any_run, dash_m_runs_atexit_traced, fifo_without_reader_said,
        failed_exec_said, close_error_under_w_error)
    return run_cases(cases, "python.hostile: passed")


if __name__ == "__main__":
    sys.exit(main())
