#!/usr/bin/env python3
"""etr commands on small traces built here (ctest cli.crafted): each case is a defect a
tester found, the trace that shows it, and the behaviour docs/CLI.md states. Each case
failed before its fix.

usage: test_crafted.py ETR WORKDIR [REAL_DIR]
  REAL_DIR  the real PyTorch traces: the cases that use them are skipped when it is absent
"""
import json
import os
import resource
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from etr_checks import PROCESS, THREAD, check, finish  # noqa: E402

ETR, WORK = sys.argv[1:3]
REAL = sys.argv[3] if len(sys.argv) > 3 else ""
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)

EMPTY = {"values": [], "shapes": [], "types": []}


def attrs(tid, scope=0, extra=()):
    a = [("rf_id", "uint64", 0), ("fw_parent", "uint64", 0), ("seq_id", "int64", -1),
         ("scope", "uint64", scope), ("tid", "uint64", tid), ("fw_tid", "uint64", 0),
         ("op_schema", "string", "")] + list(extra)
    return [{"name": n, "type": t, "value": v} for n, t, v in a]


def op(i, name, parent=2, timing=None, inputs=None, outputs=None, extra=(), tid=1):
    """An op node; timing = (ts, inclusive_dur, exclusive_dur) or None."""
    n = {"id": i, "name": name, "ctrl_deps": parent, "inputs": inputs or EMPTY,
         "outputs": outputs or EMPTY}
    if timing is not None:
        n["ts"], n["inclusive_dur"], n["exclusive_dur"] = timing
    n["attrs"] = attrs(tid, 0, extra)
    return n


def trace(name, ops, tail=None):
    """Writes WORK/name: thread node 2, the ops, process node 1; tail: keys after finish_ts.
    Returns the path."""
    nodes = [{"id": 2, "name": THREAD, "ctrl_deps": 1, "inputs": EMPTY, "outputs": EMPTY,
              "attrs": attrs(1, 7)}] + ops + \
            [{"id": 1, "name": PROCESS, "ctrl_deps": 1, "inputs": EMPTY, "outputs": EMPTY,
              "attrs": attrs(0, 7)}]
    d = {"schema": "1.1.0-chakra.0.0.4", "pid": 1, "time": "2026-01-01 00:00:00",
         "start_ts": 0, "nodes": nodes, "finish_ts": 1}
    d.update(tail or {})
    path = os.path.join(WORK, name)
    with open(path, "w") as f:
        json.dump(d, f)
    return path


def run(args, **kw):
    env = dict(os.environ, ETR_PROGRESS="0")
    return subprocess.run([ETR, *args], capture_output=True, timeout=300, env=env, **kw)


def ran(r, what, want=0):
    return check(r.returncode == want, "%s: exit %d, want %d: %s" %
                 (what, r.returncode, want, r.stderr[-400:].decode("utf-8", "replace")))


