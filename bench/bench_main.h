/* Shared by the small benchmark programs (etr-bench-capture, etr-bench-symbolize): their
 * command line and the JSON line that etr-bench reads from their output. */
#ifndef ETR_BENCH_MAIN_H
#define ETR_BENCH_MAIN_H

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Parses "[--quick]"; returns 1 or 0 into *quick, or 2 after printing the usage line. */
static inline int bench_main_args(const char *prog, int argc, char **argv, int *quick) {
  *quick = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      *quick = 1;
    } else {
      fprintf(stderr, "usage: %s [--quick]\n", prog);
      return 2;
    }
  }
  return 0;
}

/* One "key": value of the final JSON line (null when v is NaN); first opens the object. */
static inline void bench_json_num(const char *key, double v, int first) {
  printf("%s\"%s\": ", first ? "{" : ", ", key);
  if (isnan(v))
    printf("null");
  else
    printf("%.1f", v);
}

#endif
