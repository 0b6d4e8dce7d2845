/* minitensor.c — a tiny tensor runtime instrumented with etr the way a real one would be.
 *
 * Real float tensors (refcounted storages, views with their own sizes/strides/offset), ops
 * that compute (aten::mm, aten::add, aten::relu, ...), an autograd-style backward pass run
 * on a second thread per worker, collectives between worker threads (a real allreduce and
 * all-to-all through a shared process group), a triton-style kernel launch, user-scope
 * regions, and tensor/storage objects recycled through free lists so that new objects land
 * at addresses of dead ones (etr is told about every death).
 *
 * With --ranks N it runs as N processes, one rank each (mt_ranks.c: a launcher as torchrun,
 * RANK/WORLD_SIZE in each rank's environment, collectives over a mesh of sockets); each rank
 * declares its process group (etr/dist.h) and writes its own trace (`%r` in --out or in
 * ETR_TRACE is the rank).
 *
 *   etr-example-runtime [--out PATH] [--threads N | --ranks N] [--iters N]
 *                       [--schema 1.1.0|1.1.1] [--traceback [PATTERN]] [--traceback-every N]
 *                       [--symbolize full|module] [--no-trace] [--help]
 *
 * With --out the program opens, enables and closes the trace itself; without it, the
 * environment (ETR_TRACE=path.json) can record the run with no code change. Each tensor
 * allocation is announced by a small "minitensor::alloc" op whose inputs name the pool slot
 * (a stand-in for the object's address) and its generation, so a checker
 * (tests/integration/check_example_trace.py) can verify that recycled addresses got new ids.
 *
 * This file holds the model, the training step, the worker threads and main. The rest:
 * mt_tensor.c (tensors, storages, their free lists, and recording one op call), mt_ops.c
 * (the operators), mt_worker.c (process group and collectives, aten::linear and the autograd
 * tape, the backward thread) and mt_ranks.c (the --ranks launcher and socket mesh).
 *
 * Only the public API is used: #include <etr/etr.h>.
 */
#define _POSIX_C_SOURCE 200809L

#include <etr/etr.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mt_ops.h"
#include "mt_ranks.h"
#include "mt_tensor.h"
#include "mt_worker.h"

/* ---------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------- */

/* A failed etr control-plane call ends the program with the call and the error named. */
static void check_etr(int rc, const char *call) {
  if (rc == 0) return;
  fprintf(stderr, PROG ": %s failed: %s (%s)\n", call, etr_err_name(rc), etr_strerror(rc));
  exit(1);
}

/* ---------------------------------------------------------------------------------------
 * Model, training step, worker
 * ------------------------------------------------------------------------------------- */

/* The SGD step as one compiled (triton, foreach-fused) kernel: p -= lr * g for every
 * parameter. Laid out as PyTorch records a triton launch: kernel_file is the basename of the
 * generated source (et_replay looks it up in its resource folder), and the inputs are the
 * kernel's arguments (tensors, then xnumel, from which the grid is computed) followed by
 * the stream. */
static const char *const KERNEL_PATH =
    "/tmp/torchinductor_minitensor/sg/csgdfusedaddmul4k7q2bxvd3tyhn6wl5aqo2e7pzi.py";

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

static void launch_sgd_kernel(worker *w, mt_tensor *const *params, mt_tensor *const *grads, int n,
                              float lr) {
  enum { XBLOCK = 64 };
  int64_t numel = 0;
  for (int i = 0; i < n; i++) numel += params[i]->numel;
  etr_kernel_info ki = ETR_KERNEL_INFO_INIT;
  ki.backend = "triton";
  ki.file = base_name(KERNEL_PATH);
  ki.grid[0] = (uint32_t)((numel + XBLOCK - 1) / XBLOCK);
  ki.grid[1] = 1;
  ki.grid[2] = 1;
  ki.stream = 7 + w->rank;
  op_call op;
  op_init(&op, "triton_poi_fused__foreach_add_0", ETR_SCOPE_FUNCTION, "", -1, 0);
  if (op.active) op.rec.kernel = &ki;
  for (int i = 0; i < n; i++) op_in_tensor(&op, params[i]);
  for (int i = 0; i < n; i++) op_in_tensor(&op, grads[i]);
  op_in(&op, etr_value_int(numel));
  op_in(&op, etr_value_int(ki.stream));
  op_begin(&op);
  for (int k = 0; k < n; k++) {
    mt_tensor *p = params[k], *g = grads[k];
    for (int64_t i = 0; i < p->numel; i++) {
      mt_data(p)[mt_index(p, p->sizes, p->ndim, i)] -= lr * mt_get(g, i);
    }
  }
  op_end(&op);
}