def summary_top_tensors():
    """summary's largest tensors: a tensor (id, storage) seen again larger counts at its
    largest size, and the list for --top 1 starts the one for --top 2. Before: the first
    sighting was kept while the heap had room and the larger one dropped, so --top 1 gave
    (10, 16 bytes) and --top 2 gave (11, 8), (10, 4)."""
    def out(tid, numel):
        return {"values": [[tid, tid, 0, numel, 4, "cpu"]], "shapes": [[numel]],
                "types": ["Tensor(float)"]}
    path = trace("top-tensors.json", [op(3, "first", outputs=out(10, 1), timing=(1, 1, 1)),
                                      op(4, "other", outputs=out(11, 2), timing=(2, 1, 1)),
                                      op(5, "grow", outputs=out(10, 4), timing=(3, 1, 1))])
    lists = {}
    for top in (1, 2, 3):
        r = run(["summary", "--json", "--top", str(top), path])
        if ran(r, "summary --top %d" % top):
            lists[top] = [(t["tensor_id"], t["bytes"], t["op"], t["node"])
                          for t in json.loads(r.stdout)["tensors"]["top_by_bytes"]]
    want = [(10, 16, "grow", 5), (11, 8, "other", 4)]
    check(lists.get(1) == want[:1], "summary --top 1 tensors: %r" % lists.get(1))
    check(lists.get(2) == want, "summary --top 2 tensors: %r" % lists.get(2))
    check(lists.get(3) == want, "summary --top 3 tensors: %r" % lists.get(3))
    r = run(["summary", "--top", "1", path])
    if ran(r, "summary text --top 1"):
        check(b"16         10         10" in r.stdout and b"grow (node 5)" in r.stdout,
              "summary text: the 16-byte tensor, seen in grow: %r" % r.stdout[-600:])
    # a real trace: each shorter list is the start of the longer one
    real = os.path.join(REAL, "chakra_1.0.2-chakra.0.0.4.json")
    if REAL and os.path.isfile(real):
        got = {}
        for top in (5, 20, 30):
            r = run(["summary", "--json", "--top", str(top), real])
            if ran(r, "summary --top %d of the real trace" % top):
                got[top] = [(t["tensor_id"], t["storage_id"], t["bytes"])
                            for t in json.loads(r.stdout)["tensors"]["top_by_bytes"]]
        if len(got) == 3:
            check(got[20][:5] == got[5] and got[30][:20] == got[20],
                  "real trace: --top 5 / 20 / 30 lists disagree: %r" % got)
            check(sum(1 for t in got[30] if t[2] == 8) == 10,
                  "real trace: ten 8-byte tensors: %r" % got[30][:12])


def summary_names_with_nul():
    """summary's text shows a NUL inside an op name, dtype or device escaped, as docs/CLI.md
    says of control characters, and its JSON keeps the tensor's op whole. Before: both op
    names "a\\0b" and "a\\0c" printed as "a" (cli_term stopped at the NUL), and so did the
    tensor's op, dtype and device columns, and its "op" in --json."""
    t = {"values": [[7, 7, 0, 2, 4, "cp\x00u"]], "shapes": [[2]], "types": ["Tensor(fl\x00oat)"]}
    path = trace("nul-names.json", [op(3, "a\x00b", timing=(1, 1, 1), outputs=t),
                                    op(4, "a\x00c", timing=(3, 2, 2))])
    r = run(["summary", path])
    if ran(r, "summary of names with NULs"):
        text = r.stdout.decode("utf-8", "replace")
        lines = text.splitlines()
        check(any(ln.endswith("  a\\x00b") for ln in lines) and
              any(ln.endswith("  a\\x00c") for ln in lines),
              "summary text: op names a\\x00b and a\\x00c: %r" % text)
        check(any("fl\\x00oat" in ln and "cp\\x00u" in ln and "a\\x00b (node 3)" in ln
                  for ln in lines), "summary text: the tensor's dtype, device, op: %r" % text)
    r = run(["summary", "--json", path])
    if ran(r, "summary --json of names with NULs"):
        t = json.loads(r.stdout)["tensors"]["top_by_bytes"]
        check([(x["op"], x["dtype"], x["device"]) for x in t] == [("a\x00b", "fl\x00oat", "cp\x00u")],
              "summary --json: the tensor's op, dtype, device whole: %r" % t)


