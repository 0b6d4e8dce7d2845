/* Symbolization benchmark: see bench_symbolize.h. */
#define _GNU_SOURCE
#include "bench_symbolize.h"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <link.h>
#include <math.h>
#include <spawn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "etr/etr.h"
#include "unwind/symbolize_search.h"
#include "unwind/unwind.h"

#ifndef ETR_SYM20K_PATH
#define ETR_SYM20K_PATH ""
#endif

#define NFUNCS 20000
#define FUNCS_PER_CU 2500

extern char **environ;

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, size_t n) {
  if (n == 0) return NAN;
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* Shuffled function indices (a fixed seed: the same order every run). */
static void shuffle(size_t *idx, size_t n) {
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < n; i++) idx[i] = i;
  for (size_t i = n - 1; i > 0; i--) {
    size_t j = rng_next(&seed) % (i + 1);
    size_t t = idx[i];
    idx[i] = idx[j];
    idx[j] = t;
  }
}

/* ---- addr2line ---- */

/* Spawn addr2line -f -C -e lib [addr]; pipes to its stdin (when in_fd) and from its stdout. */
static pid_t spawn_addr2line(const char *lib, const char *addr, int *in_fd, int *out_fd) {
  int out[2], in[2] = {-1, -1};
  if (pipe(out) != 0) return -1;
  if (in_fd != NULL && pipe(in) != 0) {
    close(out[0]);
    close(out[1]);
    return -1;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  posix_spawn_file_actions_addclose(&fa, out[1]);
  if (in_fd != NULL) {
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_addclose(&fa, in[0]);
    posix_spawn_file_actions_addclose(&fa, in[1]);
  } else {
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", 0, 0);
  }
  char *argv[] = {"addr2line", "-f", "-C", "-e", (char *)lib, (char *)addr, NULL};
  pid_t pid;
  int rc = posix_spawnp(&pid, "addr2line", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  if (in_fd != NULL) close(in[0]);
  if (rc != 0) {
    close(out[0]);
    if (in_fd != NULL) close(in[1]);
    return -1;
  }
  *out_fd = out[0];
  if (in_fd != NULL) *in_fd = in[1];
  return pid;
}

/* Read from fd until `lines` newlines were seen (or EOF when lines == 0). Returns the count of
 * bytes, -1 on error. The answer goes to buf (cut). */
static ssize_t read_lines(int fd, int lines, char *buf, size_t cap) {
  size_t n = 0;
  int seen = 0;
  char tmp[4096];
  for (;;) {
    ssize_t r = read(fd, tmp, sizeof tmp);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) return lines == 0 ? (ssize_t)n : -1;
    for (ssize_t i = 0; i < r; i++) {
      if (n + 1 < cap) buf[n++] = tmp[i];
      if (tmp[i] == '\n') seen++;
    }
    buf[n < cap ? n : cap - 1] = '\0';
    if (lines != 0 && seen >= lines) return (ssize_t)n;
  }
}

/* One process per address: median ns over n addresses. */
static double bench_addr2line_process(const char *lib, const uint64_t *vaddr, size_t n) {
  double *t = malloc(n * sizeof *t);
  size_t k = 0;
  for (size_t i = 0; t != NULL && i < n; i++) {
    char addr[32], out[512];
    snprintf(addr, sizeof addr, "0x%" PRIx64, vaddr[i]);
    double t0 = now_ns();
    int fd;
    pid_t pid = spawn_addr2line(lib, addr, NULL, &fd);
    if (pid < 0) break;
    ssize_t r = read_lines(fd, 0, out, sizeof out);
    close(fd);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    double t1 = now_ns();
    if (r <= 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) break;
    t[k++] = t1 - t0;
  }
  double m = k == n ? median(t, k) : NAN;
  free(t);
  return m;
}

/* One open pipe: median ns per address over n addresses (after one warm-up address). */
static double bench_addr2line_pipe(const char *lib, const uint64_t *vaddr, size_t n) {
  int in, out;
  pid_t pid = spawn_addr2line(lib, NULL, &in, &out);
  if (pid < 0) return NAN;
  double *t = malloc(n * sizeof *t);
  size_t k = 0;
  for (size_t i = 0; t != NULL && i <= n; i++) {
    char addr[32], ans[512];
    int len = snprintf(addr, sizeof addr, "0x%" PRIx64 "\n", vaddr[i]);
    double t0 = now_ns();
    if (write(in, addr, (size_t)len) != len) break;
    if (read_lines(out, 2, ans, sizeof ans) <= 0) break; /* function, then file:line */
    double t1 = now_ns();
    if (i > 0) t[k++] = t1 - t0;
  }
  close(in);
  close(out);
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  double m = k == n ? median(t, k) : NAN;
  free(t);
  return m;
}

/* ---- etr's symbolizer ---- */

/* Cold: a new symbolizer, one address (the module's ELF, symbols and DWARF are loaded). */
static double bench_cold(const char *lib, const uint64_t *vaddr, size_t rounds) {
  double *t = malloc(rounds * sizeof *t);
  size_t k = 0;
  for (size_t r = 0; t != NULL && r < rounds; r++) {
    etr__symbol sym;
    double t0 = now_ns();
    etr__symbolizer *s = etr__symbolizer_new();
    int rc = s != NULL ? etr__symbolize(s, lib, NULL, 0, vaddr[r], 0, &sym) : -1;
    double t1 = now_ns();
    etr__symbolizer_free(s);
    if (rc != 0) break;
    t[k++] = t1 - t0;
  }
  double m = k == rounds ? median(t, k) : NAN;
  free(t);
  return m;
}

/* Warm: tables loaded (one address of each compile unit symbolized first), then batches of
 * addresses never seen before; ns per address, median over the batches. */
static double bench_warm(const char *lib, const uint64_t *vaddr, const size_t *order,
                         size_t batches, size_t batch, int *wrong) {
  etr__symbolizer *s = etr__symbolizer_new();
  if (s == NULL) return NAN;
  etr__symbol sym;
  for (size_t cu = 0; cu < NFUNCS / FUNCS_PER_CU; cu++)
    etr__symbolize(s, lib, NULL, 0, vaddr[cu * FUNCS_PER_CU], 0, &sym);
  double *t = malloc(batches * sizeof *t);
  size_t k = 0;
  int bad = 0;
  for (size_t b = 0; t != NULL && b < batches; b++) {
    const size_t *idx = order + b * batch;
    double t0 = now_ns();
    for (size_t i = 0; i < batch; i++)
      bad |= etr__symbolize(s, lib, NULL, 0, vaddr[idx[i]] + 1, 0, &sym); /* +1: unseen */
    double t1 = now_ns();
    t[k++] = (t1 - t0) / (double)batch;
  }
  /* Check some answers outside the timing. */
  for (size_t i = 0; i < 16 && !bad; i++) {
    char want[48];
    snprintf(want, sizeof want, "etr_sym20k_f%zu", order[i]);
    bad |= etr__symbolize(s, lib, NULL, 0, vaddr[order[i]] + 1, 0, &sym) != 0 ||
           strcmp(sym.name, want) != 0 || sym.line != (int64_t)(order[i] % FUNCS_PER_CU + 3);
  }
  *wrong = bad != 0;
  double m = k == batches ? median(t, k) : NAN;
  free(t);
  etr__symbolizer_free(s);
  return m;
}

int etr_bench_symbolize(int quick, FILE *report, double *symbolize_warm_ns,
                        double *symbolize_cold_ns, double *addr2line_ns,
                        double *addr2line_pipe_ns) {
  *symbolize_warm_ns = *symbolize_cold_ns = *addr2line_ns = *addr2line_pipe_ns = NAN;
  /* Referencing a function only symbolize.c defines makes a static link take that object
   * even while src/observer/unwind_stubs.c (weak stand-ins, temporary) is in the archive. */
  int (*volatile keep)(etr__symbolizer *, const char *) = etr__symbolizer_add_search_dir;
  (void)keep;
  const char *lib = getenv("ETR_BENCH_SYM20K");
  if (lib == NULL || lib[0] == '\0') lib = ETR_SYM20K_PATH;
  void *h = lib[0] != '\0' ? dlopen(lib, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (h == NULL) {
    if (report != NULL)
      fprintf(report, "  symbolization: cannot load the 20k-function library '%s' (%s)\n", lib,
              dlerror());
    return -1;
  }
  struct link_map *lm = NULL;
  uint64_t *vaddr = malloc(NFUNCS * sizeof *vaddr);
  size_t *order = malloc(NFUNCS * sizeof *order);
  int ok = vaddr != NULL && order != NULL && dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0;
  for (size_t i = 0; ok && i < NFUNCS; i++) {
    char name[48];
    snprintf(name, sizeof name, "etr_sym20k_f%zu", i);
    void *f = dlsym(h, name);
    if (f == NULL)
      ok = 0;
    else
      vaddr[i] = (uintptr_t)f - lm->l_addr;
  }
  dlclose(h);
  if (!ok) {
    free(vaddr);
    free(order);
    return -1;
  }
  shuffle(order, NFUNCS);
  uint64_t *shuffled = malloc(NFUNCS * sizeof *shuffled);
  if (shuffled == NULL) {
    free(vaddr);
    free(order);
    return -1;
  }
  for (size_t i = 0; i < NFUNCS; i++) shuffled[i] = vaddr[order[i]];

  int wrong = 0;
  size_t batch = 1000, batches = quick ? 5 : NFUNCS / batch;
  *symbolize_warm_ns = bench_warm(lib, vaddr, order, batches, batch, &wrong);
  *symbolize_cold_ns = bench_cold(lib, shuffled, quick ? 3 : 11);
  *addr2line_ns = bench_addr2line_process(lib, shuffled, quick ? 3 : 11);
  *addr2line_pipe_ns = bench_addr2line_pipe(lib, shuffled + 100, quick ? 30 : 300);
  if (report != NULL) {
    fprintf(report, "  symbolization, library with %d functions in %d compile units:\n", NFUNCS,
            NFUNCS / FUNCS_PER_CU);
    fprintf(report, "  %-26s %12.1f  ns per unique address (tables loaded)%s\n",
            "symbolize_warm_ns", *symbolize_warm_ns, wrong ? "  WRONG ANSWERS" : "");
    fprintf(report, "  %-26s %12.1f  ns, first address in a new symbolizer\n", "symbolize_cold_ns",
            *symbolize_cold_ns);
    fprintf(report, "  %-26s %12.1f  ns per address, one process each\n", "addr2line_ns",
            *addr2line_ns);
    fprintf(report, "  %-26s %12.1f  ns per address on an open pipe\n", "addr2line_pipe_ns",
            *addr2line_pipe_ns);
    fprintf(report, "  %-26s %12.1f  x (addr2line_pipe_ns / symbolize_warm_ns; target >= 10)\n",
            "addr2line_pipe_ratio", *addr2line_pipe_ns / *symbolize_warm_ns);
  }
  free(vaddr);
  free(order);
  free(shuffled);
  return wrong ? -1 : 0;
}

__attribute__((noinline)) static void tb_close_op(int i) {
  etr_record r;
  etr_record_init(&r, i % 2 ? "bench::odd" : "bench::even", ETR_SCOPE_FUNCTION);
  etr_record_begin(&r);
  etr_record_end(&r);
  __asm__ volatile("" ::: "memory");
}

int etr_bench_tb_close(int quick, FILE *report, double *tb_close_first_ms,
                       double *tb_close_next_ms) {
  *tb_close_first_ms = *tb_close_next_ms = NAN;
  char dir[] = "/tmp/etr-bench-tbclose-XXXXXX", path[64];
  if (mkdtemp(dir) == NULL) return -1;
  snprintf(path, sizeof path, "%s/t.json", dir);
  etr_traceback_options tb = ETR_TRACEBACK_OPTIONS_INIT;
  tb.enabled = true;
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.traceback = &tb;
  enum { MAX_CYCLES = 21 };
  int cycles = quick ? 3 : MAX_CYCLES, done = 0;
  double next[MAX_CYCLES];
  for (; done < cycles; done++) {
    etr_trace *t;
    if (etr_trace_open(path, &opt, &t) != 0) break;
    etr_trace_enable(t);
    for (int i = 0; i < 100; i++) tb_close_op(i);
    double t0 = now_ns();
    int rc = etr_trace_close(t);
    double ms = (now_ns() - t0) / 1e6;
    if (rc != 0) break;
    if (done == 0)
      *tb_close_first_ms = ms;
    else
      next[done - 1] = ms;
  }
  unlink(path);
  rmdir(dir);
  if (done < cycles) return -1;
  *tb_close_next_ms = median(next, (size_t)done - 1);
  if (report != NULL) {
    fprintf(report, "  %-26s %12.2f  ms, the first close of a trace with tracebacks\n",
            "tb_close_first_ms", *tb_close_first_ms);
    fprintf(report, "  %-26s %12.2f  ms, the next closes (same stacks, %d traces)\n",
            "tb_close_next_ms", *tb_close_next_ms, done - 1);
  }
  return 0;
}
