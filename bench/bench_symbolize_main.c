/* etr-bench-symbolize: the symbolization benchmark on its own (bench_symbolize.h).
 *   etr-bench-symbolize [--quick]
 * Prints one line per figure, then one JSON line with the keys symbolize_warm_ns,
 * symbolize_cold_ns, addr2line_ns, addr2line_pipe_ns, tb_close_first_ms, tb_close_next_ms (null
 * when not measured). */
#include "bench_main.h"
#include "bench_symbolize.h"

int main(int argc, char **argv) {
  int quick;
  if (bench_main_args("etr-bench-symbolize", argc, argv, &quick) != 0) return 2;
  double warm, cold, a2l, a2l_pipe;
  int rc = etr_bench_symbolize(quick, stdout, &warm, &cold, &a2l, &a2l_pipe);
  double close_first, close_next;
  if (etr_bench_tb_close(quick, stdout, &close_first, &close_next) != 0) rc = -1;
  bench_json_num("symbolize_warm_ns", warm, 1);
  bench_json_num("symbolize_cold_ns", cold, 0);
  bench_json_num("addr2line_ns", a2l, 0);
  bench_json_num("addr2line_pipe_ns", a2l_pipe, 0);
  bench_json_num("tb_close_first_ms", close_first, 0);
  bench_json_num("tb_close_next_ms", close_next, 0);
  printf("}\n");
  return rc == 0 ? 0 : 1;
}