def deep_nesting_is_linear():
    """graph, replay and chakra read a chain of 200,000 nested ops (each the child of the
    next, children first) in time linear in the input, as docs/CLI.md says: each run gets
    20 s of CPU (RLIMIT_CPU: the machine's load does not count), and needs about 0.2 s.
    Before: the parent-cycle check walked every op up to the root, about 2 * 10^10 steps
    here (80,000 levels took 9 s, 200,000 about a minute). The work itself is counted by
    the analysis_engine test (test_deep_nesting)."""
    n = 200000
    path = os.path.join(WORK, "deep.json")
    tid = '[{"name":"tid","type":"uint64","value":1}]'
    io = '"inputs":{"values":[],"shapes":[],"types":[]},"outputs":{"values":[],"shapes":[],"types":[]}'
    with open(path, "w") as f:
        f.write('{"schema":"1.1.0","pid":1,"time":"2026-01-01 00:00:00","start_ts":0,"nodes":[')
        f.write('{"id":2,"name":"%s","ctrl_deps":1,%s,"attrs":%s}' % (THREAD, io, tid))
        for i in range(n + 2, 2, -1):
            d = i - 3
            f.write(',{"id":%d,"name":"op","ctrl_deps":%d,%s,"ts":%d,"inclusive_dur":%d,'
                    '"exclusive_dur":1,"attrs":%s}' % (i, i - 1, io, d, 2 * (n - d) + 1, tid))
        f.write(',{"id":1,"name":"%s","ctrl_deps":1,%s,"attrs":[]}],"finish_ts":1}' %
                (PROCESS, io))

    def cpu_limit():
        resource.setrlimit(resource.RLIMIT_CPU, (20, 20))

    chakra_dir = os.path.join(WORK, "deep-chakra")
    runs = [["graph", path], ["replay", path]]
    if run(["chakra", "--help"]).returncode == 0:
        runs.append(["chakra", path, "-o", chakra_dir])
    for args in runs:
        r = run(args, preexec_fn=cpu_limit)
        if ran(r, "%s of %d nested ops within 20 s of CPU" % (args[0], n)) and args[0] == "graph":
            check(b"length: %d ops" % n in r.stdout, "graph: the path holds every op: %r" %
                  r.stdout[:600])
    os.unlink(path)


def replay_model_unreadable():
    """replay --model with a file that cannot be read (a directory: fopen succeeds, the
    read fails) stops with an error naming it, exit 1, as for a missing one. Before: the
    read error was taken for the end of the file, the model was empty, exit 0."""
    path = trace("model-dir.json", [op(3, "a", timing=(1, 1, 1))])
    d = os.path.join(WORK, "model-dir")
    os.makedirs(d, exist_ok=True)
    r = run(["replay", "--model", d, path])
    if ran(r, "replay --model DIR", 1):
        check(r.stderr == b"etr replay: %s: Is a directory\n" % d.encode(),
              "replay --model DIR: the error names it: %r" % r.stderr)
        check(r.stdout == b"", "replay --model DIR: no report: %r" % r.stdout[:200])


def chrome_args_keys_once():
    """chrome's args: an attr named like a field chrome writes there (exclusive_dur,
    input_shapes, Input Dims, id, ...) is written as "attr:NAME", and so is an attr whose name
    begins with "attr:": every key once, the op's own value under its name. Before: the attr
    was written as a second key, and a JSON reader kept the attr's value (exclusive_dur -7
    for the op's 1)."""
    extra = [("exclusive_dur", "int64", -7), ("input_shapes", "string", "x"),
             ("Input Dims", "string", "d"), ("External id", "uint64", 9),
             ("output_types", "string", "o"), ("id", "uint64", 77),
             ("attr:id", "string", "a"), ("kernel_grid", "string", "g")]
    ins = {"values": [[5, 5, 0, 2, 4, "cpu"]], "shapes": [[2]], "types": ["Tensor(float)"]}
    path = trace("chrome-attrs.json", [op(3, "a", timing=(1, 5, 1), inputs=ins, extra=extra)])
    r = run(["chrome", path])
    if not ran(r, "chrome of attrs named like its fields"):
        return
    dups = []

    def hook(pairs):
        keys = [k for k, _ in pairs]
        dups.extend(sorted(k for k in set(keys) if keys.count(k) > 1))
        return dict(pairs)
    d = json.loads(r.stdout, object_pairs_hook=hook)
    check(not dups, "chrome: duplicate keys %r" % dups)
    args = [e["args"] for e in d["traceEvents"] if e.get("ph") == "X"]
    if not check(len(args) == 1, "chrome: one slice: %r" % args):
        return
    a = args[0]
    want = {"id": 3, "exclusive_dur": 1, "input_shapes": [[2]], "Input Dims": [[2]],
            "External id": 0, "output_types": [], "attr:exclusive_dur": -7,
            "attr:input_shapes": "x", "attr:Input Dims": "d", "attr:External id": 9,
            "attr:output_types": "o", "attr:id": 77, "attr:attr:id": "a", "kernel_grid": "g"}
    got = {k: a.get(k) for k in want}
    check(got == want, "chrome args: %r, want %r" % (got, want))


