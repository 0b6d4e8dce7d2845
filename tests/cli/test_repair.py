#!/usr/bin/env python3
"""Tests of `etr repair` (issue 5, item 1): traces cut at many offsets come back valid.

usage: test_repair.py ETR EXAMPLE OUTDIR REAL_DIR PART [--quick]
  PART ours  traces recorded by the example runtime (threads, tracebacks, gzip), cut at every
             byte of the header, every byte in windows around node boundaries and in the
             footer, and a few hundred random offsets; each repaired output must pass
             `etr validate --strict`, keep exactly the nodes whose text ends before the cut
             (counted here with Python's own JSON decoder, not with etr's reader), byte for
             byte, and report bytes dropped = cut length - end of the last complete node.
             Also: intact input, stdin, empty / garbage input, OUT == FILE, unwritable OUT.
       real  the same on the real PyTorch traces (exit 77 = skipped when REAL_DIR is absent).
  --quick    fewer offsets (for the run through the reader's yajl backend).
"""
import concurrent.futures
import gzip
import json
import os
import random
import subprocess
import sys
import threading
import time
import zlib

ETR, EXAMPLE, OUT, REAL, PART = sys.argv[1:6]
QUICK = "--quick" in sys.argv[6:]
SKIP = 77
THREAD = "[pytorch|profiler|execution_trace|thread]"
PLACEHOLDER = "[etr|repair|unfinished]"
os.makedirs(OUT, exist_ok=True)
failures = []
checked = [0]


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg, flush=True)


def run(args, stdin=None, input_bytes=None):
    return subprocess.run(args, stdin=stdin, input=input_bytes, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)


# ---- an independent view of a trace: where each node's text starts and ends ----

def skip_space(text, i, also=""):
    """The first index from i of a character that is neither JSON white space nor in also."""
    while text[i] in " \t\r\n" or text[i] in also:
        i += 1
    return i


class Layout:
    """Byte offsets of a complete trace's parts, found with Python's json module (bytes are
    decoded as latin-1 so that string offsets are byte offsets)."""

    def __init__(self, data):
        self.data = data
        text = data.decode("latin-1")
        dec = json.JSONDecoder()
        i = text.index('"nodes"')
        i = text.index("[", i) + 1
        self.header_end = i
        # (start, end, id, ctrl_deps, has_traceback, tid, fw_parent, fw_tid)
        self.nodes = []
        self.thread_ids = set()
        while True:
            i = skip_space(text, i, ",")
            if text[i] == "]":
                break
            node, end = dec.raw_decode(text, i)
            tb = any(a.get("name") == "traceback" for a in node.get("attrs", []))
            self.nodes.append((i, end, node["id"], node["ctrl_deps"], tb, tid_of(node),
                               attr_of(node, "fw_parent") or 0, attr_of(node, "fw_tid") or 0))
            if node["name"] == THREAD:
                self.thread_ids.add(node["id"])
            i = end
        # where each top-level value after "nodes" ends
        self.trailer_ends = {}
        i += 1
        while True:
            i = skip_space(text, i, ",")
            if text[i] == "}":
                break
            key, i = dec.raw_decode(text, i)
            i = text.index(":", i) + 1
            i = skip_space(text, i)
            _, i = dec.raw_decode(text, i)
            self.trailer_ends[key] = i
        self.json_end = i + 1  # after the top-level '}': what follows is whitespace

    def expect(self, cut):
        """Nodes complete in the first `cut` bytes and the end of the last one."""
        done = [n for n in self.nodes if n[1] <= cut]
        return done, (done[-1][1] if done else self.header_end)


def tid_of(node):
    return next((a["value"] for a in node.get("attrs", []) if a.get("name") == "tid"), None)


def attr_of(node, name):
    return next((a["value"] for a in node.get("attrs", []) if a.get("name") == name), None)


def missing_parents(done):
    """Ids the kept nodes name but lack: ctrl_deps parents and fw_parent forward ops."""
    ids = {n[2] for n in done}
    return {n[3] for n in done if n[3] not in ids and n[3] != 1} | \
        {n[6] for n in done if n[6] and n[6] not in ids}


