/* tests/reliability/stress.c — many threads record through the execution trace while other
 * observers come and go (issue 5 item 6).
 *
 *   reliability_stress [--threads T] [--ops N] [--out FILE] [--etr PATH] [--keep] [--quiet]
 *                      [--flush-ms MS] [--buffer-kb KB] [--order-warn]
 *
 * T recording threads (default 8) each make exactly N ops (default 20 000): nested ops, two
 * and three deep, every 512 of them inside a long "step" op, the outer ones with tensor inputs and
 * outputs drawn from a per-thread pool whose tensors die and are reborn now and then (so object ids
 * are assigned and retired all the time). Meanwhile a control thread adds, enables, disables and
 * removes up to 8 extra observers with small counting callbacks, in a loop; the trace observer
 * stays enabled.
 *
 * Checks, each failing the run (exit 1) with a line on stderr:
 * - every extra observer: exits <= enters once it is removed, and on each recording thread
 *   its exits match its enters in stack order (an exit for the record on top of the stack
 *   it entered); no callback after etr_observer_remove returned (a flag set then, checked in
 *   every callback; removed observers' memory is poisoned and freed later, so a very late
 *   callback also shows up under ASan);
 * - close: 0; ops_recorded == the ops the threads made; nodes_dropped == 0; no op open;
 * - the file: `etr validate --strict` says valid, and its op count equals ops_recorded.
 * Prints one line: ops, nodes, dropped, observer activity, and the wall time of each phase.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <etr/etr.h>

#include "record_nesting.h"

#ifndef ETR_TOOL
#define ETR_TOOL "etr"
#endif

enum { MAX_THREADS = 64, SLOTS = 8, POOL = 8, GRAVE = 256, STEP = 512 };
#define MAGIC_ALIVE 0x5eedf00du
#define MAGIC_DEAD 0xdeadbeefu

static int g_threads = 8;
static uint64_t g_ops = 20000;
static bool g_quiet;
static uint32_t g_flush_ms, g_buffer_kb; /* trace options; 0 = the defaults */
static bool g_order_warn;                /* nodes out of order: a warning, not a failure */

static _Thread_local int tls_idx = -1;

/* ---- extra observers ---- */

typedef struct xobs {
  unsigned magic;
  etr_observer_id id;
  bool enabled;
  atomic_int removed; /* set right after etr_observer_remove returned */
  _Atomic uint64_t enters, exits;
  rec_nesting t[MAX_THREADS]; /* each written by recording thread idx only */
} xobs;

static _Atomic uint64_t g_late;      /* callbacks after remove returned */
static _Atomic uint64_t g_bad_magic; /* callbacks on poisoned memory */
static _Atomic uint64_t g_bad_thread;

/* Counts one callback of observer o (enter or exit) and gives the calling thread's nesting
 * check in o, or NULL (counted) when o is poisoned or the thread is not a recording one. */
static rec_nesting *x_callback(xobs *o, _Atomic uint64_t *calls) {
  if (o->magic != MAGIC_ALIVE) {
    atomic_fetch_add(&g_bad_magic, 1);
    return NULL;
  }
  if (atomic_load(&o->removed)) atomic_fetch_add(&g_late, 1);
  atomic_fetch_add_explicit(calls, 1, memory_order_relaxed);
  int i = tls_idx;
  if (i < 0 || i >= g_threads) {
    atomic_fetch_add(&g_bad_thread, 1);
    return NULL;
  }
  return &o->t[i];
}

static void x_enter(const etr_record *rec, void *user) {
  xobs *o = user;
  rec_nesting *p = x_callback(o, &o->enters);
  if (p != NULL) rec_nesting_enter(p, rec);
}

static void x_exit(const etr_record *rec, void *user) {
  xobs *o = user;
  rec_nesting *p = x_callback(o, &o->exits);
  if (p != NULL) rec_nesting_exit(p, rec);
}

/* ---- recording threads ---- */

static atomic_int g_recorders_done;
static _Atomic uint64_t g_ops_made;

typedef struct tensor_slot {
  char impl, storage; /* their addresses are the identities */
  int64_t sizes[2];
  etr_tensor t;
} tensor_slot;

static uint64_t rng_next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

