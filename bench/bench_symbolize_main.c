/* etr-bench-symbolize: the symbolization benchmark on its own (bench_symbolize.h).
 *   etr-bench-symbolize [--quick]
 * Prints one line per figure, then one JSON line with the keys symbolize_warm_ns,
 * symbolize_cold_ns, addr2line_ns, addr2line_pipe_ns (null when not measured). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench_symbolize.h"

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
      fprintf(stderr, "usage: etr-bench-symbolize [--quick]\n");
      return 2;
    }
  }
  double warm, cold, a2l, a2l_pipe;
  int rc = etr_bench_symbolize(quick, stdout, &warm, &cold, &a2l, &a2l_pipe);
  json_num("symbolize_warm_ns", warm, 1);
  json_num("symbolize_cold_ns", cold, 0);
  json_num("addr2line_ns", a2l, 0);
  json_num("addr2line_pipe_ns", a2l_pipe, 0);
  printf("}\n");
  return rc == 0 ? 0 : 1;
}
