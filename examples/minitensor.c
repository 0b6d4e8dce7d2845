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
 * Only the public API is used: #include <etr/etr.h>.
 */
#define _POSIX_C_SOURCE 200809L

#include <etr/etr.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mt_ranks.h"

#define PROG "etr-example-runtime"

/* ---------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------- */

static void fatal(const char *fmt, const char *arg) {
  fprintf(stderr, PROG ": ");
  fprintf(stderr, fmt, arg);
  fputc('\n', stderr);
  exit(1);
}

/* A failed etr control-plane call ends the program with the call and the error named. */
static void check_etr(int rc, const char *call) {
  if (rc == 0) return;
  fprintf(stderr, PROG ": %s failed: %s (%s)\n", call, etr_err_name(rc), etr_strerror(rc));
  exit(1);
}

static void check_pthread(int rc, const char *call) {
  if (rc == 0) return;
  fprintf(stderr, PROG ": %s failed: %s\n", call, strerror(rc));
  exit(1);
}

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n, size);
  if (p == NULL) fatal("out of memory (%s)", "calloc");
  return p;
}

/* ---------------------------------------------------------------------------------------
 * Tensors, storages and the object pools
 * ------------------------------------------------------------------------------------- */

#define MT_MAX_DIM 4

typedef struct mt_storage {
  atomic_int refs;
  float *data;
  int64_t nelems;
  int64_t slot;       /* index of this struct among all storage structs ever made */
  int64_t generation; /* how many times this struct (this address) was reused */
  struct mt_storage *next_free;
} mt_storage;

typedef struct mt_tensor {
  atomic_int refs;
  mt_storage *storage;
  int64_t offset; /* in elements */
  int64_t numel;
  int32_t ndim;
  int64_t sizes[MT_MAX_DIM];
  int64_t strides[MT_MAX_DIM];
  int64_t slot;
  int64_t generation;
  struct mt_tensor *next_free;
} mt_tensor;

/* Free lists are LIFO: the struct freed last is handed out first, so addresses really are
 * reused (what a malloc would do, made certain). Shared by every thread. */
static struct {
  pthread_mutex_t lock;
  mt_tensor *free_tensors;
  mt_storage *free_storages;
  int64_t tensor_slots, storage_slots;  /* structs ever malloc'd */
  int64_t tensor_allocs, tensor_reuses; /* reuses: allocations served at a used address */
  int64_t storage_allocs, storage_reuses;
  int64_t live_tensors, live_storages;
} g_pool = {PTHREAD_MUTEX_INITIALIZER, NULL, NULL, 0, 0, 0, 0, 0, 0, 0, 0};

/* The identity of every undefined tensor (PyTorch's UndefinedTensorImpl singleton). */
static const char g_undefined_impl = 0;

/* Records that some observer saw (compared with the trace's ops_recorded at the end). */
static atomic_ullong g_records_active;

/* Death notices. Building with -DMINITENSOR_FORGET_DEATHS leaves them out: a negative test
 * for tests/integration/check_example_trace.py, which must then fail (recycled addresses
 * keep their old ids). */
static void report_tensor_died(const mt_tensor *t) {
#ifndef MINITENSOR_FORGET_DEATHS
  etr_tensor_died(t);
#else
  (void)t;
#endif
}

static void report_storage_died(const mt_storage *s) {
#ifndef MINITENSOR_FORGET_DEATHS
  etr_storage_died(s);
#else
  (void)s;
#endif
}

static mt_storage *storage_new(int64_t nelems) {
  check_pthread(pthread_mutex_lock(&g_pool.lock), "pthread_mutex_lock");
  mt_storage *s = g_pool.free_storages;
  if (s != NULL) {
    g_pool.free_storages = s->next_free;
    s->generation++;
    g_pool.storage_reuses++;
  } else {
    s = xcalloc(1, sizeof *s);
    s->slot = g_pool.storage_slots++;
  }
  g_pool.storage_allocs++;
  g_pool.live_storages++;
  check_pthread(pthread_mutex_unlock(&g_pool.lock), "pthread_mutex_unlock");
  s->next_free = NULL;
  s->nelems = nelems;
  s->data = xcalloc((size_t)(nelems > 0 ? nelems : 1), sizeof(float));
  atomic_init(&s->refs, 1);
  return s;
}

static void storage_release(mt_storage *s) {
  if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1) return;
  /* Tell etr before the address can be handed out again. */
  report_storage_died(s);
  free(s->data);
  s->data = NULL;
  check_pthread(pthread_mutex_lock(&g_pool.lock), "pthread_mutex_lock");
  s->next_free = g_pool.free_storages;
  g_pool.free_storages = s;
  g_pool.live_storages--;
  check_pthread(pthread_mutex_unlock(&g_pool.lock), "pthread_mutex_unlock");
}

static mt_tensor *tensor_struct_new(void) {
  check_pthread(pthread_mutex_lock(&g_pool.lock), "pthread_mutex_lock");
  mt_tensor *t = g_pool.free_tensors;
  if (t != NULL) {
    g_pool.free_tensors = t->next_free;
    t->generation++;
    g_pool.tensor_reuses++;
  } else {
    t = xcalloc(1, sizeof *t);
    t->slot = g_pool.tensor_slots++;
  }
  g_pool.tensor_allocs++;
  g_pool.live_tensors++;
  check_pthread(pthread_mutex_unlock(&g_pool.lock), "pthread_mutex_unlock");
  t->next_free = NULL;
  atomic_init(&t->refs, 1);
  return t;
}

static mt_tensor *mt_retain(mt_tensor *t) {
  if (t != NULL) atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
  return t;
}

static void mt_release(mt_tensor *t) {
  if (t == NULL) return;
  if (atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1) return;
  report_tensor_died(t);
  storage_release(t->storage);
  t->storage = NULL;
  check_pthread(pthread_mutex_lock(&g_pool.lock), "pthread_mutex_lock");
  t->next_free = g_pool.free_tensors;
  g_pool.free_tensors = t;
  g_pool.live_tensors--;
  check_pthread(pthread_mutex_unlock(&g_pool.lock), "pthread_mutex_unlock");
}