def strict_json(text):
    """Parse as RFC 8259 JSON: no NaN, Infinity (Python's json takes them by default)."""
    def refuse(name):
        raise ValueError("not JSON: " + name)
    return json.loads(text, parse_constant=refuse)


def summary_json_non_finite():
    """summary --json stays JSON when a number is past a double's range: 1e400 in the "etr"
    footer (the reader reads it as inf) is written as "inf", as chrome writes such doubles and
    docs/FORMAT.md spells them (and finite doubles in their shortest form, 1.0 as a double); so is a multi-rank model_us that overflows (--alpha-us 1e308
    --beta-gbps 1e-300). Before: bare inf / -inf, which no JSON reader takes."""
    path = trace("footer-inf.json", [op(3, "a", timing=(1, 1, 1))],
                 tail={"etr": {"version": "0.1.0", "stats": {"a": 1, "b": 2.5}}})
    with open(path) as f:
        text = f.read().replace('"a": 1, "b": 2.5',
                                '"a": 1e400, "b": -1e400, "c": 2.5, "d": 0.1, "e": 1.0')
    with open(path, "w") as f:
        f.write(text)
    r = run(["summary", "--json", path])
    if ran(r, "summary --json of a footer with 1e400"):
        try:
            stats = strict_json(r.stdout)["recorder"]["stats"]
            check(stats == {"a": "inf", "b": "-inf", "c": 2.5, "d": 0.1, "e": 1.0}
                  and isinstance(stats["e"], float), "footer stats: %r" % stats)
            # (doubles in their shortest form, a double kept one: 0.1 was 0.10000000000000001)
            out = r.stdout.decode().replace('":0.1,', '": 0.1,')
            check('"d": 0.1,' in out, "0.1 written as %r" % out[out.find('"d"'):][:30])
        except ValueError as e:
            check(False, "summary --json of 1e400: %s: %r" % (e, r.stdout[-300:]))
    coll = [("collective_name", "string", "allreduce"), ("pg_name", "string", "0"),
            ("dtype", "string", "Float"), ("in_msg_nelems", "uint64", 10**12),
            ("out_msg_nelems", "uint64", 10**12), ("pg_size", "uint64", 2)]
    ranks = [trace("rank%d.json" % k, [op(3, "record_param_comms", timing=(1, 5 + k, 5 + k),
                                          extra=coll)]) for k in range(2)]
    # (4e12 bytes on the wire for an all-reduce of 2: 5 + 4e12 / 4e3 us = 1e9 + 5 us)
    for alpha, beta, want in (("1e308", "1e-300", "inf"), ("5", "4", 1e9 + 5)):
        r = run(["summary", "--json", "--alpha-us", alpha, "--beta-gbps", beta] + ranks)
        if ran(r, "summary --json of 2 ranks, --alpha-us %s --beta-gbps %s" % (alpha, beta)):
            try:
                c = strict_json(r.stdout)["collectives"]
                got = [x.get("model_us") for x in c]
                ok = got == [want] if isinstance(want, str) else \
                    len(got) == 1 and isinstance(got[0], float) and abs(got[0] - want) < 1e-3
                check(ok, "model_us %r, want %r" % (got, want))
            except ValueError as e:
                check(False, "summary --json of 2 ranks: %s: %r" % (e, r.stdout[-300:]))


