/* LTTng-UST tracepoint provider of etr-bench-lttng: an operator's begin (name, schema, two
 * input tensors) and end (one output tensor), the payload etr-bench records through etr.
 * A tensor is its identity (object and storage addresses), offset, element count, item
 * size, dtype and device, and 2-D sizes and strides. */
#undef LTTNG_UST_TRACEPOINT_PROVIDER
#define LTTNG_UST_TRACEPOINT_PROVIDER etr_bench

#undef LTTNG_UST_TRACEPOINT_INCLUDE
#define LTTNG_UST_TRACEPOINT_INCLUDE "./bench_lttng_tp.h"

#if !defined(ETR_BENCH_LTTNG_TP_H) || defined(LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ)
#define ETR_BENCH_LTTNG_TP_H

#include <stdint.h>

#include <lttng/tracepoint.h>

/* One tensor's fields; t is a pointer to bench_tensor (bench_lttng.c). */
#define BENCH_TENSOR_FIELDS(p, t)                                                      \
  lttng_ust_field_integer_hex(uintptr_t, p##_impl, (uintptr_t)(t)->impl)               \
      lttng_ust_field_integer_hex(uintptr_t, p##_storage, (uintptr_t)(t)->storage)     \
          lttng_ust_field_integer(int64_t, p##_offset, (t)->offset)                    \
              lttng_ust_field_integer(int64_t, p##_numel, (t)->numel)                  \
                  lttng_ust_field_integer(uint32_t, p##_itemsize, (t)->itemsize)       \
                      lttng_ust_field_string(p##_dtype, (t)->dtype)                    \
                          lttng_ust_field_string(p##_device, (t)->device)              \
                              lttng_ust_field_array(int64_t, p##_sizes, (t)->sizes, 2) \
                                  lttng_ust_field_array(int64_t, p##_strides, (t)->strides, 2)

LTTNG_UST_TRACEPOINT_EVENT(
    etr_bench, op_begin,
    LTTNG_UST_TP_ARGS(const char *, name, const char *, schema, const struct bench_tensor *, a,
                      const struct bench_tensor *, b),
    LTTNG_UST_TP_FIELDS(lttng_ust_field_string(name, name) lttng_ust_field_string(schema, schema)
                            BENCH_TENSOR_FIELDS(in0, a) BENCH_TENSOR_FIELDS(in1, b)))

LTTNG_UST_TRACEPOINT_EVENT(etr_bench, op_end, LTTNG_UST_TP_ARGS(const struct bench_tensor *, out),
                           LTTNG_UST_TP_FIELDS(BENCH_TENSOR_FIELDS(out0, out)))

#endif /* ETR_BENCH_LTTNG_TP_H */

#include <lttng/tracepoint-event.h>