static void pool_free_all(void) {
  while (g_pool.free_tensors != NULL) {
    mt_tensor *t = g_pool.free_tensors;
    g_pool.free_tensors = t->next_free;
    free(t);
  }
  while (g_pool.free_storages != NULL) {
    mt_storage *s = g_pool.free_storages;
    g_pool.free_storages = s->next_free;
    free(s);
  }
}

static float *mt_data(const mt_tensor *t) { return t->storage->data; }

/* Storage index of the element at row-major position lin of t broadcast to sizes[ndim]
 * (dims aligned on the right; missing and size-1 dims repeat). */
static int64_t mt_index(const mt_tensor *t, const int64_t *sizes, int32_t ndim, int64_t lin) {
  int64_t off = t->offset;
  for (int32_t d = ndim - 1; d >= 0; d--) {
    int64_t i = lin % sizes[d];
    lin /= sizes[d];
    int32_t td = d - (ndim - t->ndim);
    if (td >= 0 && t->sizes[td] != 1) off += i * t->strides[td];
  }
  return off;
}

static float mt_get(const mt_tensor *t, int64_t lin) {
  return mt_data(t)[mt_index(t, t->sizes, t->ndim, lin)];
}

/* ---------------------------------------------------------------------------------------
 * One operator call: an etr_record plus room for its typed inputs and outputs
 * ------------------------------------------------------------------------------------- */

#define OP_MAX_VALUES 12
#define OP_MAX_TENSORS 8
#define OP_MAX_ITEMS 160

typedef struct op_call {
  etr_record rec;
  const char *name; /* for our own messages: rec's fields are set only when active */
  bool active;      /* some observer sees this op: only then are values filled in */
  uint32_t n_in, n_out, n_tensors, n_items;
  etr_value in[OP_MAX_VALUES];
  etr_value out[OP_MAX_VALUES];
  etr_tensor tensors[OP_MAX_TENSORS];
  etr_value items[OP_MAX_ITEMS];
} op_call;

static void op_init(op_call *op, const char *name, etr_scope scope, const char *schema,
                    int64_t seq_nr, uint64_t fw_tid) {
  etr_record_init(&op->rec, name, scope);
  op->name = name;
  op->active = etr_record_is_active(&op->rec);
  op->n_in = op->n_out = op->n_tensors = op->n_items = 0;
  if (op->active) {
    /* The record's fields are filled in by init only for active records. */
    op->rec.schema = schema;
    op->rec.seq_nr = seq_nr;
    op->rec.fw_tid = fw_tid;
    atomic_fetch_add_explicit(&g_records_active, 1, memory_order_relaxed);
  }
}

static etr_value *op_items(op_call *op, uint32_t n) {
  if (op->n_items + n > OP_MAX_ITEMS) fatal("op %s: too many list items", op->name);
  etr_value *p = &op->items[op->n_items];
  op->n_items += n;
  return p;
}

/* The etr view of a tensor (NULL = undefined tensor). Valid while op and t live. */
static etr_value op_tensor_value(op_call *op, const mt_tensor *t) {
  if (op->n_tensors >= OP_MAX_TENSORS) fatal("op %s: too many tensors", op->name);
  etr_tensor *e = &op->tensors[op->n_tensors++];
  memset(e, 0, sizeof *e);
  if (t == NULL) {
    e->impl = &g_undefined_impl; /* dtype NULL: undefined */
  } else {
    e->impl = t;
    e->storage = t->storage;
    e->storage_offset = t->offset;
    e->numel = t->numel;
    e->itemsize = (int64_t)sizeof(float);
    e->dtype = "float";
    e->device = "cpu";
    e->ndim = t->ndim;
    e->sizes = t->sizes;
    e->strides = t->strides;
  }
  return etr_value_tensor(e);
}

static void op_in(op_call *op, etr_value v) {
  if (!op->active) return;
  if (op->n_in >= OP_MAX_VALUES) fatal("op %s: too many inputs", op->name);
  op->in[op->n_in++] = v;
}

static void op_out(op_call *op, etr_value v) {
  if (!op->active) return;
  if (op->n_out >= OP_MAX_VALUES) fatal("op %s: too many outputs", op->name);
  op->out[op->n_out++] = v;
}

static void op_in_tensor(op_call *op, const mt_tensor *t) {
  if (op->active) op_in(op, op_tensor_value(op, t));
}

static void op_out_tensor(op_call *op, const mt_tensor *t) {
  if (op->active) op_out(op, op_tensor_value(op, t));
}

static etr_value op_int_list(op_call *op, const int64_t *v, uint32_t n) {
  etr_value *items = op_items(op, n);
  for (uint32_t i = 0; i < n; i++) items[i] = etr_value_int(v[i]);
  return etr_value_list(items, n);
}

static void op_in_int_list(op_call *op, const int64_t *v, uint32_t n) {
  if (op->active) op_in(op, op_int_list(op, v, n));
}

static etr_value op_tensor_list(op_call *op, const mt_tensor *t) {
  etr_value *items = op_items(op, 1);
  items[0] = op_tensor_value(op, t);
  return etr_value_list(items, 1);
}

static void op_begin(op_call *op) {
  if (etr_record_needs_inputs(&op->rec)) {
    op->rec.inputs = op->in;
    op->rec.n_inputs = op->n_in;
  }
  etr_record_begin(&op->rec);
}

static void op_end(op_call *op) {
  if (etr_record_needs_outputs(&op->rec)) {
    op->rec.outputs = op->out;
    op->rec.n_outputs = op->n_out;
  }
  etr_record_end(&op->rec);
}

static void scope_begin(op_call *op, const char *name) {
  op_init(op, name, ETR_SCOPE_USER_SCOPE, "", -1, 0);
  op_begin(op);
}

/* ---------------------------------------------------------------------------------------
 * Tensor creation (each new tensor object is announced with a minitensor::alloc op)
 * ------------------------------------------------------------------------------------- */

static void announce_alloc(const mt_tensor *t) {
  op_call op;
  /* No schema: this op is the runtime's own bookkeeping (and it is frequent). Inputs:
   * tensor slot, tensor generation, storage slot, storage generation. */
  op_init(&op, "minitensor::alloc", ETR_SCOPE_FUNCTION, "", -1, 0);
  op_in(&op, etr_value_int(t->slot));
  op_in(&op, etr_value_int(t->generation));
  op_in(&op, etr_value_int(t->storage->slot));
  op_in(&op, etr_value_int(t->storage->generation));
  op_begin(&op);
  op_out_tensor(&op, t);
  op_end(&op);
}