/* One op with n_in inputs; inside it, depth - 1 more levels. */
static void op(const char *name, const etr_value *in, uint32_t n_in, const etr_value *out,
               uint32_t n_out, int depth, uint64_t *made) {
  etr_record r;
  etr_record_init(&r, name, ETR_SCOPE_FUNCTION);
  if (etr_record_is_active(&r)) r.schema = "stress::op(Tensor a, Tensor b) -> Tensor";
  if (etr_record_needs_inputs(&r)) {
    r.inputs = in;
    r.n_inputs = n_in;
  }
  etr_record_begin(&r);
  (*made)++;
  if (depth > 1) op(depth == 3 ? "stress::mid" : "stress::leaf", in, 1, out, 1, depth - 1, made);
  if (etr_record_needs_outputs(&r)) {
    r.outputs = out;
    r.n_outputs = n_out;
  }
  etr_record_end(&r);
}

typedef struct rec_ctx {
  int idx;
  uint64_t made;
} rec_ctx;

static void *recorder(void *arg) {
  rec_ctx *c = arg;
  tls_idx = c->idx;
  tensor_slot *pool = calloc(POOL, sizeof *pool);
  if (!pool) abort();
  for (int i = 0; i < POOL; i++) {
    pool[i].sizes[0] = 4 + i;
    pool[i].sizes[1] = 8;
    pool[i].t = (etr_tensor){&pool[i].impl,
                             &pool[i].storage,
                             0,
                             pool[i].sizes[0] * 8,
                             4,
                             "float",
                             "cpu",
                             2,
                             pool[i].sizes,
                             NULL};
  }
  uint64_t rng = 0x9E3779B97F4A7C15ull * (uint64_t)(c->idx + 1);
  uint64_t made = 0;
  etr_record step;
  bool in_step = false;
  for (uint64_t it = 0; made < g_ops; it++) {
    /* Every STEP iterations run inside one long op (like a training step): its children
     * span many buffer chunks and timed flushes. */
    if (it % STEP == 0) {
      if (in_step) etr_record_end(&step);
      etr_record_init(&step, "stress::step", ETR_SCOPE_USER_SCOPE);
      etr_record_begin(&step);
      in_step = true;
      if (++made == g_ops) break;
    }
    uint64_t r = rng_next(&rng);
    const etr_tensor *a = &pool[r % POOL].t, *b = &pool[(r >> 8) % POOL].t;
    const etr_tensor *o = &pool[(r >> 16) % POOL].t;
    etr_value in[3] = {etr_value_tensor(a), etr_value_tensor(b), etr_value_int((int64_t)it)};
    etr_value out[1] = {etr_value_tensor(o)};
    uint64_t left = g_ops - made;
    int depth = (it % 4 == 0) ? 3 : 2;
    if ((uint64_t)depth > left) depth = (int)left;
    op("stress::outer", in, 3, out, 1, depth, &made);
    if ((r >> 24) % 16 == 0) { /* a tensor dies; the next one at its address is new */
      tensor_slot *d = &pool[(r >> 32) % POOL];
      etr_tensor_died(&d->impl);
      etr_storage_died(&d->storage);
    }
  }
  if (in_step) etr_record_end(&step);
  c->made = made;
  atomic_fetch_add(&g_ops_made, made);
  free(pool);
  return NULL;
}

/* ---- control thread ---- */

typedef struct control_stats {
  uint64_t added, removed, toggles, add_errors, violations, counts_bad;
} control_stats;

static xobs *g_grave[GRAVE];
static size_t g_grave_n;

static void bury(xobs *o) {
  /* Poison now; free a while later (a callback in between is caught by the magic check,
   * one after the free by ASan). */
  o->magic = MAGIC_DEAD;
  if (g_grave_n == GRAVE) {
    free(g_grave[0]);
    memmove(g_grave, g_grave + 1, (GRAVE - 1) * sizeof *g_grave);
    g_grave_n--;
  }
  g_grave[g_grave_n++] = o;
}

/* Checks of an observer whose remove returned: its per-thread fields are final now (read
 * race-free only if remove waited for running callbacks, which TSan checks). */
