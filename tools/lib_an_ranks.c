/* Several rank traces together: reading, matching collectives across ranks, the recorded
 * summary and the replay simulation (what is computed: lib_an_ranks.h; output: docs/CLI.md). */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lib_an_ops.h"
#include "lib_an_ranks.h"
#include "lib_an_util.h"

#define NOIX UINT32_MAX

typedef struct rk_coll {
  int64_t id, ts, dur; /* recorded; dur -1 when the node has no timing */
  uint64_t k;          /* its place among this rank's collectives of the same group */
  uint64_t ops_before; /* ops without timing before it (id order): replay's unit costs */
  uint64_t in_nelems, out_nelems;
  double bytes; /* on the wire per rank (an_coll_bytes) */
  uint32_t pg, name;
  uint32_t inst; /* the matched instance, NOIX when unmatched */
} rk_coll;

typedef struct rk_rank {
  const char *file;
  int64_t rank;      /* the rank number used in reports */
  int64_t pg_rank;   /* from the process-group node, -1 when none */
  int64_t comm_rank; /* from a record_param_comms rank input in group "0", -1 when none */
  int64_t world;     /* group "0"'s size in the process-group node, -1 when none */
  bool pg_seen;      /* the first process-group node naming group "0" was read */
  uint64_t ops, untimed;
  int64_t t0, t1; /* first op start, last op end (recorded) */
  rk_coll *c;
  size_t n, cap;
  int64_t *uid; /* ids of the ops without timing (replay only), sorted once read */
  size_t nuid, capuid;
  int64_t comm_us; /* time inside collectives (recorded) */
  /* matching */
  uint32_t *bypg; /* collective indices ordered by (group, k) */
  size_t *pgoff;  /* per group: first position in bypg; npg + 1 entries */
  /* replay */
  double t, prev_end, wait, exposed, makespan;
  uint64_t prev_ops; /* ops without timing consumed by the collectives fired */
  size_t pos;
  uint64_t straggled; /* collectives this rank was the straggler of */
  double held_us;     /* time the others waited for it */
} rk_rank;

typedef struct rk_inst {
  uint32_t pg, name;
  uint64_t k;
  uint32_t nm;   /* members */
  size_t off;    /* members at mem[off .. off + nm): (rank index, collective index) */
  int64_t order; /* node id of the collective on its first member: listing order */
  double bytes;  /* largest among members */
  int straggler; /* rank index, -1 when none (all took the same time, or no timing) */
  bool timed;    /* wait and dur are known */
  double wait, start, dur;
} rk_inst;

typedef struct rk_set {
  const char *cmd;
  rk_rank *r;
  int n;
  an_strtab pgs, names;
  rk_inst *inst;
  size_t ninst, capinst;
  uint32_t (*mem)[2];
  size_t nmem, capmem;
  size_t unmatched;
  char mismatch[256];   /* the first mismatch found, "" when none */
  char ranks_note[512]; /* the ranks given are not the recorded world's, "" when they are */
  const char *rank_source;
  bool unit; /* replay: keep the ids of the ops without timing (their unit cost) */
} rk_set;

/* The cost of an op without timing in replay: the single-trace replay's default untimed_us
 * (lib_an_model.c), so that untimed traces (all real PyTorch ones) do not replay as 0 µs. */
#define UNTIMED_US 1.0

/* A collective call of this rank: the counted record r of its trace's records. */
static bool add_coll(rk_set *s, rk_rank *rk, const an_colls *cs, const an_coll_rec *r) {
  if (!an_grow((void **)&rk->c, &rk->cap, rk->n + 1, sizeof *rk->c)) return false;
  const char *pg = an_colls_str(cs, r->pg), *name = an_colls_str(cs, r->name);
  rk_coll *c = &rk->c[rk->n];
  memset(c, 0, sizeof *c);
  c->id = r->id;
  c->ts = r->timed ? r->ts : 0;
  c->dur = r->timed ? r->span_end - r->ts : -1;
  c->in_nelems = r->in_nelems;
  c->out_nelems = r->out_nelems;
  /* group size: the record's pg_size, else group "0"'s size, else the number of ranks given
   * (a collective whose trace names no group is in group "0", every rank) */
  c->bytes = an_coll_rec_wire(cs, r, rk->world > 0 ? (uint64_t)rk->world : (uint64_t)s->n);
  c->pg = an_strtab_intern(&s->pgs, pg, strlen(pg));
  c->name = an_strtab_intern(&s->names, name, strlen(name));
  c->inst = NOIX;
  if (c->pg == NOIX || c->name == NOIX) return false;
  if (c->dur > 0) rk->comm_us += c->dur;
  rk->n++;
  return true;
}

