/* bench/etr_bench.c — etr-bench: what recording costs, measured against a baseline in the
 * same run (docs/BENCHMARKS.md).
 *
 * Figures (ns per op unless named otherwise; each the median over --reps repetitions of
 * --ops ops after a warm-up, printed with min and max so noise is visible):
 *   disabled_ns         record site (init + begin + end, as a runtime writes it) while no
 *                       observer is enabled, minus an empty loop measured in the same rep
 *   enabled_ns          trace observer on, file on disk, op with 2 tensor inputs + 1 output:
 *                       wall clock of the recording loop / ops
 *   enabled_devnull_ns  the same writing to /dev/null
 *   enabled_cpu_ns      process CPU time (all threads, writer included) over the loop and
 *                       the close that drains the writer, / ops
 *   enabled_2t_ns       2 threads record concurrently; mean of their per-op wall times
 *   bytes_per_node      bytes written / nodes written for the 2-in-1-out op
 *   paced_*             ops that do about a microsecond of work each (as real operators
 *                       do), untraced and traced: the wall time tracing adds per op when
 *                       the writer thread keeps up (1 and 2 recording threads)
 *   binary_*            the same with the binary event log (ETR_TRACE=x.etr): the writer
 *                       writes the events as they are, no JSON. The op's name, schema,
 *                       dtype and device are the program's literals, known by address (no
 *                       bytes compared per op); binary_interned_* takes them from
 *                       etr_intern (known by address too), binary_heap_* from copies on
 *                       the heap (compared byte for byte at each op)
 *   baseline_*          the same workload through a PyTorch-style observer (pt_baseline.c)
 * The last line of output is one JSON object with every figure. The benchmark never fails
 * a build: it exits 0 unless an etr call fails (then 1, with a message).
 */
#define _GNU_SOURCE

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <etr/etr.h>

#include "bench_args.h"
#include "bench_report.h"
#include "pt_baseline.h"

#ifndef ETR_BENCH_BUILD_TYPE
#define ETR_BENCH_BUILD_TYPE "unknown"
#endif

/* The "operator body": a compiler barrier, so that neither the empty loop nor the record
 * site can be deleted or merged across iterations. */
#if defined(__GNUC__)
#define BENCH_BARRIER() __asm__ __volatile__("" ::: "memory")
#else
#define BENCH_BARRIER() atomic_signal_fence(memory_order_seq_cst)
#endif

#define MAX_REPS BENCH_MAX_REPS

/* Iterations of the operator body per op: 0 in the tight-loop phases, set for the paced
 * phases so that an op takes about a microsecond untraced. */
static unsigned op_work;
#define POOL 64 /* tensors per recording thread, reused like a model's activations */

static const char OP_NAME[] = "aten::mm";
static const char OP_SCHEMA[] = "aten::mm(Tensor self, Tensor mat2) -> Tensor";
static const int64_t SIZES[2] = {64, 128};
/* The name and schema the ops pass: the literals, or their interned copies (etr_intern) in
 * the binary_interned phase, or copies on the heap in the binary_heap phase. */
static const char *g_op_name = OP_NAME, *g_op_schema = OP_SCHEMA;
static const int64_t STRIDES[2] = {128, 1};

typedef struct pool {
  etr_tensor t[POOL];
  _Alignas(64) unsigned char impl[POOL][64];    /* tensor objects (identity only) */
  _Alignas(64) unsigned char storage[POOL][64]; /* storage objects (identity only) */
} pool;

static void pool_init(pool *p) {
  memset(p, 0, sizeof *p);
  for (int k = 0; k < POOL; k++) {
    etr_tensor *t = &p->t[k];
    t->impl = p->impl[k];
    t->storage = p->storage[k];
    t->storage_offset = 0;
    t->numel = SIZES[0] * SIZES[1];
    t->itemsize = 4;
    t->dtype = "float";
    t->device = "cpu";
    t->ndim = 2;
    t->sizes = SIZES;
    t->strides = STRIDES;
  }
}

/* The strings the ops pass: the runtime's own literals (the program's read-only data: etr
 * knows them by address, as it knows interned ones), interned copies, or copies on the heap
 * (as a runtime that builds its names at run time passes them: compared byte for byte at
 * each op). */
typedef enum { STR_LITERAL, STR_INTERNED, STR_HEAP } str_kind;

/* The heap copies of the phase that uses them (freed when the strings change again). */
static char *g_heap[4];
static unsigned g_nheap;

static const char *str_of(const char *lit, str_kind k) {
  if (k == STR_INTERNED) return etr_intern(lit);
  if (k == STR_HEAP && g_nheap < 4) {
    char *h = strdup(lit);
    if (h) return g_heap[g_nheap++] = h;
  }
  return lit;
}

static void use_strings(pool *pools, int n, str_kind kind) {
  while (g_nheap) free(g_heap[--g_nheap]);
  const char *dtype = str_of("float", kind);
  const char *device = str_of("cpu", kind);
  g_op_name = str_of(OP_NAME, kind);
  g_op_schema = str_of(OP_SCHEMA, kind);
  for (int i = 0; i < n; i++)
    for (int k = 0; k < POOL; k++) {
      pools[i].t[k].dtype = dtype;
      pools[i].t[k].device = device;
    }
}

