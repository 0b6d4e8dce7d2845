/* Symbolization benchmark (docs/BENCHMARKS.md: a warm unique address, name + file + line, <= 1 µs
 * in a library with 20k functions, >= 10x faster than addr2line on an open pipe).
 *
 * Measures, in the generated 20k-function library (tests/symbolize/lib20k.cmake; its path is
 * compiled in as ETR_SYM20K_PATH, or taken from the environment variable ETR_BENCH_SYM20K):
 *   symbolize_warm_ns  per unique address with the module's tables loaded (median of batches)
 *   symbolize_cold_ns  first address of the module in a new symbolizer (loads ELF and DWARF)
 *   addr2line_ns       one `addr2line -f -C -e lib ADDR` process per address
 *   addr2line_pipe_ns  per address on one open `addr2line -f -C -e lib` pipe (PyTorch's way)
 * Figures are medians in nanoseconds; NAN when one could not be measured (addr2line
 * missing). `quick` makes it take well under a second or two. The report (may be NULL) gets
 * one human-readable line per figure. Returns 0, or -1 when the library cannot be loaded
 * (all figures NAN). Never fails a build.
 */
#ifndef ETR_BENCH_SYMBOLIZE_H
#define ETR_BENCH_SYMBOLIZE_H

#include <stdio.h>

int etr_bench_symbolize(int quick, FILE *report, double *symbolize_warm_ns,
                        double *symbolize_cold_ns, double *addr2line_ns, double *addr2line_pipe_ns);

/* Traces with tracebacks opened, given a few ops and closed one after another (a
 * profiler's schedule), in ms per close (the writer symbolizes the stacks at close):
 *   tb_close_first_ms  the first close (loads the stack's modules' files)
 *   tb_close_next_ms   median of the next ones (the same stacks: answered from the
 *                      symbolizer the last trace handed back)
 * NAN when a trace could not be opened. */
int etr_bench_tb_close(int quick, FILE *report, double *tb_close_first_ms,
                       double *tb_close_next_ms);

#endif /* ETR_BENCH_SYMBOLIZE_H */