static void set_contiguous(mt_tensor *t, int32_t ndim, const int64_t *sizes) {
  if (ndim > MT_MAX_DIM) fatal("too many dimensions (%s)", "set_contiguous");
  t->ndim = ndim;
  t->numel = 1;
  for (int32_t d = ndim - 1; d >= 0; d--) {
    t->sizes[d] = sizes[d];
    t->strides[d] = t->numel;
    t->numel *= sizes[d];
  }
}

/* A new contiguous tensor with its own zeroed storage. */
static mt_tensor *mt_new(int32_t ndim, const int64_t *sizes) {
  mt_tensor *t = tensor_struct_new();
  set_contiguous(t, ndim, sizes);
  t->offset = 0;
  t->storage = storage_new(t->numel);
  announce_alloc(t);
  return t;
}

/* A new tensor object sharing base's storage. */
static mt_tensor *mt_view(const mt_tensor *base, int32_t ndim, const int64_t *sizes,
                          const int64_t *strides, int64_t offset) {
  mt_tensor *t = tensor_struct_new();
  t->ndim = ndim;
  t->numel = 1;
  for (int32_t d = 0; d < ndim; d++) {
    t->sizes[d] = sizes[d];
    t->strides[d] = strides[d];
    t->numel *= sizes[d];
  }
  t->offset = offset;
  t->storage = base->storage;
  atomic_fetch_add_explicit(&t->storage->refs, 1, memory_order_relaxed);
  announce_alloc(t);
  return t;
}

/* ---------------------------------------------------------------------------------------
 * Operators
 * ------------------------------------------------------------------------------------- */

#define DTYPE_FLOAT 6 /* c10::ScalarType::Float, as PyTorch records dtype arguments */

static const char *const SCHEMA_EMPTY =
    "aten::empty.memory_format(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, "
    "Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor";
static const char *const SCHEMA_ZEROS =
    "aten::zeros(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, "
    "Device? device=None, bool? pin_memory=None) -> Tensor";

static mt_tensor *op_factory(const char *name, const char *schema, int32_t ndim,
                             const int64_t *sizes) {
  op_call op;
  op_init(&op, name, ETR_SCOPE_FUNCTION, schema, -1, 0);
  op_in_int_list(&op, sizes, (uint32_t)ndim);
  op_in(&op, etr_value_int(DTYPE_FLOAT));
  op_in(&op, etr_value_none());
  op_in(&op, etr_value_device("cpu"));
  op_in(&op, etr_value_bool(false));
  if (strcmp(name, "aten::empty") == 0) op_in(&op, etr_value_none());
  op_begin(&op);
  mt_tensor *t = mt_new(ndim, sizes); /* storage is zeroed either way */
  op_out_tensor(&op, t);
  op_end(&op);
  return t;
}

static mt_tensor *op_empty(int32_t ndim, const int64_t *sizes) {
  return op_factory("aten::empty", SCHEMA_EMPTY, ndim, sizes);
}

static mt_tensor *op_zeros(int32_t ndim, const int64_t *sizes) {
  return op_factory("aten::zeros", SCHEMA_ZEROS, ndim, sizes);
}

static void op_fill_(mt_tensor *t, double value) {
  op_call op;
  op_init(&op, "aten::fill_", ETR_SCOPE_FUNCTION,
          "aten::fill_.Scalar(Tensor(a!) self, Scalar value) -> Tensor(a!)", -1, 0);
  op_in_tensor(&op, t);
  op_in(&op, etr_value_double(value));
  op_begin(&op);
  for (int64_t i = 0; i < t->numel; i++)
    mt_data(t)[mt_index(t, t->sizes, t->ndim, i)] = (float)value;
  op_out_tensor(&op, t);
  op_end(&op);
}

static void op_zero_(mt_tensor *t) {
  op_call op;
  op_init(&op, "aten::zero_", ETR_SCOPE_FUNCTION, "aten::zero_(Tensor(a!) self) -> Tensor(a!)", -1,
          0);
  op_in_tensor(&op, t);
  op_begin(&op);
  op_fill_(t, 0.0);
  op_out_tensor(&op, t);
  op_end(&op);
}

static uint32_t rng_next(uint32_t *state) {
  uint32_t x = *state;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  *state = x;
  return x;
}

static void op_uniform_(mt_tensor *t, double from, double to, uint32_t *rng) {
  op_call op;
  op_init(&op, "aten::uniform_", ETR_SCOPE_FUNCTION,
          "aten::uniform_(Tensor(a!) self, float from=0, float to=1, *, "
          "Generator? generator=None) -> Tensor(a!)",
          -1, 0);
  op_in_tensor(&op, t);
  op_in(&op, etr_value_double(from));
  op_in(&op, etr_value_double(to));
  op_in(&op, etr_value_none());
  op_begin(&op);
  for (int64_t i = 0; i < t->numel; i++) {
    double u = (double)(rng_next(rng) >> 8) / (double)(1u << 24);
    mt_data(t)[mt_index(t, t->sizes, t->ndim, i)] = (float)(from + (to - from) * u);
  }
  op_out_tensor(&op, t);
  op_end(&op);
}

static mt_tensor *op_view(mt_tensor *self, int32_t ndim, const int64_t *size, int64_t seq) {
  op_call op;
  op_init(&op, "aten::view", ETR_SCOPE_FUNCTION,
          "aten::view(Tensor(a) self, SymInt[] size) -> Tensor(a)", seq, 0);
  op_in_tensor(&op, self);
  op_in_int_list(&op, size, (uint32_t)ndim);
  op_begin(&op);
  int64_t sizes[MT_MAX_DIM], strides[MT_MAX_DIM], known = 1;
  int32_t infer = -1;
  for (int32_t d = 0; d < ndim; d++) {
    if (size[d] == -1)
      infer = d;
    else
      known *= size[d];
  }
  for (int32_t d = 0; d < ndim; d++) sizes[d] = d == infer ? self->numel / known : size[d];
  int64_t st = 1;
  for (int32_t d = ndim - 1; d >= 0; d--) {
    strides[d] = st;
    st *= sizes[d];
  }
  if (st != self->numel) fatal("aten::view: %s", "size does not match the number of elements");
  mt_tensor *out = mt_view(self, ndim, sizes, strides, self->offset);
  op_out_tensor(&op, out);
  op_end(&op);
  return out;
}

