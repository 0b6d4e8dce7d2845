#!/usr/bin/env python3
"""`etr summary` and `etr replay` given several rank traces (docs/CLI.md, "Several ranks"), on
small traces written here (tests/pylib/coll_traces.py's nodes):

  first_pg    a trace's rank and world size come from its first (newest)
              `## process_group:init ##` node, not from a later, stale one (written before
              init_process_group: rank 0 of 1)
  absent      a rank with none of group "0"'s collectives while another rank has some is a
              mismatch (summary says so, replay refuses); a rank that does not use a sub-group
              is not
  world       the ranks given against the world size the traces record: a rank missing, or
              sizes that disagree, are said (summary note, replay refuses); traces that record
              no size are read as before
  stray       a c10d:: op whose record_param_comms was not recorded is a call of its own, not
              the twin of an earlier call's record_param_comms (docs/FORMAT.md, rules 1-2)
  untimed     replay of ranks without timing costs each op 1 us (untimed_us) and says so, not 0
  overflow    replay (several ranks, one) with an overflowing network model prints no NaN

Usage: test_ranks_cli.py --etr ETR --work DIR CASE
Exit status: 0 pass, 1 fail.
"""
import argparse
import json
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "pylib"))
import coll_traces as ct  # noqa: E402
from etr_checks import PROCESS, check, finish  # noqa: E402

a = None


def run(*args):
    p = subprocess.run([a.etr] + list(args), capture_output=True, text=True,
                       env=dict(os.environ, ETR_PROGRESS="0"), timeout=120)
    check("Sanitizer" not in p.stderr and "runtime error" not in p.stderr and
          p.returncode in (0, 1, 2), "etr %s: crashed (exit %d): %s" % (args, p.returncode,
                                                                         p.stderr[-400:]))
    return p.returncode, p.stdout, p.stderr


def groups(rank, size, extra=()):
    """A group list as a `## process_group:init ##` node holds it (docs/FORMAT.md)."""
    g = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cpu:gloo", "ranks": [],
          "group_size": size, "group_count": 1 + len(extra), "rank": rank}]
    return g + list(extra)


def rpc(i, parent, ts, dur, pg="0", tensor=None, name="allreduce"):
    """record_param_comms with the collective attrs (PyTorch 2.x, etr's example)."""
    t = tensor or ct.tensor(105, 106, 256)
    extra = [("collective_name", "string", name), ("dtype", "string", "Float"),
             ("in_msg_nelems", "uint64", 256), ("out_msg_nelems", "uint64", 256),
             ("pg_name", "string", pg)]
    return ct.node(i, "record_param_comms", parent, 1, ts, dur,
                   inputs=ct.io(([t], ct.LIST_T), (0, "Int"), ([pg, ""], "Tuple[String,String]"),
                                (0, "Int"), (name, "String")), extra=extra)


def rank_nodes(ncoll, timed=True, pgs=("0",), compute=3, skew=0):
    """Per collective: `compute` ops of 10 us, then a record_param_comms per group in pgs
    (in turn) lasting 20 + skew us. Ids in start order; every op's parent the thread."""
    nodes, i, t = [ct.thread(2, 1)], 3, 100
    for k in range(ncoll):
        for _ in range(compute):
            nodes.append(ct.node(i, "aten::mul", 2, 1, t if timed else None, 10))
            i, t = i + 1, t + 10
        n = rpc(i, 2, t, 20 + skew, pg=pgs[k % len(pgs)])
        if not timed:
            for key in ("ts", "inclusive_dur", "exclusive_dur"):
                del n[key]
        nodes.append(n)
        i, t = i + 1, t + 20 + skew
    return nodes


