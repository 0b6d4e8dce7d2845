/* etr/record.h — what a runtime says about one operator call, and the begin/end pair.
 *
 * A record lives on the caller's stack and needs no free. The life cycle:
 *
 *   etr_record rec;
 *   etr_record_init(&rec, "aten::mm", ETR_SCOPE_FUNCTION);   // one relaxed load when off
 *   if (etr_record_is_active(&rec)) {                        // someone observes this op
 *     rec.schema = "aten::mm(Tensor self, Tensor mat2) -> Tensor";
 *     if (etr_record_needs_inputs(&rec)) { rec.inputs = in; rec.n_inputs = 2; }
 *   }
 *   etr_record_begin(&rec);
 *   ... run the operator ...
 *   if (etr_record_needs_outputs(&rec)) { rec.outputs = out; rec.n_outputs = 1; }
 *   etr_record_end(&rec);
 *
 * While no observer is enabled, init is a relaxed atomic load and two stores, and begin/end
 * are one predictable branch each: nothing allocates, locks or calls out. The record's
 * fields (name and scope included) are filled in by init only when the record is active;
 * set the others after init, and read none of them on an inactive record. Values pointed to by the
 * record must stay valid until the call that reads them returns: inputs and kernel/collective info
 * until etr_record_begin, outputs until etr_record_end (etr copies what it keeps).
 *
 * Threads: a record belongs to the thread that initialised it; begin and end must be called
 * on that thread. Records made inside an observer callback are not observed (no recursion).
 * Defining ETR_DISABLE before including etr.h compiles all of this to nothing.
 */
#ifndef ETR_RECORD_H
#define ETR_RECORD_H

#include <stdbool.h>
#include <stdint.h>

#include "etr/common.h"
#include "etr/value.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where an operator call comes from (written as the "scope" attr). Values are PyTorch's. */
typedef enum etr_scope {
  ETR_SCOPE_FUNCTION = 0,
  ETR_SCOPE_BACKWARD_FUNCTION = 1,
  ETR_SCOPE_TORCHSCRIPT_FUNCTION = 2,
  ETR_SCOPE_KERNEL_FUNCTION_DTYPE = 3,
  ETR_SCOPE_CUSTOM_CLASS = 4,
  ETR_SCOPE_BUILD_FEATURE = 5,
  ETR_SCOPE_LITE_INTERPRETER = 6,
  ETR_SCOPE_USER_SCOPE = 7,
  ETR_SCOPE_STATIC_RUNTIME_OP = 8,
  ETR_SCOPE_STATIC_RUNTIME_MODEL = 9
} etr_scope;
#define ETR_SCOPE_COUNT 10

/* Kernel launch details (attrs kernel_backend, kernel_file, and when set kernel_grid,
 * kernel_stream). Start from ETR_KERNEL_INFO_INIT. */
typedef struct etr_kernel_info {
  const char *backend; /* "triton", "cuda", ...; NULL = "" */
  const char *file;    /* kernel source or binary; NULL = "" */
  uint32_t grid[3];    /* all zero = not written */
  int64_t stream;      /* < 0 = not written */
} etr_kernel_info;
#define ETR_KERNEL_INFO_INIT \
  { NULL, NULL, {0, 0, 0}, -1 }

/* Collective communication details (the attrs of docs/FORMAT.md). Start from
 * ETR_COLLECTIVE_INFO_INIT. Split sizes are written as "[a, b]". */
typedef struct etr_collective_info {
  const char *name;  /* collective_name: "allreduce", "all_gather", ... */
  const char *dtype; /* "Float", ... */
  uint64_t in_msg_nelems;
  uint64_t out_msg_nelems;
  const int64_t *in_split_sizes;
  uint32_t n_in_splits;
  const int64_t *out_split_sizes;
  uint32_t n_out_splits;
  int64_t global_rank_start;  /* written when >= 0 */
  int64_t global_rank_stride; /* written when > 0 */
  const char *pg_name;
  const char *pg_desc;
  uint64_t pg_size;
  bool is_async; /* is_asynchronized_op: 1 or 0 */
} etr_collective_info;
#define ETR_COLLECTIVE_INFO_INIT \
  { NULL, NULL, 0, 0, NULL, 0, NULL, 0, -1, 0, NULL, NULL, 0, false }