static mt_tensor *op_t(mt_tensor *self, int64_t seq) {
  op_call op;
  op_init(&op, "aten::t", ETR_SCOPE_FUNCTION, "aten::t(Tensor(a) self) -> Tensor(a)", seq, 0);
  op_in_tensor(&op, self);
  op_begin(&op);
  int64_t sizes[2] = {self->sizes[1], self->sizes[0]};
  int64_t strides[2] = {self->strides[1], self->strides[0]};
  mt_tensor *out = mt_view(self, 2, sizes, strides, self->offset);
  op_out_tensor(&op, out);
  op_end(&op);
  return out;
}

static mt_tensor *op_slice(mt_tensor *self, int64_t dim, int64_t start, int64_t end, int64_t step) {
  op_call op;
  op_init(&op, "aten::slice", ETR_SCOPE_FUNCTION,
          "aten::slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, "
          "SymInt step=1) -> Tensor(a)",
          -1, 0);
  op_in_tensor(&op, self);
  op_in(&op, etr_value_int(dim));
  op_in(&op, etr_value_int(start));
  op_in(&op, etr_value_int(end));
  op_in(&op, etr_value_int(step));
  op_begin(&op);
  int64_t sizes[MT_MAX_DIM], strides[MT_MAX_DIM];
  memcpy(sizes, self->sizes, sizeof sizes);
  memcpy(strides, self->strides, sizeof strides);
  sizes[dim] = (end - start + step - 1) / step;
  strides[dim] *= step;
  mt_tensor *out =
      mt_view(self, self->ndim, sizes, strides, self->offset + start * self->strides[dim]);
  op_out_tensor(&op, out);
  op_end(&op);
  return out;
}

static mt_tensor *op_expand(mt_tensor *self, int32_t ndim, const int64_t *size) {
  op_call op;
  op_init(&op, "aten::expand", ETR_SCOPE_FUNCTION,
          "aten::expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)", -1,
          0);
  op_in_tensor(&op, self);
  op_in_int_list(&op, size, (uint32_t)ndim);
  op_in(&op, etr_value_bool(false));
  op_begin(&op);
  int64_t strides[MT_MAX_DIM];
  for (int32_t d = 0; d < ndim; d++) {
    int32_t sd = d - (ndim - self->ndim);
    strides[d] = (sd >= 0 && self->sizes[sd] != 1) ? self->strides[sd] : 0;
  }
  mt_tensor *out = mt_view(self, ndim, size, strides, self->offset);
  op_out_tensor(&op, out);
  op_end(&op);
  return out;
}

static mt_tensor *op_mm(mt_tensor *a, mt_tensor *b, int64_t seq) {
  op_call op;
  op_init(&op, "aten::mm", ETR_SCOPE_FUNCTION, "aten::mm(Tensor self, Tensor mat2) -> Tensor", seq,
          0);
  op_in_tensor(&op, a);
  op_in_tensor(&op, b);
  op_begin(&op);
  if (a->sizes[1] != b->sizes[0]) fatal("aten::mm: %s", "shape mismatch");
  int64_t sizes[2] = {a->sizes[0], b->sizes[1]};
  mt_tensor *out = mt_new(2, sizes);
  const float *ad = mt_data(a), *bd = mt_data(b);
  float *od = mt_data(out);
  for (int64_t i = 0; i < sizes[0]; i++) {
    for (int64_t j = 0; j < sizes[1]; j++) {
      float acc = 0.0f;
      for (int64_t k = 0; k < a->sizes[1]; k++) {
        acc += ad[a->offset + i * a->strides[0] + k * a->strides[1]] *
               bd[b->offset + k * b->strides[0] + j * b->strides[1]];
      }
      od[i * sizes[1] + j] = acc;
    }
  }
  op_out_tensor(&op, out);
  op_end(&op);
  return out;
}

/* out = a + alpha * b (b broadcast to a's shape); sub = true gives a - alpha * b. */
static mt_tensor *op_add_like(const char *name, const char *schema, mt_tensor *a, mt_tensor *b,
                              int64_t alpha, int64_t seq, bool sub) {
  op_call op;
  op_init(&op, name, ETR_SCOPE_FUNCTION, schema, seq, 0);
  op_in_tensor(&op, a);
  op_in_tensor(&op, b);
  op_in(&op, etr_value_int(alpha));
  op_begin(&op);
  mt_tensor *out = mt_new(a->ndim, a->sizes);
  float k = (float)(sub ? -alpha : alpha);
  for (int64_t i = 0; i < out->numel; i++) {
    mt_data(out)[i] = mt_get(a, i) + k * mt_data(b)[mt_index(b, a->sizes, a->ndim, i)];
  }
  op_out_tensor(&op, out);
  op_end(&op);
  return out;
}

static mt_tensor *op_add(mt_tensor *a, mt_tensor *b, int64_t alpha, int64_t seq) {
  return op_add_like("aten::add",
                     "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", a,
                     b, alpha, seq, false);
}

static mt_tensor *op_sub(mt_tensor *a, mt_tensor *b, int64_t alpha, int64_t seq) {
  return op_add_like("aten::sub",
                     "aten::sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", a,
                     b, alpha, seq, true);
}

static void op_add_(mt_tensor *self, mt_tensor *other, int64_t alpha) {
  op_call op;
  op_init(&op, "aten::add_", ETR_SCOPE_FUNCTION,
          "aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)", -1,
          0);
  op_in_tensor(&op, self);
  op_in_tensor(&op, other);
  op_in(&op, etr_value_int(alpha));
  op_begin(&op);
  for (int64_t i = 0; i < self->numel; i++) {
    int64_t si = mt_index(self, self->sizes, self->ndim, i);
    mt_data(self)[si] += (float)alpha * mt_data(other)[mt_index(other, self->sizes, self->ndim, i)];
  }
  op_out_tensor(&op, self);
  op_end(&op);
}

