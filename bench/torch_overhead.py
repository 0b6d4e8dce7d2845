#!/usr/bin/python3
"""Added time per PyTorch op: etr.torch against PyTorch's own execution-trace observer, in
the same run (docs/BENCHMARKS.md). A benchmark, not a test: it never fails on the figures.

usage: PYTHONPATH=<build>/python /usr/bin/python3 bench/torch_overhead.py [--reps N]
           [--iters N] [--pt-iters N] [--workload ops|mlp] [--one MODE] [--json FILE]
           [--phases SECONDS]

A loop of small CPU ops (the case where per-op overhead shows) runs under each mode:
  baseline      no observer
  attached      etr's RecordFunction callback registered, no trace open: PyTorch's own
                callback machinery with inputs and outputs copied (the floor any observer
                pays), plus one relaxed load in etr
  etr           etr.torch.trace to x.json (JSON written live by etr's writer thread)
  etr .etr      etr.torch.trace to x.etr (the binary event log; etr convert makes the JSON)
  pytorch       PyTorch's ExecutionGraphObserver (ExecutionTraceObserver in later
                PyTorch) to a JSON file
Workloads: "ops" (default), four elementwise ops on 4x4 tensors (13 aten ops an iteration,
scalar wrapping included); "mlp", a small MLP trained with SGD (forward, MSE loss,
backward, optimizer step; about 60 ops an iteration, autograd's backward ops included).

Interleaving. This VM's speed changes from one second to the next (the same loop takes
1x, 1.6x or 2.2x the time, in phases of 0.1-1 s, with the same thread CPU time: the host,
not our processes; docs/BENCHMARKS.md), so modes measured minutes apart are not comparable.
Each repetition runs baseline, then the four other modes in an order rotated from one rep
to the next, then baseline again; every mode's loop takes about as long (PyTorch's
observer runs --pt-iters iterations, fewer). Within a rep, added time per op is the
mode's time per op minus the mean of the two baselines, and the ratio PyTorch / etr is
taken within the rep. Printed: medians over reps with the quartiles and min-max; the same
over the "steady" reps, whose two baselines differ by at most 10 % (the machine kept its
speed through the rep). Wall time and the recording thread's CPU time (time.thread_time:
preemption by other processes excluded) are both given; for etr, "+close" includes the
end of the with block (the writer draining what is still queued), which the loop time
alone leaves out. Python's GC is off while timing. The load average is printed at start
and end.

--phases SECONDS shows the machine's phases: the untraced loop (500 iterations) back to
back for that long, GC off, pinned to one CPU, printing each loop's thread CPU time in order
with the kernel's steal time and how busy the other CPUs were meanwhile.

Wall time on a shared machine is noisy; instruction counts are not. --one MODE runs one
warm-up and one loop of MODE (baseline, attached, etr, etrbin, pytorch) with os.getppid()
called right before and after the loop, so that
  valgrind --tool=callgrind --separate-threads=yes --dump-before=getppid \\
      /usr/bin/python3 bench/torch_overhead.py --one etr --iters 1000
writes the loop's instructions on the main thread in its part 2 (callgrind.out.PID.2-01);
subtract --one baseline's and divide by the ops printed.
"""
import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch

try:  # (the name of PyTorch >= 2.0; 1.13 has only the first)
    from torch.profiler import ExecutionGraphObserver as PtObserver
except ImportError:
    from torch.profiler import ExecutionTraceObserver as PtObserver

import etr
import etr.torch
from etr import _torch


def ops_workload():
    x0 = torch.ones(4, 4)
    w = torch.ones(4, 4)

    def loop(iters):
        x = x0
        for _ in range(iters):
            y = torch.add(x, 1.0)
            y = torch.mul(y, w)
            y = torch.relu(y)
            x = torch.sub(y, 1.0)
        return x

    return loop


def mlp_workload():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(16, 32), torch.randn(16, 10)

    def loop(iters):
        for _ in range(iters):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()

    return loop


MODES = ["baseline", "attached", "etr", "etr .etr", "pytorch"]


