"""The etr Python package from the build tree (ctest python.package): traces written
through etr.trace / record_function / annotate / python -m etr are valid for `etr validate`
and hold the ops, values, failures and thread names the calls gave.

usage: test_etr_python.py ETR_TOOL   (PYTHONPATH holds <build>/python)
"""
import json
import os
import subprocess
import sys
import threading

import etr

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "tests", "pylib"))
from etr_checks import check, finish, scratch_dir, validate  # noqa: E402


def nodes_by_name(path):
    with open(path) as f:
        d = json.load(f)
    by = {}
    for n in d["nodes"]:
        by.setdefault(n["name"], []).append(n)
    return d, by


def attr(n, name):
    for a in n["attrs"]:
        if a["name"] == name:
            return a["value"]
    return None


def convert_valid(tool, log, out, when):
    """`etr convert log -o out` succeeds (checked) and etr validate accepts out (checked);
    whether out was written."""
    r = subprocess.run([tool, "convert", log, "-o", out], capture_output=True, text=True)
    if not check(r.returncode == 0, "etr convert %s: %s" % (when, r.stderr[-300:])):
        return False
    validate(tool, out)
    return True


@etr.annotate()
def decorated(x):
    return x * 2


def worker():
    etr.thread_set_name("py-worker")
    with etr.record_function("in_worker", inputs=[1]):
        pass