static mt_tensor *op_mul(mt_tensor *a, mt_tensor *b, int64_t seq) {
  op_call op;
  op_init(&op, "aten::mul", ETR_SCOPE_FUNCTION,
          "aten::mul.Tensor(Tensor self, Tensor other) -> Tensor", seq, 0);
  op_in_tensor(&op, a);
  op_in_tensor(&op, b);
  op_begin(&op);
  mt_tensor *out = mt_new(a->ndim, a->sizes);
  for (int64_t i = 0; i < out->numel; i++) {
    mt_data(out)[i] = mt_get(a, i) * mt_data(b)[mt_index(b, a->sizes, a->ndim, i)];
  }
  op_out_tensor(&op, out);
  op_end(&op);
  return out;
}

static mt_tensor *op_relu(mt_tensor *a, int64_t seq) {
  op_call op;
  op_init(&op, "aten::relu", ETR_SCOPE_FUNCTION, "aten::relu(Tensor self) -> Tensor", seq, 0);
  op_in_tensor(&op, a);
  op_begin(&op);
  mt_tensor *out = mt_new(a->ndim, a->sizes);
  for (int64_t i = 0; i < out->numel; i++) {
    float v = mt_get(a, i);
    mt_data(out)[i] = v > 0.0f ? v : 0.0f;
  }
  op_out_tensor(&op, out);
  op_end(&op);
  return out;
}

static mt_tensor *op_threshold_backward(mt_tensor *grad, mt_tensor *self, int64_t threshold) {
  op_call op;
  op_init(&op, "aten::threshold_backward", ETR_SCOPE_FUNCTION,
          "aten::threshold_backward(Tensor grad_output, Tensor self, Scalar threshold) -> Tensor",
          -1, 0);
  op_in_tensor(&op, grad);
  op_in_tensor(&op, self);
  op_in(&op, etr_value_int(threshold));
  op_begin(&op);
  mt_tensor *out = mt_new(grad->ndim, grad->sizes);
  for (int64_t i = 0; i < out->numel; i++) {
    mt_data(out)[i] = mt_get(self, i) <= (float)threshold ? 0.0f : mt_get(grad, i);
  }
  op_out_tensor(&op, out);
  op_end(&op);
  return out;
}

/* Sum of all elements: a 0-dim tensor. */
static mt_tensor *op_sum(mt_tensor *a, int64_t seq) {
  op_call op;
  op_init(&op, "aten::sum", ETR_SCOPE_FUNCTION,
          "aten::sum(Tensor self, *, ScalarType? dtype=None) -> Tensor", seq, 0);
  op_in_tensor(&op, a);
  op_in(&op, etr_value_none());
  op_begin(&op);
  mt_tensor *out = mt_new(0, NULL);
  float acc = 0.0f;
  for (int64_t i = 0; i < a->numel; i++) acc += mt_get(a, i);
  mt_data(out)[0] = acc;
  op_out_tensor(&op, out);
  op_end(&op);
  return out;
}

/* Sum of a 2-d tensor over dim 0: [rows, cols] -> [cols]. */
static mt_tensor *op_sum_dim0(mt_tensor *a) {
  op_call op;
  op_init(&op, "aten::sum", ETR_SCOPE_FUNCTION,
          "aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, "
          "ScalarType? dtype=None) -> Tensor",
          -1, 0);
  static const int64_t dims[1] = {0};
  op_in_tensor(&op, a);
  op_in_int_list(&op, dims, 1);
  op_in(&op, etr_value_bool(false));
  op_in(&op, etr_value_none());
  op_begin(&op);
  mt_tensor *out = mt_new(1, &a->sizes[1]);
  for (int64_t i = 0; i < a->sizes[0]; i++) {
    for (int64_t j = 0; j < a->sizes[1]; j++) {
      mt_data(out)[j] += mt_data(a)[a->offset + i * a->strides[0] + j * a->strides[1]];
    }
  }
  op_out_tensor(&op, out);
  op_end(&op);
  return out;
}

static double op_item(mt_tensor *a) {
  op_call op;
  op_init(&op, "aten::item", ETR_SCOPE_FUNCTION, "aten::item(Tensor self) -> Scalar", -1, 0);
  op_in_tensor(&op, a);
  op_begin(&op);
  double v = (double)mt_get(a, 0);
  op_out(&op, etr_value_double(v));
  op_end(&op);
  return v;
}

static mt_tensor *op_ones_like(mt_tensor *a) {
  op_call op;
  op_init(&op, "aten::ones_like", ETR_SCOPE_FUNCTION,
          "aten::ones_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, "
          "Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> "
          "Tensor",
          -1, 0);
  op_in_tensor(&op, a);
  for (int i = 0; i < 5; i++) op_in(&op, etr_value_none());
  op_begin(&op);
  mt_tensor *out = mt_new(a->ndim, a->sizes);
  op_fill_(out, 1.0);
  op_out_tensor(&op, out);
  op_end(&op);
  return out;
}

/* An op whose name needs escaping in JSON, with awkward input values. */
static const char WEIRD_NAME[] = "custom::weird\"op\\name\nline2";

static void op_weird(mt_tensor *a) {
  op_call op;
  op_init(&op, WEIRD_NAME, ETR_SCOPE_FUNCTION,
          "custom::weird(Tensor(a) self, str tag, str raw, float a, float b, float c, bool f, "
          "Any t) -> Tensor(a)",
          -1, 0);
  op_in_tensor(&op, a);
  /* a tab, U+00E9 in UTF-8, and a lone 0xff byte (invalid UTF-8: replaced by U+FFFD) */
  op_in(&op, etr_value_string("tab\there \xc3\xa9 \xff end"));
  op_in(&op, etr_value_string_n("nul\0byte", 8)); /* an embedded NUL, by length */
  op_in(&op, etr_value_double(NAN));
  op_in(&op, etr_value_double(INFINITY));
  op_in(&op, etr_value_double(-INFINITY));
  op_in(&op, etr_value_bool(true));
  if (op.active) {
    etr_value *inner = op_items(&op, 2);
    inner[0] = etr_value_double(0.5);
    inner[1] = etr_value_string("x");
    etr_value *tup = op_items(&op, 2);
    tup[0] = etr_value_int(7);
    tup[1] = etr_value_list(inner, 2);
    op_in(&op, etr_value_tuple(tup, 2));
  }
  op_begin(&op);
  op_out_tensor(&op, a);
  op_end(&op);
}

/* ---------------------------------------------------------------------------------------
 * A process group of worker threads, with real collectives
 * ------------------------------------------------------------------------------------- */