def write(path, nodes, pg_lists=()):
    """The trace; pg_lists (newest first) become `## process_group:init ##` nodes written
    in that order right after the thread node, as etr's writer puts them."""
    pg = [ct.node(90000 - k, "## process_group:init ##", 2, 1,
                  inputs=ct.io((json.dumps(g), "String"))) for k, g in enumerate(pg_lists)]
    d = {"schema": "1.1.1-chakra.0.0.4", "pid": 1, "time": "2026-01-01 00:00:00",
         "start_ts": 0, "nodes": nodes[:1] + pg + nodes[1:] + [ct.node(1, PROCESS, 1, 0)],
         "finish_ts": 1}
    with open(path, "w") as f:
        json.dump(d, f)
    return path


def summary_json(*files):
    rc, out, err = run("summary", "--json", *files)
    if not check(rc == 0, "summary --json %s: exit %d: %s" % (files, rc, err)):
        return {}
    return json.loads(out)


def case_first_pg():
    # mp.spawn with the trace opened before init_process_group: the newest node (first)
    # says rank r of 3, the stale one (last) rank 0 of 1.
    f = {r: write(os.path.join(a.work, "fp-%d.json" % r), rank_nodes(3, skew=r),
                  [groups(r, 3), groups(r, 3), groups(0, 1)]) for r in range(3)}
    order = [f[2], f[0], f[1]]
    d = summary_json(*order)
    if d:
        check(d["rank_source"] == "recorded in each trace", "rank_source: %s" % d["rank_source"])
        got = {os.path.basename(r["file"]): r["rank"] for r in d["ranks"]}
        check(got == {"fp-0.json": 0, "fp-1.json": 1, "fp-2.json": 2}, "ranks: %s" % got)
        check(d.get("ranks_note") is None, "ranks_note: %s" % d.get("ranks_note"))
    rc, out, err = run("replay", *order)
    check(rc == 0 and out.startswith("replay of 3 ranks (rank numbers: recorded in each trace)"),
          "replay: exit %d: %s%s" % (rc, out[:200], err))
    # the stale node's world size (1) is not the group size of the all-reduces: 1024 bytes
    # over 3 ranks move 2 * 1024 * 2 / 3 bytes each
    if d:
        check(all(abs(c["bytes"] - 4096 / 3) < 1 for c in d["collectives"]),
              "bytes over a world of 3: %s" % [c["bytes"] for c in d["collectives"]])


def case_absent():
    r0 = write(os.path.join(a.work, "ab-0.json"), rank_nodes(3), [groups(0, 2)])
    r1 = write(os.path.join(a.work, "ab-1.json"), rank_nodes(3, compute=2)[:1] +
               [ct.node(3, "aten::mul", 2, 1, 100, 10)], [groups(1, 2)])
    for files in ([r0, r1], [r1, r0]):
        d = summary_json(*files)
        if d:
            check(d["mismatch"] is not None and "none on rank 1" in d["mismatch"],
                  "summary %s: mismatch %s" % (files, d["mismatch"]))
        rc, out, err = run("summary", *files)
        check(rc == 0 and "  mismatch: " in out, "summary text: %s" % out)
        rc, out, err = run("replay", *files)
        check(rc == 1 and err.startswith("etr replay: the ranks' collectives do not match: ") and
              "none on rank 1" in err, "replay %s: exit %d: %s" % (files, rc, err))
    # the same with no process-group node at all (a cut trace repaired): ranks by file order
    r1b = write(os.path.join(a.work, "ab-1b.json"), [ct.thread(2, 1),
                                                     ct.node(3, "aten::mul", 2, 1, 100, 10)])
    r0b = write(os.path.join(a.work, "ab-0b.json"), rank_nodes(3))
    rc, out, err = run("replay", r0b, r1b)
    check(rc == 1 and "do not match" in err, "replay without groups: exit %d: %s" % (rc, err))
    # a rank that does not use sub-group "1" is no mismatch
    s0 = write(os.path.join(a.work, "ab-s0.json"), rank_nodes(4, pgs=("0", "1")), [groups(0, 2)])
    s1 = write(os.path.join(a.work, "ab-s1.json"), rank_nodes(2), [groups(1, 2)])
    d = summary_json(s0, s1)
    if d:
        check(d["mismatch"] is None, "sub-group: mismatch %s" % d["mismatch"])
    rc, out, err = run("replay", s0, s1)
    check(rc == 0, "replay with a sub-group: exit %d: %s" % (rc, err))