static mt_tensor *make_param(worker *w, int32_t ndim, const int64_t *sizes, double bound) {
  mt_tensor *t = op_empty(ndim, sizes);
  op_uniform_(t, -bound, bound, &w->rng);
  return t;
}

/* A gradient: a view of `n` elements of the bucket at `start`, shaped like the parameter. */
static mt_tensor *make_grad_view(mt_tensor *bucket, int64_t start, const mt_tensor *param) {
  mt_tensor *s = op_slice(bucket, 0, start, start + param->numel, 1);
  mt_tensor *v = op_view(s, param->ndim, param->sizes, -1);
  mt_release(s);
  return v;
}

static void model_init(worker *w) {
  model *m = &w->m;
  op_call scope;
  scope_begin(&scope, "## init model ##");
  const int64_t s_w1[2] = {HIDDEN, IN}, s_b1[1] = {HIDDEN};
  const int64_t s_w2[2] = {OUT, HIDDEN}, s_b2[1] = {OUT};
  m->W1 = make_param(w, 2, s_w1, 0.35);
  m->b1 = make_param(w, 1, s_b1, 0.35);
  m->W2 = make_param(w, 2, s_w2, 0.25);
  m->b2 = make_param(w, 1, s_b2, 0.25);
  const int64_t total[1] = {HIDDEN * IN + HIDDEN + OUT * HIDDEN + OUT};
  m->bucket = op_zeros(1, total);
  m->gW1 = make_grad_view(m->bucket, 0, m->W1);
  m->gb1 = make_grad_view(m->bucket, HIDDEN * IN, m->b1);
  m->gW2 = make_grad_view(m->bucket, HIDDEN * IN + HIDDEN, m->W2);
  m->gb2 = make_grad_view(m->bucket, HIDDEN * IN + HIDDEN + OUT * HIDDEN, m->b2);
  op_end(&scope);
}

static void model_free(model *m) {
  mt_tensor **all[] = {&m->W1,  &m->b1,  &m->W2,  &m->b2,    &m->gW1,
                       &m->gb1, &m->gW2, &m->gb2, &m->bucket};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    mt_release(*all[i]);
    *all[i] = NULL;
  }
}