static void check_removed(const xobs *o, control_stats *cs) {
  uint64_t en = atomic_load(&o->enters), ex = atomic_load(&o->exits);
  if (ex > en) {
    cs->counts_bad++;
    fprintf(stderr, "stress: observer %llx: %llu exits > %llu enters\n", (unsigned long long)o->id,
            (unsigned long long)ex, (unsigned long long)en);
  }
  uint64_t se = 0, sx = 0;
  for (int i = 0; i < g_threads; i++) {
    cs->violations += o->t[i].violations;
    se += o->t[i].enters;
    sx += o->t[i].exits;
    /* What is still on its stack are ops in flight at removal: enters - exits. */
    if (o->t[i].enters - o->t[i].exits != (uint64_t)o->t[i].depth) cs->counts_bad++;
  }
  if (se != en || sx != ex) cs->counts_bad++;
}

static void *control(void *arg) {
  control_stats *cs = arg;
  xobs *live[SLOTS] = {0};
  uint64_t rng = 0xC0FFEEull;
  while (!atomic_load(&g_recorders_done)) {
    uint64_t r = rng_next(&rng);
    int s = (int)(r % SLOTS);
    xobs *o = live[s];
    if (!o) {
      o = calloc(1, sizeof *o);
      if (!o) abort();
      o->magic = MAGIC_ALIVE;
      etr_observer_options opt = ETR_OBSERVER_OPTIONS_INIT;
      opt.enter = x_enter;
      opt.exit = x_exit;
      opt.user = o;
      opt.needs = (r >> 8) & 1 ? ETR_NEEDS_INPUTS | ETR_NEEDS_OUTPUTS : 0;
      opt.start_disabled = (r >> 9) & 1;
      if (etr_observer_add(&opt, &o->id) != 0) {
        cs->add_errors++;
        free(o);
        continue;
      }
      o->enabled = !opt.start_disabled;
      live[s] = o;
      cs->added++;
    } else if ((r >> 12) % 4 != 0) {
      int rc = o->enabled ? etr_observer_disable(o->id) : etr_observer_enable(o->id);
      if (rc != 0) cs->add_errors++;
      o->enabled = !o->enabled;
      cs->toggles++;
    } else {
      if (etr_observer_remove(o->id) != 0) cs->add_errors++;
      atomic_store(&o->removed, 1);
      check_removed(o, cs);
      bury(o);
      live[s] = NULL;
      cs->removed++;
    }
    if ((r >> 20) % 8 == 0) {
      struct timespec ts = {0, 20000};
      nanosleep(&ts, NULL);
    } else {
      sched_yield();
    }
  }
  for (int s = 0; s < SLOTS; s++) {
    if (!live[s]) continue;
    if (etr_observer_remove(live[s]->id) != 0) cs->add_errors++;
    atomic_store(&live[s]->removed, 1);
    check_removed(live[s], cs);
    bury(live[s]);
    cs->removed++;
  }
  return NULL;
}

/* ---- validation ---- */

/* Runs `etr validate --strict --quiet FILE`; returns its exit status (-1 when it could not
 * run) and the op and node counts of its verdict line. */
static int validate(const char *etr, const char *path, long long *nodes, long long *ops,
                    char *verdict, size_t vn) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  char *argv[] = {(char *)etr, "validate", "--strict", "--quiet", (char *)path, NULL};
  extern char **environ;
  pid_t pid;
  int rc = posix_spawnp(&pid, etr, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    errno = rc;
    return -1;
  }
  FILE *f = fdopen(fds[0], "r");
  verdict[0] = '\0';
  char line[1024];
  while (f && fgets(line, sizeof line, f)) {
    if (strstr(line, ": valid: ") || strstr(line, "invalid")) snprintf(verdict, vn, "%s", line);
  }
  if (f) fclose(f);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  *nodes = *ops = -1;
  const char *v = strstr(verdict, ": valid: ");
  if (v) sscanf(v, ": valid: %lld nodes (%lld ops", nodes, ops);
  size_t l = strlen(verdict);
  if (l && verdict[l - 1] == '\n') verdict[l - 1] = '\0';
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* Order of the nodes in the file, from its text (etr writes each node on a line of its own
 * that starts with `{"id": N, "name": "...", "ctrl_deps": P, `):
 * an op node must come before its parent op (children complete first, docs/FORMAT.md); thread
 * nodes may come anywhere. Counts the nodes, the op nodes, and the ops written after their
 * parent op. Returns 0, or -1 when the file cannot be read or a node cannot be parsed. */
