#!/usr/bin/env python3
"""End-to-end test of Python frames in tracebacks: runs examples/python/demo.py (the etrdemo
extension's ops on several Python threads, a traceback on every op) with the interpreter
etrdemo was built for, then checks the trace it wrote:

- every op node carries a traceback, and the file's "frames"/"tracebacks" tables resolve it;
- the demo.py frames of each op are exactly the expected call chain, with the line numbers of
  the call sites (found through the "# @name" markers of demo.py), on every thread;
- they are interleaved with the C frames: the op's C function (in etrdemo) is innermost;
  each run of Python frames (one interpreter activation) comes right before (inside of) a
  native _PyEval_EvalFrameDefault frame; ops run inside etrdemo.apply show the callback's
  frames, then etrdemo's apply C function, then the caller's frames; threading.py's frames
  come after worker();
- the process-wide counters say every gathered Python reference was released (after
  etrdemo unregistered its unwinder), and that each call site was symbolized about once per
  thread (the per-thread cache holds them).

Usage: check_python_trace.py --python PY --module-dir DIR --demo demo.py --workdir DIR
       [--threads 4] [--steps 3] [--env]
       check_python_trace.py --skip REASON     (exit 77: ctest SKIP_RETURN_CODE)
"""
import argparse
import json
import os
import re
import subprocess
import sys

ENTRY = "_PyEval_EvalFrameDefault"


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def markers(demo_path):
    lines = {}
    with open(demo_path) as f:
        for no, text in enumerate(f, 1):
            m = re.search(r"#\s*@([\w.]+)\s*$", text)
            if m:
                lines[m.group(1)] = no
    return lines


def expected_chains(mk):
    """Per op: the set of possible tracebacks, as runs (one per interpreter activation) of
    demo.py frames (function, line), innermost first. CPython 3.11 runs a Python-to-Python
    call in the same activation, except calls with *args (CALL_FUNCTION_EX) and calls from C
    (etrdemo.apply, threading's self._target(*args))."""
    def via_mlp(call):
        return [("mlp", mk[call]), ("step", mk["step.mlp"]), ("worker", mk["worker.step"])]

    lin = {
        "etrdemo::matmul": "linear.matmul",
        "etrdemo::add": "linear.add",
    }
    chains = {}
    for op, mark in lin.items():
        chains[op] = {
            ((("linear", mk[mark]),), tuple(via_mlp("mlp.linear1"))),
            ((("linear", mk[mark]),), tuple(via_mlp("mlp.linear2"))),
        }
    step_outer = ("worker", mk["worker.step"])
    act = ((("activation", mk["activation.ops"]),), (("step", mk["step.apply"]), step_outer))
    chains["etrdemo::relu"] = {(tuple(via_mlp("mlp.relu")),), act}
    chains["etrdemo::scale"] = {act}
    chains["etrdemo::apply"] = {((("step", mk["step.apply"]), step_outer),)}
    chains["etrdemo::sum"] = {((("step", mk["step.sum"]), step_outer),)}
    return chains


