/* mt_tensor.c — tensors, storages and their free lists, and the recording of one operator
 * call, of the example runtime (see mt_tensor.h). */
#define _POSIX_C_SOURCE 200809L

#include "mt_tensor.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------- */

void fatal(const char *fmt, const char *arg) {
  fprintf(stderr, PROG ": ");
  fprintf(stderr, fmt, arg);
  fputc('\n', stderr);
  exit(1);
}

void check_pthread(int rc, const char *call) {
  if (rc == 0) return;
  fprintf(stderr, PROG ": %s failed: %s\n", call, strerror(rc));
  exit(1);
}

void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n, size);
  if (p == NULL) fatal("out of memory (%s)", "calloc");
  return p;
}

/* ---------------------------------------------------------------------------------------
 * Tensors, storages and the object pools
 * ------------------------------------------------------------------------------------- */

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

mt_tensor *mt_retain(mt_tensor *t) {
  if (t != NULL) atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
  return t;
}

void mt_release(mt_tensor *t) {
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

void pool_free_all(void) {
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

int pool_check(void) {
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
  return failures;
}

void note_active_record(void) {
  atomic_fetch_add_explicit(&g_records_active, 1, memory_order_relaxed);
}

unsigned long long active_record_count(void) { return atomic_load(&g_records_active); }

float *mt_data(const mt_tensor *t) { return t->storage->data; }

/* Storage index of the element at row-major position lin of t broadcast to sizes[ndim]
 * (dims aligned on the right; missing and size-1 dims repeat). */
int64_t mt_index(const mt_tensor *t, const int64_t *sizes, int32_t ndim, int64_t lin) {
  int64_t off = t->offset;
  for (int32_t d = ndim - 1; d >= 0; d--) {
    int64_t i = lin % sizes[d];
    lin /= sizes[d];
    int32_t td = d - (ndim - t->ndim);
    if (td >= 0 && t->sizes[td] != 1) off += i * t->strides[td];
  }
  return off;
}

float mt_get(const mt_tensor *t, int64_t lin) {
  return mt_data(t)[mt_index(t, t->sizes, t->ndim, lin)];
}

/* ---------------------------------------------------------------------------------------
 * One operator call: an etr_record plus room for its typed inputs and outputs
 * ------------------------------------------------------------------------------------- */

void op_init(op_call *op, const char *name, etr_scope scope, const char *schema, int64_t seq_nr,
             uint64_t fw_tid) {
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

etr_value *op_items(op_call *op, uint32_t n) {
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

void op_in(op_call *op, etr_value v) {
  if (!op->active) return;
  if (op->n_in >= OP_MAX_VALUES) fatal("op %s: too many inputs", op->name);
  op->in[op->n_in++] = v;
}

void op_out(op_call *op, etr_value v) {
  if (!op->active) return;
  if (op->n_out >= OP_MAX_VALUES) fatal("op %s: too many outputs", op->name);
  op->out[op->n_out++] = v;
}

void op_in_tensor(op_call *op, const mt_tensor *t) {
  if (op->active) op_in(op, op_tensor_value(op, t));
}

void op_out_tensor(op_call *op, const mt_tensor *t) {
  if (op->active) op_out(op, op_tensor_value(op, t));
}

etr_value op_int_list(op_call *op, const int64_t *v, uint32_t n) {
  etr_value *items = op_items(op, n);
  for (uint32_t i = 0; i < n; i++) items[i] = etr_value_int(v[i]);
  return etr_value_list(items, n);
}

void op_in_int_list(op_call *op, const int64_t *v, uint32_t n) {
  if (op->active) op_in(op, op_int_list(op, v, n));
}

etr_value op_tensor_list(op_call *op, const mt_tensor *t) {
  etr_value *items = op_items(op, 1);
  items[0] = op_tensor_value(op, t);
  return etr_value_list(items, 1);
}

void op_begin(op_call *op) {
  if (etr_record_needs_inputs(&op->rec)) {
    op->rec.inputs = op->in;
    op->rec.n_inputs = op->n_in;
  }
  etr_record_begin(&op->rec);
}

void op_end(op_call *op) {
  if (etr_record_needs_outputs(&op->rec)) {
    op->rec.outputs = op->out;
    op->rec.n_outputs = op->n_out;
  }
  etr_record_end(&op->rec);
}

void scope_begin(op_call *op, const char *name) {
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
mt_tensor *mt_new(int32_t ndim, const int64_t *sizes) {
  mt_tensor *t = tensor_struct_new();
  set_contiguous(t, ndim, sizes);
  t->offset = 0;
  t->storage = storage_new(t->numel);
  announce_alloc(t);
  return t;
}

/* A new tensor object sharing base's storage. */
mt_tensor *mt_view(const mt_tensor *base, int32_t ndim, const int64_t *sizes,
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
