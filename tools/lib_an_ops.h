/* The op table behind `etr graph` and `etr replay`: one compact record per op node, the
 * data-dependency graph through tensor ids, a list scheduler (the replay simulation and the
 * critical path) and the replay cost model.
 *
 * Memory: the parsed JSON of a node is dropped as soon as the node is read. What is kept
 * per op is an an_op (about 100 bytes), 16 bytes per tensor reference in its inputs and
 * outputs, 24 bytes per dependency edge, hash-map slots over op ids and storages (load
 * <= 1/2), and while scheduling about 40 bytes per op. Measured: ~260 bytes per op
 * (81.7k ops, 24 MB peak RSS), so a 1 GB trace of ~1M ops needs about 300 MB.
 *
 * Units: every op node (not the thread and process nodes) is a unit of work with its own
 * exclusive duration; exclusive durations partition the inclusive time of each top-level
 * op, so nothing is counted twice. A parent's own time is placed where it was recorded:
 * the part before each child as that child's lead, the rest after its last child.
 *
 * Dependencies (read-after-write only):
 * - data: an op reading a tensor depends on the last op before it (in start order) that had
 *   a tensor on the same storage among its outputs. A write to a storage therefore orders
 *   every later reader of any tensor (view) on that storage. Tensors without a storage
 *   (storage id 0) are keyed by their tensor id. Undefined tensors are ignored.
 * - fw: an op with fw_parent can start once its fw_parent has started (the forward op
 *   was open when the backward op began: start-to-start, not finish-to-start).
 * - thread (replay only): the ops of one thread run in start order, one at a time.
 * Start order is (ts, id) when every op has timing, else id (ids are drawn at op start).
 *
 * Files: lib_an_ops.c (the table and the dependency graph), lib_an_colls.c (collectives),
 * lib_an_model.c (the cost model),
 * lib_an_sched.c (the scheduler and the critical path).
 */
#ifndef ETR_TOOLS_LIB_AN_OPS_H
#define ETR_TOOLS_LIB_AN_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib_an_util.h"

#define ETR_NOIX UINT32_MAX

enum {
  ETR_OPF_TIMED = 1u << 0,      /* ts / inclusive_dur / exclusive_dur present */
  ETR_OPF_FLOP_NAME = 1u << 1,  /* mm / conv-like op with FLOPs computed from shapes */
  ETR_OPF_FLOP_INNER = 1u << 2, /* ... and no descendant is one (the model costs this one) */
  ETR_OPF_COLLECTIVE = 1u << 3, /* the counted record of a collective call (an_colls) */
  ETR_OPF_HAS_FLOP_DESC = 1u << 4,
  ETR_OPF_COLL_TWIN = 1u << 5, /* another record of a collective call, counted on another op */
};

/* ---- collectives (lib_an_colls.c): what one is, for summary, replay and chakra alike ----
 *
 * An op node is a *record* of a collective (docs/FORMAT.md, "Collectives in a trace") when
 *   - attrs (level 3): it is `record_param_comms` or carries `collective_name`, and names a
 *     collective: the `collective_name` attr, else record_param_comms' first String input
 *     (PyTorch 2.x, etr's own collective info). A name of no known kind ("wait") is kind
 *     AN_COLL_OTHER: summary and replay count it, chakra makes it plain work;
 *   - dispatch (level 2): it is named `c10d::X` with X a known kind (PyTorch's dispatcher op,
 *     on the calling thread);
 *   - backend (level 1): it is named `gloo:X` or `nccl:X` with X a known kind (the process
 *     group's own record; gloo's runs on a worker thread).
 * One call may leave several records: PyTorch 1.x records `c10d::allreduce_` and
 * `gloo:all_reduce` for one all-reduce, PyTorch 2.x nests record_param_comms and
 * `nccl:all_reduce` in `c10d::allreduce_`. an_colls_resolve keeps one record per call, the
 * *counted* one, and makes the others its *twins*:
 *   1. records nested in one another (found as the nodes stream by: a child is written before
 *      its parent, by etr and by PyTorch) are one call; the record of the highest level counts,
 *      on a tie the outermost;
 *   2. a backend record left counted by 1 is the twin of the earliest counted record of a
 *      higher level, of the same kind, that started no later (ts, then id), whose input
 *      message starts with the same tensor (or either names none), and that has no backend
 *      twin yet (one nested with it by 1 is one); then, the same way, a dispatch record with an
 *      attrs record (a c10d:: op whose record_param_comms is missing is a call of its own, not
 *      the twin of an earlier call's). A backend record
 *      without such a partner (gloo:all_to_all, which PyTorch 1.13 records alone) counts.
 * Kinds known: all-reduce, reduce, all-gather, gather, scatter, broadcast, all-to-all,
 * reduce-scatter, barrier, send, recv (from the name, case and underscores ignored).
 *
 * Memory: one an_coll_rec (~120 bytes) per record, and while streaming one map entry per op
 * that records are nested in and that is not read yet. */

