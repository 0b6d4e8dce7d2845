/* etr flame: folded stacks ("outer;...;inner;op count") from the traceback tables of a
 * trace, for flamegraph.pl, inferno and speedscope.
 *
 * Memory: one counter per distinct (traceback, op name) pair seen in the nodes, plus the
 * "frames" and "tracebacks" tables, which the reader keeps (they come after the nodes).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lib_an_util.h"

#define CMD "flame"

static void help(void) {
  printf(
      "usage: etr flame [options] FILE [-o OUT]\n"
      "\n"
      "Folded stacks from the trace's traceback tables: one line per distinct traceback\n"
      "and op name (tools add up equal lines: without --lines, two tracebacks may read alike),\n"
      "\"frame;frame;...;op COUNT\", outermost frame first, the op's name as the leaf.\n"
      "Feed it to flamegraph.pl (flamegraph.pl out.folded > out.svg), inferno, or\n"
      "speedscope (which opens folded files). Only ops that carry a \"traceback\" attr count.\n"
      "A trace without tracebacks gives empty output and a note on stderr (exit 0).\n"
      "\n"
      "options:\n"
      "  -o, --output OUT     write to OUT (default: stdout)\n"
      "  --weight count|time  count ops (default) or sum their exclusive durations (us;\n"
      "                       needs timing)\n"
      "  --no-op              stop at the innermost frame (leave out the op name)\n"
      "  --lines              append \" (file:line)\" to each frame\n"
      "  --max-depth N        keep the N innermost frames of a stack (default 256, the\n"
      "                       recorder's own limit); the rest become one \"[... K frames]\"\n"
      "  --max-bytes N        stop with an error once the output reaches N bytes (default\n"
      "                       1073741824; 0 = no limit): a hostile trace cannot fill a disk\n"
      "  -h, --help           this text\n"
      "\n"
      "';' in names becomes ':', control characters become spaces, invalid UTF-8 U+FFFD.\n"
      "FILE may be gzip- or zstd-compressed; '-' reads stdin. Exit status: 0 ok, 1 bad\n"
      "input, 2 usage error.\n");
}

typedef struct flame {
  an_strtab keys;    /* "<traceback id>\x01<op name>" */
  uint64_t *weights; /* per key */
  size_t cap;
  uint64_t n_tb_nodes, n_nodes;
  bool by_time;
} flame;

static bool add(flame *fl, const rd_rnode *n) {
  char buf[64];
  int len = snprintf(buf, sizeof buf, "%llu\x01", (unsigned long long)n->traceback);
  size_t nl = n->name ? n->name_len : 0;
  char *key = malloc((size_t)len + nl + 1);
  if (key == NULL) return false;
  memcpy(key, buf, (size_t)len);
  if (nl) memcpy(key + len, n->name, nl);
  uint32_t ix = an_strtab_intern(&fl->keys, key, (size_t)len + nl);
  free(key);
  if (ix == UINT32_MAX) return false;
  if (ix >= fl->cap) {
    size_t nc = fl->cap ? fl->cap * 2 : 256;
    while (nc <= ix) nc *= 2;
    uint64_t *nw = realloc(fl->weights, nc * sizeof *nw);
    if (nw == NULL) return false;
    memset(nw + fl->cap, 0, (nc - fl->cap) * sizeof *nw);
    fl->weights = nw;
    fl->cap = nc;
  }
  uint64_t w = 1;
  if (fl->by_time) w = n->has_timing && n->exclusive_dur > 0 ? (uint64_t)n->exclusive_dur : 0;
  fl->weights[ix] += w;
  return true;
}

/* A traceback's element as an index into "frames": a whole number >= 0 (not a negative one,
 * a double, a bool or a string, which an_jint would have taken as -1, 1 or a cut value). */
static bool frame_index(const rd_jval *x, uint64_t *fi) {
  if (x->kind == ETR_J_UINT) {
    *fi = x->v.u;
    return true;
  }
  if (x->kind == ETR_J_INT && x->v.i >= 0) {
    *fi = (uint64_t)x->v.i;
    return true;
  }
  return false;
}

