/* mt_worker.h — what a worker of the example runtime trains with, beyond the plain tensor
 * ops: its state (model, process group, sequence numbers, backward engine); the process
 * group's collectives, recorded as PyTorch records c10d ops (a record_param_comms child
 * that carries etr_collective_info); aten::linear, which fills the autograd tape; and the
 * backward thread that runs the tape as autograd nodes. The training step itself, and the
 * worker threads, are in minitensor.c. */
#ifndef MT_WORKER_H
#define MT_WORKER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "mt_ranks.h"
#include "mt_tensor.h"

/* A process group of worker threads (or of ranks, over mt_ranks' mesh). */
typedef struct mt_pg {
  int size;
  pthread_barrier_t barrier;
  const float **bufs; /* bufs[rank]: that rank's contribution while a collective runs */
  mt_mesh *mesh;      /* set when the ranks are processes (--ranks): collectives go there */
} mt_pg;

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

/* c10d::allreduce_: sums the gradient bucket over the group, as DDP does; all ranks call it. */
void op_allreduce(worker *w, mt_tensor *t);
/* c10d::alltoall_base_: every rank sends per_rank floats of in to every rank, into out. */
void op_alltoall(worker *w, mt_tensor *out, mt_tensor *in, int64_t per_rank);

/* aten::linear: x W^T + b, saving into *s what the backward pass needs. */
mt_tensor *op_linear(worker *w, mt_tensor *x, mt_tensor *W, mt_tensor *b, linear_saved *s);
/* The backward thread (arg: the worker's bw_engine, its lock and cond initialised); it
 * runs each tape bw_run hands it until quit is set. */
void *bw_main(void *arg);
/* Runs the tape's backward pass on the backward thread, as autograd does, and waits. */
void bw_run(bw_engine *e, tape *tp);

#endif /* MT_WORKER_H */