typedef struct mt_pg {
  int size;
  pthread_barrier_t barrier;
  const float **bufs; /* bufs[rank]: that rank's contribution while a collective runs */
  mt_mesh *mesh;      /* set when the ranks are processes (--ranks): collectives go there */
} mt_pg;

static void pg_wait(mt_pg *pg) {
  int rc = pthread_barrier_wait(&pg->barrier);
  if (rc != 0 && rc != PTHREAD_BARRIER_SERIAL_THREAD) check_pthread(rc, "pthread_barrier_wait");
}

/* Sum n contiguous floats at data over all ranks, in place. */
static void pg_allreduce(mt_pg *pg, int rank, float *data, int64_t n) {
  if (pg->mesh) {
    mt_mesh_allreduce(pg->mesh, data, n);
    return;
  }
  float *sum = xcalloc((size_t)n, sizeof(float));
  pg->bufs[rank] = data;
  pg_wait(pg);
  for (int r = 0; r < pg->size; r++) {
    for (int64_t i = 0; i < n; i++) sum[i] += pg->bufs[r][i];
  }
  pg_wait(pg); /* everybody has read every contribution */
  memcpy(data, sum, (size_t)n * sizeof(float));
  free(sum);
}

/* Rank r sends in[j*k .. j*k+k) to rank j and receives out[j*k ..) from rank j. */
static void pg_alltoall(mt_pg *pg, int rank, const float *in, float *out, int64_t k) {
  if (pg->mesh) {
    mt_mesh_alltoall(pg->mesh, in, out, k);
    return;
  }
  pg->bufs[rank] = in;
  pg_wait(pg);
  for (int j = 0; j < pg->size; j++) {
    memcpy(out + (int64_t)j * k, pg->bufs[j] + (int64_t)rank * k, (size_t)k * sizeof(float));
  }
  pg_wait(pg);
}

/* ---------------------------------------------------------------------------------------
 * Model, autograd tape, backward thread, worker
 * ------------------------------------------------------------------------------------- */

enum { BATCH = 4, IN = 8, HIDDEN = 16, OUT = 4 };

typedef struct model {
  mt_tensor *W1, *b1, *W2, *b2;     /* parameters */
  mt_tensor *bucket;                /* all gradients in one flat buffer (as DDP does) */
  mt_tensor *gW1, *gb1, *gW2, *gb2; /* views into the bucket */
} model;

typedef struct linear_saved {
  int64_t seq_t, seq_mm, seq_add;
  mt_tensor *x;  /* input (MmBackward0 self) */
  mt_tensor *Wt; /* transposed weight (MmBackward0 mat2) */
} linear_saved;

typedef struct tape {
  uint64_t fw_tid; /* etr_thread_id() of the forward thread */
  mt_tensor *grad_loss;
  int64_t seq_sum, seq_mul, seq_sub, seq_relu;
  mt_tensor *diff; /* saved by MulBackward0 */
  mt_tensor *a1;   /* relu result, saved by ReluBackward0 */
  linear_saved l1, l2;
  model *m;
} tape;

typedef struct bw_engine {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  tape *pending;
  bool done;
  bool quit;
  pthread_t thread;
} bw_engine;

typedef struct worker {
  int rank;
  int iters;
  int n_ranks;
  mt_pg *pg;
  uint64_t tid;
  int64_t next_seq; /* forward sequence number (links forward ops to backward ones) */
  int64_t coll_seq; /* collective sequence number of the process group */
  uint32_t rng;
  model m;
  bw_engine bw;
  pthread_t thread;
  double first_loss, last_loss, mean_loss;
  bool record_groups; /* record the process-group node (the trace was opened here) */
} worker;

static const char *const SCHEMA_LINEAR =
    "aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor";

/* aten::linear = t + mm + add, each making an autograd node (its own sequence number). */
static mt_tensor *op_linear(worker *w, mt_tensor *x, mt_tensor *W, mt_tensor *b, linear_saved *s) {
  op_call op;
  op_init(&op, "aten::linear", ETR_SCOPE_FUNCTION, SCHEMA_LINEAR, w->next_seq, 0);
  op_in_tensor(&op, x);
  op_in_tensor(&op, W);
  op_in_tensor(&op, b);
  op_begin(&op);
  s->seq_t = w->next_seq++;
  mt_tensor *Wt = op_t(W, s->seq_t);
  s->seq_mm = w->next_seq++;
  mt_tensor *m = op_mm(x, Wt, s->seq_mm);
  s->seq_add = w->next_seq++;
  mt_tensor *h = op_add(m, b, 1, s->seq_add);
  op_out_tensor(&op, h);
  op_end(&op);
  s->x = mt_retain(x);
  s->Wt = Wt;
  mt_release(m);
  return h;
}

static void bw_node_begin(op_call *op, const char *name, int64_t seq, uint64_t fw_tid) {
  op_init(op, name, ETR_SCOPE_BACKWARD_FUNCTION, "", seq, fw_tid);
}

static void accumulate_grad(uint64_t fw_tid, mt_tensor *grad, mt_tensor *g) {
  op_call n;
  /* AccumulateGrad has no forward op: PyTorch gives it sequence number UINT64_MAX (-1). */
  bw_node_begin(&n, "torch::autograd::AccumulateGrad", -1, fw_tid);
  op_in_tensor(&n, g);
  op_begin(&n);
  op_add_(grad, g, 1);
  op_end(&n);
}