def main():
    tool = sys.argv[1]
    tmp = scratch_dir("etr-py-")
    path = os.path.join(tmp, "t.json")
    check(etr.__version__ == "0.1.0", "version %r" % etr.__version__)

    deep = []
    for _ in range(40):
        deep = [deep]
    with etr.trace(path) as t:
        with etr.record_function("outer", inputs=[None, True, 7, 2**70, 2.5, "text", "bad\udcff",
                                                   (1, "a"), deep, object(), list(range(5000))]):
            with etr.record_function("inner", inputs=(3,), schema="inner(int x) -> ()"):
                pass
            try:
                with etr.record_function("raises"):
                    raise ValueError("boom")
            except ValueError:
                pass
            check(decorated(21) == 42, "a decorated function returns its value")
        op = etr.Op("manual", [1.5]).begin()
        op.end([42])
        try:
            op.end()
            check(False, "a second end raises")
        except etr.EtrError:
            pass
        th = threading.Thread(target=worker)
        th.start()
        th.join()
    st = t.stats
    check(st["ops_recorded"] == 6, "6 ops recorded, got %d" % st["ops_recorded"])
    check(st["ends_without_begin"] == 0 and st["ops_abandoned"] == 0, "no misuse: %r" % st)
    validate(tool, path)
    d, by = nodes_by_name(path)
    outer, inner, raises = by["outer"][0], by["inner"][0], by["raises"][0]
    check(inner["ctrl_deps"] == outer["id"] and raises["ctrl_deps"] == outer["id"],
          "inner ops sit under outer")
    check(by["decorated"][0]["ctrl_deps"] == outer["id"], "the decorated call sits under outer")
    vals, types = outer["inputs"]["values"], outer["inputs"]["types"]
    check(vals[0] is None or types[0] == "None", "None input: %r %r" % (vals[0], types[0]))
    check(vals[1] is True and types[1] == "Bool", "bool input: %r %r" % (vals[1], types[1]))
    check(vals[2] == 7 and types[2] == "Int", "int input: %r %r" % (vals[2], types[2]))
    check(types[3] == "Double", "an int beyond int64 is a double: %r" % types[3])
    check(vals[4] == 2.5 and types[4] == "Double", "float input")
    check(vals[5] == "text" and types[5] == "String", "str input")
    check(vals[6].startswith("bad\ufffd"), "a lone surrogate is replaced: %r" % vals[6])
    check(types[7].startswith("Tuple"), "tuple input: %r" % types[7])
    check(types[9] == "Object" or "object" in str(vals[9]), "other objects: %r %r" % (vals[9], types[9]))
    check(len(vals[10]) == 4096, "a list is cut at 4096 items: %d" % len(vals[10]))
    check(st["lists_cut"] >= 1 and st["nesting_cut"] >= 1 and st["utf8_replaced"] >= 1, "cuts counted: %r" % st)
    check(inner["inputs"]["values"] == [3] and attr(inner, "op_schema") == "inner(int x) -> ()",
          "inner's input and schema")
    check(attr(raises, "etr_failed") == 1, "an exception marks the op failed")
    check(attr(inner, "etr_failed") is None, "a clean op is not failed")
    check(by["manual"][0]["outputs"]["values"] == [42], "outputs through Op.end")
    wn = by["in_worker"][0]
    tnode = [n for n in d["nodes"] if n["id"] == wn["ctrl_deps"]][0]
    check(attr(tnode, "thread_name") == "py-worker", "the worker's thread node is named")

    # misuse is an error, never a crash
    try:
        etr.trace(os.path.join(tmp, "no", "such", "dir", "t.json")).__enter__()
        check(False, "an unwritable path raises")
    except etr.EtrError as e:
        bad = os.path.join(tmp, "no", "such", "dir", "t.json")
        check(("cannot open trace %r:" % bad) in str(e),
              "the error says why, naming the path as given: %s" % e)

    # Under ETR_TRACE the process's one trace is taken: etr.trace says so, and what to do
    r = subprocess.run([sys.executable, "-c",
                        "import etr\ntry:\n    etr.trace(%r).__enter__()\n"
                        "except etr.EtrError as e:\n    print(e)\n" % os.path.join(tmp, "own.json")],
                       capture_output=True, text=True,
                       env=dict(os.environ, ETR_TRACE=os.path.join(tmp, "env.json")))
    check(r.returncode == 0 and "ETR_EBUSY" in r.stdout and
          "recorded through ETR_TRACE already" in r.stdout,
          "etr.trace under ETR_TRACE names the reason: %s %s" % (r.stdout, r.stderr))

    # python -m etr, with every Python call recorded
    script = os.path.join(tmp, "script.py")
    with open(script, "w") as f:
        f.write("def leaf():\n    return 1\n\ndef branch():\n    return leaf() + leaf()\n\n"
                "import sys\nprint(branch(), sys.argv[1:])\n")
    out = os.path.join(tmp, "m.json")
    r = subprocess.run([sys.executable, "-m", "etr", "-o", out, "--python-calls", script, "x"],
                       capture_output=True, text=True, env=os.environ)
    check(r.returncode == 0 and "2 ['x']" in r.stdout, "python -m etr ran the script: %s %s" %
          (r.stdout, r.stderr))
    if r.returncode == 0:
        validate(tool, out)
        d, by = nodes_by_name(out)
        check(len(by.get("leaf", [])) == 2 and len(by.get("branch", [])) == 1,
              "python calls recorded: %r" % sorted(by)[:20])
        if by.get("leaf") and by.get("branch"):
            check(all(n["ctrl_deps"] == by["branch"][0]["id"] for n in by["leaf"]),
                  "leaf calls sit under branch")
    # tracebacks with Python frames between the native ones
    tbp = os.path.join(tmp, "tb.json")

    def tb_leaf():
        with etr.record_function("tb_op"):
            pass

    def tb_caller():
        tb_leaf()

    with etr.trace(tbp, traceback="tb_*"):
        tb_caller()
    validate(tool, tbp)
    with open(tbp) as f:
        d = json.load(f)
    n = [x for x in d["nodes"] if x["name"] == "tb_op"][0]
    idx = attr(n, "traceback")
    check(idx is not None, "the op has a traceback")
    if idx is not None:
        frames = [d["frames"][i] for i in d["tracebacks"][idx]]
        names = [fr["name"] for fr in frames]
        here = os.path.basename(__file__)
        py = [fr for fr in frames if os.path.basename(fr["filename"]) == here]
        check([fr["name"] for fr in py][:3] == ["main.<locals>.tb_leaf", "main.<locals>.tb_caller",
                                                  "main"],
              "Python frames, innermost first: %r" % names[:12])
        check(all(fr["line"] > 0 for fr in py), "Python frames carry lines: %r" % py[:3])
        check(any(fr["name"] == "_PyEval_EvalFrameDefault" or "PyEval" in fr["name"]
                  for fr in frames) or len(frames) > len(py), "native frames too: %r" % names[:12])

    # a flight recorder (ring_mb) writing a binary log, dumped while an op is open
    ring = os.path.join(tmp, "ring.etr")
    with etr.trace(ring, ring_mb=1) as t:
        with etr.record_function("ring_outer"):
            for i in range(6000):
                with etr.record_function("ring_op", (i,)):
                    pass
            t.dump()
            conv = os.path.join(tmp, "ring-dump.json")
            if convert_valid(tool, ring, conv, "of the dump"):
                d, by = nodes_by_name(conv)
                check("[etr|ring|unfinished]" in by and "ring_outer" not in by,
                      "the open op is a placeholder in the dump")
    check(t.stats["ring_dropped"] > 0, "the ring dropped the oldest ops: %r" % t.stats)
    conv = os.path.join(tmp, "ring.json")
    if convert_valid(tool, ring, conv, "at the end"):
        d, by = nodes_by_name(conv)
        ops = by.get("ring_op", [])
        last = [n["inputs"]["values"][0] for n in ops]
        check(len(ops) > 100 and last[-1] == 5999 and last == list(range(6000 - len(ops), 6000)),
              "the latest ring_op kept, in order: %d of them" % len(ops))
        check(len(by.get("ring_outer", [])) == 1, "the outer op is a real node at the end")

    return finish("python package: all checks passed")


if __name__ == "__main__":
    sys.exit(main())