typedef struct order_stats {
  uint64_t nodes, ops, after_parent, first_bad_id, first_bad_parent;
} order_stats;

static int check_order(const char *path, order_stats *os) {
  static const char pat[] = "{\"id\": ",
                    thread_name[] = "[pytorch|profiler|execution_trace|thread]";
  static const char k_name[] = ", \"name\": \"", k_deps[] = "\", \"ctrl_deps\": ";
  memset(os, 0, sizeof *os);
  /* Read line by line: a mapping of the whole file would get sanitizer shadow pages as
   * large as the file (gigabytes under TSan). */
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  uint8_t *seen = NULL; /* by id: 1 written, 2 thread node */
  size_t cap = 0, lcap = 0;
  char *buf = NULL;
  ssize_t got;
  int rc = 0;
  while ((got = getline(&buf, &lcap, f)) > 0) {
    const char *p = buf, *lend = buf + got;
    while (p < lend && *p == ' ') p++;
    if ((size_t)(lend - p) < sizeof pat - 1 || memcmp(p, pat, sizeof pat - 1) != 0) continue;
    char *q;
    p += sizeof pat - 1;
    uint64_t id = strtoull(p, &q, 10);
    if (q == p || (size_t)(lend - q) < sizeof k_name || memcmp(q, k_name, sizeof k_name - 1)) {
      rc = -1;
      break;
    }
    const char *name = q + sizeof k_name - 1;
    const char *dq = memchr(name, '"', (size_t)(lend - name));
    while (dq && dq[-1] == '\\') dq = memchr(dq + 1, '"', (size_t)(lend - dq - 1));
    if (!dq || (size_t)(lend - dq) < sizeof k_deps || memcmp(dq, k_deps, sizeof k_deps - 1)) {
      rc = -1;
      break;
    }
    uint64_t parent = strtoull(dq + sizeof k_deps - 1, NULL, 10);
    bool is_thread = (size_t)(dq - name) == sizeof thread_name - 1 &&
                     memcmp(name, thread_name, sizeof thread_name - 1) == 0;
    size_t need = (size_t)(id > parent ? id : parent) + 1;
    if (need > cap) {
      size_t nc = cap ? cap : 1u << 20;
      while (nc < need) nc *= 2;
      uint8_t *ns = realloc(seen, nc);
      if (!ns) {
        rc = -1;
        break;
      }
      memset(ns + cap, 0, nc - cap);
      seen = ns;
      cap = nc;
    }
    os->nodes++;
    if (id != 1 && !is_thread) {
      os->ops++;
      if (parent != 1 && (seen[parent] & 3) == 1) { /* its parent op is written already */
        if (os->after_parent++ == 0) {
          os->first_bad_id = id;
          os->first_bad_parent = parent;
        }
      }
    }
    seen[id] = (uint8_t)(1 | (is_thread ? 2 : 0));
  }
  free(buf);
  free(seen);
  fclose(f);
  return rc;
}

/* Peak resident set of the process so far (VmHWM), in KiB; 0 when unknown. */
static long peak_rss_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  long kb = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
  fclose(f);
  return kb;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void usage(FILE *f) {
  fputs(
      "usage: reliability_stress [--threads T] [--ops N] [--out FILE] [--etr PATH] [--keep]"
      " [--quiet]\n"
      "                          [--flush-ms MS] [--buffer-kb KB] [--order-warn]\n"
      "  T threads (1..64, default 8) each make N ops (default 20000) while extra observers\n"
      "  are added, toggled and removed; the trace (default: a temp file, removed unless\n"
      "  --keep) is validated with `etr validate --strict` (PATH default: " ETR_TOOL
      ").\n"
      "  --flush-ms, --buffer-kb: trace options (default: the library's defaults).\n"
      "  --order-warn: op nodes written after their parent op only warn (default: fail).\n",
      f);
}