typedef enum an_coll_kind {
  AN_COLL_NONE = 0,
  AN_COLL_ALL_REDUCE = 1,
  AN_COLL_REDUCE = 2,
  AN_COLL_ALL_GATHER = 3,
  AN_COLL_GATHER = 4,
  AN_COLL_SCATTER = 5,
  AN_COLL_BROADCAST = 6,
  AN_COLL_ALL_TO_ALL = 7,
  AN_COLL_REDUCE_SCATTER = 8,
  AN_COLL_BARRIER = 9,
  AN_COLL_SEND = 10,
  AN_COLL_RECV = 11,
  AN_COLL_OTHER = 12, /* an attrs record naming no known kind ("wait") */
} an_coll_kind;

enum { AN_COLL_BY_BACKEND = 1, AN_COLL_BY_DISPATCH = 2, AN_COLL_BY_ATTRS = 3 };
enum { AN_COLL_COUNTED = 1, AN_COLL_TWIN = 2 };
#define AN_NOSTR UINT32_MAX

typedef struct an_coll_rec {
  int64_t id, parent;
  int64_t ts, end;  /* recorded start and end (µs); 0 when untimed */
  int64_t span_end; /* counted: the latest end of it and its twins */
  uint64_t tid;
  uint64_t in_bytes, out_bytes;   /* the input and output message */
  uint64_t in_nelems, out_nelems; /* the attrs (attrs records that carry them) */
  uint64_t tensor;                /* id of the input message's first tensor, 0 when none */
  uint64_t pg_size;               /* the pg_size attr, 0 when absent */
  uint32_t pg;      /* strs index of the process group's name, AN_NOSTR when not recorded */
  uint32_t name;    /* strs index: collective_name, record_param_comms' String, else the kind */
  uint32_t dtype;   /* strs index of the dtype attr, AN_NOSTR */
  uint32_t encl;    /* the nearest record enclosing it, UINT32_MAX */
  uint32_t counted; /* after resolve: the counted record of its call (itself when counted) */
  uint8_t level, kind, role;
  bool timed;
  bool bytes_exact; /* in_bytes and out_bytes are the message's, not estimates */
  uint8_t absorbed; /* bit per lower level: a twin of that level was paired with it */
} an_coll_rec;

typedef struct an_colls {
  an_coll_rec *r;
  size_t n, cap;
  an_strtab strs;
  an_u64map waiting; /* id of an op not read yet -> first record nested in it, through wnext */
  uint32_t *wnext;
  size_t capw;
  an_u64map by_id;  /* record id -> index */
  an_u64map roots;  /* ids of the thread and process nodes read */
  uint64_t world;   /* group "0"'s size from the first `## process_group:init ##` node, or 0 */
  bool groups_seen; /* a process-group node naming group "0" was read */
} an_colls;

/* The kind a collective's name says ("allreduce", "all_gather", "c10d::alltoall_base_",
 * "nccl:all_reduce_barrier" is a barrier), AN_COLL_NONE when none. */