/* One operator call as a runtime writes it: inputs and the schema are filled only when
 * someone observes, outputs only when someone needs them. Inlined in every loop. */
static inline void run_op(const pool *p, uint64_t i) {
  etr_record r;
  etr_value in[2];
  etr_value out[1];
  etr_record_init(&r, g_op_name, ETR_SCOPE_FUNCTION);
  if (etr_record_is_active(&r)) {
    r.schema = g_op_schema;
    if (etr_record_needs_inputs(&r)) {
      in[0] = etr_value_tensor(&p->t[(i * 5) % POOL]);
      in[1] = etr_value_tensor(&p->t[(i * 11 + 7) % POOL]);
      r.inputs = in;
      r.n_inputs = 2;
    }
  }
  etr_record_begin(&r);
  BENCH_BARRIER();
  for (unsigned k = 0; k < op_work; k++) BENCH_BARRIER();
  if (etr_record_needs_outputs(&r)) {
    out[0] = etr_value_tensor(&p->t[(i * 3 + 1) % POOL]);
    r.outputs = out;
    r.n_outputs = 1;
  }
  etr_record_end(&r);
}

/* The recording loop of the enabled phases: like a model, now and then an intermediate
 * tensor dies and a new one takes its address. */
static void run_ops(const pool *p, uint64_t first, uint64_t n) {
  for (uint64_t i = first; i < first + n; i++) {
    run_op(p, i);
    if ((i & 1023) == 1023) {
      const etr_tensor *t = &p->t[(i >> 10) % POOL];
      etr_tensor_died(t->impl);
      etr_storage_died(t->storage);
    }
  }
}

static uint64_t clock_ns(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
static uint64_t now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }
static uint64_t cpu_ns(void) { return clock_ns(CLOCK_PROCESS_CPUTIME_ID); }
static uint64_t thread_cpu_ns(void) { return clock_ns(CLOCK_THREAD_CPUTIME_ID); }

static void die_etr(const char *what, int rc) {
  fprintf(stderr, "etr-bench: %s failed: %s (%s)\n", what, etr_strerror(rc), etr_err_name(rc));
  exit(1);
}

/* ---- statistics ---- */

static const spread SKIPPED = {NAN, NAN, NAN};

/* ---- disabled ---- */

typedef struct disabled_result {
  spread diff, raw, empty;
} disabled_result;

/* The two loops out of line, each loop at the start of a cache line: inlined into main, the
 * loop's place moved with every unrelated edit of this file, and the record site's 1.4 ns
 * moved to 1.7-1.9 with it (the same instructions at another alignment). */
#if defined(__clang__) /* (no per-function loop alignment: the function's start only) */
#define BENCH_LOOP __attribute__((noinline, aligned(64)))
#else
#define BENCH_LOOP __attribute__((noinline, aligned(64), optimize("align-loops=64")))
#endif

static BENCH_LOOP double empty_loop(uint64_t n) {
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < n; i++) BENCH_BARRIER();
  return (double)(now_ns() - t0) / (double)n;
}

static BENCH_LOOP double disabled_loop(const pool *p, uint64_t n) {
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < n; i++) run_op(p, i);
  return (double)(now_ns() - t0) / (double)n;
}

static disabled_result bench_disabled(const pool *p, uint64_t n, int reps) {
  double diff[MAX_REPS], raw[MAX_REPS], empty[MAX_REPS];
  (void)empty_loop(n / 4 + 1); /* warm-up */
  (void)disabled_loop(p, n / 4 + 1);
  for (int r = 0; r < reps; r++) {
    empty[r] = empty_loop(n);
    raw[r] = disabled_loop(p, n);
    diff[r] = raw[r] - empty[r];
  }
  disabled_result d = {spread_of(diff, reps), spread_of(raw, reps), spread_of(empty, reps)};
  return d;
}

/* ---- enabled phases (trace to a file, trace to /dev/null, baseline), 1 or 2 threads ---- */

typedef enum phase_kind { PH_TRACE = 0, PH_BASELINE = 1, PH_OFF = 2 } phase_kind;

typedef struct worker {
  pthread_t thread;
  const pool *p;
  uint64_t warm, n;
  int depth;        /* extra stack frames under the recording loop (traceback phases) */
  etr_trace *trace; /* NULL for the baseline */
  pthread_barrier_t *bar;
  double per_op_ns;
  double cpu_per_op_ns; /* this thread's CPU time (waits for the writer excluded) */
  int rc;
} worker;

static void worker_loop(worker *w);

/* Recurse `depth` frames, then record: tracebacks then have a stack of that depth. */
static __attribute__((noinline)) void worker_deep(worker *w, int depth) {
  if (depth > 0) {
    worker_deep(w, depth - 1);
    __asm__ volatile("" ::: "memory"); /* not a tail call: keep the frame */
    return;
  }
  worker_loop(w);
}