int main(int argc, char **argv) {
  const char *out = NULL, *etr = ETR_TOOL;
  bool keep = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--threads") == 0 && v) {
      g_threads = atoi(v);
      i++;
    } else if (strcmp(a, "--ops") == 0 && v) {
      g_ops = strtoull(v, NULL, 10);
      i++;
    } else if (strcmp(a, "--out") == 0 && v) {
      out = v;
      i++;
    } else if (strcmp(a, "--etr") == 0 && v) {
      etr = v;
      i++;
    } else if (strcmp(a, "--flush-ms") == 0 && v) {
      g_flush_ms = (uint32_t)strtoul(v, NULL, 10);
      i++;
    } else if (strcmp(a, "--buffer-kb") == 0 && v) {
      g_buffer_kb = (uint32_t)strtoul(v, NULL, 10);
      i++;
    } else if (strcmp(a, "--order-warn") == 0) {
      g_order_warn = true;
    } else if (strcmp(a, "--keep") == 0) {
      keep = true;
    } else if (strcmp(a, "--quiet") == 0) {
      g_quiet = true;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else {
      usage(stderr);
      return 2;
    }
  }
  if (g_threads < 1 || g_threads > MAX_THREADS || g_ops == 0) {
    usage(stderr);
    return 2;
  }
  char tmpdir[256] = "", path[512];
  if (!out) {
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/etr-stress-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
      perror("mkdtemp");
      return 1;
    }
    snprintf(path, sizeof path, "%s/stress.json", tmpdir);
    out = path;
  }

  etr_trace *tr = NULL;
  etr_trace_options topt = ETR_TRACE_OPTIONS_INIT;
  topt.flush_ms = g_flush_ms;
  topt.buffer_kb = g_buffer_kb;
  int rc = etr_trace_open(out, &topt, &tr);
  if (rc == 0) rc = etr_trace_enable(tr);
  if (rc != 0) {
    fprintf(stderr, "stress: cannot open %s: %s\n", out, etr_strerror(rc));
    return 1;
  }
  double t0 = now_s();
  control_stats cs = {0};
  pthread_t ctl, th[MAX_THREADS];
  rec_ctx ctx[MAX_THREADS];
  if (pthread_create(&ctl, NULL, control, &cs) != 0) return 1;
  for (int i = 0; i < g_threads; i++) {
    ctx[i] = (rec_ctx){i, 0};
    if (pthread_create(&th[i], NULL, recorder, &ctx[i]) != 0) return 1;
  }
  for (int i = 0; i < g_threads; i++) pthread_join(th[i], NULL);
  atomic_store(&g_recorders_done, 1);
  pthread_join(ctl, NULL);
  double t1 = now_s();

  etr_trace_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  int crc = etr_trace_close_stats(tr, &st);
  double t2 = now_s();
  long rss_kb = peak_rss_kb(); /* before the check maps the file */
  for (size_t i = 0; i < g_grave_n; i++) free(g_grave[i]);

  long long nodes = -1, vops = -1;
  char verdict[1024] = "";
  int vrc = validate(etr, out, &nodes, &vops, verdict, sizeof verdict);
  order_stats os;
  int orc = check_order(out, &os);
  double t3 = now_s();
  if (vrc < 0) fprintf(stderr, "stress: cannot run %s: %s\n", etr, strerror(errno));

  uint64_t made = atomic_load(&g_ops_made), want = (uint64_t)g_threads * g_ops;
  int fails = 0;