int an_coll_kind_of(const char *name);
/* The kind's name as gloo and Chakra spell it ("all_reduce", ...), "other" for AN_COLL_OTHER. */
const char *an_coll_kind_name(int kind);
/* Bytes per element of a dtype name ("Float", "c10::Half", "float32", "int64", ...,
 * case ignored), 0 when unknown. */
unsigned an_dtype_size(const char *dtype);
/* Whether an op node is a record of a collective: its level (AN_COLL_BY_*, 0 when not one)
 * and *kind. */
int an_coll_classify(const rd_rnode *n, int *kind);

/* The rank and size of group "0" in a `## process_group:init ##` node (each left as it is
 * when the list does not say it); false when n is no such node or names no group "0". */
bool an_groups_zero(const rd_rnode *n, int64_t *rank, int64_t *size);

/* An all-zero an_colls is empty and valid; an_colls_free makes it so again. */
void an_colls_free(an_colls *c);
/* Feed a node of a trace (every node, in file order: thread and process nodes too). false
 * when memory ran out. */
bool an_colls_add(an_colls *c, const rd_rnode *n);
/* After the last node: nesting and pairing (above) set each record's role. false on OOM. */
bool an_colls_resolve(an_colls *c);
/* The string of a strs index ("" for AN_NOSTR). */
const char *an_colls_str(const an_colls *c, uint32_t ix);
/* Bytes on the wire per rank of a counted record (as an_coll_bytes counts them), with p the
 * group size when the record has no pg_size (0: unknown, then 0 bytes). */
double an_coll_rec_wire(const an_colls *c, const an_coll_rec *r, uint64_t p);

typedef struct an_tref {
  uint64_t tensor;  /* tensor id */
  uint64_t storage; /* storage id, 0 when none */
} an_tref;

typedef struct an_op {
  int64_t id, parent, fw_parent;
  int64_t ts, incl, excl; /* recorded microseconds; 0 when untimed */
  uint32_t thread;        /* index into an_optab.threads */
  uint32_t name;          /* index into an_optab.names */
  uint32_t parent_ix;     /* op index of the parent, ETR_NOIX for top-level */
  uint32_t fw_parent_ix;  /* op index of fw_parent, ETR_NOIX when none/unknown */
  uint32_t flags;
  uint32_t n_in, n_out; /* tensor refs: trefs[tref_off .. +n_in) then outputs */
  uint64_t tref_off;
  double flops;      /* from shapes (ETR_OPF_FLOP_NAME) */
  double coll_bytes; /* message bytes after the group-size factor */
  uint32_t pg_size;
} an_op;

typedef struct an_thread_info {
  uint64_t tid;    /* the tid attr */
  int64_t node_id; /* the thread node's id, -1 when the trace has none */
} an_thread_info;

typedef struct an_optab {
  an_op *ops;
  size_t n, cap;
  an_tref *trefs;
  size_t ntref, captref;
  an_strtab names;
  an_thread_info *threads;
  size_t nthreads, capthreads;
  an_u64map id2ix;  /* op id -> op index */
  an_u64map tid2ix; /* tid -> thread index */
  size_t n_untimed; /* ops without timing */
  size_t n_dup_ids; /* ops whose id was seen before (later one wins in lookups) */
  an_colls colls;   /* the collective records of the nodes read (an_optab_add_rnode) */
  /* after an_optab_finish */
  uint32_t *order; /* op indices in start order */
  bool timed;      /* every op has timing */
  int64_t t0, t1;  /* recorded span: min ts, max ts + inclusive_dur */
  /* parent links the cycle check followed: at most one per op, whatever the depth */
  size_t cycle_steps;
} an_optab;

/* An op described directly (for tests and for the reader path). */
typedef struct an_op_desc {
  int64_t id, parent, fw_parent;
  uint64_t tid;
  const char *name;
  size_t name_len; /* 0: strlen(name) */
  bool timed;
  int64_t ts, incl, excl;
  const an_tref *in;
  size_t n_in;
  const an_tref *out;
  size_t n_out;
  double flops;      /* 0 = none */
  double coll_bytes; /* < 0 = not a collective */
  uint32_t pg_size;
} an_op_desc;

