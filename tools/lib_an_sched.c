/* The list scheduler of `etr graph` / `etr replay` and the critical path it leaves
 * (lib_an_ops.h, "schedule"): one pass over the ops in start order, each placed as early as
 * nesting, its data sources, its fw_parent and (for replay) its thread allow; then the walk
 * back from the latest end that names what each step waited for. */
#define _POSIX_C_SOURCE 200809L

#include "cli.h"
#include "lib_an_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ETR_ROUNDING_US 2

typedef struct sched_state {
  const an_optab *t;
  const double *cost;
  an_sched *s;
  uint32_t **stack; /* per thread: open ops, outermost first */
  size_t *depth, *stcap;
  double *cur;       /* per thread: time its stream has reached */
  uint32_t *curpred; /* op whose start (if still open) or end set cur */
  int64_t *reccur;   /* per op: recorded end of its previous child (or its own ts) */
  int64_t *recmax;   /* per thread: recorded end of its last top-level op */
  bool oom;
} sched_state;

static double op_scale(const sched_state *st, uint32_t p) {
  int64_t ex = st->t->ops[p].excl;
  return ex > 0 ? st->cost[p] / (double)ex : 1.0;
}

/* Close the innermost open op of thread th: it ends after its last child (the stream's
 * cursor) plus its own time after that child, which is the recorded time from the child's
 * end to its own end (its whole cost for an untimed op), scaled like its cost. */
static void close_top(sched_state *st, uint32_t th) {
  an_sched *s = st->s;
  const an_op *op = &st->t->ops[0];
  uint32_t x = st->stack[th][--st->depth[th]];
  op = &st->t->ops[x];
  double post;
  if (op->flags & ETR_OPF_TIMED) {
    int64_t rec = op->ts + op->incl - st->reccur[x];
    post = (rec > 0 ? (double)rec : 0.0) * op_scale(st, x);
    if (op->excl <= 0) post += st->cost[x]; /* modelled cost of a sub-microsecond op */
  } else {
    post = st->cost[x];
  }
  double c = st->cur[th] > s->start[x] ? st->cur[th] : s->start[x];
  s->end[x] = c + post;
  s->busy[th] += post;
  s->end_pred[x] = (st->curpred[th] != x && st->cur[th] > s->start[x]) ? st->curpred[th] : x;
  /* The recorded end of x's subtree (a child may end after x's truncated end). */
  if (op->flags & ETR_OPF_TIMED) {
    int64_t rec_end = op->ts + op->incl > st->reccur[x] ? op->ts + op->incl : st->reccur[x];
    uint32_t p = op->parent_ix;
    if (p != ETR_NOIX && st->depth[th] > 0 && st->stack[th][st->depth[th] - 1] == p) {
      if (rec_end > st->reccur[p]) st->reccur[p] = rec_end;
    } else if (rec_end > st->recmax[th]) {
      st->recmax[th] = rec_end;
    }
  }
  st->cur[th] = s->end[x];
  st->curpred[th] = x;
  if (s->end[x] > s->thread_end[th]) s->thread_end[th] = s->end[x];
  if (s->last == ETR_NOIX || s->end[x] > s->makespan) {
    s->makespan = s->end[x];
    s->last = x;
  }
}

static bool is_open(const an_sched *s, uint32_t x) { return s->start[x] >= 0 && s->end[x] < 0; }