static void *worker_main(void *arg) {
  worker *w = arg;
  worker_deep(w, w->depth);
  return NULL;
}

static __attribute__((noinline)) void worker_loop(worker *w) {
  run_ops(w->p, 0, w->warm);
  if (w->trace != NULL) w->rc = etr_trace_flush(w->trace);
  pthread_barrier_wait(w->bar); /* A: warm, start */
  uint64_t c0 = thread_cpu_ns(), t0 = now_ns();
  run_ops(w->p, w->warm, w->n);
  uint64_t t1 = now_ns(), c1 = thread_cpu_ns();
  w->per_op_ns = (double)(t1 - t0) / (double)w->n;
  w->cpu_per_op_ns = (double)(c1 - c0) / (double)w->n;
  pthread_barrier_wait(w->bar); /* B: all done */
}

typedef struct rep_result {
  double per_op_ns;      /* mean over the recording threads */
  double rec_cpu_ns;     /* recording thread's own CPU per op, mean over the threads */
  double cpu_ns;         /* process CPU per op (all threads), loop + close */
  double close_ms;       /* etr_trace_close / pt_baseline_close */
  double bytes_per_node; /* baseline only: file size / nodes */
} rep_result;

/* Traceback settings of the PH_TRACE phases: off, or on every op / 1 in N at a depth. */
static etr_traceback_options g_tb;
static int g_tb_depth;

static rep_result run_rep(phase_kind kind, const char *path, pool *pools, int nthreads,
                          uint64_t warm, uint64_t n) {
  etr_trace *tr = NULL;
  pt_baseline *bl = NULL;
  int rc;
  /* A fresh file each time: ext4 flushes a truncated-then-rewritten file at close. */
  if (strcmp(path, "/dev/null") != 0) unlink(path);
  if (kind == PH_TRACE) {
    etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
    opt.traceback = &g_tb;
    if ((rc = etr_trace_open(path, &opt, &tr)) != 0) die_etr("etr_trace_open", rc);
    if ((rc = etr_trace_enable(tr)) != 0) die_etr("etr_trace_enable", rc);
  } else if (kind == PH_BASELINE && (rc = pt_baseline_open(path, &bl)) != 0) {
    die_etr("baseline open (etr_observer_add)", rc);
  }

  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, (unsigned)nthreads + 1);
  worker w[2];
  for (int k = 0; k < nthreads; k++) {
    w[k] = (worker){0, &pools[k], warm, n, g_tb_depth, tr, &bar, 0, 0, 0};
    if (pthread_create(&w[k].thread, NULL, worker_main, &w[k]) != 0) {
      fprintf(stderr, "etr-bench: pthread_create failed\n");
      exit(1);
    }
  }
  pthread_barrier_wait(&bar); /* A */
  uint64_t cpu0 = cpu_ns();
  pthread_barrier_wait(&bar); /* B */
  for (int k = 0; k < nthreads; k++) pthread_join(w[k].thread, NULL);

  rep_result res = {0, 0, 0, 0, 0};
  uint64_t nodes = 0;
  uint64_t c0 = now_ns();
  if (kind == PH_TRACE) {
    rc = etr_trace_close(tr);
    if (rc != 0) die_etr("etr_trace_close", rc);
  } else if (kind == PH_BASELINE) {
    rc = pt_baseline_close(bl, &nodes);
    if (rc != 0) die_etr("baseline close", rc);
  }
  uint64_t c1 = now_ns();
  uint64_t cpu1 = cpu_ns();
  pthread_barrier_destroy(&bar);
  for (int k = 0; k < nthreads; k++) {
    if (w[k].rc != 0) die_etr("etr_trace_flush", w[k].rc);
    res.per_op_ns += w[k].per_op_ns / nthreads;
    res.rec_cpu_ns += w[k].cpu_per_op_ns / nthreads;
  }
  res.cpu_ns = (double)(cpu1 - cpu0) / (double)(n * (uint64_t)nthreads);
  res.close_ms = (double)(c1 - c0) / 1e6;
  if (kind == PH_BASELINE && nodes != 0) {
    struct stat st;
    if (stat(path, &st) == 0) res.bytes_per_node = (double)st.st_size / (double)nodes;
  }
  return res;
}

typedef struct phase_result {
  spread per_op, rec_cpu, cpu, close_ms, bytes_per_node;
} phase_result;

static phase_result run_phase(phase_kind kind, const char *path, pool *pools, int nthreads,
                              uint64_t warm, uint64_t n, int reps) {
  double per_op[MAX_REPS], rec_cpu[MAX_REPS], cpu[MAX_REPS], close_ms[MAX_REPS], bpn[MAX_REPS];
  for (int r = 0; r < reps; r++) {
    rep_result x = run_rep(kind, path, pools, nthreads, warm, n);
    per_op[r] = x.per_op_ns;
    rec_cpu[r] = x.rec_cpu_ns;
    cpu[r] = x.cpu_ns;
    close_ms[r] = x.close_ms;
    bpn[r] = x.bytes_per_node;
  }
  phase_result p = {spread_of(per_op, reps), spread_of(rec_cpu, reps), spread_of(cpu, reps),
                    spread_of(close_ms, reps), spread_of(bpn, reps)};
  return p;
}