void an_optab_init(an_optab *t);
void an_optab_free(an_optab *t);
/* Register a thread node. false when memory ran out. */
bool an_optab_add_thread(an_optab *t, int64_t node_id, uint64_t tid);
bool an_optab_add_op(an_optab *t, const an_op_desc *d);
/* Add one node read from a trace (thread, process or op). false when memory ran out. */
bool an_optab_add_rnode(an_optab *t, const rd_rnode *n);
/* Resolve parents, fw_parents, the start order and the recorded span; resolve the collective
 * records (colls) and flag their ops: ETR_OPF_COLLECTIVE, coll_bytes and pg_size on the
 * counted one (the group size: its pg_size attr, else group "0"'s when the trace declares
 * it, else 0: unknown), ETR_OPF_COLL_TWIN on the others. false on OOM. */
bool an_optab_finish(an_optab *t);
const char *an_optab_name(const an_optab *t, uint32_t op_ix);
/* Mark the innermost FLOP ops (ETR_OPF_FLOP_INNER), whose cost the model's FLOP rate sets;
 * called by an_optab_finish. */
void an_optab_mark_flops(an_optab *t);

/* Read a whole trace into t (then finishes it), with the progress line of command cmd.
 * ETR_CLI_OK, or ETR_CLI_FAIL after printing the one-line error (cli_check_schema's too). */
int an_optab_load(an_optab *t, const char *cmd, const char *path);

/* FLOPs of a matrix-multiply / convolution op from its input and output shapes, or 0 when
 * the name is not one of those or the shapes do not fit. */
double an_flops(const char *name, const rd_jval *inputs, const rd_jval *outputs);
/* Bytes on the wire per rank for a collective: message bytes times the algorithm factor of
 * its group size (ring all-reduce 2(p-1)/p, all-gather / reduce-scatter / all-to-all
 * (p-1)/p, broadcast / send / recv 1; 0 when p <= 1 or the name is a barrier). An unknown
 * dtype counts 4 bytes an element. */
double an_coll_bytes(const char *coll, const char *dtype, uint64_t in_nelems, uint64_t out_nelems,
                     uint64_t pg_size);
/* The same from message bytes and a kind (AN_COLL_*). */
double an_coll_wire(int kind, double in_bytes, double out_bytes, uint64_t pg_size);

/* ---- dependency graph (lib_an_ops.c) ---- */

enum { ETR_DEP_DATA = 1, ETR_DEP_FW = 2 };

typedef struct an_dep {
  uint32_t from, to; /* op indices */
  uint32_t kind;     /* ETR_DEP_* */
  uint32_t pad;
  uint64_t tensor; /* the tensor id read (data edges) */
} an_dep;

typedef struct an_deps {
  an_dep *edges; /* grouped by `to`, in start order of `to` */
  size_t n, cap;
  size_t *first;   /* per op: index of its first incoming edge */
  uint32_t *count; /* per op: number of incoming edges */
  size_t n_data, n_fw;
  size_t n_fw_missing; /* fw_parent named but not in the trace (or not earlier) */
} an_deps;

bool an_deps_build(const an_optab *t, an_deps *d);
void an_deps_free(an_deps *d);

/* ---- cost model (lib_an_model.c) ---- */

typedef struct an_speedup {
  char *pattern; /* exact name, or a prefix when it ends with '*' ("*" = every op) */
  double factor;
} an_speedup;

typedef struct an_model {
  an_speedup *speedups;
  size_t n_speedups;
  double flops_per_s;     /* > 0: mm/conv cost = FLOPs / rate */
  double link_latency_us; /* collectives: latency + bytes / bandwidth, when bandwidth > 0 */
  double link_GBps;
  double untimed_us; /* cost of an op without recorded timing (default 1) */
} an_model;

