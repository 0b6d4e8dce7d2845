/* mt_ops.h — the operators of the example runtime (aten::mm, aten::add, aten::relu, ...).
 * Each one computes on real floats and is recorded as PyTorch records it: its schema, its
 * typed inputs and outputs. A `seq` argument is the sequence number of the autograd node
 * the forward op makes (so that backward nodes can point back at it), -1 for none. Results
 * are new references (mt_release them). Any thread may call these. */
#ifndef MT_OPS_H
#define MT_OPS_H

#include <stdint.h>

#include "mt_tensor.h"

/* aten::empty / aten::zeros: the runtime's factories (the storage is zeroed either way). */
mt_tensor *op_empty(int32_t ndim, const int64_t *sizes);
mt_tensor *op_zeros(int32_t ndim, const int64_t *sizes);
/* aten::zero_: how the optimizer clears the gradient bucket. */
void op_zero_(mt_tensor *t);
/* aten::uniform_ from the caller's xorshift state: deterministic parameters and batches. */
void op_uniform_(mt_tensor *t, double from, double to, uint32_t *rng);

/* Views (their outputs share self's storage): aten::view (-1 in size: inferred), aten::t,
 * aten::slice and aten::expand (stride 0 where it broadcasts). */
mt_tensor *op_view(mt_tensor *self, int32_t ndim, const int64_t *size, int64_t seq);
mt_tensor *op_t(mt_tensor *self, int64_t seq);
mt_tensor *op_slice(mt_tensor *self, int64_t dim, int64_t start, int64_t end, int64_t step);
mt_tensor *op_expand(mt_tensor *self, int32_t ndim, const int64_t *size);

/* The arithmetic of the model and its backward pass; b broadcasts to a's shape. */
mt_tensor *op_mm(mt_tensor *a, mt_tensor *b, int64_t seq);
mt_tensor *op_add(mt_tensor *a, mt_tensor *b, int64_t alpha, int64_t seq);
mt_tensor *op_sub(mt_tensor *a, mt_tensor *b, int64_t alpha, int64_t seq);
/* aten::add_: self += alpha * other in place, as AccumulateGrad does. */
void op_add_(mt_tensor *self, mt_tensor *other, int64_t alpha);
mt_tensor *op_mul(mt_tensor *a, mt_tensor *b, int64_t seq);
mt_tensor *op_relu(mt_tensor *a, int64_t seq);
/* ReluBackward0's op: grad where self > threshold, else 0. */
mt_tensor *op_threshold_backward(mt_tensor *grad, mt_tensor *self, int64_t threshold);
/* aten::sum of every element: the loss (a 0-dim tensor). */
mt_tensor *op_sum(mt_tensor *a, int64_t seq);
/* aten::sum.dim_IntList over dim 0 of a 2-d tensor: the bias gradient. */
mt_tensor *op_sum_dim0(mt_tensor *a);
/* aten::item: the loss as a double (its output is a Double value, not a tensor). */
double op_item(mt_tensor *a);
/* aten::ones_like: the seed gradient of the backward pass. */
mt_tensor *op_ones_like(mt_tensor *a);

/* An op whose name needs escaping in JSON and whose inputs are awkward values (a tab,
 * UTF-8, an invalid byte, an embedded NUL, NaN/±inf, a nested tuple): a test of the
 * writer. Its output is `a` itself. */
void op_weird(mt_tensor *a);

#endif /* MT_OPS_H */
