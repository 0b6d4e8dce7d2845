/* etr/value.h — typed values a runtime passes as operator inputs and outputs.
 *
 * Values are plain data owned by the caller: etr reads them during etr_record_begin (inputs)
 * and etr_record_end (outputs) and copies what it keeps, so they may live on the caller's
 * stack and be reused as soon as the call returns. Nothing here allocates.
 *
 * In the trace a tensor is written as [tensor_id, storage_id, offset, numel, itemsize,
 * "device"] with type "Tensor(<dtype>)", shape = sizes and strides = strides. Ids are
 * assigned by the trace observer from the object's identity pointers; tell etr when an
 * object dies (etr_tensor_died, etr_storage_died in etr/record.h) so that a new object at the
 * same address gets a new id.
 */
#ifndef ETR_VALUE_H
#define ETR_VALUE_H

#include <stdbool.h>
#include <stdint.h>

#include "etr/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum etr_value_kind {
  ETR_VALUE_NONE = 0,
  ETR_VALUE_BOOL = 1,
  ETR_VALUE_INT = 2,
  ETR_VALUE_DOUBLE = 3,
  ETR_VALUE_STRING = 4,
  ETR_VALUE_DEVICE = 5,
  ETR_VALUE_TENSOR = 6,
  ETR_VALUE_LIST = 7,
  ETR_VALUE_TUPLE = 8,
  ETR_VALUE_OBJECT = 9
} etr_value_kind;

/* A tensor as the runtime sees it. A tensor whose dtype is NULL is undefined (written as
 * [id, 0, 0, 0, 0, ""] with type "Tensor(nullptr (uninitialized))"). sizes and strides
 * point to ndim elements each; strides may be NULL (then written as contiguous strides). */
typedef struct etr_tensor {
  const void *impl;       /* object identity: same pointer, same tensor (until it dies) */
  const void *storage;    /* storage identity, NULL when the tensor has no storage */
  int64_t storage_offset; /* in elements */
  int64_t numel;
  int64_t itemsize;   /* bytes per element */
  const char *dtype;  /* "float", "double", "c10::Half", ...; NULL = undefined tensor */
  const char *device; /* "cpu", "cuda:0", ...; NULL = "" */
  int32_t ndim;       /* number of sizes/strides; at most ETR_MAX_NDIM are kept */
  const int64_t *sizes;
  const int64_t *strides;
} etr_tensor;

/* Dimensions beyond this are cut (and counted). */
#define ETR_MAX_NDIM 64

/* A copy of the NUL-terminated string s that etr owns and never changes or frees (it lasts
 * until the process ends). Pass it as a record's name or schema, or a tensor's dtype or
 * device: etr then knows the string by its address and skips comparing its bytes on every
 * call, which it must do for a string the runtime owns (whose buffer may be reused), unless
 * it is a literal of the main program (read-only data that is never unloaded). Intern
 * each distinct string once (op names, dtype and device names) and keep the pointer; the
 * same bytes always give the same pointer. NULL when s is NULL, longer than ETR_INTERN_MAX
 * bytes, or when the copies would pass 4 MiB in all or memory is exhausted: pass s itself
 * then. Any thread; not from a signal handler. */
#define ETR_INTERN_MAX 4096
ETR_API const char *etr_intern(const char *s);

/* One value. For LIST and TUPLE, items points to count values (nested values allowed). For
 * OBJECT, str is the kind name written as "<Kind>". STRING and DEVICE take a NUL-terminated
 * str, or str + len when len != 0 (then embedded NULs are allowed and escaped). */
typedef struct etr_value {
  etr_value_kind kind;
  uint32_t count; /* LIST/TUPLE: number of items; STRING/DEVICE: byte length or 0 */
  union {
    bool b;
    int64_t i;
    double d;
    const char *str;
    const etr_tensor *tensor;
    const struct etr_value *items;
  } u;
} etr_value;

/* Inline constructors; usable from C and C++. */
static inline etr_value etr_value_none(void) {
  etr_value v;
  v.kind = ETR_VALUE_NONE;
  v.count = 0;
  v.u.i = 0;
  return v;
}
static inline etr_value etr_value_bool(bool b) {
  etr_value v = etr_value_none();
  v.kind = ETR_VALUE_BOOL;
  v.u.b = b;
  return v;
}
static inline etr_value etr_value_int(int64_t i) {
  etr_value v = etr_value_none();
  v.kind = ETR_VALUE_INT;
  v.u.i = i;
  return v;
}
static inline etr_value etr_value_double(double d) {
  etr_value v = etr_value_none();
  v.kind = ETR_VALUE_DOUBLE;
  v.u.d = d;
  return v;
}
static inline etr_value etr_value_string(const char *s) {
  etr_value v = etr_value_none();
  v.kind = ETR_VALUE_STRING;
  v.u.str = s;
  return v;
}
/* A string of len bytes that may hold NUL bytes (len 0 means: NUL-terminated). */
static inline etr_value etr_value_string_n(const char *s, uint32_t len) {
  etr_value v = etr_value_string(s);
  v.count = len;
  return v;
}
static inline etr_value etr_value_device(const char *device) {
  etr_value v = etr_value_none();
  v.kind = ETR_VALUE_DEVICE;
  v.u.str = device;
  return v;
}
static inline etr_value etr_value_tensor(const etr_tensor *t) {
  etr_value v = etr_value_none();
  v.kind = ETR_VALUE_TENSOR;
  v.u.tensor = t;
  return v;
}
static inline etr_value etr_value_list(const etr_value *items, uint32_t count) {
  etr_value v = etr_value_none();
  v.kind = ETR_VALUE_LIST;
  v.count = count;
  v.u.items = items;
  return v;
}
static inline etr_value etr_value_tuple(const etr_value *items, uint32_t count) {
  etr_value v = etr_value_list(items, count);
  v.kind = ETR_VALUE_TUPLE;
  return v;
}
/* An opaque object of a named kind, written as the value "<Kind>" with the type "Kind"
 * (NULL or "": "<Object>", "Object"). */
static inline etr_value etr_value_object(const char *kind_name) {
  etr_value v = etr_value_none();
  v.kind = ETR_VALUE_OBJECT;
  v.u.str = kind_name;
  return v;
}

#ifdef __cplusplus
}
#endif

#endif /* ETR_VALUE_H */