def is_script(f):
    return f["filename"].endswith(".py")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip")
    ap.add_argument("--python")
    ap.add_argument("--module-dir")
    ap.add_argument("--demo")
    ap.add_argument("--workdir")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--trace", help="check this trace instead of running the demo")
    ap.add_argument("--env", action="store_true",
                    help="record through ETR_TRACE + ETR_TRACE_TRACEBACK=all (closed at exit)")
    args = ap.parse_args()
    if args.skip:
        print("SKIP: " + args.skip)
        sys.exit(77)

    os.makedirs(args.workdir, exist_ok=True)
    trace_path = os.path.join(args.workdir, "python-trace.json")
    stats_path = os.path.join(args.workdir, "python-stats.json")
    stats = None
    if args.trace:
        trace_path = args.trace
    else:
        env = dict(os.environ)
        env["PYTHONPATH"] = args.module_dir
        for k in [k for k in env if k.startswith("ETR_TRACE")]:
            del env[k]
        if args.env:
            env["ETR_TRACE"] = trace_path
            env["ETR_TRACE_TRACEBACK"] = "all"
        cmd = [args.python, args.demo, "--out", trace_path, "--stats", stats_path,
               "--threads", str(args.threads), "--steps", str(args.steps)]
        r = subprocess.run(cmd, env=env, timeout=120)
        if r.returncode != 0:
            fail(f"{' '.join(cmd)} exited with {r.returncode}")
        with open(stats_path) as f:
            stats = json.load(f)

    with open(trace_path, "rb") as f:
        data = f.read()
    try:
        trace = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        fail(f"{trace_path} is not valid JSON: {e}")
    for key in ("frames", "tracebacks"):
        if key not in trace:
            fail(f"no \"{key}\" table in the trace")
    frames, tbs = trace["frames"], trace["tracebacks"]

    mk = markers(args.demo)
    chains = expected_chains(mk)
    demo_file = os.path.realpath(args.demo)
    ops_per_step = 9  # matmul x2, add x2, relu x2, apply, scale, sum
    n_ops = 0
    seen = {op: set() for op in chains}
    tids = set()
    for node in trace["nodes"]:
        name = node["name"]
        if not name.startswith("etrdemo::"):
            continue
        n_ops += 1
        attrs = {a["name"]: a["value"] for a in node["attrs"]}
        where = f"node {node['id']} ({name})"
        if "traceback" not in attrs:
            fail(f"{where}: no traceback attr")
        tb_index = attrs["traceback"]
        if not 0 <= tb_index < len(tbs):
            fail(f"{where}: traceback {tb_index} out of range")
        fr = []
        for i in tbs[tb_index]:
            if not 0 <= i < len(frames):
                fail(f"{where}: frame index {i} out of range")
            fr.append(frames[i])
        tids.add(attrs["tid"])
        shown = "\n    ".join(f"{f['name']} {f['filename']}:{f['line']}" for f in fr)
        where += ":\n    " + shown + "\n "

        # Innermost: the op's own C function, in etrdemo.
        c_fn = "etrdemo_" + name.split("::")[1]
        if not fr or is_script(fr[0]) or not (fr[0]["name"] == c_fn or
                                               "etrdemo" in fr[0]["filename"]):
            fail(f"{where} innermost frame is not etrdemo's C function {c_fn}")
        # Runs of Python frames; each right inside a native _PyEval_EvalFrameDefault frame.
        runs, i = [], 0
        while i < len(fr):
            if not is_script(fr[i]):
                i += 1
                continue
            j = i
            while j < len(fr) and is_script(fr[j]):
                j += 1
            if i == 0:
                fail(f"{where} a Python frame is innermost")
            if j == len(fr) or fr[j]["name"] != ENTRY:
                fail(f"{where} Python frames {i}..{j - 1} are not followed by {ENTRY}")
            runs.append((i, j))
            i = j
        demo_runs = []
        for (i, j) in runs:
            run = tuple((f["name"], f["line"]) for f in fr[i:j]
                        if os.path.realpath(f["filename"]) == demo_file)
            if run:
                demo_runs.append(run)
        got = tuple(demo_runs)
        if got not in chains[name]:
            fail(f"{where} demo.py frames {got} are none of {sorted(chains[name])}")
        seen[name].add(got)
        # The activation after worker() runs threading.py's Thread.run.
        last = runs[-1]
        tail = fr[last[0]:last[1]]
        if not (tail[0]["name"] == "Thread.run" and tail[0]["filename"].endswith("threading.py")):
            fail(f"{where} the outermost Python frames are not threading's Thread.run")
        # Ops inside etrdemo.apply: the callback's activation, then apply's C function.
        if len(demo_runs) == 2 and demo_runs[0][0][0] == "activation":
            between = fr[runs[0][1]:runs[1][0]]
            if not any(f["name"] == "etrdemo_apply" or "etrdemo" in f["filename"]
                       for f in between):
                fail(f"{where} no etrdemo apply frame between the two activations")

    want_ops = args.threads * args.steps * ops_per_step
    if not args.trace and n_ops != want_ops:
        fail(f"{n_ops} etrdemo ops in the trace, expected {want_ops}")
    if not args.trace and len(tids) != args.threads:
        fail(f"ops on {len(tids)} threads, expected {args.threads}")
    # Every possible chain showed up (mlp's two linear calls, relu in both places).
    for op, got in seen.items():
        if len(got) != len(chains[op]):
            fail(f"{op}: saw {len(got)} distinct call chains, expected {len(chains[op])}")
    if stats is not None:
        if stats["script_frames"] == 0:
            fail("no script frames gathered")
        # Each thread has about 15 distinct Python call sites: symbolized once each while
        # cached (a cache that thrashed would symbolize on every op).
        if stats["script_symbolized"] > 30 * args.threads:
            fail(f"{stats['script_symbolized']} script frames symbolized for {n_ops} ops on "
                 f"{args.threads} threads: the per-thread cache does not hold them")
        if stats["script_released"] != stats["script_frames"]:
            fail(f"{stats['script_frames']} Python frame references taken, "
                 f"{stats['script_released']} released")
    print(f"ok: {n_ops} ops on {len(tids)} threads, {len(tbs)} unique tracebacks, "
          f"{len(frames)} frames; Python frames and lines as expected"
          + (f"; {stats['script_frames']} script frames, all released" if stats else ""))


if __name__ == "__main__":
    main()