static void train_step(worker *w, int iter) {
  model *m = &w->m;
  char step_name[48];
  snprintf(step_name, sizeof step_name, "ProfilerStep#%d", iter);
  op_call step;
  scope_begin(&step, step_name);

  /* A batch: inputs [4, 2, 4] (flattened below) and targets [4, 4]. */
  const int64_t s_x[3] = {BATCH, 2, IN / 2}, s_y[2] = {BATCH, OUT};
  mt_tensor *x0 = op_empty(3, s_x);
  op_uniform_(x0, -1.0, 1.0, &w->rng);
  mt_tensor *y = op_empty(2, s_y);
  op_uniform_(y, 0.0, 1.0, &w->rng);

  tape tp;
  memset(&tp, 0, sizeof tp);
  tp.fw_tid = w->tid;
  tp.m = m;

  mt_tensor *loss, *part_sum;
  {
    op_call fwd;
    scope_begin(&fwd, "## forward ##");
    const int64_t flat[2] = {BATCH, -1};
    mt_tensor *x = op_view(x0, 2, flat, -1);
    mt_tensor *h1 = op_linear(w, x, m->W1, m->b1, &tp.l1);
    tp.seq_relu = w->next_seq++;
    mt_tensor *a1 = op_relu(h1, tp.seq_relu);
    tp.a1 = mt_retain(a1);
    mt_tensor *h2 = op_linear(w, a1, m->W2, m->b2, &tp.l2);
    tp.seq_sub = w->next_seq++;
    mt_tensor *diff = op_sub(h2, y, 1, tp.seq_sub);
    tp.seq_mul = w->next_seq++;
    mt_tensor *sq = op_mul(diff, diff, tp.seq_mul);
    tp.diff = diff;
    tp.seq_sum = w->next_seq++;
    loss = op_sum(sq, tp.seq_sum);
    /* A metric on columns 1..2 of the prediction (a strided view, no gradient). */
    mt_tensor *part = op_slice(h2, 1, 1, 3, 1);
    part_sum = op_sum(part, -1);
    mt_release(part);
    mt_release(sq);
    mt_release(h2);
    mt_release(a1);
    mt_release(h1);
    mt_release(x);
    op_end(&fwd);
  }
  double loss_value = op_item(loss);
  if (iter == 0) op_weird(loss);
  if (iter == 0) w->first_loss = loss_value;
  w->last_loss = loss_value;

  {
    op_call bwd;
    scope_begin(&bwd, "## backward ##"); /* open while the backward thread runs */
    tp.grad_loss = op_ones_like(loss);
    bw_run(&w->bw, &tp);
    op_end(&bwd);
  }

  op_allreduce(w, m->bucket);

  /* Exchange the losses: every rank sends [loss, metric] to every rank. */
  {
    const int64_t s_n[1] = {2 * (int64_t)w->n_ranks};
    mt_tensor *send = op_zeros(1, s_n);
    mt_tensor *recv = op_empty(1, s_n);
    for (int r = 0; r < w->n_ranks; r++) {
      mt_data(send)[2 * r] = (float)loss_value;
      mt_data(send)[2 * r + 1] = mt_get(part_sum, 0);
    }
    op_alltoall(w, recv, send, 2);
    double total = 0.0;
    for (int r = 0; r < w->n_ranks; r++) total += mt_data(recv)[2 * r];
    w->mean_loss = total / w->n_ranks;
    mt_release(send);
    mt_release(recv);
  }

  {
    op_call opt;
    scope_begin(&opt, "Optimizer.step#SGD.step");
    const float lr = 0.02f / (float)w->n_ranks; /* the bucket holds the sum over ranks */
    mt_tensor *const params[4] = {m->W1, m->b1, m->W2, m->b2};
    mt_tensor *const grads[4] = {m->gW1, m->gb1, m->gW2, m->gb2};
    launch_sgd_kernel(w, params, grads, 4, lr);
    op_end(&opt);
  }
  {
    op_call zg;
    scope_begin(&zg, "Optimizer.zero_grad#SGD.zero_grad");
    op_zero_(m->bucket);
    op_end(&zg);
  }

  mt_release(part_sum);
  mt_release(loss);
  mt_release(y);
  mt_release(x0);
  op_end(&step);
}

static void *worker_main(void *arg) {
  worker *w = arg;
  w->tid = etr_thread_id();
  char tname[32];
  snprintf(tname, sizeof tname, "worker %d", w->rank);
  etr_thread_set_name(tname);
  check_pthread(pthread_mutex_init(&w->bw.lock, NULL), "pthread_mutex_init");
  check_pthread(pthread_cond_init(&w->bw.cond, NULL), "pthread_cond_init");
  check_pthread(pthread_create(&w->bw.thread, NULL, bw_main, &w->bw), "pthread_create");
  if (w->record_groups) {
    /* The process groups (PARAM's comm replay reads this node), recorded as the work starts
     * rather than at enable, so that the trace holds no idle stretch of the main thread. */
    check_etr(etr_dist_record_groups(), "etr_dist_record_groups");
    note_active_record();
  }
  model_init(w);
  for (int i = 0; i < w->iters; i++) train_step(w, i);
  model_free(&w->m);
  check_pthread(pthread_mutex_lock(&w->bw.lock), "pthread_mutex_lock");
  w->bw.quit = true;
  check_pthread(pthread_cond_broadcast(&w->bw.cond), "pthread_cond_broadcast");
  check_pthread(pthread_mutex_unlock(&w->bw.lock), "pthread_mutex_unlock");
  check_pthread(pthread_join(w->bw.thread, NULL), "pthread_join");
  pthread_cond_destroy(&w->bw.cond);
  pthread_mutex_destroy(&w->bw.lock);
  return NULL;
}

