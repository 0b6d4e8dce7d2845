/* bench/bench_lttng.c — etr-bench-lttng: what an LTTng-UST tracepoint costs for the op that
 * etr-bench records (a name and schema, two input tensors at begin, one output tensor at
 * end), recorded by a live LTTng session, so docs/BENCHMARKS.md can set etr beside it.
 *
 * The program creates its own session (lttng create / enable-channel / enable-event / start,
 * through the `lttng` command), starting lttng-sessiond first when none runs (then it
 * re-executes itself, because an application registers with the session daemon when
 * liblttng-ust loads, and stops that daemon at the end; --quick never starts one). Figures, each
 * the median over --reps repetitions of --ops ops: lttng_ns          wall time per op on the
 * recording thread (begin + end tracepoints) lttng_rec_cpu_ns  the recording thread's own CPU time
 * per op lttng_discarded   events the session discarded (its buffers full: discard mode) The
 * consumer daemon that writes the buffers out runs in another process: its CPU time is not in these
 * figures. The last line of output is one JSON object (null figures when LTTng cannot be used here:
 * no lttng command, no session daemon, the session failed). Never fails a build: exit 0 unless the
 * command line is wrong.
 */
#define _GNU_SOURCE

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

struct bench_tensor {
  const void *impl, *storage;
  int64_t offset, numel;
  uint32_t itemsize;
  const char *dtype, *device;
  const int64_t *sizes, *strides;
};

#define LTTNG_UST_TRACEPOINT_DEFINE
#define LTTNG_UST_TRACEPOINT_CREATE_PROBES
#include "bench_lttng_tp.h"

#define POOL 64
#define MAX_REPS 101

static const int64_t SIZES[2] = {64, 128};
static const int64_t STRIDES[2] = {128, 1};
static unsigned char g_impl[POOL][64], g_storage[POOL][64];
static struct bench_tensor g_pool[POOL];

