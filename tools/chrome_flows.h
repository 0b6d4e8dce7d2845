/* etr chrome's flow arrows that wait for their fw_parent (chrome_flows.c): an untimed op
 * read before the forward op it names (PyTorch's traces are laid out so) can only be
 * linked once that op is read. Each op read looks at the flows waiting for it only.
 */
#ifndef ETR_TOOLS_CHROME_FLOWS_H
#define ETR_TOOLS_CHROME_FLOWS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib_an_util.h"

/* A flow waiting for fw_parent: the backward op's id, thread and start. The flows waiting
 * for one fw_parent are chained through their positions (prev, next), the chain's head found
 * by the fw_parent's id (ix). */
typedef struct ch_flow {
  int64_t op_id;
  uint64_t tid;
  int64_t ts;
  int64_t fw_parent;
  uint32_t prev, next; /* positions in `w` of the chain's neighbours, or CH_NO_FLOW */
} ch_flow;

/* (so at most UINT32_MAX - 1 flows wait at once: 160 GiB of them) */
#define CH_NO_FLOW UINT32_MAX

typedef struct ch_flows {
  ch_flow *w; /* in no order */
  size_t n, cap;
  an_u64map ix;    /* fw_parent -> position in w of its chain's head */
  uint32_t *found; /* ch_flows_resolve: the positions of the flows it resolves */
  size_t cap_found;
  uint64_t waited; /* flows put here */
  uint64_t visits; /* flows ch_flows_resolve looked at or moved (ETR_CHROME_STATS) */
} ch_flows;

/* Puts the flow of op op_id (on tid, laid out at ts) to wait for fw_parent; false when
 * memory ran out or too many wait. */
bool ch_flows_wait(ch_flows *f, int64_t op_id, uint64_t tid, int64_t ts, uint64_t fw_parent);

/* The flows waiting for op `id`, just read: each is handed to emit(ctx, flow) and taken out.
 * false when memory ran out. */
bool ch_flows_resolve(ch_flows *f, int64_t id, void (*emit)(void *ctx, const ch_flow *fl),
                      void *ctx);

void ch_flows_free(ch_flows *f);

#endif