#define CHECK(cond, ...)                               \
  do {                                                 \
    if (!(cond)) {                                     \
      fprintf(stderr, "stress: FAILED: " __VA_ARGS__); \
      fputc('\n', stderr);                             \
      fails++;                                         \
    }                                                  \
  } while (0)
  CHECK(made == want, "threads made %llu ops, expected %llu", (unsigned long long)made,
        (unsigned long long)want);
  CHECK(crc == 0, "close returned %d (%s)", crc, etr_strerror(crc));
  CHECK(st.ops_recorded == made, "ops_recorded %llu != ops made %llu",
        (unsigned long long)st.ops_recorded, (unsigned long long)made);
  CHECK(st.nodes_dropped == 0, "nodes_dropped %llu", (unsigned long long)st.nodes_dropped);
  CHECK(st.ops_open_at_close == 0 && st.ops_open_at_thread_exit == 0 &&
            st.ends_without_begin == 0 && st.ends_out_of_order == 0,
        "misuse counters: open at close %llu, at thread exit %llu, ends without begin %llu, "
        "out of order %llu",
        (unsigned long long)st.ops_open_at_close, (unsigned long long)st.ops_open_at_thread_exit,
        (unsigned long long)st.ends_without_begin, (unsigned long long)st.ends_out_of_order);
  CHECK(st.write_error == 0, "write error %d", st.write_error);
  CHECK(vrc == 0, "etr validate --strict exit %d: %s", vrc, verdict);
  CHECK(vops == (long long)st.ops_recorded, "ops in the file %lld != ops_recorded %llu", vops,
        (unsigned long long)st.ops_recorded);
  CHECK(nodes == (long long)st.nodes_written, "nodes in the file %lld != nodes_written %llu", nodes,
        (unsigned long long)st.nodes_written);
  CHECK(orc == 0, "cannot scan the nodes of %s", out);
  CHECK(os.ops == st.ops_recorded && os.nodes == st.nodes_written,
        "scan: %llu nodes, %llu op nodes; close: %llu nodes, %llu ops",
        (unsigned long long)os.nodes, (unsigned long long)os.ops,
        (unsigned long long)st.nodes_written, (unsigned long long)st.ops_recorded);
  if (g_order_warn && os.after_parent)
    fprintf(stderr,
            "stress: WARNING (--order-warn): %llu op nodes written after their parent op; the "
            "first: node %llu, parent %llu\n",
            (unsigned long long)os.after_parent, (unsigned long long)os.first_bad_id,
            (unsigned long long)os.first_bad_parent);
  CHECK(os.after_parent == 0 || g_order_warn,
        "%llu op nodes written after their parent op (children complete first); the first: "
        "node %llu, parent %llu",
        (unsigned long long)os.after_parent, (unsigned long long)os.first_bad_id,
        (unsigned long long)os.first_bad_parent);
  CHECK(atomic_load(&g_late) == 0, "%llu callbacks after remove returned",
        (unsigned long long)atomic_load(&g_late));
  CHECK(atomic_load(&g_bad_magic) == 0, "%llu callbacks on freed observers",
        (unsigned long long)atomic_load(&g_bad_magic));
  CHECK(atomic_load(&g_bad_thread) == 0, "%llu callbacks on an unknown thread",
        (unsigned long long)atomic_load(&g_bad_thread));
  CHECK(cs.violations == 0, "%llu exits out of stack order or without enter",
        (unsigned long long)cs.violations);
  CHECK(cs.counts_bad == 0, "%llu observers with inconsistent enter/exit counts",
        (unsigned long long)cs.counts_bad);
  CHECK(cs.add_errors == 0, "%llu observer calls failed", (unsigned long long)cs.add_errors);
  CHECK(cs.added > 0 && cs.removed == cs.added, "observers added %llu, removed %llu",
        (unsigned long long)cs.added, (unsigned long long)cs.removed);

  printf(
      "stress: threads %d x ops %llu: ops %llu, nodes %lld (ops in file %lld, threads %llu),"
      " dropped %llu, buffer waits %llu, objects %llu, ids retired %llu;"
      " observers added %llu removed %llu toggles %llu, late callbacks %llu;"
      " record %.2fs close %.2fs check %.2fs; peak rss %ld MiB; %s\n",
      g_threads, (unsigned long long)g_ops, (unsigned long long)st.ops_recorded, nodes, vops,
      (unsigned long long)st.threads, (unsigned long long)st.nodes_dropped,
      (unsigned long long)st.buffer_waits, (unsigned long long)st.objects,
      (unsigned long long)st.ids_retired, (unsigned long long)cs.added,
      (unsigned long long)cs.removed, (unsigned long long)cs.toggles,
      (unsigned long long)atomic_load(&g_late), t1 - t0, t2 - t1, t3 - t2, rss_kb / 1024,
      fails ? "FAILED" : "ok");
  if (!g_quiet && verdict[0]) printf("%s\n", verdict);
  if (!keep) {
    unlink(out);
    if (tmpdir[0]) rmdir(tmpdir);
  }
  return fails ? 1 : 0;
}