static uint64_t clock_ns(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Runs an lttng command quietly; its exit status, or -1. With out != NULL, the command's
 * output (stdout and stderr) is kept there. */
static int lttng_cmd(char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int lttng_cmd(char *out, size_t cap, const char *fmt, ...) {
  char cmd[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  char full[1100];
  snprintf(full, sizeof full, "lttng %s 2>&1", cmd);
  FILE *f = popen(full, "r");
  if (!f) return -1;
  size_t n = 0;
  char buf[512];
  while (fgets(buf, sizeof buf, f)) {
    if (out && n + strlen(buf) < cap) {
      memcpy(out + n, buf, strlen(buf));
      n += strlen(buf);
    }
  }
  if (out) out[n] = '\0';
  int st = pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void print_null_json(const char *why) {
  printf("  lttng: not measured: %s\n", why);
  printf("{\"lttng_ns\": null, \"lttng_rec_cpu_ns\": null, \"lttng_discarded\": null}\n");
}

static inline void run_op(uint64_t i) {
  lttng_ust_tracepoint(etr_bench, op_begin, "aten::mm",
                       "aten::mm(Tensor self, Tensor mat2) -> Tensor", &g_pool[(i * 5) % POOL],
                       &g_pool[(i * 11 + 7) % POOL]);
  __asm__ __volatile__("" ::: "memory");
  lttng_ust_tracepoint(etr_bench, op_end, &g_pool[(i * 3 + 1) % POOL]);
}

int main(int argc, char **argv) {
  uint64_t ops = 200000;
  int reps = 11;
  bool quick = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) {
      ops = 20000;
      reps = 3;
      quick = true;
    } else if (!strcmp(argv[i], "--ops") && i + 1 < argc) {
      ops = strtoull(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = atoi(argv[++i]);
    } else {
      fprintf(stderr,
              "usage: etr-bench-lttng [--quick] [--ops N] [--reps R]\n"
              "LTTng-UST tracepoint cost for etr-bench's op, recorded by a live session.\n");
      return strcmp(argv[i], "--help") && strcmp(argv[i], "-h") ? 2 : 0;
    }
  }
  if (ops == 0) ops = 1;
  if (reps < 1) reps = 1;
  if (reps > MAX_REPS) reps = MAX_REPS;
  for (int k = 0; k < POOL; k++)
    g_pool[k] = (struct bench_tensor){
        g_impl[k], g_storage[k], 0, SIZES[0] * SIZES[1], 4, "float", "cpu", SIZES, STRIDES};

  if (lttng_cmd(NULL, 0, "version") != 0) {
    print_null_json("no lttng command (apt-get install lttng-tools)");
    return 0;
  }
  if (lttng_cmd(NULL, 0, "list") != 0) {
    /* No session daemon: start one, then run again so that this process registers with it
     * as it loads liblttng-ust. */
    if (quick) { /* the smoke run of the test suite leaves no daemon behind */
      print_null_json("no lttng-sessiond running (--quick does not start one)");
      return 0;
    }
    if (getenv("ETR_BENCH_LTTNG_STARTED") ||
        system("lttng-sessiond --daemonize >/dev/null 2>&1") != 0) {
      print_null_json("no lttng-sessiond (it could not be started)");
      return 0;
    }
    setenv("ETR_BENCH_LTTNG_STARTED", "1", 1);
    fflush(stdout);
    execv("/proc/self/exe", argv);
    print_null_json("could not re-execute after starting lttng-sessiond");
    return 0;
  }

  char dir[] = "/tmp/etr-bench-lttng-XXXXXX";
  if (!mkdtemp(dir)) {
    print_null_json("no temporary directory");
    return 0;
  }
  char sess[64];
  snprintf(sess, sizeof sess, "etr-bench-%d", (int)getpid());
  char out[4096];
  int ok =
      lttng_cmd(out, sizeof out, "create %s --output=%s", sess, dir) == 0 &&
      lttng_cmd(out, sizeof out,
                "enable-channel --userspace --session=%s ch --subbuf-size=4M "
                "--num-subbuf=8",
                sess) == 0 &&
      lttng_cmd(out, sizeof out, "enable-event --userspace --session=%s --channel=ch 'etr_bench:*'",
                sess) == 0 &&
      lttng_cmd(out, sizeof out, "start %s", sess) == 0;
  /* The daemon tells this process which tracepoints are on; wait until it has (5 s). */
  for (int w = 0; ok && w < 5000 && !lttng_ust_tracepoint_enabled(etr_bench, op_begin); w++)
    usleep(1000);
  double wall[MAX_REPS], cpu[MAX_REPS];
  if (ok && lttng_ust_tracepoint_enabled(etr_bench, op_begin)) {
    for (uint64_t i = 0; i < ops / 10 + 1; i++) run_op(i); /* warm-up */
    for (int r = 0; r < reps; r++) {
      uint64_t w0 = clock_ns(CLOCK_MONOTONIC), c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
      for (uint64_t i = 0; i < ops; i++) run_op(i);
      wall[r] = (double)(clock_ns(CLOCK_MONOTONIC) - w0) / (double)ops;
      cpu[r] = (double)(clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0) / (double)ops;
    }
  } else if (ok) {
    ok = 0;
    snprintf(out, sizeof out, "the session never enabled the tracepoints (not registered)");
  }
  char stop_out[4096] = "";
  lttng_cmd(stop_out, sizeof stop_out, "stop %s", sess);
  lttng_cmd(NULL, 0, "destroy %s", sess);
  char rm[128];
  snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
  if (system(rm) != 0) fprintf(stderr, "etr-bench-lttng: could not remove %s\n", dir);
  /* A daemon this program started goes away with it. */
  if (getenv("ETR_BENCH_LTTNG_STARTED") &&
      system("pkill -x lttng-sessiond >/dev/null 2>&1; true") != 0)
    fprintf(stderr, "etr-bench-lttng: could not stop lttng-sessiond\n");
  if (!ok) {
    char *nl = strchr(out, '\n');
    if (nl) *nl = '\0';
    print_null_json(out[0] ? out : "lttng session setup failed");
    return 0;
  }
  /* `lttng stop` warns "N events were discarded" when the buffers overflowed. */
  long long discarded = 0;
  const char *d = strstr(stop_out, "were discarded");
  if (d) {
    const char *p = d;
    while (p > stop_out && p[-1] == ' ') p--;
    while (p > stop_out && p[-1] >= '0' && p[-1] <= '9') p--;
    discarded = atoll(p);
  }
  double w = median(wall, reps), c = median(cpu, reps);
  printf("  lttng_ns          %10.2f  ns/op: begin + end tracepoints, live session\n", w);
  printf("  lttng_rec_cpu_ns  %10.2f  ns/op of the recording thread's CPU\n", c);
  printf("  lttng_discarded   %10lld  events discarded by the session (buffers full)\n", discarded);
  printf("{\"lttng_ns\": %.3f, \"lttng_rec_cpu_ns\": %.3f, \"lttng_discarded\": %lld}\n", w, c,
         discarded);
  return 0;
}
