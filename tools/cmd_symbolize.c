/* etr symbolize: resolve the native frames of a trace written in module mode
 * (ETR_SYMBOLIZE_MODULE: frames carry "module", "build_id", "offset") to function, source
 * file and line, on a machine that has the binaries (docs/CLI.md, docs/FORMAT.md).
 *
 * Streams: the header and every node are re-serialized as they are read (keys in file order,
 * the project's JSON escaping), so memory is bounded by the largest node and the tables after
 * "nodes". Modules are found at their recorded path (build-id checked when recorded), or by
 * build-id / basename under each --search-dir and by build-id under /usr/lib/debug; each
 * unique (module, offset) is resolved once (src/unwind/symbolize.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "json/writer.h"
#include "unwind/symbolize_search.h"
#include "unwind/unwind.h"

#define CMD "symbolize"

static void usage(FILE *f) {
  fprintf(f,
          "usage: etr symbolize [-o OUT] [--search-dir DIR ...] FILE\n"
          "\n"
          "Resolves the frames of a trace recorded in module mode (ETR_TRACE_SYMBOLIZE=module):\n"
          "each frame with \"module\" and \"offset\" gets the function \"name\", source\n"
          "\"filename\" and \"line\" from the module file (its \"build_id\" must match).\n"
          "Everything else is copied. FILE may be gzip-compressed; '-' reads stdin.\n"
          "\n"
          "  -o, --output OUT     write the resolved trace to OUT (default '-': stdout)\n"
          "  -d, --search-dir DIR also look for modules in DIR: DIR/.build-id/xx/rest[.debug]\n"
          "                       by build-id, then DIR/<module basename> (repeatable)\n"
          "\n"
          "Prints how many frames were resolved on stderr. Exit status 0, 1 on bad input or a\n"
          "write error, 2 on a bad command line.\n");
}

/* ---- re-serialization of reader values ---- */

static void put_double(etr__jw *w, double v) {
  if (!isfinite(v)) {  /* not valid JSON input; keep the file valid */
    etr__jw_double(w, v);
    return;
  }
  char tmp[48];
  int n = snprintf(tmp, sizeof tmp, "%.15g", v);
  if (strtod(tmp, NULL) != v) n = snprintf(tmp, sizeof tmp, "%.17g", v);
  for (int i = 0; i < n; i++)
    if (tmp[i] == ',') tmp[i] = '.';
  /* Stay a floating-point number ("2.0", not "2"). */
  if (strpbrk(tmp, ".eE") == NULL && n + 2 < (int)sizeof tmp) {
    memcpy(tmp + n, ".0", 3);
    n += 2;
  }
  etr__jw_raw(w, tmp, (size_t)n);
}

static void put_val(etr__jw *w, const etr_jval *v) {
  switch (v->kind) {
    case ETR_J_NULL: ETR__JW_LIT(w, "null"); break;
    case ETR_J_BOOL:
      if (v->v.b)
        ETR__JW_LIT(w, "true");
      else
        ETR__JW_LIT(w, "false");
      break;
    case ETR_J_INT: etr__jw_i64(w, v->v.i); break;
    case ETR_J_UINT: etr__jw_u64(w, v->v.u); break;
    case ETR_J_DOUBLE: put_double(w, v->v.d); break;
    case ETR_J_STRING: etr__jw_str(w, v->v.str.s, v->v.str.len); break;
    case ETR_J_ARRAY:
      etr__jw_char(w, '[');
      for (size_t i = 0; i < v->v.arr.n; i++) {
        if (i) etr__jw_char(w, ',');
        put_val(w, &v->v.arr.items[i]);
      }
      etr__jw_char(w, ']');
      break;
    case ETR_J_OBJECT:
      etr__jw_char(w, '{');
      for (size_t i = 0; i < v->v.obj.n; i++) {
        const etr_jmember *m = &v->v.obj.items[i];
        if (i) etr__jw_char(w, ',');
        etr__jw_str(w, m->key, m->key_len);
        etr__jw_char(w, ':');
        put_val(w, &m->val);
      }
      etr__jw_char(w, '}');
      break;
  }
}

/* A top-level key: the first one opens the object's first line. */
static void put_key(etr__jw *w, const char *key, bool *first) {
  etr__jw_raw(w, *first ? "\n " : ",\n ", *first ? 2 : 3);
  *first = false;
  etr__jw_str(w, key, strlen(key));
  etr__jw_raw(w, ": ", 2);
}

/* ---- frames ---- */

typedef struct counts {
  uint64_t frames, with_module, resolved, unresolved;
} counts;

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Build-id bytes from hex; 0 bytes when absent or malformed (then not checked). */
static size_t parse_build_id(const etr_jval *v, uint8_t *out, size_t cap) {
  if (v == NULL || v->kind != ETR_J_STRING || v->v.str.len % 2 || v->v.str.len / 2 > cap)
    return 0;
  for (size_t i = 0; i < v->v.str.len / 2; i++) {
    int hi = hexval(v->v.str.s[2 * i]), lo = hexval(v->v.str.s[2 * i + 1]);
    if (hi < 0 || lo < 0) return 0;
    out[i] = (uint8_t)(hi << 4 | lo);
  }
  return v->v.str.len / 2;
}

