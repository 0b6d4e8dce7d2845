"""Ranks and process groups from Python (ctest python.ranks): python3 -m etr under a launcher
of several ranks, the etr.set_rank / declare_group / record_groups API, and etr.torch.trace with
torch.distributed (gloo, skipped when absent). Each case was a defect found by trying exactly
that, and fails without its fix. Every trace written is checked with `etr validate`.

usage: test_etr_python_ranks.py ETR_TOOL   (PYTHONPATH holds <build>/python)
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "tests", "pylib"))
from etr_checks import check, run_cases, validate  # noqa: E402
from pyrun import ENV, attr, load, ops, run_py, setup  # noqa: E402

TOOL = sys.argv[1]
TMP = setup("etr-pyranks-")


def pg_groups(path):
    """The groups listed by the trace's process-group node(s): one list per node."""
    return [json.loads(n["inputs"]["values"][0]) for n in load(path)["nodes"]
            if n["name"] == "## process_group:init ##"]


def dash_m_ranks():
    """python3 -m etr under a launcher of two ranks given one -o name: each rank writes its
    own file, the rank before the ending, and says so; %r is the rank (before: both ranks
    wrote the same file, one trace was lost, and %r stayed as it is)."""
    script = os.path.join(TMP, "rank_script.py")
    with open(script, "w") as f:
        f.write("import etr\nwith etr.record_function('work'):\n    pass\n")
    out = os.path.join(TMP, "ranks.json")
    procs = [subprocess.Popen([sys.executable, "-m", "etr", "-o", out, script],
                              env=dict(ENV, RANK=str(r), WORLD_SIZE="2"), cwd=TMP,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in (0, 1)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    for r in (0, 1):
        want = os.path.join(TMP, "ranks.%d.json" % r)
        check(procs[r].returncode == 0 and ("writing %s" % want) in errs[r],
              "rank %d: exit %d, says its file: %s" % (r, procs[r].returncode, errs[r][-300:]))
        if validate(TOOL, want):
            check(len(ops(want, "work")) == 1, "rank %d's file holds its op" % r)
    check(not os.path.exists(out), "no file under the shared name")
    pct = os.path.join(TMP, "pct-%r.json")
    r = subprocess.run([sys.executable, "-m", "etr", "-o", pct, script], capture_output=True,
                       text=True, env=dict(ENV, RANK="3", WORLD_SIZE="4"), cwd=TMP, timeout=120)
    got = os.path.join(TMP, "pct-3.json")
    check(r.returncode == 0 and os.path.exists(got), "%%r is the rank: %s" % r.stderr[-300:])
    esc = os.path.join(TMP, "esc%%p.json")  # ("%%": a "%" in the name; still no rank in it)
    r = subprocess.run([sys.executable, "-m", "etr", "-o", esc, script], capture_output=True,
                       text=True, env=dict(ENV, RANK="1", WORLD_SIZE="2"), cwd=TMP, timeout=120)
    got = os.path.join(TMP, "esc%p.1.json")
    check(r.returncode == 0 and os.path.exists(got), "%%%%p names no process: %s %s"
          % (os.listdir(TMP), r.stderr[-300:]))


def dist_api():
    """etr.set_rank / declare_group / record_groups (etr/dist.h for Python): the trace's
    process-group node lists the groups with their ranks and this process's rank; bad
    arguments raise (before: no Python API, a trace opened from Python named no rank)."""
    path = os.path.join(TMP, "dist.json")
    rc, err = run_py("""
        import etr
        etr.set_rank(1, 4)
        etr.declare_group("0", None, desc="default_pg", backend="cpu:gloo")
        etr.declare_group("7", [1, 3], desc="pairs", backend="cpu:gloo")
        assert (etr.rank(), etr.world_size()) == (1, 4)
        for bad in ((lambda: etr.set_rank(4, 4)), (lambda: etr.set_rank(-1, 4)),
                    (lambda: etr.declare_group("", [0])), (lambda: etr.declare_group("x", [])),
                    (lambda: etr.declare_group("x", [-1])), (lambda: etr.declare_group(3)),
                    (lambda: etr.declare_group("a\\0b"))):
            try:
                bad()
            except (ValueError, TypeError):
                pass
            else:
                raise SystemExit("no error")
        with etr.trace(%r):
            etr.record_groups()
            with etr.record_function("work"):
                pass
    """ % path)
    check(rc == 0, "dist API: %d %s" % (rc, err[-400:]))
    rc, err = run_py("""
        import etr
        for i in range(1024):  # (the most kept)
            etr.declare_group("g" + str(i), [0])
        try:
            etr.declare_group("one too many", [0])
            raise SystemExit("the 1025th group: no error")
        except etr.EtrError as e:
            assert "at most 1024 groups" in str(e), e
    """)
    check(rc == 0, "the 1025th group is refused, and says why: %d %s" % (rc, err[-400:]))
    if validate(TOOL, path):
        nodes = pg_groups(path)
        check(len(nodes) == 1, "one process-group node: %d" % len(nodes))
        g = {x["pg_name"]: x for x in nodes[0]} if nodes else {}
        # ("rank": this process's rank in the group)
        check(g.get("7", {}).get("ranks") == [1, 3] and g["7"].get("rank") == 0 and
              g.get("0", {}).get("group_size") == 4 and g["0"].get("rank") == 1,
              "groups as declared: %s" % g)


def have_torch_gloo():
    """Whether etr.torch and torch.distributed's gloo backend are here (else the case is
    skipped, said)."""
    try:
        import etr.torch  # noqa: F401
        import torch.distributed as dist
        if not dist.is_available() or not dist.is_gloo_available():
            raise ImportError("no gloo")
    except ImportError as e:
        print("python.ranks: torch.distributed with gloo not there (%s): its case skipped" % e)
        return False
    return True


def torch_dist_groups():
    """etr.torch.trace with torch.distributed initialized: the trace names the rank and the
    process groups (the world "0" and a new group "1"), in one node (before: none);
    skipped without etr.torch or gloo."""
    if not have_torch_gloo():
        return
    path = os.path.join(TMP, "tdist-%d.json")
    store = os.path.join(TMP, "tdist.store")
    rc, err = run_py("""
        import torch, torch.distributed as dist, torch.multiprocessing as mp, etr.torch
        def run(rank):
            dist.init_process_group("gloo", init_method="file://%s", rank=rank, world_size=2)
            sub = dist.new_group([0])
            with etr.torch.trace(%r %% rank):
                t = torch.ones(4)
                dist.all_reduce(t)
                if rank == 0:
                    dist.all_reduce(t, group=sub)
                dist.all_gather([torch.zeros(4), torch.zeros(4)], torch.ones(4))
                dist.barrier()
            dist.destroy_process_group()
        if __name__ == "__main__":
            mp.spawn(run, nprocs=2)
    """ % (store, path))
    check(rc == 0, "torch.distributed under etr.torch.trace: %d %s" % (rc, err[-400:]))
    if validate(TOOL, path % 0) and validate(TOOL, path % 1):
        nodes = pg_groups(path % 0)
        check(len(nodes) == 1, "one process-group node: %d" % len(nodes))
        g = {x["pg_name"]: x for x in nodes[0]} if nodes else {}
        check(set(g) == {"0", "1"} and g["0"].get("pg_desc") == "default_pg" and
              g["1"].get("ranks") == [0] and g["0"].get("ranks") == [0, 1] and
              g["0"].get("backend_config") == "cpu:gloo" and g["0"].get("rank") == 0,
              "the world and the new group: %s" % g)
        g1 = pg_groups(path % 1)
        check(len(g1) == 1 and [x["rank"] for x in g1[0] if x["pg_name"] == "0"] == [1],
              "rank 1's node names rank 1: %s" % g1)
        # Each c10d op holds a record_param_comms child with the collective attrs, its
        # group found by size and place, and PyTorch's inputs (sequence number per group,
        # (pg_name, pg_desc), rank in the group, name), as PARAM's comm replay reads them
        # (before: none; the tools put every collective in group "0", PARAM saw none).
        nodes = load(path % 0)["nodes"]
        by_id = {n["id"]: n for n in nodes}
        colls = [(by_id[n["ctrl_deps"]]["name"], attr(n, "collective_name"), attr(n, "pg_name"),
                  attr(n, "in_msg_nelems"), attr(n, "out_msg_nelems"), attr(n, "dtype"),
                  n["inputs"]["values"][1:5])
                 for n in nodes if n["name"] == "record_param_comms"]
        check(colls == [("c10d::allreduce_", "allreduce", "0", 4, 4, "Float",
                         [0, ["0", "default_pg"], 0, "allreduce"]),
                        ("c10d::allreduce_", "allreduce", "1", 4, 4, "Float",
                         [0, ["1", "undefined"], 0, "allreduce"]),
                        ("c10d::allgather_", "allgather", "0", 4, 8, "Float",
                         [1, ["0", "default_pg"], 0, "allgather"]),
                        ("c10d::barrier", "barrier", "0", 0, 0, "",
                         [2, ["0", "default_pg"], 0, "barrier"])],
              "the collectives of rank 0: %s" % colls)
        check(not [n for n in nodes if n["name"].startswith("c10d::") and
                   attr(n, "collective_name") is not None], "the c10d ops carry no attrs")
        # etr summary counts each call once, in its group, whatever records it left (the
        # c10d op, its record_param_comms child, gloo's record on its worker thread)
        r = subprocess.run([TOOL, "summary", "--json", path % 0], capture_output=True,
                           text=True, timeout=120)
        got = sorted((c["pg_name"], c["collective"], c["count"])
                     for c in json.loads(r.stdout)["collectives"]) if r.returncode == 0 else r
        check(got == [("0", "allgather", 1), ("0", "allreduce", 1), ("0", "barrier", 1),
                      ("1", "allreduce", 1)], "etr summary's collectives of rank 0: %s" % (got,))


def torch_dist_late_groups():
    """etr.torch.trace entered before init_process_group, a group made inside the block: the
    world and the new group are declared as they are made, and the collectives name them
    (before: the trace said rank 0 of a world of 1, and the new group's all-reduce was put
    in group "0", the only group of its size known then); skipped without etr.torch or
    gloo."""
    if not have_torch_gloo():
        return
    path = os.path.join(TMP, "tlate-%d.json")
    store = os.path.join(TMP, "tlate.store")
    rc, err = run_py("""
        import torch, torch.distributed as dist, torch.multiprocessing as mp, etr.torch
        def run(rank):
            with etr.torch.trace(%r %% rank):
                dist.init_process_group("gloo", init_method="file://%s", rank=rank,
                                        world_size=2)
                sub = dist.new_group([0])
                t = torch.ones(4)
                if rank == 0:
                    dist.all_reduce(t, group=sub)
                dist.all_reduce(t)
            dist.destroy_process_group()
            assert dist.new_group.__name__ == "new_group" and not hasattr(dist.new_group,
                                                                          "_etr_watch")
        if __name__ == "__main__":
            mp.spawn(run, nprocs=2)
    """ % (path, store))
    check(rc == 0, "a block begun before init_process_group: %d %s" % (rc, err[-400:]))
    if validate(TOOL, path % 0) and validate(TOOL, path % 1):
        nodes = load(path % 0)["nodes"]
        # (the writer holds these nodes back until the first collective, then writes them
        # newest first: PARAM reads the first)
        groups = pg_groups(path % 0)[0] if pg_groups(path % 0) else []
        g = {x["pg_name"]: x for x in groups}
        check(g.get("0", {}).get("group_size") == 2 and g.get("1", {}).get("ranks") == [0],
              "the first process-group node has the world of 2 and the new group: %s" % g)
        pgs = [attr(n, "pg_name") for n in nodes if n["name"] == "record_param_comms"]
        check(pgs == ["1", "0"], "rank 0's collectives' groups: %s" % pgs)


def torch_dist_lookalike_groups():
    """Two groups of the same members (the world and new_group([0, 1])): each collective
    names its own group, told apart by the address of its C++ ProcessGroup (before: neither
    was named, as both had the collective's size and rank; PARAM's comm replay then crashed
    on the broadcast); skipped without etr.torch or gloo."""
    if not have_torch_gloo():
        return
    path = os.path.join(TMP, "talike-%d.json")
    store = os.path.join(TMP, "talike.store")
    rc, err = run_py("""
        import torch, torch.distributed as dist, torch.multiprocessing as mp, etr.torch
        def run(rank):
            dist.init_process_group("gloo", init_method="file://%s", rank=rank, world_size=2)
            same = dist.new_group([0, 1])
            with etr.torch.trace(%r %% rank):
                t = torch.ones(4)
                dist.all_reduce(t)
                dist.all_reduce(t, group=same)
                dist.broadcast(t, src=1, group=same)
                dist.barrier()
            dist.destroy_process_group()
        if __name__ == "__main__":
            mp.spawn(run, nprocs=2)
    """ % (store, path))
    check(rc == 0, "two groups of the same members: %d %s" % (rc, err[-400:]))
    for r in (0, 1):
        if not validate(TOOL, path % r):
            continue
        nodes = load(path % r)["nodes"]
        got = [(attr(n, "collective_name"), attr(n, "pg_name"), n["inputs"]["values"][2])
               for n in nodes if n["name"] == "record_param_comms"]
        check(got == [("allreduce", "0", ["0", "default_pg"]), ("allreduce", "1", ["1", "undefined"]),
                      ("broadcast", "1", ["1", "undefined"]), ("barrier", "0", ["0", "default_pg"])],
              "rank %d's collectives name their own groups: %s" % (r, got))


def main():
    cases = (
        dash_m_ranks, dist_api, torch_dist_groups, torch_dist_late_groups,
        torch_dist_lookalike_groups)
    return run_cases(cases, "python.ranks: passed")


if __name__ == "__main__":
    sys.exit(main())
