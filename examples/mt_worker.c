/* mt_worker.c — the example runtime's process group and collectives, aten::linear with
 * its autograd tape, and the backward thread that runs the tape (see mt_worker.h). */
#define _POSIX_C_SOURCE 200809L

#include "mt_worker.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mt_ops.h"

/* ---------------------------------------------------------------------------------------
 * A process group of worker threads, with real collectives
 * ------------------------------------------------------------------------------------- */

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

static const char *const SCHEMA_ALLREDUCE =
    "c10d::allreduce_(Tensor[] tensors, __torch__.torch.classes.c10d.ProcessGroup "
    "process_group, __torch__.torch.classes.c10d.ReduceOp reduce_op, Tensor? sparse_indices, "
    "int timeout) -> (Tensor[], __torch__.torch.classes.c10d.Work)";
static const char *const SCHEMA_ALLTOALL =
    "c10d::alltoall_base_(Tensor output, Tensor input, __torch__.torch.classes.c10d.ProcessGroup "
    "process_group, int[] output_split_sizes, int[] input_split_sizes, int timeout) -> "
    "__torch__.torch.classes.c10d.Work";

/* The inputs PyTorch's record_param_comms carries. The tensors come as PyTorch's process
 * group passes them: a list for a collective over a list of tensors (allreduce), one Tensor
 * for one over a single tensor (all_to_allv, from alltoall_base). PARAM's et_replay builds
 * the replayed collective's buffers from this value: a list given to all_to_allv fails. */
static void comms_inputs(op_call *op, worker *w, const mt_tensor *t, bool one_tensor,
                         const char *coll, const int64_t *in_splits, const int64_t *out_splits,
                         uint32_t n_splits) {
  if (!op->active) return;
  if (one_tensor)
    op_in_tensor(op, t);
  else
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
void op_allreduce(worker *w, mt_tensor *t) {
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
    comms_inputs(&rc, w, t, false, "allreduce", NULL, NULL, 0);
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
void op_alltoall(worker *w, mt_tensor *out, mt_tensor *in, int64_t per_rank) {
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
    comms_inputs(&rc, w, in, true, "all_to_allv", splits, splits, (uint32_t)w->n_ranks);
    op_begin(&rc);
    pg_alltoall(w->pg, w->rank, mt_data(in) + in->offset, mt_data(out) + out->offset, per_rank);
    op_out_tensor(&rc, out);
    op_end(&rc);
  }
  w->coll_seq++;
  op_out(&op, etr_value_object("Object"));
  op_end(&op);
}

/* ---------------------------------------------------------------------------------------
 * aten::linear, the autograd tape and the backward thread
 * ------------------------------------------------------------------------------------- */

static const char *const SCHEMA_LINEAR =
    "aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor";

/* aten::linear = t + mm + add, each making an autograd node (its own sequence number). */
mt_tensor *op_linear(worker *w, mt_tensor *x, mt_tensor *W, mt_tensor *b, linear_saved *s) {
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

void *bw_main(void *arg) {
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
void bw_run(bw_engine *e, tape *tp) {
  check_pthread(pthread_mutex_lock(&e->lock), "pthread_mutex_lock");
  e->pending = tp;
  e->done = false;
  check_pthread(pthread_cond_broadcast(&e->cond), "pthread_cond_broadcast");
  while (!e->done) check_pthread(pthread_cond_wait(&e->cond, &e->lock), "pthread_cond_wait");
  check_pthread(pthread_mutex_unlock(&e->lock), "pthread_mutex_unlock");
}