/* Bytes per node from the trace's own counters: the delta between two flushes around n ops
 * on this thread (no header, footer, thread or process node in it). Also checks that no op
 * was lost. */
typedef struct bytes_result {
  double bytes_per_node;
  double file_bytes_per_node; /* file size after close / all nodes (header included) */
  uint64_t buffer_waits;
} bytes_result;

static bytes_result bench_bytes(const char *path, const pool *p, uint64_t warm, uint64_t n) {
  etr_trace *tr;
  int rc;
  if ((rc = etr_trace_open(path, NULL, &tr)) != 0) die_etr("etr_trace_open", rc);
  if ((rc = etr_trace_enable(tr)) != 0) die_etr("etr_trace_enable", rc);
  run_ops(p, 0, warm);
  etr_trace_stats s0, s1;
  memset(&s0, 0, sizeof s0);
  memset(&s1, 0, sizeof s1);
  s0.struct_size = s1.struct_size = sizeof s0;
  if ((rc = etr_trace_flush(tr)) != 0) die_etr("etr_trace_flush", rc);
  if ((rc = etr_trace_stats_get(tr, &s0)) != 0) die_etr("etr_trace_stats_get", rc);
  run_ops(p, warm, n);
  if ((rc = etr_trace_flush(tr)) != 0) die_etr("etr_trace_flush", rc);
  if ((rc = etr_trace_stats_get(tr, &s1)) != 0) die_etr("etr_trace_stats_get", rc);
  uint64_t nodes_total = s1.ops_recorded + 2; /* + the thread node and the process node */
  if ((rc = etr_trace_close(tr)) != 0) die_etr("etr_trace_close", rc);

  bytes_result b = {0, 0, s1.buffer_waits};
  uint64_t dn = s1.nodes_written - s0.nodes_written;
  if (s1.ops_recorded - s0.ops_recorded != n || dn != n || s1.nodes_dropped != 0 ||
      s1.write_error != 0) {
    fprintf(stderr,
            "etr-bench: warning: %" PRIu64 " ops run, %" PRIu64 " recorded, %" PRIu64
            " nodes written, %" PRIu64 " dropped, write_error %d\n",
            n, s1.ops_recorded - s0.ops_recorded, dn, s1.nodes_dropped, s1.write_error);
  }
  if (dn != 0) b.bytes_per_node = (double)(s1.bytes_written - s0.bytes_written) / (double)dn;
  struct stat st;
  if (stat(path, &st) == 0) b.file_bytes_per_node = (double)st.st_size / (double)nodes_total;
  return b;
}

/* ---- main ---- */