/* What observers ask the runtime to fill in (etr_observer_options.needs). */
typedef enum etr_needs {
  ETR_NEEDS_INPUTS = 1u << 0,
  ETR_NEEDS_OUTPUTS = 1u << 1,
  ETR_NEEDS_IDS = 1u << 2,
  ETR_NEEDS_TRACEBACK = 1u << 3
} etr_needs;

typedef struct etr_record {
  /* Set by the runtime. */
  const char *name; /* NUL-terminated; NULL is written as "" */
  uint32_t scope;   /* etr_scope */
  uint32_t n_inputs;
  int64_t seq_nr;     /* sequence number linking forward and backward; -1 = none */
  uint64_t fw_tid;    /* etr_thread_id() of the forward thread this op runs for; 0 */
  const char *schema; /* operator schema string; NULL = "" */
  const etr_value *inputs;
  const etr_value *outputs;
  uint32_t n_outputs;
  uint32_t _needs;                       /* private: union of the active observers' needs */
  const etr_kernel_info *kernel;         /* NULL = none */
  const etr_collective_info *collective; /* NULL = none */
  /* Private to etr. */
  uint64_t _active; /* bit i: observer slot i entered */
  uint64_t _epoch;  /* registry epoch when the record was prepared */
  uint64_t _rf_id;  /* unique record handle (the "rf_id" attr) */
  uint32_t _state;  /* 0 unobserved, 1 prepared, 2 begun, 3 ended, 4 ended failed */
  uint32_t _tid;    /* logical id of the owning thread */
  uint32_t _size;   /* sizeof(etr_record) the runtime was built with (set by etr_record_init
                       when the record is observed): fields added later are read only when
                       it covers them */
} etr_record;

/* Nonzero while at least one observer is enabled somewhere (or, under ETR_TRACE_FORKS, in a
 * forked child until its first record opens its trace). Read it only through the inline
 * functions below. */
extern ETR_API uint32_t etr__observing;
/* Nonzero while an execution trace tracks object ids. */
extern ETR_API uint32_t etr__tracking_ids;

ETR_API void etr__record_prepare(etr_record *rec, const char *name, etr_scope scope);
ETR_API void etr__record_begin(etr_record *rec);
ETR_API void etr__record_end(etr_record *rec);
ETR_API void etr__record_end_failed(etr_record *rec);
ETR_API void etr__tensor_died(const void *impl);
ETR_API void etr__storage_died(const void *storage);

/* Start a record. name must stay valid until etr_record_begin returns. Any thread; never
 * allocates or locks while nothing is enabled. */
static inline ETR__ALWAYS_INLINE void etr_record_init(etr_record *rec, const char *name,
                                                      etr_scope scope) {
  /* (A NULL record is ignored by init, begin and end; for the usual &local the check folds.) */
  if (ETR__UNLIKELY(!rec)) return;
  rec->_active = 0;
  rec->_state = 0;
#ifndef ETR_DISABLE
  if (ETR__UNLIKELY(ETR__LOAD_RELAXED(&etr__observing) != 0)) {
    rec->_size = sizeof *rec; /* (no cast: C++ hosts build with -Wold-style-cast) */
    etr__record_prepare(rec, name, scope);
  }
#else
  (void)name;
  (void)scope;
#endif
}

/* True when some observer will see this record: only then is it worth filling it in. */
static inline bool etr_record_is_active(const etr_record *rec) { return rec && rec->_active != 0; }

static inline bool etr_record_needs_inputs(const etr_record *rec) {
  return rec && rec->_active != 0 && (rec->_needs & ETR_NEEDS_INPUTS) != 0;
}
static inline bool etr_record_needs_outputs(const etr_record *rec) {
  return rec && rec->_active != 0 && (rec->_needs & ETR_NEEDS_OUTPUTS) != 0;
}

