/* fuzz_record — the record API driven by fuzz bytes, over 2 threads on one open trace.
 *
 * Each input opens a trace (a file in a directory of its own under $ETR_FUZZ_TMP, /dev/shm
 * or $TMPDIR), hands one script to each of
 * two worker threads (the same two threads for every input, so the recorder's per-thread
 * state is reused across traces), waits for both, closes the trace and checks:
 *   - close returns 0, nothing dropped, no write error;
 *   - `etr validate --strict` (tools/cmd_validate.c, in process) finds the trace valid;
 *   - the file holds ops_recorded + threads + 1 nodes (the process node), and nodes_written
 *     says the same.
 *
 * Input: 3 header bytes, then the scripts.
 *   byte 0  bit 0 schema 1.1.0, bit 1 no timing, bit 2 start disabled, bits 3-4 buffer_kb
 *           {64 (default), 1, 4, 16}, bits 5-6 max_buffers {64, 1, 2, 4}, bit 7 sample 0.5
 *   byte 1  scope filter: 0 = all, else bits of the byte shifted by byte % 3 (scopes 0-9)
 *   byte 2  where the rest splits into worker 1's and worker 2's script
 * A script is a sequence of steps, each one byte (opcode) plus the bytes it reads; reading
 * past the end yields zeros, so every byte string is a valid script. Steps: begin an op
 * (hostile names, NULL names and schemas, any scope including invalid ones, inputs of every
 * value kind: deep nesting, long lists, hostile and long strings, NULL pointers, tensors with
 * odd ndim, kernel and collective info), end the top op, end one in the middle (out of
 * order), end an ended op again, end one never begun, a whole op, enable, disable, flush,
 * a tensor or storage death, stats, NULL handles to the control calls.
 *
 * Known findings in the recorder (reported, not fixed here), left out by default so that the
 * fuzzer looks for others; ETR_FUZZ_HOSTILE=1 generates them again (tests/fuzz/repro/):
 *  - a tensor with a negative storage_offset or numel is written as given ([id, storage,
 *    -100, ...]) and `etr validate` rejects the trace (the five numbers must be >= 0):
 *    record-negative-tensor-offset;
 *  - an object value's type is its kind name as given: an empty kind gives type "" (an
 *    error), a kind named "Int" or "Tensor(float)" a type that says something else:
 *    record-empty-object-kind. By default kinds come from a fixed list;
 *  - a dtype is written into the type "Tensor(<dtype>)" as given: a dtype holding '>' or
 *    ',' or ']' unbalances the type string, and `etr validate` then counts the elements of
 *    an enclosing "GenericList[...]" wrongly (type names 3 elements, the value has 4):
 *    record-dtype-with-brackets. By default those characters become '_' in dtypes.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <etr/etr.h>

#include "json/reader.h"

int etr_cmd_validate(int argc, char **argv);

#define CHECK(cond, ...)                                          \
  do {                                                            \
    if (!(cond)) {                                                \
      fprintf(stderr, "fuzz_record: check failed: %s: ", #cond);  \
      fprintf(stderr, __VA_ARGS__);                               \
      fprintf(stderr, "\n");                                      \
      fail_dump();                                                \
    }                                                             \
  } while (0)

static char g_dir[200];   /* this process's own temp directory */
static char g_path[256];  /* the trace file in it */
static etr_trace *g_trace;

/* On a failed check: keep the trace, print validate's findings, abort (a crash for libFuzzer). */
static void fail_dump(void) {
  char keep[300];
  snprintf(keep, sizeof keep, "%s.failed", g_path);
  if (access(g_path, F_OK) != 0)
    fprintf(stderr, "fuzz_record: the trace file %s is gone (removed by another process?)\n",
            g_path);
  rename(g_path, keep);
  fprintf(stderr, "fuzz_record: trace kept as %s\n", keep);
  { /* validate's findings to stderr (libFuzzer's -close_fd_mask=1 closes stdout) */
    fflush(stdout);
    dup2(2, 1);
    char *argv[] = {"validate", "--strict", "--max", "20", keep, NULL};
    etr_cmd_validate(5, argv);
    fflush(stdout);
  }
  abort();
}

