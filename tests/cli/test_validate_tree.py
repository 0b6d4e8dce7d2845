#!/usr/bin/env python3
"""etr validate's tree checks in bounded memory (tools/validate_tree.c).

usage: test_validate_tree.py ETR [--no-rss] [--quick]

Generated traces are piped to `etr validate -` (nothing on disk). Nodes are minimal (no
inputs/outputs parts, only a tid attr): the per-node errors they cause are not what this
test looks at; it looks at the tree's kinds of problem (parents, duplicate ids, ops reaching
their thread) and at the verdict.

- memory: peak RSS (GNU time's) of a run on 1.5 million nodes against one on 300 thousand
  must grow by less than 8 MB (the id table of the previous validator took ~40 bytes a
  node: ~46 MB more). --no-rss skips that comparison (sanitizer builds, whose allocator keeps freed
  memory in quarantine); --quick (sanitizer builds too) makes the large trace 300 thousand
  nodes;
- the checks still find, deep in a large trace, a missing parent, a missing fw_parent, a
  duplicate of an id written a million nodes earlier and of a recent one, an op whose tid
  differs from its thread's, a cycle; and nothing in the same trace without them;
- a parent written before its children (not what etr writes) is followed;
- what the bounds leave unchecked (ids spread over more than the id bitmap's leaves, more
  thread nodes or pending parents than it keeps, a parent written before its children
  and out of the recent ids) is said in the verdict, and never reported as a problem.
Exit 0 when every check passes, 1 otherwise.
"""
import os
import re
import subprocess
import sys
import tempfile

THREAD = "[pytorch|profiler|execution_trace|thread]"
PROCESS = "[pytorch|profiler|execution_trace|process]"
fails = 0


def fail(msg):
    global fails
    fails += 1
    print("FAIL:", msg)


def node(i, name, parent, tid, fw=None):
    attrs = '{"name":"tid","type":"uint64","value":%d}' % tid
    if fw is not None:
        attrs = '{"name":"fw_parent","type":"uint64","value":%d},' % fw + attrs
    return ('{"id":%d,"name":"%s","ctrl_deps":%d,"inputs":{},"outputs":{},"attrs":[%s]}'
            % (i, name, parent, attrs))


GNU_TIME = "/usr/bin/time"


def run(etr, nodes, *args, rss=False):
    """Pipes a trace of the given nodes to etr validate; returns (rc, stdout, peak RSS KB or
    None). The peak RSS is GNU time's: the rusage of a child of this Python process would
    count this process's own memory, which the child had until its exec."""
    cmd = [etr, "validate", *args, "-"]
    rss_file = None
    if rss:
        fd, rss_file = tempfile.mkstemp()
        os.close(fd)
        cmd = [GNU_TIME, "-f", "%M", "-o", rss_file] + cmd
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    head = ('{"schema":"1.1.0-chakra.0.0.4","pid":1,"time":"2026-01-01 00:00:00",'
            '"start_ts":0,"nodes":[\n')
    p.stdin.write(head.encode())
    buf, first = [], True
    for n in nodes:
        buf.append(n if first else ",\n" + n)
        first = False
        if len(buf) >= 20000:
            p.stdin.write("".join(buf).encode())
            buf = []
    buf.append('\n],"finish_ts":0}\n')
    p.stdin.write("".join(buf).encode())
    p.stdin.close()
    out = p.stdout.read().decode()
    rc = p.wait()
    peak = None
    if rss_file:
        with open(rss_file) as f:
            peak = int(f.read().split()[-1])
        os.unlink(rss_file)
    return rc, out, peak


def tree_problems(out):
    """The tree's problem lines, and the counts of the "... N more" lines, by kind."""
    pat = re.compile(r"(does not exist|already used by|hangs under|does not reach)")
    lines = [l for l in out.splitlines() if pat.search(l)]
    more = {}
    for m in re.finditer(r"\.\.\. (\d+) more errors about (parents|duplicate ids|"
                         r"ops reaching their thread)", out):
        more[m.group(2)] = int(m.group(1))
    return lines, more