static void frame_text(an_out *o, const rd_jval *frames, uint64_t fi, bool lines) {
  const rd_jval *fr = frames && frames->kind == ETR_J_ARRAY && fi < frames->v.arr.n
                          ? &frames->v.arr.items[fi]
                          : NULL;
  const rd_jval *name = fr ? rd_jobj_get(fr, "name") : NULL;
  if (name && name->kind == ETR_J_STRING && name->v.str.len > 0) {
    an_out_sanitized(o, name->v.str.s, name->v.str.len, ";", ':');
  } else {
    an_out_fmt(o, "[frame %llu]", (unsigned long long)fi);
  }
  if (lines && fr) {
    const rd_jval *file = rd_jobj_get(fr, "filename");
    const rd_jval *line = rd_jobj_get(fr, "line");
    if (file && file->kind == ETR_J_STRING && file->v.str.len > 0) {
      an_out_cstr(o, " (");
      an_out_sanitized(o, file->v.str.s, file->v.str.len, ";", ':');
      if (line && (line->kind == ETR_J_INT) && line->v.i > 0)
        an_out_fmt(o, ":%lld", (long long)line->v.i);
      an_out_cstr(o, ")");
    }
  }
}

int cmd_flame(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    help();
    return ETR_CLI_OK;
  }
  const char *file = NULL, *out_path = NULL;
  bool with_op = true, lines = false, by_time = false;
  uint64_t max_depth = 256, max_bytes = 1ull << 30;
  static const struct option opts[] = {{"output", required_argument, NULL, 'o'},
                                       {"weight", required_argument, NULL, 'w'},
                                       {"no-op", no_argument, NULL, 'N'},
                                       {"lines", no_argument, NULL, 'L'},
                                       {"max-depth", required_argument, NULL, 'D'},
                                       {"max-bytes", required_argument, NULL, 'B'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  optind = 1;
  opterr = 0;
  for (int c; (c = getopt_long(argc, argv, ":ho:", opts, NULL)) != -1;) {
    if (c == 'o') {
      out_path = optarg;
    } else if (c == 'w') {
      if (strcmp(optarg, "count") != 0 && strcmp(optarg, "time") != 0)
        return cli_usage(CMD, "--weight takes count or time, not '%s'", optarg);
      by_time = optarg[0] == 't';
    } else if (c == 'N') {
      with_op = false;
    } else if (c == 'L') {
      lines = true;
    } else if (c == 'D' || c == 'B') {
      if (!cli_parse_u64(CMD, c == 'D' ? "--max-depth" : "--max-bytes", optarg,
                         c == 'D' ? &max_depth : &max_bytes))
        return ETR_CLI_USAGE;
      if (c == 'D' && max_depth == 0) return cli_usage(CMD, "--max-depth must be at least 1");
    } else {
      return cli_getopt_error(CMD, c, argv);
    }
  }
  if (cli_one_file(CMD, argc, argv, &file)) return ETR_CLI_USAGE;

  cli_input in;
  if (cli_open(&in, CMD, file, NULL) != 0) return ETR_CLI_FAIL;
  if (cli_check_schema(CMD, file, rd_header(in.r)) != ETR_CLI_OK) {
    cli_close(&in);
    return ETR_CLI_FAIL;
  }
  flame fl;
  memset(&fl, 0, sizeof fl);
  fl.by_time = by_time;
  const rd_rnode *n;
  int rc;
  int status = ETR_CLI_OK;
  while ((rc = cli_next(&in, &n)) == 1) {
    fl.n_nodes++;
    if (!n->has_traceback) continue;
    fl.n_tb_nodes++;
    if (!add(&fl, n)) {
      cli_error(CMD, "%s: byte %llu: out of memory", file, (unsigned long long)n->offset);
      status = ETR_CLI_FAIL;
      break;
    }
  }
  if (status == ETR_CLI_OK && rc == 0) rc = cli_finish(&in);
  if (status == ETR_CLI_OK && rc == 0 && fl.n_tb_nodes > 0 && cli_no_skipped(CMD, in.r)) rc = -1;
  if (rc != 0) status = ETR_CLI_FAIL;
  const rd_jval *frames = status == ETR_CLI_OK ? rd_trailer(in.r, "frames") : NULL;
  const rd_jval *tbs = status == ETR_CLI_OK ? rd_trailer(in.r, "tracebacks") : NULL;
  if (status == ETR_CLI_OK && fl.n_tb_nodes > 0 &&
      (tbs == NULL || tbs->kind != ETR_J_ARRAY || frames == NULL || frames->kind != ETR_J_ARRAY)) {
    cli_error(CMD,
              "%s: %llu node(s) carry a traceback attr but the \"frames\" / "
              "\"tracebacks\" tables are missing or not arrays",
              file, (unsigned long long)fl.n_tb_nodes);
    status = ETR_CLI_FAIL;
  }
  FILE *f = NULL;
  if (status == ETR_CLI_OK) {
    f = cli_open_output(CMD, out_path);
    if (f == NULL) status = ETR_CLI_FAIL;
  }
  uint64_t bad_tb = 0, cut_stacks = 0, bad_frames = 0;
  bool too_big = false;
  if (status == ETR_CLI_OK) {
    an_out o = {.f = f};
    for (size_t k = 0; k < fl.keys.n; k++) {
      if (fl.weights[k] == 0) continue;
      if (max_bytes && o.bytes >= max_bytes) {
        too_big = true;
        break;
      }
      const char *key = fl.keys.strs[k];
      char *sepp = strchr(key, '\x01');
      uint64_t tb = strtoull(key, NULL, 10);
      const char *op = sepp + 1;
      size_t op_len = fl.keys.lens[k] - (size_t)(op - key);
      const rd_jval *seq = tb < tbs->v.arr.n ? &tbs->v.arr.items[tb] : NULL;
      bool any = false;
      if (seq != NULL && seq->kind == ETR_J_ARRAY) {
        size_t depth = seq->v.arr.n;
        if (depth > max_depth) { /* the innermost max_depth frames, under one for the rest */
          an_out_fmt(&o, "[... %zu frames]", depth - (size_t)max_depth);
          any = true;
          depth = (size_t)max_depth;
          cut_stacks++;
        }
        for (size_t j = depth; j-- > 0;) { /* innermost first in the file */
          uint64_t fi;
          if (any) an_out_raw(&o, ";", 1);
          any = true;
          if (!frame_index(&seq->v.arr.items[j], &fi)) { /* (was left out, or 1.5 was 1) */
            bad_frames++;
            an_out_cstr(&o, "[frame ?]");
            continue;
          }
          if (fi >= frames->v.arr.n) bad_frames++;
          frame_text(&o, frames, fi, lines);
        }
      } else {
        bad_tb++;
        an_out_fmt(&o, "[traceback %llu missing]", (unsigned long long)tb);
        any = true;
      }
      if (with_op || !any) {
        if (any) an_out_raw(&o, ";", 1);
        if (op_len) {
          an_out_sanitized(&o, op, op_len, ";", ':');
        } else {
          an_out_cstr(&o, "[op]");
        }
      }
      an_out_fmt(&o, " %llu\n", (unsigned long long)fl.weights[k]);
    }
    if (too_big) {
      bool to_file = out_path && strcmp(out_path, "-");
      cli_error(CMD, "%s: the output reached --max-bytes (%llu bytes): stopped; %s", file,
                (unsigned long long)max_bytes,
                to_file ? "nothing was written" : "what was written is incomplete");
      if (to_file) {
        fclose(f);
        cli_discard_output(out_path); /* (its temporary file: out_path stays as it was) */
      } else {
        fflush(f);
      }
      status = ETR_CLI_FAIL;
    } else {
      status = cli_close_output(CMD, f, out_path);
    }
  }
  if (status == ETR_CLI_OK) {
    if (fl.n_tb_nodes == 0) {
      fprintf(stderr,
              "etr flame: note: %s has no tracebacks (no node carries a traceback "
              "attr; record with tracebacks on): the output is empty\n",
              strcmp(file, "-") == 0 ? "<stdin>" : file);
    } else if (cut_stacks) {
      fprintf(stderr, "etr flame: note: %llu stack(s) deeper than --max-depth %llu were cut\n",
              (unsigned long long)cut_stacks, (unsigned long long)max_depth);
    }
    /* The recorder's tables were full: ops of the stacks it left out have no traceback. */
    const rd_jval *etr = rd_trailer(in.r, "etr");
    int64_t tb_cut = an_jint(rd_jobj_get(rd_jobj_get(etr, "stats"), "tracebacks_cut"), 0);
    if (tb_cut > 0)
      fprintf(stderr,
              "etr flame: note: the recorder left %lld stack(s) out of its full traceback "
              "tables (tracebacks_cut): their ops have no traceback and are not counted\n",
              (long long)tb_cut);
    if (fl.n_tb_nodes > 0 && bad_tb) {
      fprintf(stderr, "etr flame: note: %llu stack(s) name a traceback the table does not have\n",
              (unsigned long long)bad_tb);
    }
    if (fl.n_tb_nodes > 0 && bad_frames) {
      fprintf(stderr,
              "etr flame: note: %llu frame reference(s) in the stacks name no entry of the "
              "\"frames\" table ([frame N] past its end, [frame ?] not an index)\n",
              (unsigned long long)bad_frames);
    }
    if (by_time && fl.n_tb_nodes > 0 && fl.keys.n > 0) {
      bool any = false;
      for (size_t k = 0; k < fl.keys.n; k++) any |= fl.weights[k] > 0;
      if (!any)
        fprintf(stderr,
                "etr flame: note: --weight time but no op has a recorded exclusive "
                "duration above 0\n");
    }
  }
  cli_close(&in);
  an_strtab_free(&fl.keys);
  free(fl.weights);
  return status;
}