/* ---- one worker's script ---- */

#define MAX_OPEN 48
#define POOL_VALUES 12288
#define STR_BUF (64 * 1024)

typedef struct worker {
  pthread_t th;
  const uint8_t *p, *end; /* the script */
  etr_record recs[MAX_OPEN];
  int stack[MAX_OPEN]; /* indices into recs of begun ops, innermost last */
  int depth;
  etr_record ended;     /* a copy of the last ended record (for double ends) */
  bool have_ended;
  etr_value values[POOL_VALUES];
  size_t n_values;
  char strs[STR_BUF];
  size_t n_strs;
  int64_t ints[2][ETR_MAX_NDIM + 8];
  etr_tensor tensors[64];
  size_t n_tensors;
  int64_t splits[2][8];
  etr_kernel_info kernel;
  etr_collective_info coll;
  uint64_t self_tid;  /* etr_thread_id() of this worker */
  uint64_t other_tid; /* and of the other one */
} worker;

static worker g_w[2];

static uint8_t u8(worker *w) { return w->p < w->end ? *w->p++ : 0; }
static uint16_t u16(worker *w) { return (uint16_t)(u8(w) | u8(w) << 8); }
static uint64_t u64(worker *w) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)u8(w) << (8 * i);
  return v;
}

/* ETR_FUZZ_HOSTILE=1: also the inputs of the known findings (see the top). */
static bool g_hostile;

/* Objects the tensors point to (identity only). */
static char g_impls[16], g_storages[8];

static void reset_pools(worker *w) {
  w->n_values = 0;
  w->n_strs = 0;
  w->n_tensors = 0;
}

/* n bytes of string taken from the script (repeated when the script runs short), in the
 * string buffer; NUL-terminated. */
static char *take_str(worker *w, size_t n) {
  if (n + 1 > STR_BUF - w->n_strs) {
    if (n + 1 > STR_BUF) n = STR_BUF - 1;
    w->n_strs = 0; /* the buffer is per call: older strings are no longer referenced */
  }
  char *s = w->strs + w->n_strs;
  size_t avail = (size_t)(w->end - w->p);
  size_t take = avail < 64 ? avail : 64;
  if (take > n) take = n;
  memcpy(s, w->p, take);
  w->p += take;
  for (size_t i = take; i < n; i++) s[i] = take ? s[i % take] : (char)('a' + i % 26);
  s[n] = 0;
  w->n_strs += n + 1;
  return s;
}

static const char *const NAMES[] = {"aten::mm", "aten::add", "aten::empty", "aten::relu_",
                                    "c10d::allreduce_", "triton_poi_fused_0", "", "x"};

/* A name or other short string: a pool name, hostile bytes, a long one, or NULL. */
static const char *pick_str(worker *w, bool allow_null) {
  uint8_t m = u8(w);
  switch (m % 8) {
    case 0: case 1: case 2: return NAMES[(m >> 3) % 8];
    case 3: case 4: return take_str(w, u8(w) % 40);
    case 5: return take_str(w, (size_t)u8(w) * 40 + 1); /* up to 10 KB: past the 8192 cut */
    case 6: return allow_null ? NULL : "";
    default: return take_str(w, 1);
  }
}

/* A name that goes into a type string ("Tensor(<dtype>)"): without the brackets and commas
 * that delimit types, unless ETR_FUZZ_HOSTILE (see the top). */
static const char *type_name(worker *w, const char *s) {
  if (g_hostile || !s || s < w->strs || s >= w->strs + STR_BUF) return s;
  for (char *p = (char *)s; *p; p++)
    if (strchr("[]()<>,", *p)) *p = '_';
  return s;
}

static etr_value *alloc_values(worker *w, size_t n) {
  if (n > POOL_VALUES - w->n_values) return NULL;
  etr_value *v = w->values + w->n_values;
  w->n_values += n;
  return v;
}