/* ---------------------------------------------------------------------------------------
 * main
 * ------------------------------------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f, "usage: " PROG
             " [--out PATH] [--threads N | --ranks N] [--iters N]\n"
             "                           [--schema 1.1.0|1.1.1] [--traceback [PATTERN]]\n"
             "                           [--traceback-every N] [--symbolize full|module]\n"
             "                           [--no-trace] [--help]\n"
             "\n"
             "A tiny tensor runtime (2-layer MLP training, backward on a second thread per\n"
             "worker, allreduce/all-to-all between workers, a triton-style kernel) instrumented\n"
             "with etr.\n"
             "\n"
             "  --out PATH     open, enable and close an execution trace at PATH; without it,\n"
             "                 no trace is opened here (ETR_TRACE=path.json records the run)\n"
             "  --threads N    worker threads, each with its own model and backward thread\n"
             "                 (1..64, default 2)\n"
             "  --ranks N      run as N processes instead, one rank (one worker) each, as a\n"
             "                 launcher does (RANK, WORLD_SIZE; 1..16); collectives exchange\n"
             "                 their data over sockets; '%%r' in --out or ETR_TRACE is the rank\n"
             "  --iters N      training steps per worker (default 3)\n"
             "  --schema V     trace schema 1.1.1 (default, with strides) or 1.1.0 (needs --out)\n"
             "  --traceback [PATTERN]\n"
             "                 capture a traceback on every op, or on ops whose name matches\n"
             "                 the fnmatch(3) PATTERN (e.g. 'aten::m*'); needs --out\n"
             "  --traceback-every N\n"
             "                 then only 1 op in N per thread\n"
             "  --symbolize M  full: function/file/line in the trace (default); module: module,\n"
             "                 build id and offset, resolved later by `etr symbolize`\n"
             "  --no-trace     record nothing (also disables a trace opened through ETR_TRACE)\n"
             "  --help         this text\n");
}

/* path with every "%r" replaced by this process's rank (etr_dist_rank: RANK from the
 * launcher), as ETR_TRACE does; with also_pid "%p" by the pid and "%%" by "%" too (the
 * whole ETR_TRACE expansion); into buf. */
static const char *expand_rank(const char *path, char *buf, size_t cap, bool also_pid) {
  size_t o = 0;
  for (const char *p = path; *p; p++) {
    char num[24];
    const char *piece = p;
    size_t n = 1;
    if (p[0] == '%' && p[1] == 'r') {
      n = (size_t)snprintf(num, sizeof num, "%lld", (long long)etr_dist_rank());
      piece = num;
      p++;
    } else if (also_pid && p[0] == '%' && p[1] == 'p') {
      n = (size_t)snprintf(num, sizeof num, "%ld", (long)getpid());
      piece = num;
      p++;
    } else if (also_pid && p[0] == '%' && p[1] == '%') {
      p++;
    }
    if (o + n + 1 > cap) fatal("--out path too long: %s", path);
    memcpy(buf + o, piece, n);
    o += n;
  }
  buf[o] = '\0';
  return buf;
}

/* The launcher of --ranks N: the ranks are this program again, without --ranks. A trace
 * that ETR_TRACE opened in the launcher itself is dropped, file included: the ranks record,
 * the launcher does not (its file would carry rank 0's name, or a pid of no rank). */
static int launch(int n, int argc, char **argv, const char *out) {
  const char *env_path = getenv("ETR_TRACE");
  etr_trace *env = etr_trace_current();
  if (env != NULL) {
    check_etr(etr_trace_disable(env), "etr_trace_disable");
    check_etr(etr_trace_close(env), "etr_trace_close");
    char path[4096];
    if (env_path && strlen(env_path) < 1024) unlink(expand_rank(env_path, path, sizeof path, true));
  }
  if (n > 1 && env_path && *env_path && !strstr(env_path, "%r") && !strstr(env_path, "%p"))
    fatal("ETR_TRACE=%s would be one file for every rank: put %%r (the rank) in it", env_path);
  if (n > 1 && out && !strstr(out, "%r"))
    fatal("--out %s would be one file for every rank: put %%r (the rank) in it", out);
  char **child = xcalloc((size_t)argc + 1, sizeof *child);
  int k = 0;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--ranks") == 0) {
      i++;
      continue;
    }
    child[k++] = argv[i];
  }
  child[k] = NULL;
  int rc = mt_launch(n, child);
  free(child);
  return rc;
}