def completion_order(blocks, inject=False):
    """Thread node 2 (tid 1); blocks of 8 leaves, each block's op after its leaves, all under
    op 3 ("main", written last of the ops, as etr writes an op when it completes); process
    node last. With inject, problems deep in the file."""
    yield node(2, THREAD, 1, 1)
    nid = 10
    for b in range(blocks):
        top = nid
        for k in range(1, 9):
            tid = 1
            if inject and b == blocks - 100 and k == 3:
                tid = 7  # differs from its thread's
            yield node(top + k, "leaf", top, tid)
        parent = 3
        if inject and b == blocks * 3 // 4:
            parent = 99999999999  # missing
        fw = None
        if inject and b == blocks // 2:
            fw = 88888888888  # missing fw_parent
        if inject and b == blocks // 3:
            fw = 3  # written later: fine
        yield node(top, "block", parent, 1, fw)
        nid += 9
        if inject and b == blocks - 50:
            yield node(10 + 1, "leaf", 10, 1)  # duplicate of an id a million nodes back
            yield node(top + 2, "leaf", top, 1)  # duplicate of a recent one
    if inject:  # a cycle of two ops
        yield node(nid + 1, "c", nid + 2, 1)
        yield node(nid + 2, "c", nid + 1, 1)
    yield node(3, "main", 2, 1)
    yield node(1, PROCESS, 1, 0)


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    etr = sys.argv[1]
    check_rss = "--no-rss" not in sys.argv[2:]
    if check_rss and not os.access(GNU_TIME, os.X_OK):
        print("no %s: peak RSS not compared" % GNU_TIME)
        check_rss = False

    # memory, and no false problem on a large valid tree
    rc, out, rss_small = run(etr, completion_order(300000 // 9), "--max", "50", rss=check_rss)
    lines, more = tree_problems(out)
    if lines or more or "not checked" in out:
        fail("small completion-order tree: tree problems %s %s" % (lines[:3], more))
    # (--quick: sanitizer builds, 3-10x slower; the deep problems are as deep in 300k nodes)
    big = (300000 if "--quick" in sys.argv[2:] else 1500000) // 9
    rc, out, rss_big = run(etr, completion_order(big), "--max", "50", rss=check_rss)
    lines, more = tree_problems(out)
    if lines or more or "not checked" in out:
        fail("large completion-order tree: tree problems %s %s" % (lines[:3], more))
    if not re.search(r"\(%d nodes\)" % (big * 9 + 3), out):
        fail("large tree: node count not in the verdict: %s" % out.splitlines()[-1:])
    if check_rss:
        print("peak RSS: %d KB for 300k nodes, %d KB for 1.5M nodes" % (rss_small, rss_big))
        if rss_big - rss_small > 8 * 1024:
            fail("peak RSS grew by %d KB from 300k to 1.5M nodes (bound: 8 MB)"
                 % (rss_big - rss_small))

    # the same, with problems deep in the file: each found, once
    rc, out, _ = run(etr, completion_order(big, inject=True), "--max", "50")
    lines, more = tree_problems(out)
    want = [r"node \d+: error: parent 99999999999 \(ctrl_deps\) does not exist",
            r"node \d+: error: fw_parent 88888888888 does not exist",
            r"node 11: error: id 11 already used by an earlier node",
            r"node \d+: error: id \d+ already used by the node at byte \d+",
            r"node \d+: error: tid 7, but it hangs under the thread node 2 of tid 1",
            r"node \d+: error: does not reach a thread node: its chain of parents has a cycle"]
    for w in want:
        n = sum(1 for l in lines if re.search(w, l))
        if n != 1:
            fail("injected problems: %d lines match %r" % (n, w))
    if len(lines) != len(want) or more:
        fail("injected problems: %d tree problem lines (want %d), more %s: %s"
             % (len(lines), len(want), more, lines))
    if rc != 1 or "not checked" in out:
        fail("injected problems: exit %d, verdict %s" % (rc, out.splitlines()[-1:]))

    # a missing parent named by many nodes: each counted, the first --max listed
    def many_children():
        yield node(2, THREAD, 1, 1)
        for i in range(10, 5010):
            yield node(i, "op", 4444444, 1)
        yield node(1, PROCESS, 1, 0)
    rc, out, _ = run(etr, many_children(), "--max", "3")
    lines, more = tree_problems(out)
    if len(lines) != 3 or more.get("parents") != 4997:
        fail("5000 children of a missing parent: %d listed, more %s" % (len(lines), more))

    # parents written before their children (start order): followed, tids checked
    def start_order(bad_tid):
        yield node(2, THREAD, 1, 1)
        stack = [2]
        nid = 10
        for i in range(3000):
            depth = i % 7
            del stack[depth + 1:]
            tid = 5 if bad_tid and i == 2000 else 1
            yield node(nid, "op", stack[-1], tid)
            stack.append(nid)
            nid += 1
        yield node(1, PROCESS, 1, 0)
    rc, out, _ = run(etr, start_order(False))
    lines, more = tree_problems(out)
    if lines or more or "not checked" in out:
        fail("start order: %s %s %s" % (lines[:3], more, out.splitlines()[-1:]))
    rc, out, _ = run(etr, start_order(True))
    lines, more = tree_problems(out)
    if len(lines) != 1 or "tid 5, but it hangs under the thread node 2 of tid 1" not in lines[0]:
        fail("start order with a wrong tid: %s %s" % (lines, more))

    # ids spread over more leaves of the bitmap than it may take: said, never a false error
    def sparse():
        yield node(2, THREAD, 1, 1)
        for i in range(1, 4001):
            yield node(i << 20, "op", 2, 1)
            yield node((i << 20) + 1, "op", i << 20, 1)  # child after its parent
        yield node(1, PROCESS, 1, 0)
    rc, out, _ = run(etr, sparse())
    lines, more = tree_problems(out)
    verdict = out.splitlines()[-1] if out else ""
    m = re.search(r"not checked \(over validate's memory bounds\): (\d+) ids for uniqueness, "
                  r"(\d+) references to a parent", verdict)
    if not m or int(m.group(1)) == 0 or int(m.group(2)) == 0:
        fail("sparse ids: the verdict does not say what was not checked: %s" % verdict)
    if lines or more:
        fail("sparse ids: tree problems reported: %s %s" % (lines[:3], more))

    # more thread nodes than validate keeps (65,536): their ops are said unchecked, not wrong
    def many_threads():
        for t in range(70000):
            yield node(10 + 2 * t, THREAD, 1, t + 1)
            yield node(11 + 2 * t, "op", 10 + 2 * t, t + 1)
        yield node(1, PROCESS, 1, 0)
    rc, out, _ = run(etr, many_threads())
    lines, more = tree_problems(out)
    verdict = out.splitlines()[-1] if out else ""
    m = re.search(r"not checked .*, (\d+) ops reaching their thread", verdict)
    if not m or int(m.group(1)) == 0 or lines or more:
        fail("70,000 threads: %s %s %s" % (verdict, lines[:3], more))

    # more parents pending at once than validate keeps (16,384): references said unchecked
    def many_pending():
        yield node(2, THREAD, 1, 1)
        for i in range(20000):
            yield node(100000 + i, "leaf", 200000 + i, 1)
        for i in range(20000):
            yield node(200000 + i, "op", 2, 1)
        yield node(1, PROCESS, 1, 0)
    rc, out, _ = run(etr, many_pending())
    lines, more = tree_problems(out)
    verdict = out.splitlines()[-1] if out else ""
    m = re.search(r"not checked .*: \d+ ids for uniqueness, (\d+) references to a parent, "
                  r"(\d+) ops reaching their thread", verdict)
    if not m or int(m.group(1)) == 0 or int(m.group(2)) == 0 or lines or more:
        fail("20,000 parents pending: %s %s %s" % (verdict, lines[:3], more))

    # a parent written before its children and out of the recent ids: said unchecked
    def old_parent():
        yield node(2, THREAD, 1, 1)
        yield node(10, "main", 2, 1)
        for i in range(70000):
            yield node(11 + i, "op", 10, 1)
        yield node(1, PROCESS, 1, 0)
    rc, out, _ = run(etr, old_parent())
    lines, more = tree_problems(out)
    verdict = out.splitlines()[-1] if out else ""
    m = re.search(r"not checked .*, (\d+) ops reaching their thread", verdict)
    if not m or int(m.group(1)) == 0 or lines or more:
        fail("a parent before its children, long ago: %s %s %s" % (verdict, lines[:3], more))

    if fails:
        print("%d check(s) failed" % fails)
        return 1
    print("all validate tree checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