static const etr_tensor *make_tensor(worker *w) {
  uint8_t m = u8(w);
  if (m % 16 == 15) return NULL; /* NULL tensor pointer */
  if (w->n_tensors == 64) return &w->tensors[0];
  etr_tensor *t = &w->tensors[w->n_tensors++];
  memset(t, 0, sizeof *t);
  t->impl = &g_impls[m % 16];
  uint8_t s = u8(w);
  t->storage = s & 1 ? NULL : &g_storages[(s >> 1) % 8];
  t->storage_offset = (int64_t)u16(w);
  t->numel = (int64_t)u64(w);
  t->itemsize = u8(w);
  if (g_hostile) {
    t->storage_offset -= 100;
  } else { /* the recorder writes negative ones as they are: see the note at the top */
    t->numel &= INT64_MAX;
  }
  uint8_t d = u8(w);
  static const char *const DT[] = {"float", "double", "c10::Half", "long int", "bool"};
  t->dtype = d % 8 == 7 ? NULL : d % 8 >= 5 ? type_name(w, pick_str(w, false)) : DT[d % 8];
  t->device = d & 8 ? NULL : d & 16 ? pick_str(w, true) : "cpu";
  uint8_t nd = u8(w);
  t->ndim = nd & 0x80 ? -(int32_t)(nd & 3) : (int32_t)(nd % 72);
  int which = (int)(w->n_tensors & 1);
  int64_t *sz = w->ints[which];
  int64_t *st = w->ints[which ^ 1];
  for (int i = 0; i < ETR_MAX_NDIM + 8; i++) sz[i] = (int64_t)(int8_t)u8(w);
  t->sizes = nd & 0x40 && t->ndim > 0 ? NULL : sz;
  t->strides = d & 32 ? NULL : st;
  return t;
}

/* One value; depth bounds the recursion of this generator (nesting itself can go deeper
 * through the "chain" case). */
static void make_value(worker *w, etr_value *v, int depth) {
  uint8_t k = u8(w);
  switch (k % 14) {
    case 0: *v = etr_value_none(); break;
    case 1: *v = etr_value_bool(k & 0x80); break;
    case 2: *v = etr_value_int((int64_t)u64(w)); break;
    case 3: {
      uint64_t bits = u64(w);
      double d;
      memcpy(&d, &bits, 8); /* NaN, infinities, subnormals, any bit pattern */
      *v = etr_value_double(d);
      break;
    }
    case 4: *v = etr_value_string(pick_str(w, true)); break;
    case 5: { /* with embedded NULs */
      uint32_t n = u8(w);
      *v = etr_value_string_n(take_str(w, n), n);
      break;
    }
    case 6: *v = etr_value_device(pick_str(w, true)); break;
    case 7: case 8: *v = etr_value_tensor(make_tensor(w)); break;
    case 9: {
      static const char *const KINDS[] = {"Generator", "ScriptObject", "Stream", "Object"};
      *v = etr_value_object(g_hostile ? pick_str(w, true) : KINDS[u8(w) % 4]);
      break;
    }
    case 10: case 11: { /* list or tuple of a few values */
      uint32_t n = u8(w) % 6;
      etr_value *items = depth < 6 ? alloc_values(w, n) : NULL;
      if (items)
        for (uint32_t i = 0; i < n; i++) make_value(w, &items[i], depth + 1);
      *v = k % 14 == 10 ? etr_value_list(items, items ? n : u8(w) % 3)
                        : etr_value_tuple(items, items ? n : 0);
      break;
    }
    case 12: { /* a long list of ints, past the 4096 cut */
      uint32_t n = (uint32_t)u8(w) * 20;
      etr_value *items = alloc_values(w, n);
      if (!items) n = 0;
      for (uint32_t i = 0; i < n; i++) items[i] = etr_value_int((int64_t)i);
      *v = etr_value_list(items, n);
      break;
    }
    default: { /* a chain of single-item lists, past the 32-level cut */
      uint32_t n = (uint32_t)u16(w) % 3000 + 1;
      etr_value *items = alloc_values(w, n);
      if (!items) {
        *v = etr_value_none();
        break;
      }
      items[n - 1] = etr_value_int(7);
      for (uint32_t i = n - 1; i > 0; i--) items[i - 1] = etr_value_list(&items[i], 1);
      *v = etr_value_tuple(items, 1);
      break;
    }
  }
  if (k >= 0xF8) v->kind = (etr_value_kind)(10 + (k & 7)); /* unknown kinds */
}