def chrome_mixed_timing():
    """chrome lays out each op by its own timing: an op with ts and durations keeps them, one
    without is laid out 1 us a op in recorded order on its thread (from 0), whatever the
    order of the nodes; no op is left out, and the note and otherData.timing say what was
    done. Before: the first op decided for the whole file: untimed first, every recorded
    time was discarded and the note said the trace had no timing; timed first, the untimed
    op was left out."""
    u = op(4, "child_untimed", parent=3)
    top = op(3, "top", timing=(0, 5, 3))
    b = op(5, "b", timing=(6, 1, 1))
    results = []
    for name, order in (("mixed1.json", [u, top, b]), ("mixed2.json", [b, u, top])):
        path = trace(name, order)
        r = run(["chrome", path])
        if not ran(r, "chrome " + name):
            return
        d = json.loads(r.stdout)
        xs = sorted((e["name"], e["ts"], e["dur"]) for e in d["traceEvents"] if e["ph"] == "X")
        note = r.stderr.decode().replace(path, "FILE")
        results.append((xs, d["otherData"]["timing"], note))
        check(xs == [("b", 6, 1), ("child_untimed", 0, 1), ("top", 0, 5)],
              "chrome %s: slices %r" % (name, xs))
        check(d["otherData"]["timing"].startswith("mixed"),
              "chrome %s: otherData.timing %r" % (name, d["otherData"]["timing"]))
        check("has no timing" not in note and "left out" not in note and
              "1 of 3 op(s) without timing" in note, "chrome %s: note %r" % (name, note))
    check(len(results) == 2 and results[0] == results[1],
          "chrome: the two orders give different results: %r" % results)
    # all timed, all untimed: as before
    r = run(["chrome", trace("untimed.json", [op(4, "c", parent=3), op(3, "p")])])
    if ran(r, "chrome of an untimed trace"):
        d = json.loads(r.stdout)
        check(d["otherData"]["timing"].startswith("synthetic") and
              b"has no timing; ops are laid out 1 us each" in r.stderr,
              "chrome of an untimed trace: %r %r" % (d["otherData"], r.stderr))
    r = run(["chrome", trace("timed.json", [op(4, "c", parent=3, timing=(1, 1, 1)),
                                           op(3, "p", timing=(0, 3, 2))])])
    if ran(r, "chrome of a timed trace"):
        d = json.loads(r.stdout)
        check(d["otherData"]["timing"] == "recorded" and r.stderr == b"",
              "chrome of a timed trace: %r %r" % (d["otherData"], r.stderr))


def validate_footer_count_exact():
    """The footer's nodes_written against the nodes read: a trace that lost one leaf op is
    not valid under --strict (before: one node either way was let through, so a file that
    lost exactly one node was called valid). etr's own footer counts the process node."""
    ops = [op(3, "a", timing=(0, 1, 1)), op(4, "b", timing=(2, 1, 1))]
    stats = lambda n: {"etr": {"version": "0.1.0", "stats": {"nodes_written": n}}}
    r = run(["validate", "--strict", trace("count_ok.json", ops, stats(4))])
    ran(r, "validate --strict, the footer's count right")
    for n in (3, 5):
        r = run(["validate", "--strict", trace("count_off_%d.json" % n, ops, stats(n))])
        ran(r, "validate --strict, the footer says %d nodes for 4" % n, want=1)
        check(b"the footer says %d nodes written, the file has 4" % n in r.stdout + r.stderr,
              "validate names the count: %r" % (r.stdout + r.stderr)[-300:])


CASES = [summary_top_tensors, summary_names_with_nul, deep_nesting_is_linear,
         replay_model_unreadable,
         chrome_args_keys_once,
         summary_json_non_finite,
         chrome_mixed_timing, validate_footer_count_exact]

for case in CASES:
    try:
        case()
    except Exception as e:  # noqa: BLE001 (a case that crashes is a failure, not the end)
        check(False, "%s raised %r" % (case.__name__, e))
sys.exit(finish("cli.crafted: passed"))
