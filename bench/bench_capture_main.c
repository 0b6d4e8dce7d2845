/* etr-bench-capture: the native capture benchmark on its own (bench_capture.h).
 *   etr-bench-capture [--quick]
 * Prints a table, then one JSON line with the keys capture32_ns and fpwalk32_ns. */
#include "bench_main.h"
#include "bench_capture.h"

int main(int argc, char **argv) {
  int quick;
  if (bench_main_args("etr-bench-capture", argc, argv, &quick) != 0) return 2;
  double cap32, fp32;
  int rc = etr_bench_capture(quick, stdout, &cap32, &fp32);
  bench_json_num("capture32_ns", cap32, 1);
  bench_json_num("fpwalk32_ns", fp32, 0);
  printf("}\n");
  return rc == 0 ? 0 : 1;
}