void an_model_init(an_model *m);
void an_model_free(an_model *m);
/* Parse a model file (format in docs/CLI.md). 0, or -1 with "FILE: line N: reason", or
 * "FILE: reason" when it cannot be opened or read (a directory too). */
int an_model_load(an_model *m, const char *path, char *err, size_t errlen);
/* Parse one line (no trailing newline needed). 0, 1 for a blank/comment line, -1 with reason. */
int an_model_line(an_model *m, const char *line, char *err, size_t errlen);
/* Cost (µs) of every op under the model into cost[t->n] (the recorded exclusive duration,
 * divided by its speed-up, when no FLOP or link rule applies). false on OOM. */
bool an_model_costs(const an_model *m, const an_optab *t, double *cost);

/* ---- schedule: simulation / longest path (lib_an_sched.c) ---- */

/* What set an op's start: nothing (time 0), the end of the previous op of its thread,
 * the end of a data source, the start of its fw_parent, recorded idle time after the
 * previous op, the start of its parent (first child). */
enum {
  ETR_BIND_NONE = 0,
  ETR_BIND_THREAD = 1,
  ETR_BIND_DATA = 2,
  ETR_BIND_FW = 3,
  ETR_BIND_IDLE = 4,
  ETR_BIND_PARENT = 5
};

typedef struct an_sched {
  double *start, *end; /* per op, µs from the simulated time 0 */
  uint32_t *pred;      /* the op whose constraint set the start, ETR_NOIX */
  uint32_t *end_pred;  /* the child whose end set this op's end, or the op itself */
  size_t n_ops;
  uint8_t *bind; /* ETR_BIND_* of that constraint */
  double makespan;
  uint32_t last;      /* op with the latest end (critical path end), ETR_NOIX if none */
  double *busy;       /* per thread: sum of costs */
  double *thread_end; /* per thread: end of its last op */
} an_sched;

typedef struct an_sched_opts {
  bool thread_order; /* ops of a thread run one at a time in start order (replay) */
  bool keep_idle;    /* recorded idle time of a thread (no op open) is kept as a delay */
} an_sched_opts;

/* Schedule every op as early as its constraints allow, with cost[i] per op. Ops nest: a
 * child starts after its previous sibling ends plus its "lead", the part of the parent's
 * exclusive time recorded between the two (scaled like the parent's cost); a parent ends
 * after its last child plus the rest of its exclusive time. Besides nesting, an op starts
 * after the sources of its data edges end and after its fw_parent starts; with
 * thread_order also after the previous top-level op of its thread (plus the recorded idle
 * time between them with keep_idle), else top-level ops start at 0 (unlimited threads).
 * One pass in start order; a data source still open on another thread is closed on
 * demand. false on OOM. */
bool an_schedule(const an_optab *t, const an_deps *d, const double *cost, const an_sched_opts *o,
                 an_sched *s);
void an_sched_free(an_sched *s);
/* One event of the critical path: an op's start or end, the time since the previous event
 * and the op that spent it (the op itself; its parent for a lead before a child; its
 * fw_parent for a fw wait; ETR_NOIX for recorded idle time or a gap). */
typedef struct an_path_step {
  uint32_t op;
  bool at_end;
  uint8_t bind; /* for a start: what set it (ETR_BIND_*) */
  double t;     /* the event's time */
  double spent; /* t minus the previous event's time */
  uint32_t spent_by;
} an_path_step;

/* The critical path, earliest event first: fills *path (malloc'd) and returns its length. */
size_t an_sched_path(const an_sched *s, const an_optab *t, an_path_step **path);

/* Print the critical path: length, time, the op names that take most of it, then up to
 * `limit` entries (0 = all) with start, cost and the constraint that put each op there. */
void an_sched_print_path(FILE *f, const an_optab *t, const an_sched *s, const double *cost,
                         size_t limit);

/* Short name of an ETR_BIND_* value ("thread", "data", ...). */
const char *an_bind_name(int bind);

#endif /* ETR_TOOLS_LIB_AN_OPS_H */