def case_world():
    f = {r: write(os.path.join(a.work, "w4-%d.json" % r), rank_nodes(2), [groups(r, 4)])
         for r in range(4)}
    missing = [f[0], f[1], f[3]]
    d = summary_json(*missing)
    if d:
        note = d.get("ranks_note") or ""
        check("world of 4" in note and "rank 2 missing" in note, "ranks_note: %r" % note)
    rc, out, err = run("summary", *missing)
    check(rc == 0 and "\nnote: the traces record a world of 4 ranks, 3 given: rank 2 missing" in out,
          "summary text: %s" % out[:400])
    rc, out, err = run("replay", *missing)
    check(rc == 1 and err.startswith("etr replay: the traces are not the ranks of one run: ") and
          "rank 2 missing" in err, "replay with rank 2 missing: exit %d: %s" % (rc, err))
    # sizes that disagree: ranks 0, 1 of a 4-rank run with rank 2 of a 3-rank run
    r2 = write(os.path.join(a.work, "w3-2.json"), rank_nodes(2), [groups(2, 3)])
    mixed = [f[0], f[1], r2, f[3]]
    d = summary_json(*mixed)
    if d:
        note = d.get("ranks_note") or ""
        check("different world sizes" in note, "ranks_note: %r" % note)
    rc, out, err = run("replay", *mixed)
    check(rc == 1 and "different world sizes" in err, "replay mixed: exit %d: %s" % (rc, err))
    # all four: nothing to say
    d = summary_json(*f.values())
    if d:
        check(d.get("ranks_note", "absent") is None, "complete: %s" % d.get("ranks_note"))
    rc, out, err = run("replay", *f.values())
    check(rc == 0 and "note:" not in out, "replay complete: exit %d: %s" % (rc, err))
    # traces that record no size: as before (no note, replay runs)
    g = [write(os.path.join(a.work, "wn-%d.json" % r), rank_nodes(2)) for r in (0, 1)]
    d = summary_json(*g)
    if d:
        check(d.get("ranks_note", "absent") is None, "no size: %s" % d.get("ranks_note"))
    rc, out, err = run("replay", *g)
    check(rc == 0, "replay without sizes: exit %d: %s" % (rc, err))


def stray_nodes(drop_third):
    """Three all-reduces as PyTorch 2.x records them: c10d::allreduce_ with
    record_param_comms nested in it (children first), the same gradient tensor each time;
    drop_third: the third call's record_param_comms is missing (ETR_TRACE_SAMPLE)."""
    t = ct.tensor(105, 106, 256)
    nodes, i, ts = [ct.thread(2, 1)], 3, 100
    for k in range(3):
        nodes.append(ct.node(i, "aten::mul", 2, 1, ts, 10))
        c, ts = i + 1, ts + 1000
        if not (drop_third and k == 2):
            nodes.append(rpc(c + 1, c, ts + 1, 18, tensor=t))
        nodes.append(ct.c10d(c, "allreduce_", 2, 1, ts, 20,
                             [([t], ct.LIST_T), ("<Object>", "Object")]))
        i, ts = c + 2, ts + 1000
    return nodes