/* Values for inputs or outputs: *n of them, or NULL (with a nonzero count sometimes). */
static const etr_value *make_values(worker *w, uint32_t *n) {
  uint8_t m = u8(w);
  *n = m % 6;
  if (m >= 0xF0) return NULL; /* NULL with count *n */
  etr_value *vals = alloc_values(w, *n);
  if (!vals) {
    *n = 0;
    return NULL;
  }
  for (uint32_t i = 0; i < *n; i++) make_value(w, &vals[i], 0);
  return vals;
}

static void fill_begin(worker *w, etr_record *r) {
  uint8_t f = u8(w);
  r->seq_nr = f & 1 ? (int64_t)u8(w) : -1;
  r->fw_tid = f & 2 ? (f & 4 ? w->other_tid : (uint64_t)u8(w)) : 0;
  if (f & 8) r->schema = pick_str(w, true);
  if (etr_record_needs_inputs(r)) r->inputs = make_values(w, &r->n_inputs);
  if (f & 16) {
    etr_kernel_info k = ETR_KERNEL_INFO_INIT;
    k.backend = pick_str(w, true);
    k.file = pick_str(w, true);
    if (f & 32) {
      k.grid[0] = u8(w);
      k.grid[1] = u8(w);
      k.grid[2] = u16(w);
    }
    k.stream = (int64_t)(int8_t)u8(w);
    w->kernel = k;
    r->kernel = &w->kernel;
  }
  if (f & 64) {
    etr_collective_info c = ETR_COLLECTIVE_INFO_INIT;
    c.name = pick_str(w, true);
    c.dtype = pick_str(w, true);
    c.in_msg_nelems = u64(w);
    c.out_msg_nelems = u8(w);
    uint8_t s = u8(w);
    for (int i = 0; i < 8; i++) w->splits[0][i] = w->splits[1][i] = (int64_t)(int8_t)u8(w);
    c.in_split_sizes = s & 1 ? w->splits[0] : NULL;
    c.n_in_splits = s % 9;
    c.out_split_sizes = s & 2 ? w->splits[1] : NULL;
    c.n_out_splits = (s >> 4) % 9;
    c.global_rank_start = (int64_t)(int8_t)u8(w);
    c.global_rank_stride = (int64_t)(int8_t)u8(w);
    c.pg_name = pick_str(w, true);
    c.pg_desc = pick_str(w, true);
    c.pg_size = u8(w);
    c.is_async = s & 4;
    w->coll = c;
    r->collective = &w->coll;
  }
}

static void begin_op(worker *w) {
  if (w->depth == MAX_OPEN) return;
  int slot = w->depth; /* recs[] is indexed by stack position at begin time */
  for (int i = 0; i < MAX_OPEN; i++) { /* a free slot: one not on the stack */
    bool used = false;
    for (int j = 0; j < w->depth; j++) used |= w->stack[j] == i;
    if (!used) {
      slot = i;
      break;
    }
  }
  etr_record *r = &w->recs[slot];
  reset_pools(w);
  const char *name = pick_str(w, true);
  uint8_t sc = u8(w);
  etr_record_init(r, name, (etr_scope)(sc & 0x80 ? sc : sc % ETR_SCOPE_COUNT));
  if (etr_record_is_active(r)) fill_begin(w, r);
  etr_record_begin(r);
  w->stack[w->depth++] = slot;
}

