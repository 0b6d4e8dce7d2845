/* Native capture benchmark (docs/BENCHMARKS.md: traceback capture at depth 32 <= 3x a plain
 * frame-pointer walk of the same stack).
 *
 * At stack depths 8, 32 and 128 (frames of a recursion compiled with frame pointers), each
 * method stores exactly that many return addresses of the same stack, in the same run:
 *   etr       etr__unwind_capture (cached unwind rules; warm)
 *   fpwalk    a frame-pointer walk with stack bounds checks (the physical limit)
 *   glibc     backtrace() (libgcc's DWARF unwinder)
 *   libunwind unw_backtrace, from libunwind.so.8 opened with dlopen (NAN when absent)
 * plus the cost of reading dl_iterate_phdr's load/unload counters, a thread's first capture
 * (stack bounds, counters), and etr's capture at depth 32 on 2 threads at once.
 * Figures are medians over repeats, in nanoseconds per capture. `quick` keeps it under a
 * second or so. The report (may be NULL) gets a table. Returns 0 (-1 when a method stored
 * fewer frames than asked: the figures are still written). Never fails a build.
 */
#ifndef ETR_BENCH_CAPTURE_H
#define ETR_BENCH_CAPTURE_H

#include <stdio.h>

int etr_bench_capture(int quick, FILE *report, double *capture32_ns, double *fpwalk32_ns);

#endif /* ETR_BENCH_CAPTURE_H */