def case_stray():
    r0 = write(os.path.join(a.work, "st-0.json"), stray_nodes(False), [groups(0, 2)])
    r1 = write(os.path.join(a.work, "st-1.json"), stray_nodes(True), [groups(1, 2)])
    d = summary_json(r0, r1)
    if d:
        got = [(r["rank"], r["collectives"], r["comm_us"]) for r in d["ranks"]]
        # a call lasts its record_param_comms' 18 us (the c10d op around it adds no tail);
        # the stray c10d op is a call (of no named group) of its own 20 us
        check(got == [(0, 3, 54), (1, 3, 56)], "ranks (rank, collectives, comm_us): %s" % got)
    rc, out, err = run("summary", r1)
    check(rc == 0 and "comm" in out, "summary of the rank alone: exit %d: %s" % (rc, err))
    d1 = json.loads(run("summary", "--json", r1)[1] or "{}")
    cs = d1.get("collectives", [])
    check(sum(c.get("count", 0) for c in cs) == 3, "one rank: collectives %s" % cs)


def case_untimed():
    f = [write(os.path.join(a.work, "ut-%d.json" % r), rank_nodes(2, timed=False),
               [groups(r, 2)]) for r in (0, 1)]
    rc, out, err = run("replay", *f)
    check(rc == 0, "replay untimed: exit %d: %s" % (rc, err))
    check("without timing cost 1 us each" in out and "unit costs" in out,
          "replay untimed says so: %s" % out[:500])
    # 9 ops a rank (the process-group node, 3 + 1 + 3 + 1), 1 us each, one after the other
    check("predicted makespan: 9.0 us" in out, "replay untimed makespan: %s" % out[:500])
    check("predicted makespan: 0.0" not in out, "no 0 us makespan: %s" % out[:500])


def case_overflow():
    f = [write(os.path.join(a.work, "ov-%d.json" % r), rank_nodes(3, skew=r), [groups(r, 2)])
         for r in (0, 1)]
    rc, out, err = run("replay", "--alpha-us", "1e308", "--beta-gbps", "1e-300", *f)
    check("nan" not in (out + err).lower(), "overflow: NaN printed: %s%s" % (out, err))
    check(rc == 0 or (rc == 1 and "overflow" in err and err.count("\n") == 1),
          "overflow: exit %d: %s" % (rc, err))
    # one rank (the single-trace replay): the same
    rc, out, err = run("replay", "--alpha-us", "1e308", "--beta-gbps", "1e-300", f[0])
    check("nan" not in (out + err).lower(), "overflow, one rank: NaN printed: %s%s" % (out, err))
    check(rc == 0 or (rc == 1 and "overflow" in err and err.count("\n") == 1),
          "overflow, one rank: exit %d: %s" % (rc, err))


def case_stdin_twice():
    # '-' twice: stdin holds one trace, so a second read finds it empty; a usage error (exit
    # 2) that says so, not "unexpected end of input (truncated file?)" about the second
    f = write(os.path.join(a.work, "st-0.json"), rank_nodes(2), [groups(0, 1)])
    with open(f) as fh:
        text = fh.read()
    for cmd in ("summary", "replay"):
        p = subprocess.run([a.etr, cmd, "-", "-"], input=text, capture_output=True, text=True,
                           env=dict(os.environ, ETR_PROGRESS="0"), timeout=120)
        check(p.returncode == 2 and "stdin can be given once" in p.stderr,
              "%s - -: exit %d: %s" % (cmd, p.returncode, p.stderr[-300:]))
        p = subprocess.run([a.etr, cmd, "-"], input=text, capture_output=True, text=True,
                           env=dict(os.environ, ETR_PROGRESS="0"), timeout=120)
        check(p.returncode == 0, "%s -: exit %d: %s" % (cmd, p.returncode, p.stderr[-300:]))


CASES = {"first_pg": case_first_pg, "absent": case_absent, "world": case_world,
         "stray": case_stray, "untimed": case_untimed, "overflow": case_overflow,
         "stdin_twice": case_stdin_twice}


def main():
    global a
    ap = argparse.ArgumentParser()
    ap.add_argument("--etr", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("case", choices=sorted(CASES))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    CASES[a.case]()
    return finish()


if __name__ == "__main__":
    sys.exit(main())
