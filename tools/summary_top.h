/* etr summary's largest tensors (summary_top.c): the N largest seen, a tensor identified by
 * its id and storage id and counting at the largest size it is seen with (PyTorch reuses
 * ids). A min-heap on (bytes, id, storage) with a hash index from (id, storage) to the heap
 * position, so that a sighting costs O(log N), not N.
 */
#ifndef ETR_TOOLS_SUMMARY_TOP_H
#define ETR_TOOLS_SUMMARY_TOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sum_tens {
  uint64_t bytes;
  int64_t id, storage, offset, numel, itemsize;
  int64_t node;
  char dtype[32], device[24], op[64]; /* cut to fit; they may hold NULs ("\u0000") */
  uint8_t dtype_len, device_len, op_len;
  uint32_t slot; /* its slot in the index while in the heap */
} sum_tens;

typedef struct sum_top {
  sum_tens *heap;
  size_t n, max;
  uint32_t *ix;   /* (id, storage) -> position in heap; SUM_TOP_EMPTY, or the position */
  size_t ix_mask; /* slots - 1: a power of two, at least twice max */
} sum_top;

#define SUM_TOP_EMPTY UINT32_MAX

/* Room for the max largest; false when memory ran out. */
bool sum_top_init(sum_top *t, size_t max);
void sum_top_free(sum_top *t);

/* Whether a sighting of (bytes, id, storage) of x enters the N largest, or grows the entry
 * of its tensor there: only then is the rest of it worth filling in. */
bool sum_top_wants(const sum_top *t, const sum_tens *x);

/* Puts x, for which sum_top_wants said yes, in its place. */
void sum_top_put(sum_top *t, const sum_tens *x);

/* The entries, largest first (the heap is spent: nothing may be put after). */
void sum_top_sort(sum_top *t);

#endif
