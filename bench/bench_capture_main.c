/* etr-bench-capture: the native capture benchmark on its own (bench_capture.h).
 *   etr-bench-capture [--quick]
 * Prints a table, then one JSON line with the keys capture32_ns and fpwalk32_ns. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench_capture.h"

static void json_num(const char *key, double v, int first) {
  printf("%s\"%s\": ", first ? "{" : ", ", key);
  if (isnan(v))
    printf("null");
  else
    printf("%.1f", v);
}

int main(int argc, char **argv) {
  int quick = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      quick = 1;
    } else {
      fprintf(stderr, "usage: etr-bench-capture [--quick]\n");
      return 2;
    }
  }
  double cap32, fp32;
  int rc = etr_bench_capture(quick, stdout, &cap32, &fp32);
  json_num("capture32_ns", cap32, 1);
  json_num("fpwalk32_ns", fp32, 0);
  printf("}\n");
  return rc == 0 ? 0 : 1;
}
