#!/usr/bin/env python3
"""Outputs of the etr commands are whole or not there (ctest cli.outputs): a file the
command writes keeps what it held until the command succeeds (a failed input, a full disk
as RLIMIT_FSIZE makes it, SIGINT while it writes), no temporary file is left beside it, and
no output overwrites a file the command reads (`replay --model`, `chakra`'s input in its
output directory). Also: `summary`'s tensor bytes saturate, `validate` shows a trace's
control characters escaped, `chakra --rank` past its range says why. Each case failed
before its fix (2026-11-27).

usage: test_outputs.py ETR EXAMPLE OUTDIR
"""
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time

ETR, EXAMPLE, OUT = sys.argv[1:4]
shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)
failures = []
OLD = b"the file that was there\n"


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg, flush=True)


def check(cond, msg):
    if not cond:
        fail(msg)
    return cond


def run(args, **kw):
    return subprocess.run([ETR, *args], capture_output=True, timeout=300, **kw)


def leftovers(d):
    return [n for n in os.listdir(d) if ".etr-" in n]


def fresh_dir(name):
    d = os.path.join(OUT, name)
    os.makedirs(d)
    return d


def put_old(path):
    with open(path, "wb") as f:
        f.write(OLD)


def is_old(path):
    if not os.path.exists(path):  # (removed: not the old file either)
        return False
    with open(path, "rb") as f:
        return f.read() == OLD


TRACE = os.path.join(OUT, "t.json")
LOG = os.path.join(OUT, "t.etr")
subprocess.run([EXAMPLE, "--out", TRACE, "--iters", "20"], check=True, capture_output=True)
subprocess.run([EXAMPLE, "--out", LOG, "--iters", "20"], check=True, capture_output=True)
with open(TRACE, "rb") as f:
    TEXT = f.read()