def missing_fw_threads(done):
    """Threads of the forward ops named by fw_parent and lacking (their placeholders' threads)."""
    ids = {n[2] for n in done}
    return {n[7] or n[5] for n in done if n[6] and n[6] not in ids}


# ---- one cut ----

def check_cut(name, layout, cut_bytes, json_len, workdir, validate_args, src_suffix=".json",
              intact=None):
    """Repairs cut_bytes (json_len = length of its decompressed content) and checks it.
    intact: whether the input is whole (default: json_len is the whole trace)."""
    tag = "%s@%d" % (name, len(cut_bytes))
    src = os.path.join(workdir, "cut%s" % src_suffix)
    dst = os.path.join(workdir, "rep.json")
    with open(src, "wb") as f:
        f.write(cut_bytes)
    if os.path.exists(dst):
        os.unlink(dst)
    r = run([ETR, "repair", "--json", src, "-o", dst])
    checked[0] += 1
    if json_len < layout.header_end:
        # no complete header: not a trace we can repair; nothing written
        if r.returncode != 2 or os.path.exists(dst):
            fail("%s: header cut: exit %d (want 2), output %s" % (
                tag, r.returncode, "written" if os.path.exists(dst) else "absent"))
        elif len(r.stderr.splitlines()) != 1 or b": byte " not in r.stderr:
            fail("%s: header cut: want a one-line 'FILE: byte N: ...' error, got %r" %
                 (tag, r.stderr))
        return
    if r.returncode != 0:
        fail("%s: exit %d: %s" % (tag, r.returncode, r.stderr.decode(errors="replace")))
        return
    rep = json.loads(r.stdout)
    done, last_end = layout.expect(json_len)
    if intact is None:
        intact = json_len >= layout.json_end
    want_dropped = 0 if intact else json_len - last_end
    if rep["nodes_kept"] != len(done):
        fail("%s: kept %d nodes, want %d" % (tag, rep["nodes_kept"], len(done)))
    if rep["bytes_dropped"] != want_dropped:
        fail("%s: dropped %d bytes, want %d" % (tag, rep["bytes_dropped"], want_dropped))
    if rep["intact"] != intact:
        fail("%s: intact %s, want %s" % (tag, rep["intact"], intact))
    with open(dst, "rb") as f:
        out = f.read()
    if intact:
        if out != layout.data[:json_len]:
            fail("%s: intact input not copied unchanged" % tag)
        return
    # the header and every kept node (with the separators between them), byte for byte
    if out[:last_end] != layout.data[:last_end]:
        fail("%s: the first %d bytes differ from the input" % (tag, last_end))
    v = run([ETR, "validate"] + validate_args + ["--max", "3", dst])
    if v.returncode != 0:
        fail("%s: repaired trace does not validate: %s" % (
            tag, v.stdout.decode(errors="replace")[-600:]))
        return
    d = json.loads(out)
    rp = d["etr"]["repair"]
    if rp["nodes_kept"] != len(done) or rp["bytes_dropped"] != want_dropped:
        fail("%s: the trace's repair member says %r" % (tag, rp))
    nodes = d["nodes"]
    if len(nodes) != len(done) + rep["placeholders_added"] + rep["thread_nodes_added"] + \
            (1 if rep["process_node_added"] else 0):
        fail("%s: %d nodes in the output, report %r" % (tag, len(nodes), rep))
    miss = missing_parents(done)
    added = {n["id"] for n in nodes[len(done):] if n["name"] == PLACEHOLDER}
    if added != miss:
        fail("%s: placeholders %s, missing parents %s" % (tag, sorted(added), sorted(miss)))
    # a thread node is added for each thread whose ops are kept but whose node is not
    kept_ids = {n[2] for n in done}
    top = max(kept_ids | {n[3] for n in done} | {1})
    lacking = ({n[5] for n in done if n[2] not in layout.thread_ids and n[2] != 1} |
               missing_fw_threads(done)) - {n[5] for n in done if n[2] in layout.thread_ids}
    new_threads = [n for n in nodes[len(done):] if n["name"] == THREAD]
    if sorted(tid_of(n) for n in new_threads) != sorted(lacking) or \
            any(n["id"] <= top for n in new_threads):
        fail("%s: thread nodes added %s, threads lacking one %s" % (
            tag, [(n["id"], tid_of(n)) for n in new_threads], sorted(lacking)))
    for n in nodes[len(done):]:
        if n["name"] == PLACEHOLDER and not any(
                a["name"] == "etr_incomplete" and a["value"] == 1 for a in n["attrs"]):
            fail("%s: placeholder %d without etr_incomplete" % (tag, n["id"]))
    has_process = any(n[2] == 1 for n in done)
    if rep["process_node_added"] == has_process:
        fail("%s: process_node_added %s, process node in the prefix %s" % (
            tag, rep["process_node_added"], has_process))
    # finish_ts: the input's own when its value was read whole (the byte after it is in the
    # prefix: a number at the very end may be the start of a longer one), else derived
    fin_end = layout.trailer_ends.get("finish_ts")
    if fin_end is not None and json_len > fin_end:
        want_fin = json.loads(layout.data[:layout.json_end].decode("latin-1"))["finish_ts"]
    else:
        ends = [n["ts"] + n["inclusive_dur"] for n in nodes[:len(done)] if "ts" in n]
        want_fin = max([d["start_ts"]] + [-(-e // 1000) for e in ends])
    if d["finish_ts"] != want_fin:
        fail("%s: finish_ts %d, want %d" % (tag, d["finish_ts"], want_fin))
    tb_nodes = sum(1 for n in done if n[4])
    tb_end = layout.trailer_ends.get("tracebacks")
    want_lost = tb_nodes if (tb_end is None or json_len < tb_end) else 0
    if rep["tracebacks_lost"] != want_lost:
        fail("%s: tracebacks_lost %d, want %d" % (tag, rep["tracebacks_lost"], want_lost))
    if want_lost and any(d["tracebacks"][t] for t in range(len(d["tracebacks"]))):
        fail("%s: lost tracebacks are not empty" % tag)


def cut_points(layout, n_random, window, n_windows, rng, header_step=1):
    """Offsets: the whole header, every byte around sampled node boundaries, around the end
    of the last node and of each value in the footer, some through the footer, random ones."""
    size = len(layout.data)
    pts = set(range(0, min(layout.header_end + 2, size), header_step))
    pts.update(range(layout.header_end - 2, layout.header_end + 3))
    nodes = layout.nodes

    def around(b, w):
        pts.update(range(max(0, b - w), min(size, b + w) + 1))

    picks = {0, 1, len(nodes) // 2, len(nodes) - 2, len(nodes) - 1}
    picks |= set(rng.sample(range(len(nodes)), min(n_windows, len(nodes))))
    for k in picks:
        if 0 <= k < len(nodes):
            around(nodes[k][0], window)
            around(nodes[k][1], window)
    footer = nodes[-1][1]
    for end in layout.trailer_ends.values():
        around(end, 3)
    pts.update(range(footer, size + 1, max(1, (size - footer) // (10 if QUICK else 30))))
    around(layout.json_end, 3)
    pts.add(size)
    pts.update(rng.randrange(layout.header_end, size) for _ in range(n_random))
    return sorted(pts)


def sweep(name, data, validate_args, n_random, window, n_windows, seed, header_step=1):
    t0 = time.monotonic()
    layout = Layout(data)
    rng = random.Random(seed)
    pts = cut_points(layout, n_random, window, n_windows, rng, header_step)
    # two workers (the machine has 2 cores), each in its own directory
    dirs = [os.path.join(OUT, "%s.w%d" % (name, i)) for i in range(2)]
    for d in dirs:
        os.makedirs(d, exist_ok=True)

    def work(i):
        for c in pts[i::2]:
            check_cut(name, layout, data[:c], c, dirs[i], validate_args)

    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        list(ex.map(work, range(2)))
    print("%s: %d cuts (%d nodes, %d bytes), %.1f s" % (
        name, len(pts), len(layout.nodes), len(data), time.monotonic() - t0), flush=True)
    return layout


def thread_nodes_last(data):
    """The trace as recorders that write a thread's node at thread exit lay it out: thread
    nodes moved after the ops, before the process node."""
    lay = Layout(data)
    text = [data[n[0]:n[1]] for n in lay.nodes]
    threads = [t for t, n in zip(text, lay.nodes) if n[2] in lay.thread_ids]
    ops = [t for t, n in zip(text, lay.nodes) if n[2] not in lay.thread_ids and n[2] != 1]
    proc = [t for t, n in zip(text, lay.nodes) if n[2] == 1]
    body = b",".join(b"\n    " + t for t in ops + threads + proc)
    return data[:lay.header_end] + body + data[lay.nodes[-1][1]:]


RAW_BLOCK = 64 * 1024  # the raw stream's block size in cmd_repair.c


def big_strings(data, seed):
    """The trace with two ops' inputs replaced by a ~200 KB string of escapes and braces,
    laid out so that one of the raw stream's 64 KiB blocks ends between the two bytes of a
    \\" escape in the first and of a \\\\ escape in the second, each followed by "}}}}"
    (a scanner that lost the escape state at the block's end would take them for the end of
    the node); returns it and the (start, end) of the two nodes."""
    lay = Layout(data)
    rng = random.Random(seed)
    out, spans, last = [], [], 0
    for k, esc in ((len(lay.nodes) // 3, '"'), (2 * len(lay.nodes) // 3, '\\"')):
        a, b = lay.nodes[k][0], lay.nodes[k][1]
        node = json.loads(data[a:b].decode("utf-8"))
        node["inputs"] = {"values": ["@MARK@"], "shapes": [[]], "types": ["String"],
                          "strides": [[]]}
        start = sum(len(x) for x in out) + (a - last)  # where the node lands in the output
        first = start + json.dumps(node).encode().index(b"@MARK@")  # its string's first byte
        boundary = (first // RAW_BLOCK + 2) * RAW_BLOCK
        mix = "".join(rng.choice('"\\x{}\u00e9') for _ in range(60000))
        node["inputs"]["values"][0] = "x" * (boundary - 1 - first) + esc + "}}}}" + mix
        new = json.dumps(node).encode()
        assert new[boundary - 1 - start] == 0x5C and new[boundary - start] in b'"\\'
        out.append(data[last:a])
        out.append(new)
        spans.append((start, start + len(new)))
        last = b
    out.append(data[last:])
    return b"".join(out), spans


def gzip_sweep(name, data, validate_args, n_cuts, seed):
    """Cuts of the gzip-compressed trace: repaired from what decompresses."""
    layout = Layout(data)
    gz = gzip.compress(data, 6)
    rng = random.Random(seed)
    pts = sorted({rng.randrange(20, len(gz)) for _ in range(n_cuts)} | {len(gz)})
    wd = os.path.join(OUT, name + ".gz.w")
    os.makedirs(wd, exist_ok=True)
    for c in pts:
        z = zlib.decompressobj(wbits=31)
        prefix = z.decompress(gz[:c])
        # a gzip file that lacks only its 8-byte trailer is cut too (its footer is rebuilt)
        check_cut(name + ".gz", layout, gz[:c], len(prefix), wd, validate_args, ".json.gz",
                  intact=c == len(gz))
    print("%s.gz: %d cuts" % (name, len(pts)), flush=True)


def expect(desc, args, code, stdin=None, input_bytes=None, err_has=None):
    r = run(args, stdin=stdin, input_bytes=input_bytes)
    if r.returncode != code:
        fail("%s: exit %d, want %d: %s" % (desc, r.returncode, code, r.stderr.decode(errors="replace")))
    elif err_has and err_has.encode() not in r.stderr:
        fail("%s: stderr lacks %r: %r" % (desc, err_has, r.stderr))
    return r


def part_ours():
    t1 = os.path.join(OUT, "threads.json")
    t2 = os.path.join(OUT, "traceback.json")
    for path, extra in ((t1, ["--threads", "2", "--iters", "1"]),
                        (t2, ["--threads", "1", "--iters", "1", "--traceback"])):
        if os.path.exists(path):
            os.unlink(path)
        r = run([EXAMPLE, "--out", path] + extra)
        if r.returncode != 0:
            fail("example runtime %s: exit %d" % (extra, r.returncode))
            return
    data1 = open(t1, "rb").read()
    data2 = open(t2, "rb").read()
    strict = ["--strict"]
    nr, win = (30, 3) if QUICK else (100, 6)
    lay = sweep("threads", data1, strict, nr, win, 1 if QUICK else 2, 1)
    sweep("traceback", data2, strict, nr // 3, win // 2, 0 if QUICK else 1, 2, 9)
    gzip_sweep("threads", data1, strict, 6 if QUICK else 12, 3)
    # escapes across the raw stream's block boundaries
    rng = random.Random(5)
    big, spans = big_strings(data1, 5)
    lay_big = Layout(big)
    wd = os.path.join(OUT, "big")
    os.makedirs(wd, exist_ok=True)
    pts = set()
    for a, b in spans:
        pts.update(range(b - 2, b + 3))
        pts.update(rng.randrange(a, b) for _ in range(2 if QUICK else 4))
    for c in sorted(pts):
        check_cut("big-strings", lay_big, big[:c], c, wd, strict)
    print("big-strings: %d cuts (%d bytes)" % (len(pts), len(big)), flush=True)
    # thread nodes written at thread exit: repair adds those of the threads still running
    sweep("thread-nodes-last", thread_nodes_last(data1), strict, nr // 3, 2, 0 if QUICK else 2, 4,
          9)

    wd = os.path.join(OUT, "misc")
    os.makedirs(wd, exist_ok=True)
    cut = os.path.join(wd, "cut.json")
    mid = lay.nodes[len(lay.nodes) // 2]
    with open(cut, "wb") as f:
        f.write(data1[:mid[0] + (mid[1] - mid[0]) // 2])
    ref = os.path.join(wd, "ref.json")
    expect("repair cut", [ETR, "repair", cut, "-o", ref], 0, err_has="kept ")
    ref_bytes = open(ref, "rb").read()
    # the report line: one line naming what was kept, added and dropped
    r = run([ETR, "repair", cut, "-o", os.path.join(wd, "x.json")])
    line = r.stderr.decode()
    if line.count("\n") != 1 or "kept %d nodes" % len(lay.expect(len(open(cut, 'rb').read()))[0]) \
            not in line or "dropped" not in line or "1 process node" not in line:
        fail("report line: %r" % line)
    # stdin: a pipe (copied to a temporary file) and a regular file give the same output
    o = os.path.join(wd, "stdin.json")
    with open(cut, "rb") as f:
        expect("stdin regular", [ETR, "repair", "-", "-o", o], 0, stdin=f)
    if open(o, "rb").read() != ref_bytes:
        fail("stdin (regular file) output differs")
    p = subprocess.Popen(["cat", cut], stdout=subprocess.PIPE)
    expect("stdin pipe", [ETR, "repair", "-", "-o", o], 0, stdin=p.stdout)
    p.wait()
    if open(o, "rb").read() != ref_bytes:
        fail("stdin (pipe) output differs")
    # a FIFO (as <(...) gives) is copied to a temporary file too
    fifo = os.path.join(wd, "fifo")
    if os.path.lexists(fifo):
        os.unlink(fifo)
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "wb") as w:
            w.write(open(cut, "rb").read())

    th = threading.Thread(target=feed)
    th.start()
    expect("FIFO", [ETR, "repair", fifo, "-o", o], 0)
    th.join()
    if open(o, "rb").read() != ref_bytes:
        fail("FIFO output differs")
    expect("a directory", [ETR, "repair", wd, "-o", o], 2, err_has="directory")
    # -o - writes the trace on stdout
    r = expect("stdout", [ETR, "repair", cut, "-o", "-"], 0)
    if r.stdout != ref_bytes:
        fail("-o - output differs")
    # a repaired trace is intact: repairing it again changes nothing
    o2 = os.path.join(wd, "again.json")
    r = expect("repair of a repaired trace", [ETR, "repair", ref, "-o", o2], 0, err_has="intact")
    if open(o2, "rb").read() != ref_bytes:
        fail("repairing a repaired trace changed it")
    # a complete trace that names nodes it lacks (finalized at a crash while an op was open
    # and its child done; a forward op never written): placeholders before its own end
    layout1 = Layout(data1)
    by_id = {n[2]: n for n in layout1.nodes}
    parent = next((n[3] for n in layout1.nodes if n[3] in by_id and n[3] not in
                   layout1.thread_ids and n[3] != 1), None)
    fwp = next((n[6] for n in layout1.nodes if n[6] and n[6] in by_id and n[6] != parent), None)
    if parent is None or fwp is None:
        fail("the example trace has no nested op or no fw_parent to remove")
    else:
        holey = data1
        order = [n[2] for n in layout1.nodes]
        for victim in sorted((parent, fwp), key=lambda v: -by_id[v][0]):
            k = order.index(victim)
            if k > 0:  # the node with the separator before it
                a, b = layout1.nodes[k - 1][1], by_id[victim][1]
            else:  # the first node with the separator after it
                a, b = by_id[victim][0], layout1.nodes[1][0]
            holey = holey[:a] + holey[b:]
        hp = os.path.join(wd, "holey.json")
        with open(hp, "wb") as f:
            f.write(holey)
        if run([ETR, "validate", "--quiet", hp]).returncode == 0:
            fail("validate accepts a trace whose parent and fw_parent are missing")
        r = expect("complete but holey", [ETR, "repair", hp, "-o", o2], 0,
                   err_has="placeholder")
        v = run([ETR, "validate", "--strict", "--quiet", o2])
        if v.returncode != 0:
            fail("holey trace repaired does not validate: %s" % v.stdout.decode()[-400:])
        fixed = json.loads(open(o2, "rb").read())
        ph = {n["id"] for n in fixed["nodes"] if n["name"] == PLACEHOLDER}
        if ph != {parent, fwp}:
            fail("holey: placeholders %s, want %s" % (sorted(ph), sorted({parent, fwp})))
        if fixed.get("etr", {}).get("stats") is None:
            fail("holey: the trace's own footer (etr.stats) was not kept")
    # intact gzip: the decompressed trace
    gzp = os.path.join(wd, "whole.json.gz")
    with open(gzp, "wb") as f:
        f.write(gzip.compress(data1))
    expect("intact gzip", [ETR, "repair", gzp, "-o", o2], 0, err_has="intact")
    if open(o2, "rb").read() != data1:
        fail("intact gzip: output is not the decompressed input")
    # a zero-filled tail (power loss on some file systems) is dropped
    zt = os.path.join(wd, "zeros.json")
    with open(zt, "wb") as f:
        f.write(data1[:mid[1]] + b"\0" * 4096)
    r = expect("zero-filled tail", [ETR, "repair", "--json", zt, "-o", o2], 0)
    if r.returncode == 0:
        rep = json.loads(r.stdout)
        if rep["bytes_dropped"] != 4096 or rep["nodes_kept"] != len(lay.expect(mid[1])[0]):
            fail("zero-filled tail: %r" % rep)
        expect("zero-filled tail validates", [ETR, "validate", "--strict", o2], 0)
    # not a trace: exit 2, one line naming the byte, nothing written
    for desc, content in (("empty", b""), ("garbage", b"hello world\n"),
                          ("json, not a trace", b'{"a": 1}\n'), ("binary", bytes(range(256))),
                          ("header cut", data1[:lay.header_end - 3])):
        bad = os.path.join(wd, "bad.json")
        with open(bad, "wb") as f:
            f.write(content)
        o3 = os.path.join(wd, "bad.out.json")
        if os.path.exists(o3):
            os.unlink(o3)
        r = expect(desc, [ETR, "repair", bad, "-o", o3], 2)
        if os.path.exists(o3):
            fail("%s: output written" % desc)
        if r.stderr.count(b"\n") != 1 or b"bad.json: byte " not in r.stderr:
            fail("%s: want a one-line error naming file and byte: %r" % (desc, r.stderr))
    expect("missing input", [ETR, "repair", os.path.join(wd, "nope.json"), "-o", o3], 2)
    # never overwrite the input (also through a symlink)
    before = open(cut, "rb").read()
    expect("OUT == FILE", [ETR, "repair", cut, "-o", cut], 1, err_has="is the input")
    link = os.path.join(wd, "link.json")
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(cut, link)
    expect("OUT -> FILE", [ETR, "repair", cut, "-o", link], 1, err_has="is the input")
    with open(cut, "rb") as f:
        expect("OUT == stdin's file", [ETR, "repair", "-", "-o", cut], 1, stdin=f)
    if open(cut, "rb").read() != before:
        fail("the input was modified")
    # unwritable output: exit 1; a device is never removed
    expect("OUT in a missing dir", [ETR, "repair", cut, "-o", os.path.join(wd, "no", "x.json")],
           1, err_has="cannot create")
    if os.path.exists("/dev/full"):
        expect("OUT /dev/full", [ETR, "repair", cut, "-o", "/dev/full"], 1, err_has="write error")
        if not os.path.exists("/dev/full"):
            fail("repair removed /dev/full")
    # usage
    expect("no -o", [ETR, "repair", cut], 2)
    expect("--json with -o -", [ETR, "repair", "--json", cut, "-o", "-"], 2)
    expect("two inputs", [ETR, "repair", cut, cut, "-o", o2], 2)
    r = expect("--help", [ETR, "repair", "--help"], 0)
    if b"placeholder" not in r.stdout or b"traceback" not in r.stdout:
        fail("--help does not describe placeholders and tracebacks")
    wide_tids(data1, wd)


def wide_tids(data, wd):
    """validate compares whole tids: an op whose tid differs from its thread node's only above
    bit 16 (OS tids do) is an error (the validator once kept the low 16 bits only)."""
    doc = json.loads(data)
    for n in doc["nodes"]:
        if n.get("name") != THREAD:
            for a in n.get("attrs", []):
                if a.get("name") == "tid":
                    a["value"] = int(a["value"]) + 65536
    bad = os.path.join(wd, "wide_tid.json")
    with open(bad, "w") as f:
        json.dump(doc, f)
    r = expect("validate, op tid differs above bit 16", [ETR, "validate", bad], 1)
    if b"hangs under the thread node" not in r.stdout:
        fail("wide tid: validate does not name the tid mismatch: %r" % r.stdout[-400:])


def part_real():
    if not os.path.isdir(REAL):
        print("real traces not found at %s: skipped" % REAL)
        sys.exit(SKIP)
    names = sorted(f for f in os.listdir(REAL) if f.endswith(".json") or f.endswith(".json.gz"))
    if not names:
        sys.exit(SKIP)
    for i, nm in enumerate(names):
        raw = open(os.path.join(REAL, nm), "rb").read()
        data = gzip.decompress(raw) if nm.endswith(".gz") else raw
        # real traces carry quirks that --strict counts (e.g. short strides): plain validate
        if nm.endswith(".gz"):
            gzip_sweep(nm[:-3], data, [], 2 if QUICK else 4, 10 + i)
            layout = Layout(data)
            rng = random.Random(20 + i)
            wd = os.path.join(OUT, nm + ".w")
            os.makedirs(wd, exist_ok=True)
            pts = [len(data)] + [rng.randrange(layout.header_end, len(data))
                                 for _ in range(2 if QUICK else 3)]
            for c in pts:
                check_cut(nm, layout, data[:c], c, wd, [])
        else:
            sweep(nm, data, [], 20 if QUICK else 50, 3 if QUICK else 4, 1, 10 + i, 3)


if PART == "ours":
    part_ours()
elif PART == "real":
    part_real()
else:
    print("unknown part", PART)
    sys.exit(2)
print("%d repairs checked, %d failures" % (checked[0], len(failures)))
sys.exit(1 if failures else 0)
