#!/usr/bin/env python3
"""etr commands on inputs of odd shapes at the edge of their bounds (ctest cli.bounded): the
reader's limit met by a table (ETR_READER_LIMIT_MB=1, so a table of a few hundred KB is over
it), tables placed before "nodes", a very long name. Each case is a defect found measuring
the commands at scale (docs/CLI.md, "Common behaviour") and failed before its fix. The
files are small; nothing here depends on time.

usage: test_bounded.py ETR WORKDIR
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
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)

EMPTY = {"values": [], "shapes": [], "types": [], "strides": []}


def attrs(tid, scope=0, extra=()):
    a = [("rf_id", "uint64", 0), ("fw_parent", "uint64", 0), ("seq_id", "int64", -1),
         ("scope", "uint64", scope), ("tid", "uint64", tid), ("fw_tid", "uint64", 0),
         ("op_schema", "string", ""), ("kernel_backend", "string", ""),
         ("kernel_file", "string", "")] + list(extra)
    return [{"name": n, "type": t, "value": v} for n, t, v in a]


def op(i, name="op", tb=None):
    extra = [("traceback", "uint64", tb)] if tb is not None else []
    return {"id": i, "name": name, "ctrl_deps": 2, "inputs": EMPTY, "outputs": EMPTY,
            "ts": i, "inclusive_dur": 1, "exclusive_dur": 1, "attrs": attrs(1, 0, extra)}


def nodes(ops):
    return ([{"id": 2, "name": THREAD, "ctrl_deps": 1, "inputs": EMPTY, "outputs": EMPTY,
              "attrs": attrs(1, 7)}] + ops +
            [{"id": 1, "name": PROCESS, "ctrl_deps": 1, "inputs": EMPTY, "outputs": EMPTY,
              "attrs": attrs(0, 7)}])


def write(name, members):
    """WORK/name: a JSON object of the (key, value) pairs in this order."""
    path = os.path.join(WORK, name)
    with open(path, "w") as f:
        f.write("{\n" + ",\n".join("  %s: %s" % (json.dumps(k), json.dumps(v))
                                   for k, v in members) + "\n}\n")
    return path


HEADER = [("schema", "1.1.1-chakra.0.0.4"), ("pid", 7), ("time", "2026-01-01 00:00:00"),
          ("start_ts", 0)]
FRAMES = [{"name": "main", "filename": "m.py", "line": 1},
          {"name": "step", "filename": "m.py", "line": 2}]
# 500,000 zeros: about 1 MB of text, more than 8 MiB as the reader holds the values,
# the trailer's budget under ETR_READER_LIMIT_MB=1 (8 x 1 MiB).
BIG_TBS = [[1, 0]] + [[0] * 100 for _ in range(5000)]


def run(args, limit_mb=None, **kw):
    env = dict(os.environ, ETR_PROGRESS="0")
    env.pop("ETR_READER_LIMIT_MB", None)
    if limit_mb is not None:
        env["ETR_READER_LIMIT_MB"] = str(limit_mb)
    return subprocess.run([ETR, *args], capture_output=True, timeout=300, env=env, **kw)


def ran(r, what, want=0):
    return check(r.returncode == want, "%s: exit %d, want %d: %s" %
                 (what, r.returncode, want, r.stderr[-400:].decode("utf-8", "replace")))


def repair_table_over_limit():
    """etr repair and a "tracebacks" table over the reader's limit. An intact trace is
    copied as it is, table and all: it was refused (exit 1, "would be lost") though nothing
    would be. A cut trace whose table was written whole is refused, since its footer is
    written again from what the reader kept: it was repaired with the table replaced by
    an empty one per id, exit 0. A cut inside the table is an ordinary cut (that table was
    never whole): repaired."""
    members = HEADER + [("nodes", nodes([op(3, tb=0), op(4, tb=1)])), ("finish_ts", 5),
                        ("frames", FRAMES), ("tracebacks", BIG_TBS),
                        ("etr", {"version": "0.1.0", "stats": {"nodes_written": 4}})]
    path = write("big-tables.json", members)
    out = os.path.join(WORK, "big-tables.repaired.json")
    r = run(["repair", path, "-o", out], limit_mb=1)
    if ran(r, "repair of an intact trace whose table is over the limit"):
        with open(path, "rb") as a, open(out, "rb") as b:
            check(a.read() == b.read(), "repair of an intact trace: not copied unchanged")
        check(b"intact" in r.stderr, "repair says intact: %r" % r.stderr)
    with open(path, "rb") as f:
        data = f.read()
    cut_footer = os.path.join(WORK, "big-tables.cut-footer.json")
    with open(cut_footer, "wb") as f:
        f.write(data[:data.rindex(b'"stats"')])  # the tables whole, the footer cut
    out2 = os.path.join(WORK, "cut-footer.repaired.json")
    r = run(["repair", cut_footer, "-o", out2], limit_mb=1)
    ran(r, "repair of a cut trace whose whole table is over the limit", want=1)
    check(b'the value of "tracebacks" is over the reader\'s limit' in r.stderr and
          not os.path.exists(out2), "repair names the table and writes nothing: %r" % r.stderr)
    # with the limit raised, the same file repairs and keeps the table
    r = run(["repair", cut_footer, "-o", out2])
    if ran(r, "repair of the cut trace under the default limit"):
        with open(out2) as f:
            d = json.load(f)
        check(d.get("tracebacks") == BIG_TBS and d["etr"]["repair"]["tracebacks_lost"] == 0,
              "the repaired trace keeps its table")
    cut_table = os.path.join(WORK, "big-tables.cut-table.json")
    with open(cut_table, "wb") as f:
        f.write(data[:data.index(b'"tracebacks"') + 1400000])  # cut inside the table, once skipped
    out3 = os.path.join(WORK, "cut-table.repaired.json")
    r = run(["repair", cut_table, "-o", out3], limit_mb=1)
    if ran(r, "repair of a trace cut inside its table over the limit"):
        with open(out3) as f:
            d = json.load(f)
        check(d["etr"]["repair"]["nodes_kept"] == 4, "cut inside the table: %r" % d["etr"])


def symbolize_keys_in_any_order():
    """etr symbolize keeps every top-level value wherever it stands. A trace whose keys were
    sorted (jq -S, json.dump(sort_keys=True)) has "frames" and "etr" before "nodes" and
    the header after it: symbolize wrote only "nodes" and "tracebacks" (the frames, schema,
    pid, time, start_ts, finish_ts and footer gone, exit 0). Now the header keys before
    "nodes" stay there and every other key follows the nodes."""
    members = HEADER + [("nodes", nodes([op(3, tb=0), op(4, tb=1)])), ("finish_ts", 5),
                        ("frames", FRAMES), ("tracebacks", [[1, 0], [0]]),
                        ("etr", {"version": "0.1.0", "stats": {"nodes_written": 4}})]
    want = dict(members)
    for name, order in (("sorted", sorted(members)),
                        ("tables-first", [m for m in members if m[0] != "nodes"] +
                         [("nodes", want["nodes"])])):
        path = write("keys-%s.json" % name, order)
        r = run(["symbolize", path])
        if not ran(r, "symbolize of a trace with its keys %s" % name):
            continue
        got = json.loads(r.stdout)
        check(got == want, "symbolize, keys %s: %s lost or changed" % (
            name, sorted(k for k in want if got.get(k) != want[k])))


def repair_cut_keys_before_nodes():
    """etr repair of a cut trace whose "etr", "finish_ts" and "frames" come before "nodes"
    (its keys sorted): the header, copied as it is, holds them, and the footer wrote them
    again, so the repaired trace had "finish_ts" twice and no etr command read it ("appears
    twice"). Now each key comes once and the frames are kept."""
    members = [("etr", {"version": "0.1.0", "stats": {"nodes_written": 6}}), ("finish_ts", 9),
               ("frames", FRAMES)] + HEADER + \
              [("nodes", nodes([op(3, tb=0), op(4, tb=1), op(5, tb=0), op(6, tb=1)])),
               ("tracebacks", [[1, 0], [0]])]
    path = write("keys-first.json", members)
    with open(path, "rb") as f:
        data = f.read()
    cut = os.path.join(WORK, "keys-first.cut.json")
    with open(cut, "wb") as f:
        f.write(data[:data.index(b'"id": 5') + 20])  # cut inside op 5
    out = os.path.join(WORK, "keys-first.repaired.json")
    if not ran(run(["repair", cut, "-o", out]), "repair of a cut trace, keys before nodes"):
        return
    with open(out) as f:
        pairs = json.load(f, object_pairs_hook=lambda p: p)
    keys = [k for k, _ in pairs]
    check(len(keys) == len(set(keys)), "repair wrote a top-level key twice: %s" % keys)
    with open(out) as f:
        check(json.load(f).get("frames") == FRAMES, "repair kept the frames: %s" % keys)
    ran(run(["summary", out]), "summary of the repaired trace")


def graph_replay_long_name():
    """The reports of etr graph and etr replay cut an op name after 1024 bytes, as human
    output does (docs/CLI.md, "Trace strings are shown, never obeyed"): they wrote it whole,
    three times (a 200 MB name gave 600 MB of report). Cut at a character's start; control
    characters still become spaces."""
    name = "\x1b" + "x" * 1021 + "\u20ac" + "y" * 4000  # the euro sign spans bytes 1022..1024
    path = write("long-name.json", HEADER + [("nodes", nodes([op(3, name)])), ("finish_ts", 5)])
    want = " " + "x" * 1021 + "..."
    for cmd in ("graph", "replay"):
        r = run([cmd, path])
        if not ran(r, "%s of an op with a long name" % cmd):
            continue
        out = r.stdout.decode("utf-8")  # (a cut inside a character would not decode)
        lines = [ln for ln in out.splitlines() if "xxxx" in ln]
        check(len(lines) >= 2 and all(ln.endswith(want) for ln in lines) and "yy" not in out,
              "%s: the name not cut after 1024 bytes: %d lines, %d bytes" %
              (cmd, len(lines), len(out)))


def repair_says_decompressed():
    """etr repair of an intact zstd trace writes plain JSON, as for gzip, and says so: it
    said "copied unchanged" for zstd (only gzip got "(decompressed)"). Skipped without the
    zstd tool."""
    if not shutil.which("zstd"):
        print("repair_says_decompressed: skipped (no zstd)")
        return
    path = write("plain.json", HEADER + [("nodes", nodes([op(3)])), ("finish_ts", 5)])
    subprocess.run(["zstd", "-q", "-f", path, "-o", path + ".zst"], check=True)
    out = os.path.join(WORK, "plain.repaired.json")
    r = run(["repair", path + ".zst", "-o", out])
    if ran(r, "repair of an intact zstd trace"):
        with open(path, "rb") as a, open(out, "rb") as b:
            check(a.read() == b.read(), "repair of a zstd trace: not its JSON")
        check(b"copied unchanged (decompressed)" in r.stderr, "repair says: %r" % r.stderr)


def tables_not_held_by_commands_without_use():
    """The commands that use no table (chrome, graph, replay, chakra; summary uses the "etr"
    footer only) pass over the tables after "nodes" without holding them: they loaded them
    whole, up to 1.5 times the trailer's budget (a trace with 1 M distinct tracebacks: 196 MB
    for summary and chrome, 3.6 MB now). Checked under an address-space limit (RLIMIT_AS,
    32 MiB) with ETR_READER_LIMIT_MB=8, so that a 3 MB table (1.5 M numbers, about 30 MB
    as values) is within the trailer's budget (64 MiB) and is loaded when held. Skipped when
    the command cannot run under that limit at all (sanitizer builds reserve more)."""
    limit = 32 << 20

    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    tiny = write("no-tables.json", HEADER + [("nodes", nodes([op(3)])), ("finish_ts", 5)])
    if run(["summary", tiny], preexec_fn=limited).returncode != 0:
        print("tables_not_held_by_commands_without_use: skipped (etr needs more than 32 MiB "
              "of address space here)")
        return
    path = os.path.join(WORK, "big-tables-unused.json")
    with open(path, "w") as f:
        f.write(json.dumps(dict(HEADER + [("nodes", nodes([op(3, tb=0)])), ("finish_ts", 5),
                                          ("frames", FRAMES)]))[:-1])
        f.write(', "tracebacks": [' + ",".join(["[" + ",".join(["0"] * 100) + "]"] * 15000) +
                '], "etr": {"version": "0.1.0", "stats": {"nodes_written": 3}}}')
    for args in (["summary", path], ["chrome", path, "-o", os.devnull], ["graph", path],
                 ["replay", path]):
        r = run(args, limit_mb=8, preexec_fn=limited)
        ran(r, "%s of a trace with a 3 MB table under a 32 MiB address space" % args[0])
    r = run(["summary", "--json", path], limit_mb=8, preexec_fn=limited)
    if ran(r, "summary --json under the limit"):
        check(json.loads(r.stdout)["recorder"]["stats"] == {"nodes_written": 3},
              "summary still reads the footer: %r" % r.stdout[-200:])


CASES = [repair_table_over_limit, symbolize_keys_in_any_order, repair_cut_keys_before_nodes,
         graph_replay_long_name, repair_says_decompressed, tables_not_held_by_commands_without_use]

for case in CASES:
    try:
        case()
    except Exception as e:  # noqa: BLE001 (a case that crashes is a failure, not the end)
        check(False, "%s raised %r" % (case.__name__, e))
sys.exit(finish("cli.bounded: passed"))
