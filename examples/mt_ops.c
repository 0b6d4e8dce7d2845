/* mt_ops.c — the operators of the example runtime (see mt_ops.h): each computes on real
 * floats and is recorded with its PyTorch schema, typed inputs and outputs. */
#define _POSIX_C_SOURCE 200809L

#include "mt_ops.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

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

mt_tensor *op_empty(int32_t ndim, const int64_t *sizes) {
  return op_factory("aten::empty", SCHEMA_EMPTY, ndim, sizes);
}

mt_tensor *op_zeros(int32_t ndim, const int64_t *sizes) {
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

void op_zero_(mt_tensor *t) {
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

void op_uniform_(mt_tensor *t, double from, double to, uint32_t *rng) {
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

mt_tensor *op_view(mt_tensor *self, int32_t ndim, const int64_t *size, int64_t seq) {
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

mt_tensor *op_t(mt_tensor *self, int64_t seq) {
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

mt_tensor *op_slice(mt_tensor *self, int64_t dim, int64_t start, int64_t end, int64_t step) {
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

mt_tensor *op_expand(mt_tensor *self, int32_t ndim, const int64_t *size) {
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

mt_tensor *op_mm(mt_tensor *a, mt_tensor *b, int64_t seq) {
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

mt_tensor *op_add(mt_tensor *a, mt_tensor *b, int64_t alpha, int64_t seq) {
  return op_add_like("aten::add",
                     "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", a,
                     b, alpha, seq, false);
}

mt_tensor *op_sub(mt_tensor *a, mt_tensor *b, int64_t alpha, int64_t seq) {
  return op_add_like("aten::sub",
                     "aten::sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", a,
                     b, alpha, seq, true);
}

void op_add_(mt_tensor *self, mt_tensor *other, int64_t alpha) {
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

mt_tensor *op_mul(mt_tensor *a, mt_tensor *b, int64_t seq) {
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

mt_tensor *op_relu(mt_tensor *a, int64_t seq) {
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

mt_tensor *op_threshold_backward(mt_tensor *grad, mt_tensor *self, int64_t threshold) {
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
mt_tensor *op_sum(mt_tensor *a, int64_t seq) {
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
mt_tensor *op_sum_dim0(mt_tensor *a) {
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

double op_item(mt_tensor *a) {
  op_call op;
  op_init(&op, "aten::item", ETR_SCOPE_FUNCTION, "aten::item(Tensor self) -> Scalar", -1, 0);
  op_in_tensor(&op, a);
  op_begin(&op);
  double v = (double)mt_get(a, 0);
  op_out(&op, etr_value_double(v));
  op_end(&op);
  return v;
}

mt_tensor *op_ones_like(mt_tensor *a) {
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

void op_weird(mt_tensor *a) {
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
