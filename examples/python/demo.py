#!/usr/bin/env python3
"""etrdemo driver: a tiny two-layer model on etrdemo's instrumented operators, run on
several Python threads while an execution trace records a traceback on every op. The
tracebacks show this file's functions and lines interleaved with the C frames (the op's
C function innermost, then the Python frames of each interpreter activation just inside
the _PyEval_EvalFrameDefault frame that runs them).

    python3 demo.py --out trace.json [--threads 4] [--steps 3]

etrdemo must be importable (PYTHONPATH=<build>/examples/python) and built for this very
interpreter (CPython 3.11). Lines on the way to an op carry a "# @name" marker; the test
(tests/script/check_python_trace.py) computes the expected line numbers from them.
"""
import argparse
import json
import os
import sys
import threading

import etrdemo


def linear(x, w, b):
    y = etrdemo.matmul(x, w)  # @linear.matmul
    return etrdemo.add(y, b)  # @linear.add


def mlp(x, params):
    h = linear(x, *params[0])  # @mlp.linear1
    h = etrdemo.relu(h)  # @mlp.relu
    return linear(h, *params[1])  # @mlp.linear2


def activation(t):
    # Called from C (etrdemo.apply): a second interpreter activation on the stack.
    return etrdemo.scale(etrdemo.relu(t), 0.5)  # @activation.ops


def step(x, params):
    y = mlp(x, params)  # @step.mlp
    y = etrdemo.apply(activation, y)  # @step.apply
    return etrdemo.sum(y)  # @step.sum


def make_params(seed):
    def mat(rows, cols, k):
        return etrdemo.tensor([[((i * cols + j + k) % 7 - 3) * 0.1 for j in range(cols)]
                               for i in range(rows)])
    return [(mat(4, 8, seed), mat(1, 8, seed + 1)), (mat(8, 3, seed + 2), mat(1, 3, seed + 3))]


def worker(idx, steps, results):
    params = make_params(idx)
    x = etrdemo.full(2, 4, 0.1 * (idx + 1))
    total = 0.0
    for _ in range(steps):
        total += step(x, params)  # @worker.step
    results[idx] = total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="trace file to write (unless ETR_TRACE is set)")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--no-traceback", action="store_true")
    ap.add_argument("--stats", help="write the counters (JSON) here")
    args = ap.parse_args()
    if not args.out and not os.environ.get("ETR_TRACE"):
        ap.error("--out is required (or set ETR_TRACE)")

    # With ETR_TRACE set, libetr opened a trace at load time (ETR_TRACE_TRACEBACK=all for
    # tracebacks) and closes it at exit: record into that one.
    env_trace = bool(os.environ.get("ETR_TRACE"))
    if not env_trace:
        etrdemo.open(args.out, traceback=not args.no_traceback)
    results = [None] * args.threads
    threads = [threading.Thread(target=worker, args=(i, args.steps, results), name=f"w{i}")
               for i in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats = etrdemo.close() or {}
    # Unregistering gives back every Python reference etr still holds.
    etrdemo.unregister_unwinder()
    stats.update(etrdemo.traceback_stats())
    if args.stats:
        with open(args.stats, "w") as f:
            json.dump(stats, f)
    print(f"etrdemo: {args.threads} threads x {args.steps} steps, losses "
          + ", ".join(f"{r:.4f}" for r in results), file=sys.stderr)
    print("etrdemo: " + ", ".join(f"{k} {v}" for k, v in stats.items()), file=sys.stderr)
    print(f"etrdemo: trace written to {os.environ['ETR_TRACE'] if env_trace else args.out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