/* Backward of aten::linear; returns the input's gradient (NULL when not needed). */
static mt_tensor *linear_backward(uint64_t fw, linear_saved *l, mt_tensor *g_out, mt_tensor *grad_W,
                                  mt_tensor *grad_b, bool input_grad) {
  mt_tensor *g_m, *g_b;
  {
    op_call n;
    bw_node_begin(&n, "AddBackward0", l->seq_add, fw);
    op_in_tensor(&n, g_out);
    op_begin(&n);
    g_m = mt_retain(g_out);
    g_b = op_sum_dim0(g_out);
    op_out_tensor(&n, g_m);
    op_out_tensor(&n, g_b);
    op_end(&n);
  }
  accumulate_grad(fw, grad_b, g_b);
  mt_release(g_b);

  mt_tensor *g_x = NULL, *g_Wt;
  {
    op_call n;
    bw_node_begin(&n, "MmBackward0", l->seq_mm, fw);
    op_in_tensor(&n, g_m);
    op_begin(&n);
    if (input_grad) {
      mt_tensor *WtT = op_t(l->Wt, -1);
      g_x = op_mm(g_m, WtT, -1);
      mt_release(WtT);
    }
    mt_tensor *xT = op_t(l->x, -1);
    g_Wt = op_mm(xT, g_m, -1);
    mt_release(xT);
    op_out_tensor(&n, g_x); /* undefined when the input needs no gradient */
    op_out_tensor(&n, g_Wt);
    op_end(&n);
  }
  mt_release(g_m);

  mt_tensor *g_W;
  {
    op_call n;
    bw_node_begin(&n, "TBackward0", l->seq_t, fw);
    op_in_tensor(&n, g_Wt);
    op_begin(&n);
    g_W = op_t(g_Wt, -1);
    op_out_tensor(&n, g_W);
    op_end(&n);
  }
  mt_release(g_Wt);
  accumulate_grad(fw, grad_W, g_W);
  mt_release(g_W);
  return g_x;
}

/* The backward pass of one training step; runs on the worker's backward thread. Releases
 * every tensor the tape saved (so they die on this thread). */
static void run_backward(tape *tp) {
  const uint64_t fw = tp->fw_tid;
  model *m = tp->m;

  mt_tensor *g_sq;
  {
    op_call n;
    bw_node_begin(&n, "SumBackward0", tp->seq_sum, fw);
    op_in_tensor(&n, tp->grad_loss);
    op_begin(&n);
    const int64_t shape[2] = {BATCH, OUT};
    g_sq = op_expand(tp->grad_loss, 2, shape); /* stride-0 view of the scalar */
    op_out_tensor(&n, g_sq);
    op_end(&n);
  }

  mt_tensor *g_self, *g_other;
  {
    op_call n;
    bw_node_begin(&n, "MulBackward0", tp->seq_mul, fw);
    op_in_tensor(&n, g_sq);
    op_begin(&n);
    g_self = op_mul(g_sq, tp->diff, -1);
    g_other = op_mul(tp->diff, g_sq, -1);
    op_out_tensor(&n, g_self);
    op_out_tensor(&n, g_other);
    op_end(&n);
  }
  mt_release(g_sq);
  /* Both gradients flow into diff: the engine accumulates them. */
  mt_tensor *g_diff = op_add(g_self, g_other, 1, -1);
  mt_release(g_self);
  mt_release(g_other);

  mt_tensor *g_h2;
  {
    op_call n;
    bw_node_begin(&n, "SubBackward0", tp->seq_sub, fw);
    op_in_tensor(&n, g_diff);
    op_begin(&n);
    g_h2 = mt_retain(g_diff);
    op_out_tensor(&n, g_h2);
    op_out_tensor(&n, NULL); /* the target needs no gradient */
    op_end(&n);
  }
  mt_release(g_diff);

  mt_tensor *g_a1 = linear_backward(fw, &tp->l2, g_h2, m->gW2, m->gb2, true);
  mt_release(g_h2);

  mt_tensor *g_h1;
  {
    op_call n;
    bw_node_begin(&n, "ReluBackward0", tp->seq_relu, fw);
    op_in_tensor(&n, g_a1);
    op_begin(&n);
    g_h1 = op_threshold_backward(g_a1, tp->a1, 0);
    op_out_tensor(&n, g_h1);
    op_end(&n);
  }
  mt_release(g_a1);

  mt_tensor *g_x = linear_backward(fw, &tp->l1, g_h1, m->gW1, m->gb1, false);
  mt_release(g_x);
  mt_release(g_h1);

  /* Saved tensors are freed once the graph has run. */
  mt_release(tp->grad_loss);
  mt_release(tp->diff);
  mt_release(tp->a1);
  mt_release(tp->l1.x);
  mt_release(tp->l1.Wt);
  mt_release(tp->l2.x);
  mt_release(tp->l2.Wt);
  tp->grad_loss = tp->diff = tp->a1 = tp->l1.x = tp->l1.Wt = tp->l2.x = tp->l2.Wt = NULL;
}

static void *bw_main(void *arg) {
  bw_engine *e = arg;
  etr_thread_set_name("autograd backward"); /* its thread node's thread_name */
  for (;;) {
    check_pthread(pthread_mutex_lock(&e->lock), "pthread_mutex_lock");
    while (e->pending == NULL && !e->quit) {
      check_pthread(pthread_cond_wait(&e->cond, &e->lock), "pthread_cond_wait");
    }
    tape *tp = e->pending;
    e->pending = NULL;
    check_pthread(pthread_mutex_unlock(&e->lock), "pthread_mutex_unlock");
    if (tp == NULL) break; /* quit */
    run_backward(tp);
    check_pthread(pthread_mutex_lock(&e->lock), "pthread_mutex_lock");
    e->done = true;
    check_pthread(pthread_cond_broadcast(&e->cond), "pthread_cond_broadcast");
    check_pthread(pthread_mutex_unlock(&e->lock), "pthread_mutex_unlock");
  }
  return NULL;
}

/* Hand the tape to the backward thread and wait until it has run. */
static void bw_run(bw_engine *e, tape *tp) {
  check_pthread(pthread_mutex_lock(&e->lock), "pthread_mutex_lock");
  e->pending = tp;
  e->done = false;
  check_pthread(pthread_cond_broadcast(&e->cond), "pthread_cond_broadcast");
  while (!e->done) check_pthread(pthread_cond_wait(&e->cond, &e->lock), "pthread_cond_wait");
  check_pthread(pthread_mutex_unlock(&e->lock), "pthread_mutex_unlock");
}

static const char *const SCHEMA_ALLREDUCE =
    "c10d::allreduce_(Tensor[] tensors, __torch__.torch.classes.c10d.ProcessGroup "
    "process_group, __torch__.torch.classes.c10d.ReduceOp reduce_op, Tensor? sparse_indices, "
    "int timeout) -> (Tensor[], __torch__.torch.classes.c10d.Work)";
static const char *const SCHEMA_ALLTOALL =
    "c10d::alltoall_base_(Tensor output, Tensor input, __torch__.torch.classes.c10d.ProcessGroup "
    "process_group, int[] output_split_sizes, int[] input_split_sizes, int timeout) -> "
    "__torch__.torch.classes.c10d.Work";