bool an_schedule(const an_optab *t, const an_deps *d, const double *cost, const an_sched_opts *o,
                 an_sched *s) {
  memset(s, 0, sizeof *s);
  size_t nn = t->n ? t->n : 1, nt = t->nthreads ? t->nthreads : 1;
  sched_state st = {0};
  st.t = t;
  st.cost = cost;
  st.s = s;
  s->start = malloc(nn * sizeof *s->start);
  s->end = malloc(nn * sizeof *s->end);
  s->pred = malloc(nn * sizeof *s->pred);
  s->end_pred = malloc(nn * sizeof *s->end_pred);
  s->bind = malloc(nn);
  s->busy = calloc(nt, sizeof *s->busy);
  s->thread_end = calloc(nt, sizeof *s->thread_end);
  st.stack = calloc(nt, sizeof *st.stack);
  st.depth = calloc(nt, sizeof *st.depth);
  st.stcap = calloc(nt, sizeof *st.stcap);
  st.cur = calloc(nt, sizeof *st.cur);
  st.curpred = malloc(nt * sizeof *st.curpred);
  st.reccur = malloc(nn * sizeof *st.reccur);
  int64_t *recmax = st.recmax = malloc(nt * sizeof *recmax);
  bool ok = s->start && s->end && s->pred && s->end_pred && s->bind && s->busy && s->thread_end &&
            st.stack && st.depth && st.stcap && st.cur && st.curpred && st.reccur && recmax;
  if (ok) {
    for (size_t k = 0; k < t->n; k++) s->start[k] = s->end[k] = -1; /* not yet scheduled */
    for (size_t k = 0; k < nt; k++) {
      st.curpred[k] = ETR_NOIX;
      recmax[k] = t->t0;
    }
  }
  bool idle = o->thread_order && o->keep_idle && t->timed;
  s->last = ETR_NOIX;
  s->n_ops = t->n;
  for (size_t k = 0; ok && k < t->n; k++) {
    uint32_t i = t->order[k];
    const an_op *op = &t->ops[i];
    uint32_t th = op->thread;
    /* Close what is open on this thread and is not an ancestor of i. */
    uint32_t p = op->parent_ix;
    bool nested = p != ETR_NOIX && is_open(s, p) && t->ops[p].thread == th;
    while (st.depth[th] > 0 && !(nested && st.stack[th][st.depth[th] - 1] == p)) close_top(&st, th);
    double est = 0;
    uint32_t pred = ETR_NOIX;
    uint8_t bind = ETR_BIND_NONE;
    if (nested || o->thread_order) {
      est = st.cur[th];
      pred = st.curpred[th];
      bind = pred == ETR_NOIX        ? ETR_BIND_NONE
             : (nested && pred == p) ? ETR_BIND_PARENT
                                     : ETR_BIND_THREAD;
    }
    /* Timestamps and durations are whole microseconds, truncated one by one, so a recorded
     * start may fall up to ~2 us before the computed end of what precedes it. Such a small
     * negative lead or gap is kept (bounded by the parent's start), so rounding does not
     * add up along a thread. */
    if (nested && (op->flags & ETR_OPF_TIMED) && (t->ops[p].flags & ETR_OPF_TIMED)) {
      /* The parent's own time recorded between its previous child (or its start) and this
       * child, scaled like the parent's cost. */
      double lead = (double)(op->ts - st.reccur[p]);
      if (lead < -ETR_ROUNDING_US) lead = -ETR_ROUNDING_US;
      lead *= op_scale(&st, p);
      est += lead;
      if (est < s->start[p]) est = s->start[p];
      if (lead > 0) s->busy[th] += lead;
    } else if (!nested && idle && op->ts - recmax[th] >= -ETR_ROUNDING_US) {
      double gap = (double)(op->ts - recmax[th]);
      est += gap;
      if (est < 0) est = 0;
      if (gap > 0) bind = ETR_BIND_IDLE;
    }
    for (uint32_t e = 0; e < d->count[i]; e++) {
      const an_dep *ed = &d->edges[d->first[i] + e];
      uint32_t f = ed->from;
      double c;
      if (ed->kind == ETR_DEP_FW) {
        c = s->start[f];
      } else {
        if (is_open(s, f)) {
          if (t->ops[f].thread == th) continue; /* an ancestor of i: nesting orders them */
          uint32_t fth = t->ops[f].thread;
          while (st.depth[fth] > 0 && is_open(s, f)) close_top(&st, fth);
        }
        c = s->end[f];
      }
      if (c > est) {
        est = c;
        pred = f;
        bind = ed->kind == ETR_DEP_FW ? ETR_BIND_FW : ETR_BIND_DATA;
      }
    }
    s->start[i] = est;
    s->pred[i] = pred;
    s->bind[i] = bind;
    st.reccur[i] = op->ts;
    if (st.depth[th] == st.stcap[th]) {
      size_t nc = st.stcap[th] ? st.stcap[th] * 2 : 16;
      uint32_t *ns = realloc(st.stack[th], nc * sizeof *ns);
      if (ns == NULL) {
        ok = false;
        break;
      }
      st.stack[th] = ns;
      st.stcap[th] = nc;
    }
    st.stack[th][st.depth[th]++] = i;
    st.cur[th] = est;
    st.curpred[th] = i;
  }
  for (size_t th = 0; ok && th < t->nthreads; th++) {
    while (st.depth[th] > 0) close_top(&st, (uint32_t)th);
  }
  for (size_t th = 0; st.stack && th < nt; th++) free(st.stack[th]);
  free(st.stack);
  free(st.depth);
  free(st.stcap);
  free(st.cur);
  free(st.curpred);
  free(st.reccur);
  free(recmax);
  if (!ok) an_sched_free(s);
  return ok;
}