/* The rank of the process from PyTorch's record_param_comms inputs (tensors, seq,
 * (pg_name, pg_desc), rank in the group, ...) in group "0". */
static void comm_rank_of(rk_rank *rk, const rd_rnode *n) {
  int kind;
  if (rk->comm_rank >= 0 || an_coll_classify(n, &kind) != AN_COLL_BY_ATTRS) return;
  const rd_rattr *pg = an_attr(n, "pg_name");
  const rd_jval *vals = n->inputs ? rd_jobj_get(n->inputs, "values") : NULL;
  if (pg && pg->value.kind == ETR_J_STRING && !strcmp(pg->value.v.str.s, "0") && vals &&
      vals->kind == ETR_J_ARRAY && vals->v.arr.n >= 4 && vals->v.arr.items[0].kind == ETR_J_ARRAY &&
      vals->v.arr.items[3].kind == ETR_J_INT)
    rk->comm_rank = vals->v.arr.items[3].v.i;
}

static int cmp_coll_id(const void *a, const void *b) {
  const rk_coll *x = a, *y = b;
  return x->id < y->id ? -1 : x->id > y->id;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static int read_rank(rk_set *s, rk_rank *rk) {
  cli_input in;
  if (cli_open(&in, s->cmd, rk->file, &cli_no_trailer)) return ETR_CLI_FAIL;
  if (cli_check_schema(s->cmd, rk->file, rd_header(in.r)) != ETR_CLI_OK) {
    cli_close(&in);
    return ETR_CLI_FAIL;
  }
  const rd_rnode *nd;
  int rc;
  bool oom = false;
  an_colls cs;
  memset(&cs, 0, sizeof cs);
  rk->t0 = INT64_MAX;
  rk->t1 = INT64_MIN;
  while ((rc = cli_next(&in, &nd)) == 1) {
    if (!an_colls_add(&cs, nd)) {
      oom = true;
      break;
    }
    if (an_is_thread_node(nd) || an_is_process_node(nd)) continue;
    rk->ops++;
    if (nd->has_timing) {
      if (nd->ts < rk->t0) rk->t0 = nd->ts;
      if (nd->inclusive_dur >= 0 && nd->ts <= INT64_MAX - nd->inclusive_dur &&
          nd->ts + nd->inclusive_dur > rk->t1)
        rk->t1 = nd->ts + nd->inclusive_dur;
    } else {
      rk->untimed++;
      if (s->unit) {
        if (!an_grow((void **)&rk->uid, &rk->capuid, rk->nuid + 1, sizeof *rk->uid)) {
          oom = true;
          break;
        }
        rk->uid[rk->nuid++] = nd->id;
      }
    }
    /* The first process-group node is the newest (its writer puts them newest first:
     * docs/FORMAT.md); a later one is older and may be stale (written before
     * init_process_group, it says rank 0 of 1). */
    if (!rk->pg_seen && an_groups_zero(nd, &rk->pg_rank, &rk->world)) rk->pg_seen = true;
    comm_rank_of(rk, nd);
  }
  if (rc == 0 && !oom) rc = cli_finish(&in);
  cli_close(&in);
  /* The collective calls: the counted records (tools/lib_an_ops.h, an_colls). A send or a
   * recv is between two ranks, not a call of every rank of its group: it is left out of the
   * ranks' matching (as etr chakra makes it plain work), or every later collective of the
   * ranks it skipped would be paired with the wrong one. */
  if (rc == 0 && !oom && !an_colls_resolve(&cs)) oom = true;
  for (size_t i = 0; rc == 0 && !oom && i < cs.n; i++)
    if (cs.r[i].role == AN_COLL_COUNTED && cs.r[i].kind != AN_COLL_SEND &&
        cs.r[i].kind != AN_COLL_RECV && !add_coll(s, rk, &cs, &cs.r[i]))
      oom = true;
  an_colls_free(&cs);
  if (oom) cli_error(s->cmd, "%s: out of memory", rk->file);
  if (rc < 0 || oom) return ETR_CLI_FAIL;
  if (rk->t0 > rk->t1) rk->t0 = rk->t1 = 0;
  /* Ids are drawn at op start: id order is each rank's order of collectives. */
  if (rk->n) qsort(rk->c, rk->n, sizeof *rk->c, cmp_coll_id);
  /* the untimed ops before each collective: both lists in id order, merged */
  if (rk->nuid) {
    qsort(rk->uid, rk->nuid, sizeof *rk->uid, cmp_i64);
    size_t u = 0;
    for (size_t j = 0; j < rk->n; j++) {
      while (u < rk->nuid && rk->uid[u] < rk->c[j].id) u++;
      rk->c[j].ops_before = u;
    }
  }
  free(rk->uid);
  rk->uid = NULL;
  rk->nuid = rk->capuid = 0;
  return ETR_CLI_OK;
}

static int cmp_rank(const void *a, const void *b) {
  const rk_rank *x = a, *y = b;
  return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/* Rank numbers: every trace's own (process-group node, else its collectives), unless one is
 * missing or two agree; then the order of the files. */
static void assign_ranks(rk_set *s) {
  bool ok = true;
  for (int i = 0; i < s->n; i++) {
    rk_rank *r = &s->r[i];
    r->rank = r->pg_rank >= 0 ? r->pg_rank : r->comm_rank;
    if (r->rank < 0) ok = false;
    for (int j = 0; j < i && ok; j++)
      if (s->r[j].rank == r->rank) ok = false;
  }
  s->rank_source = "recorded in each trace";
  if (!ok) {
    s->rank_source = "order of the files (the traces do not name distinct ranks)";
    for (int i = 0; i < s->n; i++) s->r[i].rank = i;
  }
  qsort(s->r, (size_t)s->n, sizeof *s->r, cmp_rank);
}

/* Group "0" is every rank (docs/FORMAT.md), and so is a collective that names no group
 * (add_coll): a rank with none of its collectives while another has some did not take part
 * in them (a trace cut short and repaired, a rank that recorded nothing), which is a
 * mismatch, not a group it is not a member of. (A rank with collectives of other groups only
 * may have left group "" out: it named them.) */
static void every_rank(rk_set *s, size_t p) {
  const char *pg = s->pgs.strs[p];
  bool zero = !strcmp(pg, "0");
  if (s->mismatch[0] || (!zero && pg[0])) return;
  int with = -1, without = -1;
  for (int i = 0; i < s->n && (with < 0 || without < 0); i++) {
    size_t c = s->r[i].pgoff[p + 1] - s->r[i].pgoff[p];
    if (c && with < 0) with = i;
    if (!c && without < 0 && (zero || !s->r[i].n)) without = i;
  }
  if (with < 0 || without < 0) return;
  snprintf(s->mismatch, sizeof s->mismatch,
           "%s: %zu collectives on rank %" PRId64 ", none on rank %" PRId64 " (%s)",
           zero ? "process group \"0\" (every rank)" : "collectives naming no process group",
           s->r[with].pgoff[p + 1] - s->r[with].pgoff[p], s->r[with].rank, s->r[without].rank,
           cli_term(s->r[without].file));
}

/* The world the traces record (group "0"'s size) against the ranks given: they should be
 * ranks 0..size-1 of one run (an_world_note says it as etr chakra does). */
static void check_world(rk_set *s) {
  an_rank_given *g = malloc((size_t)(s->n ? s->n : 1) * sizeof *g);
  const char **files = malloc((size_t)(s->n ? s->n : 1) * sizeof *files);
  if (g && files) {
    for (int i = 0; i < s->n; i++) {
      g[i] = (an_rank_given){s->r[i].rank, s->r[i].world, false};
      files[i] = s->r[i].file;
    }
    an_world_note(s->ranks_note, sizeof s->ranks_note, files, g, (size_t)s->n);
  } else {
    snprintf(s->ranks_note, sizeof s->ranks_note, "out of memory");
  }
  free(g);
  free(files);
}

/* Pair the k-th collective of each group across the ranks that use the group. */
static bool match(rk_set *s) {
  size_t npg = s->pgs.n;
  size_t *count = calloc(npg ? npg : 1, sizeof *count);
  if (!count) return false;
  for (int i = 0; i < s->n; i++) {
    rk_rank *r = &s->r[i];
    memset(count, 0, (npg ? npg : 1) * sizeof *count);
    for (size_t j = 0; j < r->n; j++) r->c[j].k = count[r->c[j].pg]++;
    r->pgoff = calloc(npg + 1, sizeof *r->pgoff);
    r->bypg = malloc((r->n ? r->n : 1) * sizeof *r->bypg);
    if (!r->pgoff || !r->bypg) {
      free(count);
      return false;
    }
    for (size_t p = 0; p < npg; p++) r->pgoff[p + 1] = r->pgoff[p] + count[p];
    memset(count, 0, (npg ? npg : 1) * sizeof *count);
    for (size_t j = 0; j < r->n; j++) {
      uint32_t p = r->c[j].pg;
      r->bypg[r->pgoff[p] + count[p]++] = (uint32_t)j;
    }
  }
  free(count);
  for (size_t p = 0; p < npg; p++) {
    size_t lo = SIZE_MAX, hi = 0;
    uint32_t nm = 0;
    for (int i = 0; i < s->n; i++) {
      size_t c = s->r[i].pgoff[p + 1] - s->r[i].pgoff[p];
      if (!c) continue;
      nm++;
      if (c < lo) lo = c;
      if (c > hi) hi = c;
    }
    if (!nm) continue;
    every_rank(s, p);
    if (lo != hi && !s->mismatch[0])
      snprintf(s->mismatch, sizeof s->mismatch,
               "process group \"%s\": %zu collectives on one rank, %zu on another",
               cli_term(s->pgs.strs[p]), lo, hi);
    for (size_t k = 0; k < lo; k++) {
      if (!an_grow((void **)&s->inst, &s->capinst, s->ninst + 1, sizeof *s->inst) ||
          !an_grow((void **)&s->mem, &s->capmem, s->nmem + nm, sizeof *s->mem))
        return false;
      rk_inst *in = &s->inst[s->ninst];
      memset(in, 0, sizeof *in);
      in->pg = (uint32_t)p;
      in->k = k;
      in->off = s->nmem;
      in->order = INT64_MAX;
      in->name = NOIX;
      for (int i = 0; i < s->n; i++) {
        rk_rank *r = &s->r[i];
        if (r->pgoff[p + 1] == r->pgoff[p]) continue;
        uint32_t j = r->bypg[r->pgoff[p] + k];
        rk_coll *c = &r->c[j];
        if (in->name == NOIX) {
          in->name = c->name;
          in->order = c->id;
        } else if (c->name != in->name && !s->mismatch[0]) {
          snprintf(s->mismatch, sizeof s->mismatch,
                   "process group \"%s\", collective #%zu: %s on rank %" PRId64 " but %s before",
                   cli_term(s->pgs.strs[p]), k, cli_term(s->names.strs[c->name]), r->rank,
                   cli_term(s->names.strs[in->name]));
        }
        if (c->bytes > in->bytes) in->bytes = c->bytes;
        c->inst = (uint32_t)s->ninst;
        s->mem[s->nmem][0] = (uint32_t)i;
        s->mem[s->nmem][1] = j;
        s->nmem++;
        in->nm++;
      }
      s->ninst++;
    }
  }
  for (int i = 0; i < s->n; i++)
    for (size_t j = 0; j < s->r[i].n; j++)
      if (s->r[i].c[j].inst == NOIX) s->unmatched++;
  return true;
}

static void set_free(rk_set *s) {
  for (int i = 0; i < s->n; i++) {
    free(s->r[i].c);
    free(s->r[i].uid);
    free(s->r[i].bypg);
    free(s->r[i].pgoff);
  }
  free(s->r);
  free(s->inst);
  free(s->mem);
  an_strtab_free(&s->pgs);
  an_strtab_free(&s->names);
}

static int load(rk_set *s, const char *cmd, char *const *files, int n, bool unit) {
  memset(s, 0, sizeof *s);
  s->cmd = cmd;
  s->unit = unit;
  s->r = calloc((size_t)n, sizeof *s->r);
  if (!s->r) {
    cli_error(cmd, "out of memory");
    return ETR_CLI_FAIL;
  }
  s->n = n;
  for (int i = 0; i < n; i++) {
    s->r[i].file = files[i];
    s->r[i].pg_rank = s->r[i].comm_rank = s->r[i].world = -1;
  }
  for (int i = 0; i < n; i++)
    if (read_rank(s, &s->r[i]) != ETR_CLI_OK) return ETR_CLI_FAIL;
  assign_ranks(s);
  check_world(s);
  if (!match(s)) {
    cli_error(cmd, "out of memory");
    return ETR_CLI_FAIL;
  }
  return ETR_CLI_OK;
}

static int cmp_inst(const void *a, const void *b) {
  const rk_inst *x = a, *y = b;
  if (x->order != y->order) return x->order < y->order ? -1 : 1;
  return x->pg < y->pg ? -1 : x->pg > y->pg;
}

static double model_us(const an_ranks_opts *o, double bytes) {
  return o->alpha_us + bytes / (o->beta_GBps * 1e3);
}

/* No rank holds a collective: its time in communication is not known (it is not 0). */
#define NO_COLL_NOTE                                                                    \
  "note: no collective in these traces (no record_param_comms or collective attrs, no " \
  "c10d::, gloo: or nccl: op): communication is not modelled, the time in it is not known"

static bool no_collective(const rk_set *s) {
  for (int i = 0; i < s->n; i++)
    if (s->r[i].n) return false;
  return true;
}

/* ---- summary: recorded times ---- */

static void straggle_recorded(rk_set *s) {
  for (size_t i = 0; i < s->ninst; i++) {
    rk_inst *in = &s->inst[i];
    int64_t lo = INT64_MAX, hi = -1;
    in->straggler = -1;
    for (uint32_t m = 0; m < in->nm; m++) {
      const uint32_t *e = s->mem[in->off + m];
      int64_t d = s->r[e[0]].c[e[1]].dur;
      if (d < 0) continue;
      if (d < lo) {
        lo = d;
        in->straggler = (int)e[0];
      }
      if (d > hi) hi = d;
    }
    if (in->straggler < 0) continue;
    in->timed = true;
    in->wait = (double)(hi - lo);
    in->dur = (double)lo;
    if (hi == lo) { /* all spent the same time: nobody held the others up */
      in->straggler = -1;
      continue;
    }
    rk_rank *st = &s->r[in->straggler];
    st->straggled++;
    for (uint32_t m = 0; m < in->nm; m++) {
      const uint32_t *e = s->mem[in->off + m];
      int64_t d = s->r[e[0]].c[e[1]].dur;
      if (d > lo) st->held_us += (double)(d - lo);
    }
  }
}

static void print_summary_json(rk_set *s, const an_ranks_opts *o, FILE *f) {
  fputs("{\"ranks\": [", f);
  for (int i = 0; i < s->n; i++) {
    rk_rank *r = &s->r[i];
    fprintf(f, "%s\n  {\"rank\": %" PRId64 ", \"file\": ", i ? "," : "", r->rank);
    cli_json_str(f, r->file);
    fprintf(f,
            ", \"ops\": %" PRIu64 ", \"makespan_us\": %" PRId64 ", \"comm_us\": %" PRId64
            ", \"collectives\": %zu, \"straggler_of\": %" PRIu64 ", \"others_waited_us\": %.0f}",
            r->ops, r->t1 - r->t0, r->comm_us, r->n, r->straggled, r->held_us);
  }
  fprintf(f, "],\n \"rank_source\": ");
  cli_json_str(f, s->rank_source);
  fputs(", \"ranks_note\": ", f);
  if (s->ranks_note[0])
    cli_json_str(f, s->ranks_note);
  else
    fputs("null", f);
  fprintf(f, ", \"matched\": %zu, \"unmatched\": %zu, \"mismatch\": ", s->ninst, s->unmatched);
  if (s->mismatch[0])
    cli_json_str(f, s->mismatch);
  else
    fputs("null", f);
  fputs(",\n \"collectives\": [", f);
  size_t lim = o->limit && o->limit < s->ninst ? o->limit : s->ninst;
  for (size_t i = 0; i < lim; i++) {
    rk_inst *in = &s->inst[i];
    fprintf(f, "%s\n  {\"pg_name\": ", i ? "," : "");
    cli_json_str(f, s->pgs.strs[in->pg]);
    fprintf(f, ", \"index\": %" PRIu64 ", \"collective\": ", in->k);
    cli_json_str(f, s->names.strs[in->name]);
    fprintf(f, ", \"ranks\": %u, \"bytes\": %.0f, \"straggler\": ", in->nm, in->bytes);
    if (in->straggler >= 0)
      fprintf(f, "%" PRId64, s->r[in->straggler].rank);
    else
      fputs("null", f);
    if (in->timed)
      fprintf(f, ", \"transfer_us\": %.0f, \"wait_max_us\": %.0f", in->dur, in->wait);
    else
      fputs(", \"transfer_us\": null, \"wait_max_us\": null", f);
    if (o->beta_GBps > 0) { /* (an extreme model overflows a double: +inf, not JSON) */
      double mu = model_us(o, in->bytes);
      if (isfinite(mu))
        fprintf(f, ", \"model_us\": %.3f", mu);
      else
        fputs(", \"model_us\": \"inf\"", f);
    }
    fputc('}', f);
  }
  fputs("]}\n", f);
}

static void print_summary_text(rk_set *s, const an_ranks_opts *o, FILE *f) {
  fprintf(f, "%d ranks (rank numbers: %s)\n", s->n, s->rank_source);
  fprintf(f, "  %6s %10s %14s %12s %6s %11s  %s\n", "rank", "ops", "makespan_us", "comm_us",
          "comm%", "collectives", "file");
  for (int i = 0; i < s->n; i++) {
    rk_rank *r = &s->r[i];
    int64_t span = r->t1 - r->t0;
    fprintf(f, "  %6" PRId64 " %10" PRIu64 " %14" PRId64 " %12" PRId64 " %5.1f%% %11zu  %s%s\n",
            r->rank, r->ops, span, r->comm_us,
            span > 0 ? 100.0 * (double)r->comm_us / (double)span : 0.0, r->n, r->file,
            r->untimed == r->ops && r->ops ? " (no timing)" : "");
  }
  if (s->ranks_note[0]) fprintf(f, "note: %s: not the ranks of one whole run\n", s->ranks_note);
  if (no_collective(s)) fprintf(f, "%s\n", NO_COLL_NOTE);
  fprintf(f, "\ncollectives matched across ranks (process group + order): %zu", s->ninst);
  if (s->unmatched) fprintf(f, ", %zu left unmatched", s->unmatched);
  fputc('\n', f);
  if (s->mismatch[0]) fprintf(f, "  mismatch: %s\n", s->mismatch);
  fprintf(f,
          "\nstragglers (in each collective, the rank that spent the least time in it arrived "
          "last; the others waited for it)\n  %6s %14s %18s\n",
          "rank", "straggler_of", "others_waited_us");
  for (int i = 0; i < s->n; i++)
    fprintf(f, "  %6" PRId64 " %14" PRIu64 " %18.0f\n", s->r[i].rank, s->r[i].straggled,
            s->r[i].held_us);
  size_t lim = o->limit && o->limit < s->ninst ? o->limit : s->ninst;
  fprintf(f, "\ncollectives (first %zu of %zu)\n  %5s %-8s %-16s %12s %10s %12s %12s", lim,
          s->ninst, "#", "pg", "collective", "bytes", "straggler", "transfer_us", "wait_max_us");
  if (o->beta_GBps > 0) fprintf(f, " %12s", "model_us");
  fputc('\n', f);
  for (size_t i = 0; i < lim; i++) {
    rk_inst *in = &s->inst[i];
    fprintf(f, "  %5zu %-8s %-16s %12.0f ", i,
            s->pgs.strs[in->pg][0] ? cli_term(s->pgs.strs[in->pg]) : "-",
            cli_term(s->names.strs[in->name]), in->bytes);
    if (in->straggler >= 0)
      fprintf(f, "%10" PRId64, s->r[in->straggler].rank);
    else
      fprintf(f, "%10s", "-");
    if (in->timed)
      fprintf(f, " %12.0f %12.0f", in->dur, in->wait);
    else
      fprintf(f, " %12s %12s", "-", "-");
    if (o->beta_GBps > 0) fprintf(f, " %12.3f", model_us(o, in->bytes));
    fputc('\n', f);
  }
}

int an_ranks_summary(const char *cmd, char *const *files, int n, const an_ranks_opts *o,
                     const char *out_path) {
  rk_set s;
  int rc = load(&s, cmd, files, n, false);
  if (rc == ETR_CLI_OK) {
    if (s.ninst) qsort(s.inst, s.ninst, sizeof *s.inst, cmp_inst);
    straggle_recorded(&s);
    FILE *out = cli_open_output(cmd, out_path);
    if (!out) {
      rc = ETR_CLI_FAIL;
    } else {
      if (o->json)
        print_summary_json(&s, o, out);
      else
        print_summary_text(&s, o, out);
      rc = cli_close_output(cmd, out, out_path);
    }
  }
  set_free(&s);
  return rc;
}

/* ---- replay: simulation ---- */

/* Fire instance `ix` if every member has it next. */
/* When rank r is ready for collective c: where its replay clock stands, plus the compute gap
 * recorded between its previous collective and this one; without timing, UNTIMED_US per op
 * between them (as single-trace replay costs them). */
static double rank_ready(const rk_rank *r, const rk_coll *c) {
  double gap = c->dur >= 0                   ? (double)c->ts - r->prev_end
               : c->ops_before > r->prev_ops ? (double)(c->ops_before - r->prev_ops) * UNTIMED_US
                                             : 0;
  return r->t + (gap > 0 ? gap : 0);
}

static bool try_fire(rk_set *s, uint32_t ix, const an_ranks_opts *o) {
  rk_inst *in = &s->inst[ix];
  for (uint32_t m = 0; m < in->nm; m++) {
    const uint32_t *e = s->mem[in->off + m];
    if (s->r[e[0]].pos != e[1]) return false;
  }
  double start = 0, min_ready = 0, dur = -1;
  in->straggler = -1;
  for (uint32_t m = 0; m < in->nm; m++) {
    const uint32_t *e = s->mem[in->off + m];
    rk_rank *r = &s->r[e[0]];
    const rk_coll *c = &r->c[e[1]];
    double ready = rank_ready(r, c);
    if (in->straggler < 0 || ready > start) {
      start = ready;
      in->straggler = (int)e[0];
    }
    if (m == 0 || ready < min_ready) min_ready = ready;
    if (c->dur >= 0 && (dur < 0 || (double)c->dur < dur)) dur = (double)c->dur;
  }
  if (o->beta_GBps > 0) dur = model_us(o, in->bytes);
  if (dur < 0) dur = UNTIMED_US; /* no rank timed it: an op without timing */
  in->start = start;
  in->dur = dur;
  in->wait = start - min_ready;
  int straggler = in->straggler;
  if (in->wait <= 0) in->straggler = -1; /* all arrived together: nobody held the others up */
  for (uint32_t m = 0; m < in->nm; m++) {
    const uint32_t *e = s->mem[in->off + m];
    rk_rank *r = &s->r[e[0]];
    const rk_coll *c = &r->c[e[1]];
    double ready = rank_ready(r, c);
    r->wait += start - ready;
    r->exposed += start + dur - ready;
    s->r[straggler].held_us += start - ready;
    r->t = start + dur;
    if (c->dur >= 0) r->prev_end = (double)(c->ts + c->dur);
    r->prev_ops = c->ops_before + (c->dur < 0); /* (the collective's own record too) */
    r->pos++;
  }
  if (in->straggler >= 0) s->r[in->straggler].straggled++;
  return true;
}

static int simulate(rk_set *s, const an_ranks_opts *o) {
  for (int i = 0; i < s->n; i++) {
    rk_rank *r = &s->r[i];
    r->t = 0;
    r->prev_end = (double)r->t0;
    r->prev_ops = 0;
    r->pos = 0;
  }
  for (;;) {
    bool progress = false, left = false;
    for (int i = 0; i < s->n; i++) {
      rk_rank *r = &s->r[i];
      while (r->pos < r->n && try_fire(s, r->c[r->pos].inst, o)) progress = true;
      if (r->pos < r->n) left = true;
    }
    if (!left) break;
    if (!progress) {
      for (int i = 0; i < s->n; i++) {
        rk_rank *r = &s->r[i];
        if (r->pos >= r->n) continue;
        const rk_coll *c = &r->c[r->pos];
        cli_error(s->cmd,
                  "the ranks wait for each other forever: rank %" PRId64 " is at %s #%" PRIu64
                  " of process group \"%s\" (node %" PRId64
                  "), which not every rank of the group reaches next",
                  r->rank, s->names.strs[c->name], c->k, s->pgs.strs[c->pg], c->id);
        return ETR_CLI_FAIL;
      }
    }
  }
  for (int i = 0; i < s->n; i++) {
    rk_rank *r = &s->r[i];
    double tail = (double)r->t1 - r->prev_end;
    if (r->untimed > r->prev_ops) tail += (double)(r->untimed - r->prev_ops) * UNTIMED_US;
    r->makespan = r->t + (tail > 0 ? tail : 0);
  }
  return ETR_CLI_OK;
}

int an_ranks_replay(const char *cmd, char *const *files, int n, const an_ranks_opts *o, FILE *f) {
  rk_set s;
  int rc = load(&s, cmd, files, n, true);
  if (rc != ETR_CLI_OK) goto done;
  if (s.ranks_note[0]) {
    cli_error(cmd, "the traces are not the ranks of one run: %s", s.ranks_note);
    rc = ETR_CLI_FAIL;
    goto done;
  }
  if (s.mismatch[0] || s.unmatched) {
    cli_error(cmd, "the ranks' collectives do not match: %s",
              s.mismatch[0] ? s.mismatch : "some collectives have no partner");
    rc = ETR_CLI_FAIL;
    goto done;
  }
  rc = simulate(&s, o);
  if (rc != ETR_CLI_OK) goto done;
  /* An extreme network model (--alpha-us 1e308 --beta-gbps 1e-300) overflows a double: the
   * times would be inf and the waits inf - inf, not a number. Say so rather than print them. */
  for (int i = 0; i < s.n; i++)
    if (!isfinite(s.r[i].makespan) || !isfinite(s.r[i].exposed) || !isfinite(s.r[i].wait)) {
      cli_error(cmd,
                "the network model overflows: the predicted times exceed the range of a double "
                "(rank %" PRId64 "); give a smaller --alpha-us or a larger --beta-gbps",
                s.r[i].rank);
      rc = ETR_CLI_FAIL;
      goto done;
    }
  fprintf(f, "replay of %d ranks (rank numbers: %s)\n", s.n, s.rank_source);
  if (o->beta_GBps > 0)
    fprintf(f, "network model: a collective takes %g us + bytes / %g GB/s\n", o->alpha_us,
            o->beta_GBps);
  else
    fprintf(f, "network: recorded (a collective takes the shortest time any rank spent in it)\n");
  uint64_t ops = 0, untimed = 0;
  for (int i = 0; i < s.n; i++) {
    ops += s.r[i].ops;
    untimed += s.r[i].untimed;
  }
  fprintf(f, "compute between collectives: as recorded on each rank");
  if (untimed) /* (said as single-trace replay says it) */
    fprintf(f,
            "; %" PRIu64
            " op(s) without timing cost %.3g us each, a collective no rank timed "
            "%s%s",
            untimed, UNTIMED_US, o->beta_GBps > 0 ? "the network model's time" : "as much",
            untimed == ops ? " (the traces have no timing: unit costs)" : "");
  fprintf(f, "; %zu collectives matched across ranks in %zu process group(s)\n", s.ninst, s.pgs.n);
  if (no_collective(&s)) fprintf(f, "%s\n", NO_COLL_NOTE);
  int slow = 0;
  for (int i = 1; i < s.n; i++)
    if (s.r[i].makespan > s.r[slow].makespan) slow = i;
  fprintf(f, "predicted makespan: %.1f us (rank %" PRId64 ")\n", s.n ? s.r[slow].makespan : 0.0,
          s.n ? s.r[slow].rank : 0);
  fprintf(f, "ranks:\n  %6s %11s %14s %14s %16s %14s %9s %12s %14s\n", "rank", "collectives",
          "recorded_us", "predicted_us", "comm_exposed_us", "comm_wait_us", "exposed%",
          "straggler_of", "others_wait_us");
  for (int i = 0; i < s.n; i++) {
    rk_rank *r = &s.r[i];
    fprintf(
        f, "  %6" PRId64 " %11zu %14" PRId64 " %14.1f %16.1f %14.1f %8.1f%% %12" PRIu64 " %14.1f\n",
        r->rank, r->n, r->t1 - r->t0, r->makespan, r->exposed, r->wait,
        r->makespan > 0 ? 100.0 * r->exposed / r->makespan : 0.0, r->straggled, r->held_us);
  }
  if (s.ninst) qsort(s.inst, s.ninst, sizeof *s.inst, cmp_inst);
  size_t lim = o->limit && o->limit < s.ninst ? o->limit : s.ninst;
  fprintf(f, "collectives (first %zu of %zu; straggler = the rank the others waited for)\n", lim,
          s.ninst);
  fprintf(f, "  %5s %-8s %-16s %12s %12s %10s %10s %10s\n", "#", "pg", "collective", "bytes",
          "start_us", "dur_us", "straggler", "wait_us");
  for (size_t i = 0; i < lim; i++) {
    rk_inst *in = &s.inst[i];
    char who[24] = "-";
    if (in->straggler >= 0) snprintf(who, sizeof who, "%" PRId64, s.r[in->straggler].rank);
    fprintf(f, "  %5zu %-8s %-16s %12.0f %12.1f %10.1f %10s %10.1f\n", i,
            s.pgs.strs[in->pg][0] ? cli_term(s.pgs.strs[in->pg]) : "-",
            cli_term(s.names.strs[in->name]), in->bytes, in->start, in->dur, who, in->wait);
  }
done:
  set_free(&s);
  return rc;
}

int an_ranks_net_option(const char *cmd, int opt, const char *arg, an_ranks_opts *o) {
  if (opt == 'a') {
    if (!cli_parse_double(cmd, "--alpha-us", arg, &o->alpha_us)) return ETR_CLI_USAGE;
    if (o->alpha_us < 0) return cli_usage(cmd, "--alpha-us must be >= 0");
    o->alpha_set = true;
  } else {
    if (!cli_parse_double(cmd, "--beta-gbps", arg, &o->beta_GBps)) return ETR_CLI_USAGE;
    if (!(o->beta_GBps > 0)) return cli_usage(cmd, "--beta-gbps must be > 0");
  }
  return 0;
}

int an_ranks_net_check(const char *cmd, const an_ranks_opts *o) {
  if (o->alpha_set && !(o->beta_GBps > 0))
    return cli_usage(cmd, "--alpha-us needs --beta-gbps (the network model has both)");
  return 0;
}