static void end_rec(worker *w, etr_record *r) {
  reset_pools(w);
  if (etr_record_needs_outputs(r)) r->outputs = make_values(w, &r->n_outputs);
  etr_record_end(r);
  w->ended = *r;
  w->have_ended = true;
}

static void end_at(worker *w, int pos) {
  if (w->depth == 0) return;
  pos %= w->depth;
  end_rec(w, &w->recs[w->stack[pos]]);
  memmove(&w->stack[pos], &w->stack[pos + 1], (size_t)(w->depth - pos - 1) * sizeof(int));
  w->depth--;
}

static void run_script(worker *w) {
  w->other_tid = g_w[w == &g_w[0]].self_tid;
  w->depth = 0;
  w->have_ended = false;
  int steps = 0;
  while (w->p < w->end && steps++ < 4000) {
    uint8_t op = u8(w);
    switch (op % 20) {
      case 0: case 1: case 2: case 3: begin_op(w); break;
      case 4: case 5: case 6: end_at(w, w->depth - 1); break; /* the innermost */
      case 7: end_at(w, u8(w)); break;                         /* any: out of order */
      case 8: /* a whole op */
        begin_op(w);
        end_at(w, w->depth - 1);
        break;
      case 9: /* end an ended record again */
        if (w->have_ended) etr_record_end(&w->ended);
        break;
      case 10: { /* end without begin */
        etr_record r;
        etr_record_init(&r, pick_str(w, true), ETR_SCOPE_FUNCTION);
        etr_record_end(&r);
        break;
      }
      case 11: { /* init, never begun nor ended */
        etr_record r;
        etr_record_init(&r, "never_begun", ETR_SCOPE_FUNCTION);
        break;
      }
      case 12: CHECK(etr_trace_enable(g_trace) == 0, "enable"); break;
      case 13: CHECK(etr_trace_disable(g_trace) == 0, "disable"); break;
      case 14: {
        int rc = etr_trace_flush(g_trace);
        CHECK(rc == 0, "flush: %d", rc);
        break;
      }
      case 15: {
        uint8_t m = u8(w);
        if (m & 1)
          etr_tensor_died(&g_impls[(m >> 1) % 16]);
        else
          etr_storage_died(&g_storages[(m >> 1) % 8]);
        break;
      }
      case 16: {
        etr_trace_stats st;
        memset(&st, 0, sizeof st);
        st.struct_size = u8(w) & 1 ? 0 : sizeof st;
        CHECK(etr_trace_stats_get(g_trace, &st) == 0, "stats");
        break;
      }
      case 17: /* NULL handles */
        CHECK(etr_trace_enable(NULL) != 0 && etr_trace_disable(NULL) != 0, "NULL handle");
        CHECK(!etr_trace_is_enabled(NULL), "NULL is enabled");
        break;
      case 18: { /* nest several ops at once */
        int n = u8(w) % 12;
        for (int i = 0; i < n; i++) begin_op(w);
        break;
      }
      default: (void)etr_thread_id(); break;
    }
  }
  /* ops still open stay open: close writes them, marked incomplete */
}

/* ---- the two workers ---- */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static uint64_t g_gen;  /* incremented for each input */
static int g_done;      /* workers finished with this generation */

static void *worker_main(void *arg) {
  worker *w = arg;
  uint64_t seen = 0;
  w->self_tid = etr_thread_id();
  for (;;) {
    pthread_mutex_lock(&g_mu);
    while (g_gen == seen) pthread_cond_wait(&g_cv, &g_mu);
    seen = g_gen;
    pthread_mutex_unlock(&g_mu);
    run_script(w);
    pthread_mutex_lock(&g_mu);
    g_done++;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
  }
  return NULL;
}

