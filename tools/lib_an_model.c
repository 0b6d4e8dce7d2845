/* The replay cost model of `etr replay` (lib_an_ops.h, "cost model"): a model file's
 * directives (speed-ups by op name, a FLOP rate, a link for collectives; format in
 * docs/CLI.md) and the cost of every op under them. */
#define _POSIX_C_SOURCE 200809L

#include "cli.h"
#include "lib_an_ops.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void an_model_init(an_model *m) {
  memset(m, 0, sizeof *m);
  m->untimed_us = 1.0;
}

void an_model_free(an_model *m) {
  for (size_t i = 0; i < m->n_speedups; i++) free(m->speedups[i].pattern);
  free(m->speedups);
  memset(m, 0, sizeof *m);
}

static bool num(const char *s, double *out) { return an_parse_double(s, out); }

int an_model_line(an_model *m, const char *line, char *err, size_t errlen) {
  char buf[1024];
  size_t len = strlen(line);
  if (len >= sizeof buf) {
    snprintf(err, errlen, "line too long");
    return -1;
  }
  memcpy(buf, line, len + 1);
  char *hash = strchr(buf, '#');
  /* '#' starts a comment only at the start of a word ("## forward ##" names need quotes). */
  if (hash != NULL && (hash == buf || isspace((unsigned char)hash[-1]))) *hash = '\0';
  char *tok[8];
  int nt = 0;
  char *p = buf;
  while (*p && nt < 8) {
    while (isspace((unsigned char)*p)) p++;
    if (!*p) break;
    if (*p == '"') { /* quoted name: "## forward ##" */
      char *q = strchr(p + 1, '"');
      if (q == NULL) {
        snprintf(err, errlen, "unterminated quote");
        return -1;
      }
      *q = '\0';
      tok[nt++] = p + 1;
      p = q + 1;
      continue;
    }
    tok[nt++] = p;
    while (*p && !isspace((unsigned char)*p)) p++;
    if (*p) *p++ = '\0';
  }
  if (nt == 0) return 1;
  double a, b;
  if (strcmp(tok[0], "speedup") == 0) {
    if (nt != 3 || !num(tok[2], &a) || a <= 0) {
      snprintf(err, errlen, "expected: speedup NAME FACTOR (FACTOR > 0)");
      return -1;
    }
    an_speedup *ns = realloc(m->speedups, (m->n_speedups + 1) * sizeof *ns);
    if (ns == NULL) {
      snprintf(err, errlen, "out of memory");
      return -1;
    }
    m->speedups = ns;
    char *pat = strdup(tok[1]);
    if (pat == NULL) {
      snprintf(err, errlen, "out of memory");
      return -1;
    }
    m->speedups[m->n_speedups].pattern = pat;
    m->speedups[m->n_speedups].factor = a;
    m->n_speedups++;
  } else if (strcmp(tok[0], "flops_per_s") == 0) {
    if (nt != 2 || !num(tok[1], &a) || a <= 0) {
      snprintf(err, errlen, "expected: flops_per_s RATE (RATE > 0)");
      return -1;
    }
    m->flops_per_s = a;
  } else if (strcmp(tok[0], "link") == 0) {
    if (nt != 3 || !num(tok[1], &a) || !num(tok[2], &b) || a < 0 || b <= 0) {
      snprintf(err, errlen, "expected: link LATENCY_US BANDWIDTH_GBPS (bandwidth > 0)");
      return -1;
    }
    m->link_latency_us = a;
    m->link_GBps = b;
  } else if (strcmp(tok[0], "untimed_us") == 0) {
    if (nt != 2 || !num(tok[1], &a) || a < 0) {
      snprintf(err, errlen, "expected: untimed_us COST (>= 0)");
      return -1;
    }
    m->untimed_us = a;
  } else {
    snprintf(err, errlen, "unknown directive '%.40s' (speedup, flops_per_s, link, untimed_us)",
             tok[0]);
    return -1;
  }
  return 0;
}

int an_model_load(an_model *m, const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return -1;
  }
  cli_remember_input(path); /* (no output of the command may overwrite it) */
  char line[1024], why[256];
  int ln = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    ln++;
    size_t len = strlen(line);
    if (len == sizeof line - 1 && line[len - 1] != '\n') {
      snprintf(err, errlen, "%s: line %d: line too long", path, ln);
      fclose(f);
      return -1;
    }
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
    if (an_model_line(m, line, why, sizeof why) < 0) {
      snprintf(err, errlen, "%s: line %d: %s", path, ln, why);
      fclose(f);
      return -1;
    }
  }
  if (ferror(f)) { /* (a directory opens, and fails at the first read: EISDIR) */
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    fclose(f);
    return -1;
  }
  fclose(f);
  return 0;
}

static double speedup_for(const an_model *m, const char *name) {
  double best = 1.0;
  size_t best_len = 0;
  bool exact = false;
  for (size_t i = 0; i < m->n_speedups; i++) {
    const char *pat = m->speedups[i].pattern;
    size_t pl = strlen(pat);
    if (pl > 0 && pat[pl - 1] == '*') {
      if (!exact && strncmp(name, pat, pl - 1) == 0 && pl - 1 + 1 > best_len) {
        best = m->speedups[i].factor;
        best_len = pl; /* longer prefixes win; "*" (pl 1) is the catch-all */
      }
    } else if (strcmp(name, pat) == 0) {
      best = m->speedups[i].factor;
      exact = true;
    }
  }
  return best;
}

bool an_model_costs(const an_model *m, const an_optab *t, double *cost) {
  double *by_name = malloc((t->names.n ? t->names.n : 1) * sizeof *by_name);
  if (by_name == NULL) return false;
  for (size_t i = 0; i < t->names.n; i++) by_name[i] = speedup_for(m, t->names.strs[i]);
  for (size_t i = 0; i < t->n; i++) {
    const an_op *op = &t->ops[i];
    if (m->flops_per_s > 0 && (op->flags & ETR_OPF_FLOP_INNER)) {
      cost[i] = op->flops / m->flops_per_s * 1e6;
    } else if (m->link_GBps > 0 && (op->flags & ETR_OPF_COLLECTIVE)) {
      cost[i] = m->link_latency_us + op->coll_bytes / (m->link_GBps * 1e3);
    } else {
      double base = (op->flags & ETR_OPF_TIMED) ? (double)op->excl : m->untimed_us;
      cost[i] = base / by_name[op->name];
    }
  }
  free(by_name);
  return true;
}
