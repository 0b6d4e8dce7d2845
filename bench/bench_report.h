/* bench/bench_report.h — etr-bench's statistics and output: medians with their spread,
 * the table rows and the JSON line, and the sibling benchmark programs it runs. */
#ifndef ETR_BENCH_REPORT_H
#define ETR_BENCH_REPORT_H

#include <stdbool.h>
#include <stddef.h>

#define BENCH_MAX_REPS 1001

typedef struct spread {
  double med, min, max;
} spread;

/* Median, min and max of v[0..n), 1 <= n <= BENCH_MAX_REPS. */
spread spread_of(const double *v, int n);

/* Run a sibling benchmark program (in etr-bench's own directory), pass its output through,
 * and read the numbers named in keys from its last line (a JSON object); NAN when absent. */
void run_sibling(const char *prog, bool quick, const char *const *keys, double *vals, size_t n);

/* CPUs this process may run on. */
int nproc(void);

/* A table row: median, min, max (or '-' when not measured); one value. */
void row(const char *name, spread s, const char *unit);
void row1(const char *name, double v, const char *unit);
/* A key of the JSON line: one number (null when not measured); median, _min and _max. */
void json_num(const char *name, double v);
void json_spread(const char *name, spread s);

#endif