int main(int argc, char **argv) {
  uint64_t ops = 200000, reps = 11;
  bool quick = false, ops_set = false, reps_set = false, keep = false;
  str_kind strings = STR_LITERAL;
  unsigned run = RUN_ALL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      bench_usage(stdout);
      return 0;
    } else if (strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (strcmp(argv[i], "--interned") == 0) {
      strings = STR_INTERNED;
    } else if (strcmp(argv[i], "--heap") == 0) {
      strings = STR_HEAP;
    } else if (strcmp(argv[i], "--keep") == 0) {
      keep = true;
    } else if (strcmp(argv[i], "--ops") == 0 && i + 1 < argc) {
      if (!bench_parse_u64(argv[++i], &ops) || ops == 0 || ops > (UINT64_C(1) << 40)) {
        fprintf(stderr, "etr-bench: bad --ops value '%s'\n", argv[i]);
        return 2;
      }
      ops_set = true;
    } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      if (!bench_parse_u64(argv[++i], &reps) || reps == 0 || reps > MAX_REPS) {
        fprintf(stderr, "etr-bench: bad --reps value '%s' (1..%d)\n", argv[i], MAX_REPS);
        return 2;
      }
      reps_set = true;
    } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      if (!bench_parse_phases(argv[++i], &run)) {
        fprintf(stderr, "etr-bench: bad --only list '%s'\n", argv[i]);
        return 2;
      }
    } else {
      fprintf(stderr, "etr-bench: unknown argument '%s'\n", argv[i]);
      bench_usage(stderr);
      return 2;
    }
  }
  if (quick) {
    if (!ops_set) ops = 5000;
    if (!reps_set) reps = 3;
  }
  uint64_t disabled_ops = ops * 100 < 1000000 ? 1000000 : ops * 100;
  uint64_t warm = ops / 10 < 100 ? 100 : (ops / 10 > 20000 ? 20000 : ops / 10);
  int nreps = (int)reps;

  if (etr_trace_current() != NULL) {
    fprintf(stderr, "etr-bench: a trace is already open (ETR_TRACE is set?); unset it\n");
    return 1;
  }

  const char *tmp = getenv("TMPDIR");
  if (tmp == NULL || tmp[0] == '\0') tmp = "/tmp";
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/etr-bench-XXXXXX", tmp);
  if (mkdtemp(dir) == NULL) {
    fprintf(stderr, "etr-bench: cannot create a directory in %s: %s\n", tmp, strerror(errno));
    return 1;
  }
  char trace_path[4200], bytes_path[4200], base_path[4200], bin_path[4200], bin_bytes_path[4200];
  snprintf(trace_path, sizeof trace_path, "%s/trace.json", dir);
  snprintf(bin_path, sizeof bin_path, "%s/trace.etr", dir);
  snprintf(bin_bytes_path, sizeof bin_bytes_path, "%s/trace-bytes.etr", dir);
  snprintf(bytes_path, sizeof bytes_path, "%s/trace-bytes.json", dir);
  snprintf(base_path, sizeof base_path, "%s/baseline.json", dir);

  static pool pools[2];
  pool_init(&pools[0]);
  pool_init(&pools[1]);
  if (strings != STR_LITERAL) use_strings(pools, 2, strings);

  int np = nproc();
  double load[3] = {NAN, NAN, NAN};
  if (getloadavg(load, 3) < 3) load[0] = load[1] = load[2] = NAN;
  printf("etr-bench: etr %s (header %s), build %s%s, nproc %d\n", etr_version_string(),
         ETR_VERSION_STRING, ETR_BENCH_BUILD_TYPE,
#ifdef __OPTIMIZE__
         "",
#else
         " (NOT OPTIMISED: figures are meaningless, use -DCMAKE_BUILD_TYPE=Release)",
#endif
         np);
  printf("  load average at start: %.2f %.2f %.2f (other work on the machine adds noise)\n",
         load[0], load[1], load[2]);
  printf("  op: %s, 2 tensor inputs + 1 output (2-D float cpu), pool of %d tensors/thread\n",
         OP_NAME, POOL);
  printf("  %" PRIu64 " ops x %d reps (warm-up %" PRIu64 " ops/rep); disabled: %" PRIu64
         " ops x %d reps; trace files in %s\n",
         ops, nreps, warm, disabled_ops, nreps, dir);
  fflush(stdout);

  disabled_result dis = {SKIPPED, SKIPPED, SKIPPED};
  bytes_result byt = {NAN, NAN, 0};
  phase_result none = {SKIPPED, SKIPPED, SKIPPED, SKIPPED, SKIPPED};
  phase_result en = none, dn = none, en2 = none, bl = none, bl2 = none;
  if (run & RUN_DISABLED) dis = bench_disabled(&pools[0], disabled_ops, nreps);
  if (run & RUN_BYTES) byt = bench_bytes(bytes_path, &pools[0], warm, ops);
  if (run & RUN_ENABLED) en = run_phase(PH_TRACE, trace_path, pools, 1, warm, ops, nreps);
  if (run & RUN_DEVNULL) dn = run_phase(PH_TRACE, "/dev/null", pools, 1, warm, ops, nreps);
  if (run & RUN_2T) en2 = run_phase(PH_TRACE, trace_path, pools, 2, warm, ops, nreps);
  /* The binary event log (ETR_TRACE=x.etr): the same ops, events written as they are. */
  phase_result bin = none, bin2 = none, bini = none, binh = none;
  bytes_result bin_byt = {NAN, NAN, 0};
  if (run & RUN_BINARY) {
    bin_byt = bench_bytes(bin_bytes_path, &pools[0], warm, ops);
    bin = run_phase(PH_TRACE, bin_path, pools, 1, warm, ops, nreps);
    bin2 = run_phase(PH_TRACE, bin_path, pools, 2, warm, ops, nreps);
    use_strings(pools, 2, STR_INTERNED);
    bini = run_phase(PH_TRACE, bin_path, pools, 1, warm, ops, nreps);
    use_strings(pools, 2, STR_HEAP);
    binh = run_phase(PH_TRACE, bin_path, pools, 1, warm, ops, nreps);
    use_strings(pools, 2, strings);
  }
  if (run & RUN_BASELINE) bl = run_phase(PH_BASELINE, base_path, pools, 1, warm, ops, nreps);
  if (run & RUN_BASELINE_2T) bl2 = run_phase(PH_BASELINE, base_path, pools, 2, warm, ops, nreps);
  /* Paced: ops with about 1 us of work each, untraced then traced, 1 and 2 threads. */
  phase_result poff = none, pon = none, poff2 = none, pon2 = none;
  if (run & RUN_PACED) {
    uint64_t pops = ops / 4 < 1000 ? 1000 : ops / 4;
    op_work = 1;
    for (;;) { /* calibrate the body to about 1 us */
      uint64_t t0 = now_ns();
      run_ops(&pools[0], 0, 1000);
      double per = (double)(now_ns() - t0) / 1000.0;
      if (per >= 1000.0 || op_work >= (1u << 24)) break;
      op_work *= 2;
    }
    poff = run_phase(PH_OFF, trace_path, pools, 1, warm, pops, nreps);
    pon = run_phase(PH_TRACE, trace_path, pools, 1, warm, pops, nreps);
    poff2 = run_phase(PH_OFF, trace_path, pools, 2, warm, pops, nreps);
    pon2 = run_phase(PH_TRACE, trace_path, pools, 2, warm, pops, nreps);
    op_work = 0;
  }
  /* Tracebacks: the recording loop 32 frames deep, a traceback on every op, then on 1 op
   * in 100, against the same loop traced without tracebacks. */
  phase_result tb0 = none, tb1 = none, tb100 = none;
  if (run & RUN_TRACEBACK) {
    g_tb_depth = 26; /* + the thread's own frames: about 32 */
    tb0 = run_phase(PH_TRACE, trace_path, pools, 1, warm, ops, nreps);
    g_tb = (etr_traceback_options)ETR_TRACEBACK_OPTIONS_INIT;
    g_tb.enabled = true;
    tb1 = run_phase(PH_TRACE, trace_path, pools, 1, warm, ops, nreps);
    g_tb.every = 100;
    tb100 = run_phase(PH_TRACE, trace_path, pools, 1, warm, ops, nreps);
    g_tb = (etr_traceback_options)ETR_TRACEBACK_OPTIONS_INIT;
    g_tb_depth = 0;
  }
  /* Capture and symbolization: their own programs (they use libetr's internals). */
  static const char *const cap_keys[] = {"capture32_ns", "fpwalk32_ns"};
  static const char *const sym_keys[] = {"symbolize_warm_ns", "symbolize_cold_ns",
                                         "addr2line_ns",      "addr2line_pipe_ns",
                                         "tb_close_first_ms", "tb_close_next_ms"};
  static const char *const lttng_keys[] = {"lttng_ns", "lttng_rec_cpu_ns"};
  double cap[2] = {NAN, NAN}, sym[6] = {NAN, NAN, NAN, NAN, NAN, NAN}, lt[2] = {NAN, NAN};
  if (run & RUN_CAPTURE) {
    printf("\n  capture (etr-bench-capture):\n");
    run_sibling("etr-bench-capture", quick, cap_keys, cap, 2);
  }
  if (run & RUN_SYMBOLIZE) {
    printf("\n  symbolization (etr-bench-symbolize):\n");
    run_sibling("etr-bench-symbolize", quick, sym_keys, sym, 6);
  }
  /* The peer: an LTTng-UST tracepoint with the same payload, live session (bench_lttng.c). */
  if (run & RUN_LTTNG) {
    printf("\n  LTTng-UST (etr-bench-lttng):\n");
    run_sibling("etr-bench-lttng", quick, lttng_keys, lt, 2);
  }
  double tb_added = tb1.rec_cpu.med - tb0.rec_cpu.med;
  double tb100_added = tb100.rec_cpu.med - tb0.rec_cpu.med;
  double paced_added = pon.per_op.med - poff.per_op.med;
  double paced_2t_added = pon2.per_op.med - poff2.per_op.med;
  if (!keep) {
    unlink(bytes_path);
    unlink(trace_path);
    unlink(bin_path);
    unlink(bin_bytes_path);
    unlink(base_path);
    rmdir(dir);
  }

  double ratio_2t = en2.per_op.med / en.per_op.med;
  double ratio_2t_rec_cpu = en2.rec_cpu.med / en.rec_cpu.med;
  double speedup = bl.per_op.med / en.per_op.med;
  double speedup_2t = bl2.per_op.med / en2.per_op.med;
  double speedup_cpu = bl.cpu.med / en.cpu.med;

  printf("\n  %-26s %12s %12s %12s  %s\n", "figure", "median", "min", "max", "unit");
  row("disabled_ns", dis.diff, "ns/op: record site minus empty loop (target <= 2)");
  row("disabled_raw_ns", dis.raw, "ns/op: loop with the record site");
  row("empty_loop_ns", dis.empty, "ns/op: empty loop (compiler barrier only)");
  row("enabled_ns", en.per_op, "ns/op on the recording thread, trace on disk (<= 250)");
  row("enabled_rec_cpu_ns", en.rec_cpu, "ns/op of the recording thread's own CPU time");
  row("enabled_close_ms", en.close_ms, "ms: etr_trace_close (drains the writer)");
  row("enabled_devnull_ns", dn.per_op, "ns/op, trace to /dev/null");
  row("enabled_cpu_ns", en.cpu, "ns/op of process CPU, all threads, loop + close (<= 1000)");
  row("enabled_devnull_rec_cpu_ns", dn.rec_cpu, "ns/op of the recording thread's CPU, /dev/null");
  row("enabled_devnull_cpu_ns", dn.cpu, "ns/op of process CPU, /dev/null");
  row("enabled_2t_ns", en2.per_op, "ns/op per recording thread, 2 threads");
  row("enabled_2t_rec_cpu_ns", en2.rec_cpu, "ns/op of each recording thread's own CPU");
  row("enabled_2t_cpu_ns", en2.cpu, "ns/op of process CPU, 2 threads");
  row("binary_ns", bin.per_op, "ns/op on the recording thread, binary log on disk (<= 60)");
  row("binary_rec_cpu_ns", bin.rec_cpu, "ns/op of the recording thread's own CPU, binary (<= 60)");
  row("binary_cpu_ns", bin.cpu, "ns/op of process CPU, binary log (<= 150)");
  row("binary_2t_ns", bin2.per_op, "ns/op per recording thread, 2 threads, binary");
  row1("binary_bytes_per_op", bin_byt.bytes_per_node, "bytes/op in the binary log (<= 64)");
  row("binary_interned_ns", bini.per_op, "ns/op, binary, name/schema/dtype/device interned");
  row("binary_interned_rec_cpu_ns", bini.rec_cpu, "ns/op of the recording thread's CPU, interned");
  row("binary_interned_cpu_ns", bini.cpu, "ns/op of process CPU, binary, interned");
  row("binary_heap_ns", binh.per_op, "ns/op, binary, name/schema/dtype/device on the heap");
  row("binary_heap_rec_cpu_ns", binh.rec_cpu, "ns/op of the recording thread's CPU, heap");
  row("binary_heap_cpu_ns", binh.cpu, "ns/op of process CPU, binary, heap strings");
  row("baseline_ns", bl.per_op, "ns/op, PyTorch-style observer (global mutex)");
  row("baseline_rec_cpu_ns", bl.rec_cpu, "ns/op of the recording thread's own CPU, baseline");
  row("baseline_cpu_ns", bl.cpu, "ns/op of process CPU, baseline");
  row("baseline_2t_ns", bl2.per_op, "ns/op per recording thread, baseline, 2 threads");
  row("baseline_2t_rec_cpu_ns", bl2.rec_cpu, "ns/op of each recording thread's CPU, baseline");
  row("baseline_close_ms", bl.close_ms, "ms: baseline close");
  row1("bytes_per_node", byt.bytes_per_node, "bytes/node (trace's own counters)");
  row1("file_bytes_per_node", byt.file_bytes_per_node, "bytes/node: file size / all nodes");
  row1("baseline_bytes_per_node", bl.bytes_per_node.med, "bytes/node, PyTorch layout");
  row1("ratio_2t", ratio_2t, "enabled_2t_ns / enabled_ns (target <= 1.5)");
  row1("ratio_2t_rec_cpu", ratio_2t_rec_cpu, "enabled_2t_rec_cpu_ns / enabled_rec_cpu_ns");
  row1("speedup", speedup, "baseline_ns / enabled_ns");
  row1("speedup_2t", speedup_2t, "baseline_2t_ns / enabled_2t_ns");
  row1("speedup_cpu", speedup_cpu, "baseline_cpu_ns / enabled_cpu_ns");
  row("paced_off_ns", poff.per_op, "ns/op, ~1 us ops, no trace");
  row("paced_on_ns", pon.per_op, "ns/op, ~1 us ops, traced to disk");
  row1("paced_added_ns", paced_added, "paced_on_ns - paced_off_ns: wall time tracing adds per op");
  row("paced_2t_off_ns", poff2.per_op, "ns/op per thread, 2 threads, no trace");
  row("paced_2t_on_ns", pon2.per_op, "ns/op per thread, 2 threads, traced");
  row1("paced_2t_added_ns", paced_2t_added,
       "wall time added per op, 2 threads (2 cores: shared with the writer)");
  row("traceback_off_rec_cpu_ns", tb0.rec_cpu,
      "ns/op of recording-thread CPU, stack depth ~32, no traceback");
  row("traceback_rec_cpu_ns", tb1.rec_cpu, "ns/op, the same with a traceback on every op");
  row("traceback100_rec_cpu_ns", tb100.rec_cpu, "ns/op, the same with a traceback on 1 op in 100");
  row("traceback_cpu_ns", tb1.cpu,
      "ns/op of process CPU (writer, tables, symbolization), every op");
  row1("traceback_added_ns", tb_added, "traceback_rec_cpu_ns - traceback_off_rec_cpu_ns");
  row1("traceback100_added_ns", tb100_added, "traceback100_rec_cpu_ns - traceback_off_rec_cpu_ns");
  row1("capture32_ns", cap[0], "ns: native capture of a 32-frame stack");
  row1("fpwalk32_ns", cap[1], "ns: frame-pointer walk of the same stack");
  row1("capture32_ratio", cap[0] / cap[1], "capture32_ns / fpwalk32_ns (target <= 3)");
  row1("symbolize_warm_ns", sym[0], "ns per new address, module loaded (target <= 1000)");
  row1("symbolize_cold_ns", sym[1], "ns per address, first address of a module");
  row1("addr2line_ns", sym[2], "ns per address, one addr2line process each");
  row1("addr2line_pipe_ns", sym[3], "ns per address, addr2line on an open pipe");
  row1("tb_close_first_ms", sym[4], "ms, first close of a trace with tracebacks");
  row1("tb_close_next_ms", sym[5], "ms, next closes, same stacks (symbolizer kept)");
  row1("symbolize_vs_pipe", sym[3] / sym[0],
       "addr2line_pipe_ns / symbolize_warm_ns (target >= 10)");
  row1("lttng_ns", lt[0], "ns/op, LTTng-UST begin + end tracepoints, same payload, live session");
  row1("lttng_rec_cpu_ns", lt[1], "ns/op of the recording thread's CPU, LTTng-UST");
  row1("lttng_vs_enabled", lt[0] / en.per_op.med, "lttng_ns / enabled_ns");
  printf("  buffer_waits in the bytes run: %" PRIu64 "\n\n", byt.buffer_waits);

  printf(
      "{\"etr_version\": \"%s\", \"build\": \"%s\", \"optimized\": %s, \"nproc\": %d, "
      "\"ops\": %" PRIu64 ", \"reps\": %d, \"disabled_ops\": %" PRIu64,
      etr_version_string(), ETR_BENCH_BUILD_TYPE,
#ifdef __OPTIMIZE__
      "true",
#else
      "false",
#endif
      np, ops, nreps, disabled_ops);
  json_num("loadavg", load[0]);
  json_spread("disabled_ns", dis.diff);
  json_spread("disabled_raw_ns", dis.raw);
  json_spread("empty_loop_ns", dis.empty);
  json_spread("enabled_ns", en.per_op);
  json_spread("enabled_rec_cpu_ns", en.rec_cpu);
  json_spread("enabled_close_ms", en.close_ms);
  json_spread("enabled_devnull_ns", dn.per_op);
  json_spread("enabled_cpu_ns", en.cpu);
  json_spread("enabled_devnull_rec_cpu_ns", dn.rec_cpu);
  json_spread("enabled_devnull_cpu_ns", dn.cpu);
  json_spread("enabled_2t_ns", en2.per_op);
  json_spread("enabled_2t_rec_cpu_ns", en2.rec_cpu);
  json_spread("enabled_2t_cpu_ns", en2.cpu);
  json_spread("binary_ns", bin.per_op);
  json_spread("binary_rec_cpu_ns", bin.rec_cpu);
  json_spread("binary_cpu_ns", bin.cpu);
  json_spread("binary_2t_ns", bin2.per_op);
  json_num("binary_bytes_per_op", bin_byt.bytes_per_node);
  json_spread("binary_interned_ns", bini.per_op);
  json_spread("binary_interned_rec_cpu_ns", bini.rec_cpu);
  json_spread("binary_interned_cpu_ns", bini.cpu);
  json_spread("binary_heap_ns", binh.per_op);
  json_spread("binary_heap_rec_cpu_ns", binh.rec_cpu);
  json_spread("binary_heap_cpu_ns", binh.cpu);
  json_spread("baseline_ns", bl.per_op);
  json_spread("baseline_rec_cpu_ns", bl.rec_cpu);
  json_spread("baseline_cpu_ns", bl.cpu);
  json_spread("baseline_2t_ns", bl2.per_op);
  json_spread("baseline_2t_rec_cpu_ns", bl2.rec_cpu);
  json_spread("baseline_close_ms", bl.close_ms);
  json_num("bytes_per_node", byt.bytes_per_node);
  json_num("file_bytes_per_node", byt.file_bytes_per_node);
  json_num("baseline_bytes_per_node", bl.bytes_per_node.med);
  json_num("ratio_2t", ratio_2t);
  json_num("ratio_2t_rec_cpu", ratio_2t_rec_cpu);
  json_num("speedup", speedup);
  json_num("speedup_2t", speedup_2t);
  json_num("speedup_cpu", speedup_cpu);
  json_spread("paced_off_ns", poff.per_op);
  json_spread("paced_on_ns", pon.per_op);
  json_num("paced_added_ns", paced_added);
  json_spread("paced_2t_off_ns", poff2.per_op);
  json_spread("paced_2t_on_ns", pon2.per_op);
  json_num("paced_2t_added_ns", paced_2t_added);
  json_spread("traceback_off_rec_cpu_ns", tb0.rec_cpu);
  json_spread("traceback_rec_cpu_ns", tb1.rec_cpu);
  json_spread("traceback100_rec_cpu_ns", tb100.rec_cpu);
  json_spread("traceback_cpu_ns", tb1.cpu);
  json_num("traceback_added_ns", tb_added);
  json_num("traceback100_added_ns", tb100_added);
  json_num("lttng_ns", lt[0]);
  json_num("lttng_rec_cpu_ns", lt[1]);
  json_num("capture32_ns", cap[0]);
  json_num("fpwalk32_ns", cap[1]);
  json_num("symbolize_warm_ns", sym[0]);
  json_num("symbolize_cold_ns", sym[1]);
  json_num("addr2line_ns", sym[2]);
  json_num("addr2line_pipe_ns", sym[3]);
  json_num("tb_close_first_ms", sym[4]);
  json_num("tb_close_next_ms", sym[5]);
  printf(", \"buffer_waits\": %" PRIu64 "}\n", byt.buffer_waits);
  use_strings(pools, 2, STR_LITERAL); /* (frees the heap copies) */
  return 0;
}
