#!/usr/bin/python3
"""Added time per PyTorch op: etr.torch against PyTorch's own execution-graph observer, in
the same run (docs/BENCHMARKS.md). A benchmark, not a test: it never fails on the figures.

usage: PYTHONPATH=<build>/python /usr/bin/python3 bench/torch_overhead.py [--reps N]
           [--iters N] [--one MODE]

A small loop of aten ops on small CPU tensors (the case where per-op overhead shows) runs
under each mode, the modes interleaved, --reps times each; the medians are compared with
the untraced loop. Modes:
  baseline      no observer
  etr attached  etr's RecordFunction callback registered, no trace open: PyTorch's own
                callback machinery with inputs and outputs copied (the floor any observer
                pays), plus one relaxed load in etr
  etr           etr.torch.trace to a file (writer thread included, timing on)
  etr .etr      the same to a binary event log (the writer makes no JSON; etr convert does)
  pytorch       torch.profiler.ExecutionGraphObserver to a file
Ops per loop are counted from etr's trace (nodes it recorded), so the per-op figure is
(mode - baseline) / ops.

Wall time on a shared machine is noisy; instruction counts are not. --one MODE runs one
warm-up and one loop of MODE (baseline, attached, etr, pytorch) with os.getppid() called
right before and after the loop, so that
  valgrind --tool=callgrind --dump-before=getppid /usr/bin/python3 bench/torch_overhead.py \
      --one etr --iters 1000
writes the loop's instructions (main thread) in its part 2; compare with --one baseline and
--one attached, and divide by the ops printed.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch
from torch.profiler import ExecutionGraphObserver

import etr
import etr.torch
from etr import _torch


def workload(iters):
    x = torch.ones(4, 4)
    w = torch.ones(4, 4)
    for _ in range(iters):
        y = torch.add(x, 1.0)
        y = torch.mul(y, w)
        y = torch.relu(y)
        x = torch.sub(y, 1.0)
    return x


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--iters", type=int, default=5000)
    p.add_argument("--one", choices=["baseline", "attached", "etr", "pytorch"])
    a = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="etr-torch-bench-")
    et_path, eg_path = os.path.join(tmp, "et.json"), os.path.join(tmp, "eg.json")
    bin_path = os.path.join(tmp, "et.etr")
    loop = lambda: workload(a.iters)  # noqa: E731
    run = loop  # (what the modes time)

    # ops per loop, from a trace of one loop
    with etr.torch.trace(et_path) as t:
        run()
    ops = t.stats["ops_recorded"]

    def etr_mode():
        with etr.torch.trace(et_path):
            return timed(run)

    def etr_binary_mode():  # the binary event log: the writer makes no JSON (etr convert does)
        with etr.torch.trace(bin_path):
            return timed(run)

    def attached_mode():
        _torch.attach()
        try:
            return timed(run)
        finally:
            _torch.detach()

    def eg_mode():
        eg = ExecutionGraphObserver()
        eg.register_callback(eg_path)
        eg.start()
        try:
            return timed(run)
        finally:
            eg.stop()
            eg.unregister_callback()

    modes = {"baseline": lambda: timed(run), "etr attached": attached_mode, "etr": etr_mode,
             "etr .etr": etr_binary_mode, "pytorch": eg_mode}
    if a.one:
        def marked():  # (the markers for callgrind --dump-before=getppid)
            workload(50)
            os.getppid()
            loop()
            os.getppid()
        run = marked
        {"baseline": lambda: timed(run), "attached": attached_mode, "etr": etr_mode,
         "pytorch": eg_mode}[a.one]()
        print("%s: %d ops per loop" % (a.one, ops))
        return 0
    for f in modes.values():  # warm up
        f()
    times = {m: [] for m in modes}
    for _ in range(a.reps):
        for m, f in modes.items():
            times[m].append(f())
    med = {m: statistics.median(v) for m, v in times.items()}
    base = med["baseline"]
    load = os.getloadavg()[0]
    print("torch %s, %d ops per loop (%d iterations), %d reps, load %.2f, %s" % (
        torch.__version__, ops, a.iters, a.reps, load, os.uname().machine))
    print("| mode          | loop (ms) | per op (ns) | added per op (ns) | runs (ms) |")
    print("| ------------- | --------- | ----------- | ----------------- | --------- |")
    added = {}
    for m in modes:
        added[m] = (med[m] - base) / ops * 1e9
        print("| %-13s | %9.1f | %11.0f | %17.0f | %s |" % (
            m, med[m] * 1e3, med[m] / ops * 1e9, added[m],
            "/".join("%.0f" % (x * 1e3) for x in times[m])))
    if added["etr"] > 0:
        print("pytorch / etr added time per op: %.1fx" % (added["pytorch"] / added["etr"]))
    if added["etr .etr"] > 0:
        print("pytorch / etr (binary log) added time per op: %.1fx" % (
            added["pytorch"] / added["etr .etr"]))
    if added["etr"] - added["etr attached"] > 0:
        print("pytorch / etr, beyond the callback floor: %.1fx" % (
            (added["pytorch"] - added["etr attached"]) / (added["etr"] - added["etr attached"])))
    print(json.dumps({"ops": ops, "reps": a.reps, "load": load,
                      "median_s": med, "added_ns_per_op": added}))


if __name__ == "__main__":
    sys.exit(main())
