/* bench/bench_args.h — etr-bench's command line: its phases, --help, and number parsing. */
#ifndef ETR_BENCH_ARGS_H
#define ETR_BENCH_ARGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* The phases --only names (bits of the set to run). */
enum {
  RUN_DISABLED = 1u << 0,
  RUN_BYTES = 1u << 1,
  RUN_ENABLED = 1u << 2,
  RUN_DEVNULL = 1u << 3,
  RUN_2T = 1u << 4,
  RUN_BASELINE = 1u << 5,
  RUN_BASELINE_2T = 1u << 6,
  RUN_PACED = 1u << 7,
  RUN_TRACEBACK = 1u << 8,
  RUN_CAPTURE = 1u << 9,
  RUN_SYMBOLIZE = 1u << 10,
  RUN_LTTNG = 1u << 11,
  RUN_BINARY = 1u << 12,
  RUN_ALL = (1u << 13) - 1
};

/* etr-bench --help. */
void bench_usage(FILE *f);
/* A decimal number with nothing after it (no sign): false when s is not one. */
bool bench_parse_u64(const char *s, uint64_t *out);
/* --only's comma-separated phase names into their bits: false for an unknown name or none. */
bool bench_parse_phases(const char *s, unsigned *out);

#endif