static bool key_is(const etr_jmember *m, const char *k) {
  return m->key_len == strlen(k) && memcmp(m->key, k, m->key_len) == 0;
}

/* One frame: resolved when it names a module and an offset, else copied. */
static int put_frame(etr__jw *w, etr__symbolizer *s, const etr_jval *fr, counts *c) {
  c->frames++;
  const etr_jval *mod = fr->kind == ETR_J_OBJECT ? etr_jobj_get(fr, "module") : NULL;
  const etr_jval *off = fr->kind == ETR_J_OBJECT ? etr_jobj_get(fr, "offset") : NULL;
  uint64_t vaddr;
  if (mod == NULL || mod->kind != ETR_J_STRING || off == NULL ||
      !((off->kind == ETR_J_INT && off->v.i >= 0) || off->kind == ETR_J_UINT)) {
    put_val(w, fr);
    return 0;
  }
  vaddr = off->kind == ETR_J_INT ? (uint64_t)off->v.i : off->v.u;
  c->with_module++;
  uint8_t bid[64];
  size_t bid_len = parse_build_id(etr_jobj_get(fr, "build_id"), bid, sizeof bid);
  etr__symbol sym;
  int rc = etr__symbolize(s, mod->v.str.s, bid, bid_len, vaddr, 0, &sym);
  if (rc < 0) return rc;
  if (rc == 0) {
    c->resolved++;
  } else {
    c->unresolved++;
    if (sym.line == 0) {  /* nothing learned: keep the frame as it was */
      put_val(w, fr);
      return 0;
    }
  }
  ETR__JW_LIT(w, "{\"name\":");
  etr__jw_str(w, sym.name, strlen(sym.name));
  ETR__JW_LIT(w, ",\"filename\":");
  etr__jw_str(w, sym.filename, strlen(sym.filename));
  ETR__JW_LIT(w, ",\"line\":");
  etr__jw_i64(w, sym.line);
  for (size_t i = 0; i < fr->v.obj.n; i++) {
    const etr_jmember *m = &fr->v.obj.items[i];
    if (key_is(m, "name") || key_is(m, "filename") || key_is(m, "line")) continue;
    etr__jw_char(w, ',');
    etr__jw_str(w, m->key, m->key_len);
    etr__jw_char(w, ':');
    put_val(w, &m->val);
  }
  etr__jw_char(w, '}');
  return 0;
}

static int put_frames(etr__jw *w, etr__symbolizer *s, const etr_jval *frames, counts *c) {
  if (frames->kind != ETR_J_ARRAY) {
    put_val(w, frames);
    return 0;
  }
  etr__jw_char(w, '[');
  for (size_t i = 0; i < frames->v.arr.n; i++) {
    etr__jw_raw(w, i ? ",\n  " : "\n  ", i ? 4 : 3);
    int rc = put_frame(w, s, &frames->v.arr.items[i], c);
    if (rc < 0) return rc;
  }
  if (frames->v.arr.n) etr__jw_raw(w, "\n ", 2);
  etr__jw_char(w, ']');
  return 0;
}

/* ---- the command ---- */