class Bench:
    def __init__(self, loop, tmp):
        self.loop = loop
        self.json_path = os.path.join(tmp, "x.json")
        self.bin_path = os.path.join(tmp, "x.etr")
        self.pt_path = os.path.join(tmp, "pt.json")
        self.waits = {"etr": [], "etr .etr": []}  # buffer_waits of each etr run

    # Each returns (wall s, thread CPU s, wall s including the close) for `iters`.
    @staticmethod
    def _timed(fn, iters):
        t0, c0 = time.perf_counter(), time.thread_time()
        fn(iters)
        return time.perf_counter() - t0, time.thread_time() - c0

    def baseline(self, iters):
        w, c = self._timed(self.loop, iters)
        return w, c, w

    def attached(self, iters):
        _torch.attach()
        try:
            w, c = self._timed(self.loop, iters)
        finally:
            _torch.detach()
        return w, c, w

    def _etr(self, path, iters, mode):
        t = etr.torch.trace(path)
        t.__enter__()
        try:
            t0 = time.perf_counter()
            w, c = self._timed(self.loop, iters)
        finally:
            t.__exit__(None, None, None)
        self.waits[mode].append(t.stats.get("buffer_waits", 0))
        return w, c, time.perf_counter() - t0

    def etr_json(self, iters):
        return self._etr(self.json_path, iters, "etr")

    def etr_bin(self, iters):
        return self._etr(self.bin_path, iters, "etr .etr")

    def pytorch(self, iters):
        ob = PtObserver()
        ob.register_callback(self.pt_path)
        ob.start()
        try:
            t0 = time.perf_counter()
            w, c = self._timed(self.loop, iters)
        finally:
            ob.stop()
            ob.unregister_callback()
        return w, c, time.perf_counter() - t0

    def run(self, mode, iters):
        return {"baseline": self.baseline, "attached": self.attached, "etr": self.etr_json,
                "etr .etr": self.etr_bin, "pytorch": self.pytorch}[mode](iters)


def count_ops(loop, iters, path):
    with etr.torch.trace(path) as t:
        loop(iters)
    return t.stats["ops_recorded"]


def q(v):
    """median, first and third quartiles, min, max"""
    v = sorted(v)
    if len(v) < 2:
        return (v[0],) * 5
    qs = statistics.quantiles(v, n=4, method="inclusive")
    return statistics.median(v), qs[0], qs[2], v[0], v[-1]


def fmt(v, scale=1.0, f="%.0f"):
    m, a, b, lo, hi = (x * scale for x in q(v))
    return ("%s [%s-%s] (%s-%s)" % (f, f, f, f, f)) % (m, a, b, lo, hi)


def cpu_times():
    """per CPU (busy, idle) jiffies, and steal jiffies over all CPUs"""
    busy, steal = {}, 0
    with open("/proc/stat") as f:
        for line in f:
            w = line.split()
            if w[0] == "cpu":
                steal = int(w[8])
            elif w[0].startswith("cpu"):
                v = [int(x) for x in w[1:]]
                busy[w[0]] = (sum(v[:3]) + sum(v[5:8]), v[3] + v[4])
    return busy, steal