static int parse_int(const char *s, const char *opt, long lo, long hi) {
  char *end = NULL;
  errno = 0;
  long v = s ? strtol(s, &end, 10) : 0;
  if (s == NULL || *s == '\0' || *end != '\0' || errno != 0 || v < lo || v > hi) {
    fprintf(stderr, PROG ": %s needs an integer in [%ld, %ld]\n", opt, lo, hi);
    exit(2);
  }
  return (int)v;
}

int main(int argc, char **argv) {
  const char *out = NULL;
  int n_threads = 2, iters = 3, launch_ranks = 0;
  bool threads_set = false;
  bool no_trace = false, schema_set = false;
  etr_schema schema = ETR_SCHEMA_1_1_1;
  etr_traceback_options tb = ETR_TRACEBACK_OPTIONS_INIT;
  bool tb_set = false;

  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(a, "--out") == 0) {
      if (val == NULL) fatal("%s needs a path", a);
      out = val;
      i++;
    } else if (strcmp(a, "--threads") == 0) {
      n_threads = parse_int(val, a, 1, 64);
      threads_set = true;
      i++;
    } else if (strcmp(a, "--ranks") == 0) {
      launch_ranks = parse_int(val, a, 1, MT_MAX_RANKS);
      i++;
    } else if (strcmp(a, "--iters") == 0) {
      iters = parse_int(val, a, 1, 1000000);
      i++;
    } else if (strcmp(a, "--schema") == 0) {
      if (val != NULL && strcmp(val, "1.1.1") == 0)
        schema = ETR_SCHEMA_1_1_1;
      else if (val != NULL && strcmp(val, "1.1.0") == 0)
        schema = ETR_SCHEMA_1_1_0;
      else
        fatal("--schema takes 1.1.0 or 1.1.1, not '%s'", val ? val : "");
      schema_set = true;
      i++;
    } else if (strcmp(a, "--traceback") == 0) {
      tb.enabled = true;
      tb_set = true;
      if (val != NULL && val[0] != '-') {
        tb.pattern = val;
        i++;
      }
    } else if (strcmp(a, "--traceback-every") == 0) {
      tb.every = (uint32_t)parse_int(val, a, 1, 1000000000);
      tb_set = true;
      i++;
    } else if (strcmp(a, "--symbolize") == 0) {
      if (val != NULL && strcmp(val, "full") == 0)
        tb.symbolize = ETR_SYMBOLIZE_FULL;
      else if (val != NULL && strcmp(val, "module") == 0)
        tb.symbolize = ETR_SYMBOLIZE_MODULE;
      else
        fatal("--symbolize takes full or module, not '%s'", val ? val : "");
      tb_set = true;
      i++;
    } else if (strcmp(a, "--no-trace") == 0) {
      no_trace = true;
    } else {
      fprintf(stderr, PROG ": unknown argument '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (no_trace && out != NULL) fatal("%s", "--no-trace and --out exclude each other");
  if (tb_set && out == NULL) {
    fatal("%s", "--traceback options need --out (with ETR_TRACE, set ETR_TRACE_TRACEBACK)");
  }
  if (tb_set) tb.enabled = true;
  if (schema_set && out == NULL) {
    fatal("%s", "--schema needs --out (with ETR_TRACE, set ETR_TRACE_SCHEMA instead)");
  }
  if (etr_version() != ETR_VERSION_NUMBER) {
    fprintf(stderr, PROG ": built against etr %s but running with %s\n", ETR_VERSION_STRING,
            etr_version_string());
    return 1;
  }

  mt_mesh mesh;
  bool is_rank = mt_mesh_from_env(&mesh) != 0;
  if (launch_ranks > 0) {
    if (is_rank) fatal("%s", "--ranks given to a rank (the launcher does not pass it on)");
    if (threads_set) fatal("%s", "--ranks and --threads exclude each other");
    return launch(launch_ranks, argc, argv, out);
  }
  char out_path[4096];
  if (out != NULL) out = expand_rank(out, out_path, sizeof out_path, false);
  if (is_rank) {
    n_threads = 1; /* this process is one rank of the mesh */
    etr_process_group world = ETR_PROCESS_GROUP_INIT;
    world.name = "0";
    world.desc = "default_pg";
    world.backend = "cpu:minitensor";
    check_etr(etr_dist_declare_group(&world), "etr_dist_declare_group");
  }

  etr_trace *trace = NULL;
  if (out != NULL) {
    etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
    opt.schema = schema;
    opt.traceback = &tb;
    int rc = etr_trace_open(out, &opt, &trace);
    if (rc == ETR_EBUSY) {
      fprintf(stderr, PROG ": etr_trace_open(%s): a trace is already open (is ETR_TRACE set?)\n",
              out);
      return 1;
    }
    if (rc == ETR_EOPEN) {
      fprintf(stderr, PROG ": cannot create the trace file %s: %s\n", out, strerror(errno));
      return 1;
    }
    check_etr(rc, "etr_trace_open");
    check_etr(etr_trace_enable(trace), "etr_trace_enable");
  } else if (no_trace && etr_trace_current() != NULL) {
    check_etr(etr_trace_disable(etr_trace_current()), "etr_trace_disable");
  }

  mt_pg pg;
  pg.size = n_threads;
  pg.mesh = is_rank ? &mesh : NULL;
  pg.bufs = xcalloc((size_t)n_threads, sizeof *pg.bufs);
  check_pthread(pthread_barrier_init(&pg.barrier, NULL, (unsigned)n_threads),
                "pthread_barrier_init");
  worker *workers = xcalloc((size_t)n_threads, sizeof *workers);
  for (int r = 0; r < n_threads; r++) {
    workers[r].rank = is_rank ? mesh.rank : r;
    workers[r].iters = iters;
    workers[r].n_ranks = is_rank ? mesh.size : n_threads;
    workers[r].pg = &pg;
    workers[r].record_groups = r == 0 && trace != NULL;
    workers[r].rng = 0x9e3779b9u ^ (uint32_t)(workers[r].rank * 7919 + 1);
    check_pthread(pthread_create(&workers[r].thread, NULL, worker_main, &workers[r]),
                  "pthread_create");
  }
  for (int r = 0; r < n_threads; r++) {
    check_pthread(pthread_join(workers[r].thread, NULL), "pthread_join");
  }
  for (int r = 0; r < n_threads; r++) {
    printf("%s %d: loss %.5f -> %.5f (mean over ranks %.5f)\n", is_rank ? "rank" : "worker",
           workers[r].rank, workers[r].first_loss, workers[r].last_loss, workers[r].mean_loss);
  }
  pthread_barrier_destroy(&pg.barrier);
  free(pg.bufs);
  if (is_rank) mt_mesh_close(&mesh);
  free(workers);

  /* The runtime's own checks: nothing leaked (so every death was reported), and recycled
   * objects really landed at addresses of dead ones. */
  int failures = pool_check();
  pool_free_all();

  if (trace != NULL) {
    /* Every worker has exited, so its buffered nodes are queued: flush waits until they are
     * in the file. Close then adds the thread nodes, the process node and the footer (and
     * frees the trace, so the statistics are read here). */
    check_etr(etr_trace_flush(trace), "etr_trace_flush");
    etr_trace_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    check_etr(etr_trace_stats_get(trace, &st), "etr_trace_stats_get");
    unsigned long long observed = active_record_count();
    if (st.ops_recorded != observed) {
      fprintf(stderr,
              PROG ": the trace recorded %" PRIu64
                   " ops but the runtime made %llu active "
                   "records\n",
              st.ops_recorded, observed);
      failures++;
    }
    check_etr(etr_trace_close(trace), "etr_trace_close");
    struct stat sb;
    long long size = stat(out, &sb) == 0 ? (long long)sb.st_size : -1;
    printf("etr: %" PRIu64 " ops recorded, %" PRIu64 " nodes written, %" PRIu64
           " bytes before close (%" PRIu64 " threads, %" PRIu64 " objects, %" PRIu64
           " ids retired); %s: %lld bytes\n",
           st.ops_recorded, st.nodes_written, st.bytes_written, st.threads, st.objects,
           st.ids_retired, out, size);
    if (st.ids_retired == 0) {
      fprintf(stderr, PROG ": etr retired no object id although objects died\n");
      failures++;
    }
  } else if (etr_trace_current() != NULL && !no_trace) {
    etr_trace_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    check_etr(etr_trace_stats_get(etr_trace_current(), &st), "etr_trace_stats_get");
    printf("etr: %" PRIu64 " ops recorded so far by the ETR_TRACE trace (finalized at exit)\n",
           st.ops_recorded);
  }
  return failures ? 1 : 0;
}