static bool same_file(const char *a, const char *b) {
  struct stat sa, sb;
  return strcmp(a, "-") != 0 && strcmp(b, "-") != 0 && stat(a, &sa) == 0 && stat(b, &sb) == 0 &&
         sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int etr_cmd_symbolize(int argc, char **argv) {
  if (etr_cli_wants_help(argc, argv)) {
    usage(stdout);
    return ETR_CLI_OK;
  }
  const char *in_path = NULL, *out_path = "-";
  const char **dirs = calloc((size_t)argc, sizeof *dirs);
  size_t ndirs = 0;
  if (dirs == NULL) {
    etr_cli_error(CMD, "out of memory");
    return ETR_CLI_FAIL;
  }
  bool opts = true;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (opts && strcmp(a, "--") == 0) {
      opts = false;
    } else if (opts && (!strcmp(a, "-o") || !strcmp(a, "--output") || !strcmp(a, "-d") ||
                        !strcmp(a, "--search-dir"))) {
      if (i + 1 >= argc) {
        free(dirs);
        return etr_cli_usage(CMD, "%s wants a value", a);
      }
      if (a[1] == 'o' || a[2] == 'o')
        out_path = argv[++i];
      else
        dirs[ndirs++] = argv[++i];
    } else if (opts && !strncmp(a, "--output=", 9)) {
      out_path = a + 9;
    } else if (opts && !strncmp(a, "--search-dir=", 13)) {
      dirs[ndirs++] = a + 13;
    } else if (!opts && in_path == NULL) {
      in_path = a; /* after "--" even "-x" is a file name */
    } else if (etr_cli_operand(CMD, a, &in_path) != 0) {
      free(dirs);
      return ETR_CLI_USAGE;
    }
  }
  if (in_path == NULL) {
    free(dirs);
    return etr_cli_usage(CMD, "no input file");
  }
  if (same_file(in_path, out_path)) {
    free(dirs);
    etr_cli_error(CMD, "%s: the output would overwrite the input", out_path);
    return ETR_CLI_FAIL;
  }

  int result = ETR_CLI_FAIL;
  etr__symbolizer *s = etr__symbolizer_new();
  bool to_stdout = strcmp(out_path, "-") == 0;
  int fd = -1;
  bool created = false;
  etr__jw w;
  bool jw_ok = false;
  etr_cli_input in = {0};
  counts c = {0};
  if (s == NULL) {
    etr_cli_error(CMD, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < ndirs; i++) {
    if (etr__symbolizer_add_search_dir(s, dirs[i]) != 0) {
      etr_cli_error(CMD, "out of memory");
      goto done;
    }
  }
  if (etr_cli_open(&in, CMD, in_path, NULL) != 0) goto done;
  fd = to_stdout ? STDOUT_FILENO : open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    etr_cli_error(CMD, "%s: cannot create: %s", out_path, strerror(errno));
    goto done;
  }
  created = !to_stdout;
  if (etr__jw_init(&w, fd, 1 << 20) != 0) {
    etr_cli_error(CMD, "out of memory");
    goto done;
  }
  jw_ok = true;

  /* Header: the keys before "nodes", in file order. */
  const etr_rheader *h = etr_reader_header(in.r);
  size_t nkeys;
  const char *const *keys = etr_reader_top_keys(in.r, &nkeys);
  etr__jw_char(&w, '{');
  bool first = true;
  for (size_t i = 0; i < nkeys && strcmp(keys[i], "nodes") != 0; i++) {
    const char *k = keys[i];
    if (!strcmp(k, "schema") && h->schema != NULL) {
      put_key(&w, k, &first);
      etr__jw_str(&w, h->schema, strlen(h->schema));
    } else if (!strcmp(k, "pid")) {
      put_key(&w, k, &first);
      etr__jw_i64(&w, h->pid);
    } else if (!strcmp(k, "time") && h->time != NULL) {
      put_key(&w, k, &first);
      etr__jw_str(&w, h->time, strlen(h->time));
    } else if (!strcmp(k, "start_ts")) {
      put_key(&w, k, &first);
      etr__jw_i64(&w, h->start_ts);
    }
    /* else an unknown header key: the reader keeps no value for it (it warned) */
  }
  put_key(&w, "nodes", &first);
  etr__jw_char(&w, '[');

  const etr_rnode *node;
  int rc;
  uint64_t n = 0;
  while ((rc = etr_cli_next(&in, &node)) == 1) {
    if (n++)
      etr__jw_raw(&w, ",\n  ", 4);
    else
      etr__jw_raw(&w, "\n  ", 3);
    put_val(&w, node->raw);
    if (w.len >= (1 << 20) && etr__jw_flush(&w) != 0) break;
  }
  if (rc < 0) goto done;
  if (w.err == 0 && etr_cli_finish(&in) != 0) goto done;
  etr__jw_raw(&w, n ? "\n ]" : "]", n ? 3 : 1);

  /* Trailer: finish_ts and the tables, in file order; "frames" resolved. */
  keys = etr_reader_top_keys(in.r, &nkeys);
  size_t i = 0;
  while (i < nkeys && strcmp(keys[i], "nodes") != 0) i++;
  for (i++; i < nkeys && w.err == 0; i++) {
    const char *k = keys[i];
    if (!strcmp(k, "finish_ts")) {
      put_key(&w, k, &first);
      etr__jw_i64(&w, etr_reader_finish_ts(in.r));
      continue;
    }
    const etr_jval *v = etr_reader_trailer(in.r, k);
    if (v == NULL) continue;
    put_key(&w, k, &first);
    if (!strcmp(k, "frames")) {
      if (put_frames(&w, s, v, &c) < 0) {
        etr_cli_error(CMD, "out of memory");
        goto done;
      }
    } else {
      put_val(&w, v);
    }
  }
  etr__jw_raw(&w, "\n}\n", 3);
  etr__jw_flush(&w);
  if (w.err != 0) {
    etr_cli_error(CMD, "%s: write error: %s", to_stdout ? "<stdout>" : out_path,
                  strerror(w.err));
    goto done;
  }
  if (!to_stdout && close(fd) != 0) {
    fd = -1;
    etr_cli_error(CMD, "%s: write error: %s", out_path, strerror(errno));
    goto done;
  }
  fd = -1;
  fprintf(stderr,
          "etr symbolize: %" PRIu64 " frames resolved, %" PRIu64 " unresolved (%" PRIu64
          " with a module, of %" PRIu64 " frames)\n",
          c.resolved, c.unresolved, c.with_module, c.frames);
  result = ETR_CLI_OK;
done:
  if (jw_ok) etr__jw_free(&w);
  if (fd >= 0 && !to_stdout) close(fd);
  if (result != ETR_CLI_OK && created) unlink(out_path);  /* no half-written output */
  etr_cli_close(&in);
  etr__symbolizer_free(s);
  free(dirs);
  return result;
}