def phases(loop, seconds):
    mine = sorted(os.sched_getaffinity(0))[0]
    os.sched_setaffinity(0, {mine})
    gc.disable()
    loop(100)
    rows = []
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        b0, s0 = cpu_times()
        c0 = time.thread_time()
        loop(500)
        c1 = time.thread_time()
        b1, s1 = cpu_times()
        others = [c for c in b1 if c != "cpu%d" % mine]
        db = sum(b1[c][0] - b0[c][0] for c in others)
        di = sum(b1[c][1] - b0[c][1] for c in others)
        rows.append((c1 - c0, s1 - s0, db / (db + di) if db + di else 0.0))
    print("thread CPU ms per loop of 500 iterations, in order (pinned to CPU %d; "
          "steal jiffies; other CPUs busy %%):" % mine)
    print(" ".join("%.1f" % (r[0] * 1e3) for r in rows))
    print("steal jiffies in all: %d; median %.2f ms, min %.2f, max %.2f; other CPUs busy "
          "during the fastest quarter %.0f%%, the slowest quarter %.0f%%" % (
              sum(r[1] for r in rows), statistics.median(r[0] for r in rows) * 1e3,
              min(r[0] for r in rows) * 1e3, max(r[0] for r in rows) * 1e3,
              100 * statistics.mean(r[2] for r in sorted(rows)[:max(1, len(rows) // 4)]),
              100 * statistics.mean(r[2] for r in sorted(rows)[-max(1, len(rows) // 4):])))
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=21)
    p.add_argument("--iters", type=int, default=1500, help="loop iterations (default 1500)")
    p.add_argument("--pt-iters", type=int, default=0,
                   help="iterations for PyTorch's observer (default iters/8: as long a loop)")
    p.add_argument("--workload", choices=["ops", "mlp"], default="ops")
    p.add_argument("--one", choices=["baseline", "attached", "etr", "etrbin", "pytorch"])
    p.add_argument("--json", metavar="FILE", help="also write every measurement there")
    p.add_argument("--phases", type=float, metavar="SECONDS")
    a = p.parse_args()
    loop = {"ops": ops_workload, "mlp": mlp_workload}[a.workload]()
    if a.phases:
        return phases(loop, a.phases)
    if a.workload == "mlp" and a.iters == 1500 and not a.one:
        a.iters = 300
    pt_iters = a.pt_iters or max(1, a.iters // 8)
    tmp = tempfile.mkdtemp(prefix="etr-torch-bench-")
    try:
        return run(a, loop, pt_iters, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(a, loop, pt_iters, tmp):
    b = Bench(loop, tmp)
    loop(20)  # lazily made state (momentum buffers, ...) exists from now on
    ops = count_ops(loop, a.iters, os.path.join(tmp, "count.json"))
    pt_ops = count_ops(loop, pt_iters, os.path.join(tmp, "count.json"))

    if a.one:
        def marked(iters):  # (the markers for callgrind --dump-before=getppid)
            loop(20)
            os.getppid()
            loop(iters)
            os.getppid()
        b.loop = marked
        mode = {"etrbin": "etr .etr"}.get(a.one, a.one)
        b.run(mode, a.iters)
        print("%s: %d ops per loop (%s workload, %d iterations)" % (a.one, ops, a.workload,
                                                                  a.iters))
        return 0

    iters = {m: a.iters for m in MODES}
    iters["pytorch"] = pt_iters
    nops = {m: ops for m in MODES}
    nops["pytorch"] = pt_ops
    load0 = os.getloadavg()
    gc.collect()
    gc.disable()
    for m in MODES:  # warm up
        b.run(m, iters[m])
    others = MODES[1:]
    reps = []
    for r in range(a.reps):
        gc.collect()
        order = others[r % len(others):] + others[:r % len(others)]
        rep = {"order": order, "base0": b.run("baseline", iters["baseline"])}
        for m in order:
            rep[m] = b.run(m, iters[m])
        rep["base1"] = b.run("baseline", iters["baseline"])
        reps.append(rep)
    gc.enable()
    load1 = os.getloadavg()
    waits = {m: v[1:] for m, v in b.waits.items()}  # (the reps' runs, not the warm-up)

    # per rep: ns per op of each mode, and added ns per op against the rep's own baseline
    def per_rep(rep, k):  # k: 0 wall, 1 thread CPU, 2 wall with close
        base = (rep["base0"][k] + rep["base1"][k]) / 2 / ops * 1e9
        d = {"baseline": base}
        for m in others:
            d[m] = rep[m][k] / nops[m] * 1e9
        d["drift"] = abs(rep["base1"][k] - rep["base0"][k]) / (base * ops / 1e9)
        return d

    print("torch %s, workload %s: %d ops per loop (%d iterations; PyTorch's observer %d ops, "
          "%d iterations), %d reps, load average %.2f at start, %.2f at end" % (
              torch.__version__, a.workload, ops, a.iters, pt_ops, pt_iters, a.reps, load0[0],
              load1[0]))
    print("the recording thread waited for etr's writer (buffer_waits, median per loop): "
          "JSON %g, binary log %g" % (statistics.median(waits["etr"]),
                                      statistics.median(waits["etr .etr"])))
    out = {"buffer_waits": waits, "torch": torch.__version__, "workload": a.workload, "ops": ops, "pt_ops": pt_ops,
           "iters": a.iters, "pt_iters": pt_iters, "reps": a.reps, "load_start": load0,
           "load_end": load1}
    for k, what in ((0, "wall"), (1, "thread CPU"), (2, "wall, etr/pytorch through close")):
        rows = [per_rep(rep, k) for rep in reps]
        for subset, sel in (("all reps", rows),
                            ("steady reps", [r for r in rows if r["drift"] <= 0.10])):
            if not sel:
                print("\n%s, %s: none" % (what, subset))
                continue
            print("\n%s, %s (%d of %d): ns per op, median [quartiles] (min-max)" % (
                what, subset, len(sel), len(rows)))
            print("| mode | per op (ns) | added per op (ns) |")
            print("| --- | --- | --- |")
            res = {}
            for m in MODES:
                added = [r[m] - r["baseline"] for r in sel]
                print("| %s | %s | %s |" % (m, fmt([r[m] for r in sel]),
                                            "-" if m == "baseline" else fmt(added)))
                res[m] = {"per_op": q([r[m] for r in sel]), "added": q(added)}
            for e in ("etr", "etr .etr"):
                ratios = [(r["pytorch"] - r["baseline"]) / (r[e] - r["baseline"]) for r in sel
                          if r[e] > r["baseline"]]
                med_added = statistics.median([r[e] - r["baseline"] for r in sel])
                med_pt = statistics.median([r["pytorch"] - r["baseline"] for r in sel])
                floor = statistics.median([r["attached"] - r["baseline"] for r in sel])
                line = "PyTorch / %s, added time per op: median of per-rep ratios %s" % (
                    "etr (JSON)" if e == "etr" else "etr (binary log)",
                    fmt(ratios, f="%.1f") if ratios else "-")
                if med_added > 0:
                    line += "; ratio of medians %.1fx" % (med_pt / med_added)
                if med_added - floor > 0:
                    line += "; beyond the callback floor %.1fx" % ((med_pt - floor) /
                                                                   (med_added - floor))
                print(line)
                res["ratio " + e] = q(ratios) if ratios else None
            out["%s, %s" % (what, subset)] = res
    if a.json:
        out["raw"] = reps
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