/* The operator starts: observers' enter callbacks run here. */
static inline ETR__ALWAYS_INLINE void etr_record_begin(etr_record *rec) {
#ifndef ETR_DISABLE
  if (ETR__UNLIKELY(rec && rec->_state != 0)) etr__record_begin(rec);
#else
  (void)rec;
#endif
}

/* The operator ended: exit callbacks run here, for every observer whose enter ran, even if
 * it was disabled since. On an observed record, an end without a begin, or a second end, is
 * counted (etr_registry_stats.ends_without_begin) and ignored; on a record nobody observed,
 * end costs one branch and counts nothing. */
static inline ETR__ALWAYS_INLINE void etr_record_end(etr_record *rec) {
#ifndef ETR_DISABLE
  if (ETR__UNLIKELY(rec && rec->_state != 0)) etr__record_end(rec);
#else
  (void)rec;
#endif
}

/* The operator did not complete: an exception (or an error path) left it. Ends the record as
 * etr_record_end does, and the op is written marked failed (attr "etr_failed"); outputs are
 * not read. etr/etr.hpp's guard calls it when an exception unwinds through it. */
static inline void etr_record_end_failed(etr_record *rec) {
#ifndef ETR_DISABLE
  if (ETR__UNLIKELY(rec && rec->_state != 0)) etr__record_end_failed(rec);
#else
  (void)rec;
#endif
}

/* For observers, in their exit callback: the record was ended by etr_record_end_failed. */
static inline bool etr_record_failed(const etr_record *rec) { return rec && rec->_state == 4; }

/* Give an observed record the runtime's own handle as its rf_id attr, in place of etr's
 * unique number: a runtime whose other tools name ops by their handle (PyTorch's
 * RecordFunction::handle(), which Kineto writes as "Record function id") passes it, so
 * that their traces link to this one. Between etr_record_init and etr_record_begin; 0
 * keeps etr's number. Records of the same trace made without it keep etr's numbers, which
 * may equal a runtime handle. */
static inline void etr_record_set_rf_id(etr_record *rec, uint64_t id) {
  if (rec && rec->_state == 1 && id) rec->_rf_id = id;
}

/* The record's unique handle (0 when not observed). For observers. */
static inline uint64_t etr_record_handle(const etr_record *rec) {
  return rec && rec->_state != 0 ? rec->_rf_id : 0;
}

/* The calling thread's small logical id (1, 2, ... in order of first use). Put it in the
 * fw_tid of records run on another thread on this thread's behalf. Any thread; cheap after
 * the first call on a thread. */
ETR_API uint64_t etr_thread_id(void);

/* Name the calling thread in traces: its thread node gets the attr "thread_name" (besides
 * "os_tid", the kernel's thread id, which every thread node carries). Without a name, the
 * thread's OS name (pthread_setname_np, prctl) is used. Call it before the thread's first
 * recorded op: the thread node is written then. NULL or "" clears it; a name is cut at 63
 * bytes. 0, or ETR_ESTATE during thread exit. The calling thread only; no lock. */
ETR_API int etr_thread_set_name(const char *name);

/* Tell etr a tensor object (identified by its impl pointer) died, so that a new tensor at
 * the same address gets a new id. Any thread; one relaxed load while no trace is open. */
static inline void etr_tensor_died(const void *impl) {
#ifndef ETR_DISABLE
  if (ETR__UNLIKELY(ETR__LOAD_RELAXED(&etr__tracking_ids) != 0)) etr__tensor_died(impl);
#else
  (void)impl;
#endif
}

/* Same for a storage object. */
static inline void etr_storage_died(const void *storage) {
#ifndef ETR_DISABLE
  if (ETR__UNLIKELY(ETR__LOAD_RELAXED(&etr__tracking_ids) != 0)) etr__storage_died(storage);
#else
  (void)storage;
#endif
}

#ifdef __cplusplus
}
#endif

#endif /* ETR_RECORD_H */