void an_sched_free(an_sched *s) {
  free(s->start);
  free(s->end);
  free(s->pred);
  free(s->end_pred);
  free(s->bind);
  free(s->busy);
  free(s->thread_end);
  memset(s, 0, sizeof *s);
}

size_t an_sched_path(const an_sched *s, const an_optab *t, an_path_step **path) {
  size_t n = 0, cap = 0;
  an_path_step *p = NULL;
  uint32_t x = s->last;
  bool at_end = true;
  /* Walk back from the latest end: an end was set by its last child's end or by its own
   * start; a start by the end of a thread predecessor / data source, or the start of its
   * parent / fw_parent. Each step goes to an event no later, so the walk ends. */
  for (size_t guard = 0; x != ETR_NOIX && guard < 4 * (size_t)s->n_ops + 4; guard++) {
    if (!an_grow((void **)&p, &cap, n + 1, sizeof *p)) break;
    an_path_step *st = &p[n++];
    st->op = x;
    st->at_end = at_end;
    st->t = at_end ? s->end[x] : s->start[x];
    st->bind = at_end ? ETR_BIND_NONE : s->bind[x];
    st->spent = st->t;
    st->spent_by = x;
    if (at_end) {
      if (s->end_pred[x] != x) {
        x = s->end_pred[x];
      } else {
        at_end = false;
      }
      continue;
    }
    uint8_t b = s->bind[x];
    uint32_t pr = s->pred[x];
    /* Time just before a start: the parent's lead when nested, else idle or a wait. */
    if (b == ETR_BIND_PARENT || b == ETR_BIND_FW) {
      st->spent_by = pr;
    } else if (b == ETR_BIND_THREAD && t->ops[x].parent_ix != ETR_NOIX) {
      st->spent_by = t->ops[x].parent_ix;
    } else {
      st->spent_by = ETR_NOIX;
    }
    if (b == ETR_BIND_NONE || pr == ETR_NOIX) break;
    at_end = !(b == ETR_BIND_PARENT || b == ETR_BIND_FW);
    x = pr;
  }
  for (size_t a = 0, b = n ? n - 1 : 0; a < b; a++, b--) {
    an_path_step tmp = p[a];
    p[a] = p[b];
    p[b] = tmp;
  }
  for (size_t k = 1; k < n; k++) p[k].spent = p[k].t - p[k - 1].t;
  *path = p;
  return n;
}

const char *an_bind_name(int bind) {
  switch (bind) {
    case ETR_BIND_THREAD:
      return "thread";
    case ETR_BIND_DATA:
      return "data";
    case ETR_BIND_FW:
      return "fw";
    case ETR_BIND_IDLE:
      return "idle";
    case ETR_BIND_PARENT:
      return "parent";
    default:
      return "start";
  }
}

