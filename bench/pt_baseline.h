/* bench/pt_baseline.h — a PyTorch-style execution-trace observer, the honest baseline.
 *
 * It does what torch/csrc/profiler/standalone/execution_trace_observer.cpp does, in C:
 * one global recursive mutex guards the per-thread op stacks, the pointer -> id map and
 * the output FILE*; tensor ids are looked up under that mutex once per object; the node is
 * formatted and written with fprintf on the recording thread while the mutex is held. It
 * writes the same fields as etr's node (timing included) in PyTorch's layout. Where PyTorch
 * allocates (a std::string per value, a heap context per op, a std::map for ids) this one
 * uses fixed per-thread buffers and an open-addressing hash: a generous rendition, not a
 * strawman. Only what the benchmark records is formatted in full (tensors, ints, doubles,
 * bools, strings); other kinds are written as "<Kind>".
 */
#ifndef ETR_BENCH_PT_BASELINE_H
#define ETR_BENCH_PT_BASELINE_H

#include <stdint.h>

#include <etr/etr.h>

typedef struct pt_baseline pt_baseline;

/* Open path, write the header, add the observer (enabled). Returns 0 or an ETR_E... code
 * (ETR_EOPEN when the file cannot be created). */
int pt_baseline_open(const char *path, pt_baseline **out);

/* Remove the observer, write the process node and the footer, close the file, free.
 * *nodes_out (may be NULL) receives the number of nodes written. Returns 0 or an error. */
int pt_baseline_close(pt_baseline *b, uint64_t *nodes_out);

#endif /* ETR_BENCH_PT_BASELINE_H */