/* The inputs PyTorch's record_param_comms carries. */
static void comms_inputs(op_call *op, worker *w, const mt_tensor *t, const char *coll,
                         const int64_t *in_splits, const int64_t *out_splits, uint32_t n_splits) {
  if (!op->active) return;
  op_in(op, op_tensor_list(op, t));
  op_in(op, etr_value_int(w->coll_seq));
  etr_value *pg = op_items(op, 2);
  pg[0] = etr_value_string("0");
  pg[1] = etr_value_string("default_pg");
  op_in(op, etr_value_tuple(pg, 2));
  op_in(op, etr_value_int(w->rank));
  op_in(op, etr_value_string(coll));
  op_in(op, n_splits ? op_int_list(op, in_splits, n_splits) : etr_value_list(NULL, 0));
  op_in(op, n_splits ? op_int_list(op, out_splits, n_splits) : etr_value_list(NULL, 0));
  op_in(op, etr_value_int(0));
  op_in(op, etr_value_int(1));
  op_in(op, etr_value_int(w->n_ranks));
}

static void fill_pg_info(etr_collective_info *ci, worker *w) {
  ci->global_rank_start = 0;
  ci->global_rank_stride = 1;
  ci->pg_name = "0";
  ci->pg_desc = "default_pg";
  ci->pg_size = (uint64_t)w->n_ranks;
}

/* Sum the gradient bucket over all workers (DDP launches it asynchronously). */
static void op_allreduce(worker *w, mt_tensor *t) {
  op_call op;
  op_init(&op, "c10d::allreduce_", ETR_SCOPE_FUNCTION, SCHEMA_ALLREDUCE, -1, 0);
  if (op.active) {
    op_in(&op, op_tensor_list(&op, t));
    op_in(&op, etr_value_object("Object")); /* process group */
    op_in(&op, etr_value_object("Object")); /* reduce op */
    op_in(&op, etr_value_none());
    op_in(&op, etr_value_int(-1));
  }
  op_begin(&op);
  {
    op_call rc;
    etr_collective_info ci = ETR_COLLECTIVE_INFO_INIT;
    ci.name = "allreduce";
    ci.dtype = "Float";
    ci.in_msg_nelems = (uint64_t)t->numel;
    ci.out_msg_nelems = (uint64_t)t->numel;
    ci.is_async = true;
    fill_pg_info(&ci, w);
    op_init(&rc, "record_param_comms", ETR_SCOPE_FUNCTION, "", -1, 0);
    if (rc.active) rc.rec.collective = &ci;
    comms_inputs(&rc, w, t, "allreduce", NULL, NULL, 0);
    op_begin(&rc);
    pg_allreduce(w->pg, w->rank, mt_data(t) + t->offset, t->numel);
    if (rc.active) op_out(&rc, op_tensor_list(&rc, t));
    op_end(&rc);
  }
  w->coll_seq++;
  if (op.active) {
    op_out(&op, op_tensor_list(&op, t));
    op_out(&op, etr_value_object("Object")); /* work */
  }
  op_end(&op);
}

/* Every rank sends `per_rank` floats to every rank (split sizes all per_rank). */
static void op_alltoall(worker *w, mt_tensor *out, mt_tensor *in, int64_t per_rank) {
  int64_t splits[64];
  for (int r = 0; r < w->n_ranks; r++) splits[r] = per_rank;
  op_call op;
  op_init(&op, "c10d::alltoall_base_", ETR_SCOPE_FUNCTION, SCHEMA_ALLTOALL, -1, 0);
  op_in_tensor(&op, out);
  op_in_tensor(&op, in);
  op_in(&op, etr_value_object("Object"));
  op_in_int_list(&op, splits, (uint32_t)w->n_ranks);
  op_in_int_list(&op, splits, (uint32_t)w->n_ranks);
  op_in(&op, etr_value_int(-1));
  op_begin(&op);
  {
    op_call rc;
    etr_collective_info ci = ETR_COLLECTIVE_INFO_INIT;
    ci.name = "all_to_allv";
    ci.dtype = "Float";
    ci.in_msg_nelems = (uint64_t)in->numel;
    ci.out_msg_nelems = (uint64_t)out->numel;
    ci.in_split_sizes = splits;
    ci.n_in_splits = (uint32_t)w->n_ranks;
    ci.out_split_sizes = splits;
    ci.n_out_splits = (uint32_t)w->n_ranks;
    ci.is_async = false;
    fill_pg_info(&ci, w);
    op_init(&rc, "record_param_comms", ETR_SCOPE_FUNCTION, "", -1, 0);
    if (rc.active) rc.rec.collective = &ci;
    comms_inputs(&rc, w, in, "all_to_allv", splits, splits, (uint32_t)w->n_ranks);
    op_begin(&rc);
    pg_alltoall(w->pg, w->rank, mt_data(in) + in->offset, mt_data(out) + out->offset, per_rank);
    if (rc.active) op_out(&rc, op_tensor_list(&rc, out));
    op_end(&rc);
  }
  w->coll_seq++;
  op_out(&op, etr_value_object("Object"));
  op_end(&op);
}

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
    atomic_fetch_add_explicit(&g_records_active, 1, memory_order_relaxed);
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
  int failures = 0;
  printf("minitensor: %" PRId64 " tensors (%" PRId64 " at a reused address), %" PRId64
         " storages (%" PRId64 " at a reused address), %llu ops observed\n",
         g_pool.tensor_allocs, g_pool.tensor_reuses, g_pool.storage_allocs, g_pool.storage_reuses,
         (unsigned long long)atomic_load(&g_records_active));
  if (g_pool.live_tensors != 0 || g_pool.live_storages != 0) {
    fprintf(stderr, PROG ": leak: %" PRId64 " tensors and %" PRId64 " storages still alive\n",
            g_pool.live_tensors, g_pool.live_storages);
    failures++;
  }
  if (g_pool.tensor_reuses == 0 || g_pool.storage_reuses == 0) {
    fprintf(stderr, PROG ": no address was reused (the free lists did not work)\n");
    failures++;
  }
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
    unsigned long long observed = atomic_load(&g_records_active);
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
