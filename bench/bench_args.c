/* etr-bench's command line (bench_args.h). */
#include "bench_args.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bench_report.h"

static const struct {
  const char *name;
  unsigned bit;
} PHASES[] = {{"disabled", RUN_DISABLED},
              {"bytes", RUN_BYTES},
              {"enabled", RUN_ENABLED},
              {"devnull", RUN_DEVNULL},
              {"2t", RUN_2T},
              {"baseline", RUN_BASELINE},
              {"baseline2t", RUN_BASELINE_2T},
              {"paced", RUN_PACED},
              {"traceback", RUN_TRACEBACK},
              {"capture", RUN_CAPTURE},
              {"symbolize", RUN_SYMBOLIZE},
              {"lttng", RUN_LTTNG},
              {"binary", RUN_BINARY}};

void bench_usage(FILE *f) {
  fprintf(
      f,
      "usage: etr-bench [--quick] [--ops N] [--reps N] [--only LIST] [--keep] [--interned|--heap]\n"
      "                 [--help]\n"
      "  --ops N      ops per repetition in the enabled phases (default 200000); the\n"
      "               disabled phase runs 100x as many (at least 1000000)\n"
      "  --reps N     repetitions per figure, median reported (default 11, max %d)\n"
      "  --quick      smoke run: --ops 5000 --reps 3 (a few seconds at most)\n"
      "  --only LIST  run only these phases (comma-separated; for profiling): disabled,\n"
      "               bytes, enabled, devnull, 2t, baseline, baseline2t, paced, traceback, "
      "binary,\n"
      "               capture, symbolize, lttng (the last three run etr-bench-capture,\n"
      "               etr-bench-symbolize and etr-bench-lttng from etr-bench's own\n"
      "               directory; lttng needs lttng-tools and liblttng-ust); the figures\n"
      "               of the others are printed as '-' and null\n"
      "  --interned   every phase passes the op's strings interned (etr_intern), not only\n"
      "               binary_interned (to count instructions of that path alone)\n"
      "  --heap       the same with copies of the strings on the heap (binary_heap's)\n"
      "  --keep       keep the last trace files written (trace-bytes.json, trace.json,\n"
      "               baseline.json) in the temporary directory\n"
      "Prints a table, then one JSON line with every figure. Trace files go to a\n"
      "temporary directory under $TMPDIR (default /tmp), removed unless --keep.\n",
      BENCH_MAX_REPS);
}

bool bench_parse_u64(const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || s[0] == '-') return false;
  *out = v;
  return true;
}

bool bench_parse_phases(const char *s, unsigned *out) {
  unsigned m = 0;
  while (*s) {
    size_t len = strcspn(s, ",");
    bool found = false;
    for (size_t k = 0; k < sizeof PHASES / sizeof PHASES[0]; k++) {
      if (strlen(PHASES[k].name) == len && strncmp(s, PHASES[k].name, len) == 0) {
        m |= PHASES[k].bit;
        found = true;
      }
    }
    if (!found) return false;
    s += len;
    if (*s == ',') s++;
  }
  *out = m;
  return m != 0;
}
