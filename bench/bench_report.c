/* bench/bench_report.c — etr-bench's statistics and output (bench_report.h). */
#define _GNU_SOURCE

#include "bench_report.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

spread spread_of(const double *v, int n) {
  double s[BENCH_MAX_REPS];
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp_double);
  spread r;
  r.min = s[0];
  r.max = s[n - 1];
  r.med = (n % 2) ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
  return r;
}

void run_sibling(const char *prog, bool quick, const char *const *keys, double *vals, size_t n) {
  for (size_t i = 0; i < n; i++) vals[i] = NAN;
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return;
  self[len] = '\0';
  char *slash = strrchr(self, '/');
  if (!slash) return;
  *slash = '\0';
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "'%s/%s'%s", self, prog, quick ? " --quick" : "");
  fflush(stdout);
  FILE *f = popen(cmd, "r");
  if (!f) {
    printf("  (%s: cannot run: %s)\n", prog, strerror(errno));
    return;
  }
  char line[4096], last[4096] = "";
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '{') {
      snprintf(last, sizeof last, "%s", line);
    } else {
      fputs("  ", stdout);
      fputs(line, stdout);
    }
  }
  int st = pclose(f);
  if (st != 0) printf("  (%s exited with status %d)\n", prog, st);
  for (size_t i = 0; i < n; i++) {
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\": ", keys[i]);
    const char *p = strstr(last, pat);
    if (p) {
      char *end;
      double v = strtod(p + strlen(pat), &end);
      if (end != p + strlen(pat)) vals[i] = v;
    }
  }
}

int nproc(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

void row(const char *name, spread s, const char *unit) {
  if (isnan(s.med))
    printf("  %-26s %12s %12s %12s  %s\n", name, "-", "-", "-", unit);
  else
    printf("  %-26s %12.2f %12.2f %12.2f  %s\n", name, s.med, s.min, s.max, unit);
}

void row1(const char *name, double v, const char *unit) {
  if (isnan(v))
    printf("  %-26s %12s  %s\n", name, "-", unit);
  else
    printf("  %-26s %12.2f  %s\n", name, v, unit);
}

void json_num(const char *name, double v) {
  if (isnan(v))
    printf(", \"%s\": null", name);
  else
    printf(", \"%s\": %.3f", name, v);
}

void json_spread(const char *name, spread s) {
  char key[64];
  json_num(name, s.med);
  snprintf(key, sizeof key, "%s_min", name);
  json_num(key, s.min);
  snprintf(key, sizeof key, "%s_max", name);
  json_num(key, s.max);
}