static void remove_tmp(void) {
  unlink(g_path);
  rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  setenv("ETR_PROGRESS", "0", 1);
  const char *h = getenv("ETR_FUZZ_HOSTILE");
  g_hostile = h && *h == '1';
  /* A directory of our own (mkdtemp) in ETR_FUZZ_TMP, else /dev/shm (tmpfs), else $TMPDIR
   * or /tmp; removed at exit unless a check failed (then the trace is kept in it). */
  const char *base = getenv("ETR_FUZZ_TMP");
  if (!base || access(base, W_OK) != 0)
    base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/etr-fuzz-record.XXXXXX", base ? base : "/tmp");
  if (!mkdtemp(g_dir)) {
    perror("fuzz_record: mkdtemp");
    abort();
  }
  snprintf(g_path, sizeof g_path, "%s/trace.json", g_dir);
  atexit(remove_tmp);
  int nul = open("/dev/null", O_WRONLY);
  if (nul >= 0) {
    dup2(nul, 1);
    close(nul);
  }
  for (int i = 0; i < 2; i++)
    if (pthread_create(&g_w[i].th, NULL, worker_main, &g_w[i]) != 0) abort();
  return 0;
}

static uint64_t count_nodes(void) {
  etr_reader *r = NULL;
  int rc = etr_reader_open(g_path, NULL, &r);
  CHECK(rc == 0, "reader: %s", r ? etr_reader_error(r) : "out of memory");
  uint64_t n = 0;
  const etr_rnode *node;
  while ((rc = etr_reader_next(r, &node)) == 1) n++;
  CHECK(rc == 0, "reader: %s", etr_reader_error(r));
  etr_reader_close(r);
  return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3) return 0;
  uint8_t f = data[0], sc = data[1], split = data[2];
  data += 3;
  size -= 3;

  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.schema = f & 1 ? ETR_SCHEMA_1_1_0 : ETR_SCHEMA_1_1_1;
  opt.no_timing = f & 2;
  static const uint32_t kb[4] = {0, 1, 4, 16}, bufs[4] = {0, 1, 2, 4};
  opt.buffer_kb = kb[(f >> 3) & 3];
  opt.max_buffers = bufs[(f >> 5) & 3];
  opt.sample_probability = f & 0x80 ? 0.5 : 0.0;
  opt.scopes = sc ? ((uint32_t)sc << (sc % 3)) & 0x3FFu : 0;
  if (sc && !opt.scopes) opt.scopes = 1;
  int rc = etr_trace_open(g_path, &opt, &g_trace);
  CHECK(rc == 0, "open %s: %d", g_path, rc);
  if (!(f & 4)) CHECK(etr_trace_enable(g_trace) == 0, "enable");

  size_t cut = size * split / 255;
  g_w[0].p = data;
  g_w[0].end = data + cut;
  g_w[1].p = data + cut;
  g_w[1].end = data + size;
  pthread_mutex_lock(&g_mu);
  g_done = 0;
  g_gen++;
  pthread_cond_broadcast(&g_cv);
  while (g_done < 2) pthread_cond_wait(&g_cv, &g_mu);
  pthread_mutex_unlock(&g_mu);

  etr_trace_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  rc = etr_trace_close_stats(g_trace, &st);
  g_trace = NULL;
  CHECK(rc == 0, "close: %d", rc);
  CHECK(st.nodes_dropped == 0 && st.write_error == 0, "dropped %llu, write error %d",
        (unsigned long long)st.nodes_dropped, st.write_error);

  char *argv[] = {"validate", "--strict", "--quiet", g_path, NULL};
  rc = etr_cmd_validate(4, argv);
  CHECK(rc == 0, "etr validate --strict: %d", rc);
  uint64_t n = count_nodes();
  CHECK(n == st.ops_recorded + st.threads + 1,
        "%llu nodes in the file; ops_recorded %llu + threads %llu + 1",
        (unsigned long long)n, (unsigned long long)st.ops_recorded,
        (unsigned long long)st.threads);
  CHECK(n == st.nodes_written, "%llu nodes in the file, nodes_written %llu",
        (unsigned long long)n, (unsigned long long)st.nodes_written);
  return 0;
}