CUT = os.path.join(OUT, "cut.json")
with open(CUT, "wb") as f:
    f.write(TEXT[: len(TEXT) * 2 // 3])

# (command's arguments with O for the output and I for the input)
COMMANDS = {
    "chrome": ["chrome", "I", "-o", "O"],
    "summary": ["summary", "I", "-o", "O"],
    "graph": ["graph", "--max-nodes", "100000", "--dot", "O", "I"],
    "replay": ["replay", "--csv", "O", "I"],
    "symbolize": ["symbolize", "I", "-o", "O"],
    "repair": ["repair", "I", "-o", "O"],
}


def args_of(cmd, inp, out):
    return [inp if a == "I" else out if a == "O" else a for a in COMMANDS[cmd]]


def small_files():
    # (SIGXFSZ at its default, as a shell leaves it: the command must not die of it with
    # its temporary file left; before 2026-11-27 this test ignored it for the command)
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


def failed_runs_keep_the_old_file():
    """A command that fails (a cut input; a file limit smaller than its output) leaves the
    output as it was and nothing beside it. Before: chrome, graph, replay and summary left a
    truncated file on a full disk, chrome and symbolize one for a cut input; repair removed
    the old file on a full disk."""
    for cmd in COMMANDS:
        d = fresh_dir("fail-" + cmd)
        out = os.path.join(d, "out")
        put_old(out)
        r = run(args_of(cmd, CUT, out))
        if r.returncode == 0:  # (a command that reads what it can of a cut trace)
            check(not is_old(out), "%s: a successful run replaces the output" % cmd)
            put_old(out)
        else:
            check(is_old(out), "%s on a cut input (exit %d): the old output kept" %
                  (cmd, r.returncode))
        check(not leftovers(d), "%s: nothing left beside the output: %r" % (cmd, leftovers(d)))
        r = run(args_of(cmd, TRACE, out), preexec_fn=small_files)
        if check(r.returncode == 1, "%s past RLIMIT_FSIZE: exit %d, want 1 (%s)" %
                 (cmd, r.returncode, r.stderr[-200:])):
            check(is_old(out), "%s past RLIMIT_FSIZE: the old output kept" % cmd)
            check(not leftovers(d), "%s past RLIMIT_FSIZE: nothing left: %r" % (cmd,
                                                                                 leftovers(d)))
        r = run(args_of(cmd, TRACE, out))
        check(r.returncode == 0 and not is_old(out) and os.path.getsize(out) > 0,
              "%s: the run that succeeds writes the output (exit %d)" % (cmd, r.returncode))
    # repair's write error closed (and discarded) its temporary file, then discarded the
    # output again, which by then named the old file: removed (2026-11-28). Its .gz too.
    d = fresh_dir("fail-repair-gz")
    out = os.path.join(d, "out.json.gz")
    put_old(out)
    r = run(["repair", TRACE, "-o", out], preexec_fn=small_files)
    if check(r.returncode == 1, "repair -o .gz past RLIMIT_FSIZE: exit %d, want 1" % r.returncode):
        check(os.path.exists(out) and is_old(out),
              "repair -o .gz past RLIMIT_FSIZE: the old output kept")
        check(not leftovers(d), "repair -o .gz past RLIMIT_FSIZE: nothing left: %r" %
              leftovers(d))


def output_through_a_symlink():
    """An output path that is a symlink: the file it points to is replaced, the link stays,
    and the file keeps its mode (the outputs written beside and renamed over their path
    first replaced the link itself with a new file of mode 0644)."""
    d = fresh_dir("symlink")
    real = os.path.join(d, "real.json")
    link = os.path.join(d, "link.json")
    put_old(real)
    os.chmod(real, 0o600)
    os.symlink("real.json", link)
    r = run(["chrome", TRACE, "-o", link])
    check(r.returncode == 0, "chrome -o a symlink: exit %d" % r.returncode)
    check(os.path.islink(link), "the symlink stays a symlink")
    check(not is_old(real) and os.path.getsize(real) > 0, "the file it points to is written")
    check((os.stat(real).st_mode & 0o777) == 0o600, "its mode stays 0600: %o" %
          (os.stat(real).st_mode & 0o777))
    check(not leftovers(d), "nothing left beside it: %r" % leftovers(d))


def fsize_limit(n):
    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (n, n))
    return limit


def convert_gz_keeps_the_old_file():
    """convert -o x.json.gz past RLIMIT_FSIZE keeps the old file (before: truncated and
    partly written, the uncompressed JSON left beside it)."""
    d = fresh_dir("convert-gz")
    out = os.path.join(d, "out.json.gz")
    ref = os.path.join(d, "ref.json.gz")
    check(run(["convert", LOG, "-o", ref]).returncode == 0, "convert .gz")
    gz_size = os.path.getsize(ref)
    os.unlink(ref)
    put_old(out)
    r = run(["convert", LOG, "-o", out], preexec_fn=fsize_limit(gz_size // 2))
    check(r.returncode == 1, "convert .gz past RLIMIT_FSIZE: exit %d (%s)" % (r.returncode,
                                                                             r.stderr[-200:]))
    check(is_old(out), "convert .gz: the old output kept")
    check(not leftovers(d) and sorted(os.listdir(d)) == ["out.json.gz"],
          "convert .gz: nothing left beside it: %r" % os.listdir(d))
    r = run(["convert", LOG, "-o", out])
    check(r.returncode == 0 and not is_old(out), "convert .gz then succeeds")


def convert_gz_needs_the_room_of_the_output():
    """convert -o x.json.gz writes its temporary file compressed: a file limit that the
    compressed trace fits in, and the JSON does not, is no obstacle, for a complete log and
    a cut one (completed by repair, compressed too). Before: the whole JSON went to a
    temporary file beside OUT first (ENOSPC on a small file system)."""
    d = fresh_dir("convert-gz-room")
    with open(LOG, "rb") as f:
        log = f.read()
    cut = os.path.join(d, "cut.etr")
    with open(cut, "wb") as f:
        f.write(log[: len(log) - 100])
    for src in (LOG, cut):
        plain = os.path.join(d, "plain.json")
        check(run(["convert", src, "-o", plain]).returncode == 0, "convert %s" % src)
        json_size = os.path.getsize(plain)
        gz = os.path.join(d, "out.json.gz")
        r = run(["convert", src, "-o", gz], preexec_fn=fsize_limit(json_size // 3))
        if check(r.returncode == 0, "convert %s -o .gz, files limited to a third of the JSON "
                 "(%d bytes): exit %d (%s)" % (src, json_size, r.returncode, r.stderr[-300:])):
            check(os.path.getsize(gz) < json_size // 3, "the output is compressed")
            with open(plain, "rb") as f:
                want = f.read()
            got = subprocess.run(["gzip", "-dc", gz], capture_output=True).stdout
            # (a cut log's repair member counts the bytes of the file convert made first)
            same = re.compile(rb'"source_bytes": [0-9]+')
            check(same.sub(b"", got) == same.sub(b"", want),
                  "the .gz holds the JSON of the plain conversion")
        check(not leftovers(d), "nothing left beside it: %r" % leftovers(d))
        for p in (plain, gz):
            if os.path.exists(p):
                os.unlink(p)


def interrupted_run_keeps_the_old_file():
    """SIGINT while chrome writes (its input a FIFO fed half the trace, the output's
    temporary file there): the command ends by the signal, the old output is kept and the
    temporary file removed. Before: a truncated output, the old one lost."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        d = fresh_dir("interrupt-%d" % sig)
        fifo = os.path.join(d, "in.fifo")
        os.mkfifo(fifo)
        out = os.path.join(d, "out.json")
        put_old(out)
        p = subprocess.Popen([ETR, "chrome", fifo, "-o", out], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
        w = open(fifo, "wb")
        w.write(TEXT[: len(TEXT) // 2])
        w.flush()
        deadline = time.monotonic() + 60
        while not leftovers(d) and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.01)
        check(bool(leftovers(d)), "chrome: its temporary output exists while it runs")
        p.send_signal(sig)
        rc = p.wait(timeout=60)
        w.close()
        check(rc == -sig, "chrome ends by signal %d: %r" % (sig, rc))
        check(is_old(out), "chrome interrupted by %d: the old output kept" % sig)
        check(not leftovers(d), "chrome interrupted: nothing left beside it: %r" % leftovers(d))


def small_rank(path):
    """A trace with no process-group node: chakra gives it its position as its rank."""
    e = {"values": [], "shapes": [], "types": []}
    a = [{"name": "tid", "type": "uint64", "value": 1}]
    with open(path, "w") as f:
        json.dump({"schema": "1.1.1", "pid": 1, "time": "2026-01-01 00:00:00", "start_ts": 0,
                   "nodes": [{"id": 2, "name": "[pytorch|profiler|execution_trace|thread]",
                              "ctrl_deps": 1, "inputs": e, "outputs": e, "attrs": a},
                             {"id": 3, "name": "op", "ctrl_deps": 2, "inputs": e,
                              "outputs": e, "attrs": a},
                             {"id": 1, "name": "[pytorch|profiler|execution_trace|process]",
                              "ctrl_deps": 1, "inputs": e, "outputs": e, "attrs": []}],
                   "finish_ts": 1}, f)
    return path


def chakra_all_ranks_or_none():
    """chakra writes every rank's file or none: a trace of a rank already converted (the
    example trace's process-group node says rank 0, the first small trace is rank 0 by its
    position) exits 1 and leaves DIR as it was, with 2 traces before it and with 20 (more
    files waiting than the outputs' first 8 slots); SIGINT while 12 wait removes them all.
    Before (audit13 #6): the ranks before the duplicate were written, a partial set."""
    if run(["chakra", "--help"]).returncode != 0:
        return
    src = fresh_dir("chakra-ranks")
    smalls = [small_rank(os.path.join(src, "s%02d.json" % i)) for i in range(20)]
    for n in (2, 20):
        d = fresh_dir("chakra-dup-%d" % n)
        put_old(os.path.join(d, "rank.0.et"))
        r = run(["chakra", *smalls[:n], TRACE, "-o", d])
        check(r.returncode == 1 and b"rank 0 again" in r.stderr,
              "chakra, %d ranks then rank 0 again: exit %d %r" % (n, r.returncode,
                                                                 r.stderr[-200:]))
        check(sorted(os.listdir(d)) == ["rank.0.et"] and is_old(os.path.join(d, "rank.0.et")),
              "chakra, %d ranks then rank 0 again: DIR as it was: %r" % (n, os.listdir(d)))
        check(r.stdout == b"", "chakra that failed reports no file: %r" % r.stdout[:200])
    d = fresh_dir("chakra-20")
    r = run(["chakra", *smalls, "-o", d])
    check(r.returncode == 0 and r.stdout.count(b"\n") == 20,
          "chakra of 20 traces: exit %d %r" % (r.returncode, r.stderr[-200:]))
    check(sorted(os.listdir(d)) == sorted("rank.%d.et" % i for i in range(20)),
          "chakra of 20 traces: their 20 files and nothing else: %r" % os.listdir(d))
    d = fresh_dir("chakra-interrupt")
    fifo = os.path.join(src, "last.fifo")
    os.mkfifo(fifo)
    p = subprocess.Popen([ETR, "chakra", *smalls[:12], fifo, "-o", d],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while len(leftovers(d)) < 12 and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.01)
    check(len(leftovers(d)) == 12, "chakra: 12 files wait while it reads the 13th: %r" %
          os.listdir(d))
    p.send_signal(signal.SIGINT)
    rc = p.wait(timeout=60)
    check(rc == -signal.SIGINT, "chakra ends by SIGINT: %r" % rc)
    check(os.listdir(d) == [], "chakra interrupted: nothing left in DIR: %r" % os.listdir(d))


def convert_default_name():
    """convert LOG.etr.gz (or .zst) without -o writes LOG.json, as for LOG.etr (docs/CLI.md:
    FILE with .etr replaced by .json). Before (audit13 #7): LOG.etr.gz.json."""
    d = fresh_dir("convert-name")
    with open(LOG, "rb") as f:
        log = f.read()
    packers = [("gz", ["gzip", "-k"]), ("GZ", ["gzip", "-k", "-S", ".GZ"])]
    if shutil.which("zstd"):
        packers.append(("zst", ["zstd", "-q"]))
    for ext, pack in packers:
        name = os.path.join(d, "run-%s.etr" % ext)
        with open(name, "wb") as f:
            f.write(log)
        subprocess.run([*pack, name], check=True)
        os.unlink(name)
        r = run(["convert", "run-%s.etr.%s" % (ext, ext)], cwd=d)
        check(r.returncode == 0 and b"-> run-%s.json" % ext.encode() in r.stdout,
              "convert run.etr.%s: exit %d %r %r" % (ext, r.returncode, r.stdout, r.stderr))
        check(os.path.exists(os.path.join(d, "run-%s.json" % ext)) and
              not os.path.exists(os.path.join(d, "run-%s.etr.%s.json" % (ext, ext))),
              "convert run.etr.%s: run.json made: %r" % (ext, os.listdir(d)))


def compressed_outputs():
    """An output named .gz (in any case) is gzip from every command, as convert's always was
    (before, chrome, summary, graph, replay, symbolize and repair wrote plain bytes under the
    name); one of a compression etr does not write (.zst, .xz, ...) is refused, nothing
    written (before: plain JSON under it, audit13 #4)."""
    import gzip
    d = fresh_dir("compressed")
    cmds = dict(COMMANDS, repair=["repair", "I", "-o", "O"], convert=["convert", "I", "-o", "O"])
    for cmd in cmds:
        inp = LOG if cmd == "convert" else TRACE
        plain = os.path.join(d, cmd + ".out")
        packed = os.path.join(d, cmd + ".OUT.Gz")
        COMMANDS_SAVED = COMMANDS.get(cmd)
        COMMANDS[cmd] = cmds[cmd]
        try:
            r1 = run(args_of(cmd, inp, plain))
            r2 = run(args_of(cmd, inp, packed))
            check(r1.returncode == 0 and r2.returncode == 0,
                  "%s: exit %d / %d %r" % (cmd, r1.returncode, r2.returncode, r2.stderr[-200:]))
            with open(packed, "rb") as f:
                head = f.read(2)
            if check(head == b"\x1f\x8b", "%s -o x.OUT.Gz: not gzip (%r)" % (cmd, head)):
                with gzip.open(packed, "rb") as f:
                    got = f.read()
                with open(plain, "rb") as f:
                    want = f.read()
                if cmd in ("chrome", "summary"):  # (they name their output or time themselves)
                    check(len(got) > 0, "%s: the gzip holds nothing" % cmd)
                else:
                    check(got == want, "%s: the gzip's bytes differ from the plain output" % cmd)
            for ext in (".json.zst", ".zstd", ".XZ", ".bz2", ".lz4"):
                out = os.path.join(d, cmd + ext)
                r = run(args_of(cmd, inp, out))
                check(r.returncode == 1 and b"etr writes gzip" in r.stderr,
                      "%s -o *%s: exit %d %r" % (cmd, ext, r.returncode, r.stderr[-200:]))
                check(not os.path.exists(out), "%s -o *%s: written" % (cmd, ext))
        finally:
            if COMMANDS_SAVED is None:
                del COMMANDS[cmd]
            else:
                COMMANDS[cmd] = COMMANDS_SAVED
    check(leftovers(d) == [], "compressed outputs: temporary files left %r" % leftovers(d))
    # a run that fails after opening its .gz output leaves the old file and no temporary one
    # (repair took a .gz output's stream, which has no descriptor, for a device: its
    # temporary file stayed; findings-15 #2)
    big = json.loads(TEXT)
    node = dict(big["nodes"][-1])
    node["name"] = "x" * (2 << 20)  # one node over a 1 MiB reader limit
    big["nodes"].append(node)
    bad = os.path.join(d, "big.json")
    with open(bad, "w") as f:
        json.dump(big, f)
    for cmd in ("repair", "chrome", "symbolize"):
        out = os.path.join(d, "failed-%s.json.gz" % cmd)
        put_old(out)
        COMMANDS_SAVED = COMMANDS.get(cmd)
        COMMANDS[cmd] = cmds[cmd]
        try:
            r = run(args_of(cmd, bad, out), env=dict(os.environ, ETR_READER_LIMIT_MB="1"))
        finally:
            if COMMANDS_SAVED is None:
                del COMMANDS[cmd]
            else:
                COMMANDS[cmd] = COMMANDS_SAVED
        check(r.returncode != 0, "%s of a node over the limit -o .gz: exit 0" % cmd)
        check(is_old(out), "%s -o .gz that failed: the old file replaced" % cmd)
        check(leftovers(d) == [], "%s -o .gz that failed: left %r" % (cmd, leftovers(d)))


def no_output_over_an_input():
    """replay --model M --csv M is refused and M kept (before: replaced by the CSV, exit 0);
    chakra with an input in its output directory under an output's name is refused before
    anything is written (before: rank.0.et was written first); every refusal exits 1."""
    d = fresh_dir("model")
    model = os.path.join(d, "m.txt")
    with open(model, "w") as f:
        f.write("speedup 2\n")
    with open(model, "rb") as f:
        before = f.read()
    r = run(["replay", "--model", model, "--csv", model, TRACE])
    check(r.returncode == 1, "replay --csv over --model: exit %d" % r.returncode)
    with open(model, "rb") as f:
        check(f.read() == before, "replay --csv over --model: the model kept")

    d = fresh_dir("chakra")
    inside = os.path.join(d, "rank.1.et")
    shutil.copy(TRACE, inside)
    r = run(["chakra", TRACE, inside, "-o", d])
    check(r.returncode == 1 and b"refusing" in r.stderr,
          "chakra with an input in DIR under an output's name: exit %d %s" %
          (r.returncode, r.stderr[-200:]))
    check(sorted(os.listdir(d)) == ["rank.1.et"], "chakra wrote nothing: %r" % os.listdir(d))
    r = run(["chakra", TRACE, "-o", d, "--rank", "2147483648"])
    check(r.returncode == 2 and b"--rank" in r.stderr,
          "chakra --rank 2147483648: exit %d, a message (%r)" % (r.returncode, r.stderr))

    link = os.path.join(OUT, "same.json")
    if not os.path.exists(link):
        os.symlink(TRACE, link)
    for args in (["chrome", TRACE, "-o", TRACE], ["chrome", TRACE, "-o", link],
                 ["repair", TRACE, "-o", TRACE], ["symbolize", TRACE, "-o", link],
                 ["convert", LOG, "-o", LOG]):
        r = run(args)
        check(r.returncode == 1, "etr %s: exit %d, want 1" % (" ".join(args[:1]), r.returncode))


def summary_bytes_saturate():
    """A tensor of numel 2^62 and itemsize 8 is the largest, at UINT64_MAX bytes (before:
    0, ranked last)."""
    d = json.loads(TEXT)
    for n in d["nodes"]:
        if n["inputs"]["types"] and n["inputs"]["types"][0].startswith("Tensor("):
            n["inputs"]["values"][0][0] = 999999  # (a tensor of its own)
            n["inputs"]["values"][0][3] = 2**62
            n["inputs"]["values"][0][4] = 8
            break
    path = os.path.join(OUT, "huge-tensor.json")
    with open(path, "w") as f:
        json.dump(d, f)
    r = run(["summary", "--json", path])
    if check(r.returncode == 0, "summary of the huge tensor: %s" % r.stderr[-200:]):
        s = json.loads(r.stdout)
        tensors = s["tensors"]["top_by_bytes"]
        check(bool(tensors) and tensors[0].get("bytes") == 2**64 - 1,
              "the largest tensor at UINT64_MAX bytes: %r" % (tensors[:1],))


def validate_escapes():
    """validate shows a trace's control characters escaped (before: an unknown top-level
    key and the schema string were printed raw, ESC and all)."""
    d = json.loads(TEXT)
    d["\x1b]0;pwned\x07"] = 1
    d["schema"] = "1.1.1\x1b[2J"
    path = os.path.join(OUT, "escapes.json")
    with open(path, "w") as f:
        json.dump(d, f)
    r = run(["validate", path])
    check(b"\x1b" not in r.stdout and b"\x07" not in r.stdout,
          "validate prints no raw ESC or BEL: %r" % r.stdout[-300:])


def repair_stops_at_a_limit():
    """repair of a whole trace that holds a node over the reader's limit (a 20 MiB string;
    nesting past 1024 levels) fails and says so (before: it kept the nodes before it,
    dropped the rest as if the file were cut there, and exited 0)."""
    d = json.loads(TEXT)
    mid = d["nodes"][len(d["nodes"]) // 2]
    big = dict(d)
    big["nodes"] = [dict(n) for n in d["nodes"]]
    node = big["nodes"][len(d["nodes"]) // 2]
    node["inputs"] = {"values": ["x" * (20 << 20)], "shapes": [[]], "types": ["String"],
                      "strides": [[]]}
    deep = json.loads(TEXT)
    deep["nodes"][len(deep["nodes"]) // 2]["inputs"] = {
        "values": ["DEEP"], "shapes": [[]], "types": ["GenericList[]"], "strides": [[]]}
    deep = json.dumps(deep).replace('"DEEP"', "[" * 1100 + "]" * 1100)  # (past json's recursion)
    del mid
    for name, doc in (("big-node", big), ("deep-node", deep)):
        path = os.path.join(OUT, name + ".json")
        with open(path, "w") as f:
            f.write(doc if isinstance(doc, str) else json.dumps(doc))
        out = os.path.join(OUT, name + ".repaired.json")
        r = run(["repair", path, "-o", out])
        check(r.returncode == 1 and b"limit" in r.stderr,
              "repair of a whole trace with a %s: exit %d (%s)" % (name, r.returncode,
                                                                 r.stderr[-300:]))
        check(not os.path.exists(out), "repair of a %s wrote nothing" % name)
        os.unlink(path)
    del big, deep


def reports_and_settings():
    """A report to a full stdout is an error (before: exit 0, the report lost); stdout that
    is the input is refused (before: `chrome t.json >> t.json` grew its own input); a reader
    setting that is not understood is said (before: silently ignored); yajl refuses the
    nesting the built-in reader refuses (before: 1e6 levels accepted)."""
    with open("/dev/full", "wb") as full:
        for args in (["--version"], ["summary", TRACE], ["validate", TRACE]):
            r = subprocess.run([ETR, *args], stdout=full, stderr=subprocess.PIPE, timeout=120)
            check(r.returncode == 1 and b"write error" in r.stderr,
                  "etr %s > /dev/full: exit %d %r" % (args[0], r.returncode, r.stderr[-200:]))
    victim = os.path.join(OUT, "victim.json")
    shutil.copy(TRACE, victim)
    with open(victim, "ab") as app:
        r = subprocess.run([ETR, "chrome", victim], stdout=app, stderr=subprocess.PIPE,
                           timeout=120)
    check(r.returncode == 1, "etr chrome t.json >> t.json: exit %d" % r.returncode)
    with open(victim, "rb") as f:
        check(f.read() == TEXT, "etr chrome t.json >> t.json: the input kept")
    env = dict(os.environ, ETR_READER_LIMIT_MB="abc")
    r = run(["validate", TRACE], env=env)
    check(r.returncode == 0 and b"ETR_READER_LIMIT_MB=abc ignored" in r.stderr,
          "ETR_READER_LIMIT_MB=abc is said: %r" % r.stderr[-200:])
    deep = os.path.join(OUT, "deep.json")
    with open(deep, "w") as f:
        f.write('{"schema": "1.1.1", "pid": 1, "time": "2026-01-01 00:00:00", "start_ts": 1, '
                '"nodes": [{"id": 5, "name": "a", "ctrl_deps": 1, "inputs": {"values": [' +
                "[" * 100000 + "]" * 100000 + '], "shapes": [[]], "types": ["x"]}}]}')
    for backend in ("hand", "yajl"):
        r = run(["summary", deep], env=dict(os.environ, ETR_READER_BACKEND=backend))
        check(r.returncode == 1 and b"nesting too deep" in r.stderr,
              "%s reader: 100 000 levels refused: exit %d %r" % (backend, r.returncode,
                                                                r.stderr[-200:]))


def stdout_into_an_input():
    """Every command refuses a stdout that is one of its inputs (`etr CMD t.json >> t.json`),
    before anything reaches it: exit 1, the input as it was. Before: only summary, flame and
    chrome did (in cli_open_output); symbolize, graph, replay, validate and chakra appended
    their output to the trace (symbolize doubled it), repair -o - and convert too."""
    d = fresh_dir("stdout-input")
    victim = os.path.join(d, "victim.json")
    log = os.path.join(d, "victim.etr")
    model = os.path.join(d, "model.txt")
    other = os.path.join(d, "other.json")
    shutil.copy(TRACE, other)
    chakra = os.path.join(d, "chakra")
    cases = [
        (victim, ["validate", "V"]), (victim, ["validate", "--quiet", "V"]),
        (victim, ["summary", "V"]), (victim, ["summary", "--json", "other", "V"]),
        (victim, ["chrome", "V"]), (victim, ["flame", "V"]), (victim, ["graph", "V"]),
        (victim, ["graph", "--dot", "-", "V"]), (victim, ["replay", "V"]),
        (victim, ["replay", "other", "V"]), (model, ["replay", "--model", "M", "V"]),
        (model, ["replay", "--model=M", "V"]), (victim, ["symbolize", "V"]),
        (victim, ["repair", "V", "-o", "-"]),
        (victim, ["repair", "--json", "V", "-o", os.path.join(d, "repaired.json")]),
        (log, ["convert", "L", "-o", "-"]), (log, ["convert", "L", "-o", os.path.join(d, "c.json")]),
    ]
    if run(["chakra", "--help"]).returncode == 0:
        cases += [(victim, ["chakra", "V", "-o", chakra]),
                  (victim, ["chakra", "other", "V", "-o", chakra])]
    names = {"V": victim, "L": log, "M": model, "--model=M": "--model=" + model, "other": other}
    for target, args in cases:
        shutil.copy(TRACE, victim)
        shutil.copy(LOG, log)
        with open(model, "w") as f:
            f.write("speedup * 2\n")
        with open(target, "rb") as f:
            before = f.read()
        argv = [names.get(a, a) for a in args]
        what = "etr %s >> %s" % (" ".join(args), os.path.basename(target))
        with open(target, "ab") as app:
            r = subprocess.run([ETR, *argv], stdout=app, stderr=subprocess.PIPE, timeout=120)
        check(r.returncode == 1, "%s: exit %d, want 1 (%r)" % (what, r.returncode, r.stderr[-200:]))
        check(b"<stdout>: is an input of this command: refusing to write into it" in r.stderr,
              "%s: says why: %r" % (what, r.stderr[-300:]))
        with open(target, "rb") as f:
            check(f.read() == before, "%s: the input kept" % what)
    # chakra with many traces, the last one stdout: refused before the first is converted
    # (before: the lines of the ranks before it, past stdio's 4 KiB buffer, reached it)
    if run(["chakra", "--help"]).returncode == 0:
        e = {"values": [], "shapes": [], "types": []}
        a = [{"name": "tid", "type": "uint64", "value": 1}]
        small = {"schema": "1.1.1", "pid": 1, "time": "2026-01-01 00:00:00", "start_ts": 0,
                 "nodes": [{"id": 2, "name": "[pytorch|profiler|execution_trace|thread]",
                            "ctrl_deps": 1, "inputs": e, "outputs": e, "attrs": a},
                           {"id": 3, "name": "op", "ctrl_deps": 2, "inputs": e, "outputs": e,
                            "attrs": a},
                           {"id": 1, "name": "[pytorch|profiler|execution_trace|process]",
                            "ctrl_deps": 1, "inputs": e, "outputs": e, "attrs": []}],
                 "finish_ts": 1}
        ranks = []
        for i in range(60):
            ranks.append(os.path.join(d, "rank%02d.json" % i))
            with open(ranks[-1], "w") as f:
                json.dump(small, f)
        with open(ranks[-1], "rb") as f:
            before = f.read()
        with open(ranks[-1], "ab") as app:
            r = subprocess.run([ETR, "chakra", *ranks, "-o", os.path.join(d, "many")],
                               stdout=app, stderr=subprocess.PIPE, timeout=120)
        check(r.returncode == 1 and b"refusing to write into it" in r.stderr,
              "chakra of 60 traces >> the last: exit %d %r" % (r.returncode, r.stderr[-200:]))
        with open(ranks[-1], "rb") as f:
            check(f.read() == before, "chakra of 60 traces >> the last: the trace kept")
        check(not os.path.exists(os.path.join(d, "many")) or
              not os.listdir(os.path.join(d, "many")),
              "chakra of 60 traces >> the last: nothing converted")
    # the same through stdin ('-')
    shutil.copy(TRACE, victim)
    with open(victim, "rb") as inp, open(victim, "ab") as app:
        r = subprocess.run([ETR, "validate", "-"], stdin=inp, stdout=app, stderr=subprocess.PIPE,
                           timeout=120)
    check(r.returncode == 1, "etr validate - < t >> t: exit %d" % r.returncode)
    with open(victim, "rb") as f:
        check(f.read() == TEXT, "etr validate - < t >> t: the input kept")


for case in (reports_and_settings, stdout_into_an_input, output_through_a_symlink, failed_runs_keep_the_old_file, repair_stops_at_a_limit, convert_gz_keeps_the_old_file,
             convert_gz_needs_the_room_of_the_output,
             interrupted_run_keeps_the_old_file, no_output_over_an_input,
             chakra_all_ranks_or_none, convert_default_name, compressed_outputs,
             summary_bytes_saturate, validate_escapes):
    try:
        case()
    except Exception as e:  # noqa: BLE001 (a case that crashes is a failure, not the end)
        fail("%s raised %r" % (case.__name__, e))
if failures:
    print("%d failure(s)" % len(failures))
    sys.exit(1)
shutil.rmtree(OUT, ignore_errors=True)
print("cli.outputs: passed")