typedef struct name_sum {
  uint32_t name;
  uint32_t count;
  double total;
} name_sum;

static int cmp_name_sum(const void *a, const void *b) {
  const name_sum *x = a, *y = b;
  if (x->total != y->total) return x->total > y->total ? -1 : 1;
  return x->name < y->name ? -1 : x->name > y->name;
}

void an_sched_print_path(FILE *f, const an_optab *t, const an_sched *s, const double *cost,
                         size_t limit) {
  (void)cost;
  an_path_step *path = NULL;
  size_t n = an_sched_path(s, t, &path);
  size_t nops = 0;
  double idle = 0;
  name_sum *sums = calloc(t->names.n + 1, sizeof *sums);
  bool *seen = calloc(t->n ? t->n : 1, sizeof *seen);
  for (size_t k = 0; k < n; k++) {
    if (seen && !seen[path[k].op]) {
      seen[path[k].op] = true;
      nops++;
    }
    if (path[k].spent_by == ETR_NOIX) {
      idle += path[k].spent;
    } else if (sums) {
      sums[t->ops[path[k].spent_by].name].total += path[k].spent;
      if (path[k].at_end) sums[t->ops[path[k].spent_by].name].count++;
    }
  }
  fprintf(f, "  length: %zu ops, %.1f us", nops, s->makespan);
  if (idle > 0) fprintf(f, " (%.1f us of it recorded idle time or waits between ops)", idle);
  fprintf(f, "\n");
  if (sums != NULL && n > 0) {
    for (size_t i = 0; i < t->names.n; i++) sums[i].name = (uint32_t)i;
    qsort(sums, t->names.n, sizeof *sums, cmp_name_sum);
    fprintf(f, "  time on the path by op name:\n");
    size_t i = 0;
    for (; i < t->names.n && i < 8 && sums[i].total > 0; i++) {
      fprintf(f, "    %12.1f us %5.1f%%  %6u x  ", sums[i].total,
              s->makespan > 0 ? 100.0 * sums[i].total / s->makespan : 0.0, sums[i].count);
      an_out o = {.f = f};
      an_out_sanitized_cut(&o, t->names.strs[sums[i].name], t->names.lens[sums[i].name],
                           CLI_TERM_MAX, "", ' ');
      fputc('\n', f);
    }
    /* The names past the first 8 in one line, so that the lines and the idle time above
     * add up to the length. */
    double rest = 0;
    unsigned rest_count = 0;
    size_t rest_names = 0;
    for (; i < t->names.n && sums[i].total > 0; i++, rest_names++) {
      rest += sums[i].total;
      rest_count += sums[i].count;
    }
    if (rest_names > 0)
      fprintf(f, "    %12.1f us %5.1f%%  %6u x  (%zu other op name%s)\n", rest,
              s->makespan > 0 ? 100.0 * rest / s->makespan : 0.0, rest_count, rest_names,
              rest_names == 1 ? "" : "s");
  }
  free(sums);
  free(seen);
  size_t show = limit == 0 || limit > n ? n : limit;
  if (show > 0) {
    fprintf(f, "  path (%s%zu of %zu events):\n    %12s  %-5s %-6s %6s %12s  %s\n",
            show < n ? "first " : "", show, n, "at_us", "event", "via", "thread", "id", "name");
  }
  for (size_t k = 0; k < show; k++) {
    const an_path_step *st = &path[k];
    const an_op *op = &t->ops[st->op];
    fprintf(f, "    %12.1f  %-5s %-6s %6llu %12lld  ", st->t, st->at_end ? "end" : "start",
            st->at_end ? "" : an_bind_name(st->bind),
            (unsigned long long)t->threads[op->thread].tid, (long long)op->id);
    an_out o = {.f = f};
    an_out_sanitized_cut(&o, t->names.strs[op->name], t->names.lens[op->name], CLI_TERM_MAX, "",
                         ' ');
    fputc('\n', f);
  }
  if (show < n) fprintf(f, "    ... (--path 0 prints all)\n");
  free(path);
}
