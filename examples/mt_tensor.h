/* mt_tensor.h — the example runtime's tensors and how it records one operator call.
 *
 * Float tensors over refcounted storages; tensor and storage structs are recycled through
 * LIFO free lists so that new objects land at the addresses of dead ones (etr is told of
 * every death). op_call is an etr_record with room for the op's typed inputs and outputs;
 * every op of the runtime (mt_ops.h, mt_worker.h) is recorded through it. Also the error
 * exits that every file of the runtime uses. Any thread may call any of these. */
#ifndef MT_TENSOR_H
#define MT_TENSOR_H

#include <etr/etr.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PROG "etr-example-runtime"

/* Errors: each ends the program (exit 1) with PROG and the cause on stderr, so callers
 * need no error paths. */

/* An error the runtime cannot go on from; fmt has one %s, filled with arg. */
void fatal(const char *fmt, const char *arg);
/* A failed pthread call (rc != 0) names the call and the error. */
void check_pthread(int rc, const char *call);
/* calloc that never returns NULL. */
void *xcalloc(size_t n, size_t size);

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

/* Keeps t alive past the code that made it (saved for backward); NULL is allowed. */
mt_tensor *mt_retain(mt_tensor *t);
/* Drops a reference (NULL is allowed); the last one tells etr of the death, then recycles. */
void mt_release(mt_tensor *t);

/* The runtime's own checks at exit, after every worker has joined: prints the pool's
 * totals and the records observers saw; names a leak or free lists that reused no address
 * on stderr. Returns the number of failed checks. */
int pool_check(void);
/* Frees the structs on the free lists at exit (every tensor is dead by then). */
void pool_free_all(void);

/* Counts a record an observer saw that op_init did not count (the process-group node), so
 * that the total still matches the trace's ops_recorded. */
void note_active_record(void);
/* Records observers saw so far, to compare with the trace's ops_recorded. */
unsigned long long active_record_count(void);

/* The storage's buffer; elements are addressed through mt_index (offset and strides). */
float *mt_data(const mt_tensor *t);
/* Storage index of the element at row-major position lin of t broadcast to sizes[ndim]
 * (dims aligned on the right; missing and size-1 dims repeat): how ops read views. */
int64_t mt_index(const mt_tensor *t, const int64_t *sizes, int32_t ndim, int64_t lin);
/* Element lin of t in row-major order, whatever its strides. */
float mt_get(const mt_tensor *t, int64_t lin);

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

/* Starts describing an op (on the stack); schema, seq_nr and fw_tid reach the record only
 * when an observer sees it. */
void op_init(op_call *op, const char *name, etr_scope scope, const char *schema, int64_t seq_nr,
             uint64_t fw_tid);
/* Room for n list or tuple items that live as long as op. */
etr_value *op_items(op_call *op, uint32_t n);
/* Adds an input / an output value (only when some observer sees the op). */
void op_in(op_call *op, etr_value v);
void op_out(op_call *op, etr_value v);
/* Adds a tensor input / output (NULL = an undefined tensor). */
void op_in_tensor(op_call *op, const mt_tensor *t);
void op_out_tensor(op_call *op, const mt_tensor *t);
/* An int[] value whose items live in op, for inputs built by hand (record_param_comms). */
etr_value op_int_list(op_call *op, const int64_t *v, uint32_t n);
/* Adds an int[] input (only when some observer sees the op). */
void op_in_int_list(op_call *op, const int64_t *v, uint32_t n);
/* A Tensor[] value of one tensor, whose items live in op: how collectives take tensors. */
etr_value op_tensor_list(op_call *op, const mt_tensor *t);
/* Begins / ends the op's record: inputs go out at begin, outputs at end. */
void op_begin(op_call *op);
void op_end(op_call *op);
/* Opens a user scope (## forward ##, ProfilerStep#i, ...); close it with op_end. */
void scope_begin(op_call *op, const char *name);

/* A new contiguous tensor with its own zeroed storage (announced by minitensor::alloc). */
mt_tensor *mt_new(int32_t ndim, const int64_t *sizes);
/* A new tensor object sharing base's storage: how view ops make their outputs. */
mt_tensor *mt_view(const mt_tensor *base, int32_t ndim, const int64_t *sizes,
                   const int64_t *strides, int64_t offset);

#endif /* MT_TENSOR_H */
