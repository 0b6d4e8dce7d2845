/* fuzz_reader — the streaming trace reader (src/json/reader.h) and the validator of
 * `etr validate` (tools/cmd_validate.c) on arbitrary bytes.
 *
 * Input: one mode byte, then the file's bytes (a trace, a gzip'd trace, or anything).
 * Mode bits:
 *   0-1  0, 3: the hand parser; 1: yajl (ETR_READER_BACKEND); 2: both parsers on the same
 *        bytes, compared node by node (same nodes with the same trees, same end: both reach
 *        the end of "nodes" and finish alike, or both fail)
 *   2    etr validate --strict
 *   3    etr validate prints its problem lines (to stdout, which is /dev/null here);
 *        otherwise --quiet
 * Modes 0, 1 and 3 run cmd_validate in process on the bytes, written to a memfd and
 * opened as /proc/self/fd/N (so the reader's open/fstat/read path is the real one).
 * The only oracle besides the sanitizers is the comparison of mode 2 (and that validate
 * returns 0 or 1, never 2, on a file operand).
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include "json/reader.h"

int cmd_validate(int argc, char **argv);

static int g_fd = -1;
static char g_path[64];

#define FUZZ_TARGET "fuzz_reader"
#include "fuzz_check.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  setenv("ETR_PROGRESS", "0", 1);
  g_fd = memfd_create("fuzz_reader", 0);
  if (g_fd < 0) {
    perror("memfd_create");
    abort();
  }
  snprintf(g_path, sizeof g_path, "/proc/self/fd/%d", g_fd);
  /* validate prints a verdict line per input: keep it off the terminal. libFuzzer's own
   * output goes to stderr. */
  int nul = open("/dev/null", O_WRONLY);
  if (nul >= 0) {
    dup2(nul, 1);
    close(nul);
  }
  return 0;
}

static void put_file(const uint8_t *data, size_t size) {
  if (ftruncate(g_fd, 0) != 0) abort();
  size_t off = 0;
  while (off < size) {
    ssize_t n = pwrite(g_fd, data + off, size - off, (off_t)off);
    if (n <= 0) abort();
    off += (size_t)n;
  }
}

/* ---- mode 2: both parsers compared ---- */

/* Known difference, not ours to fix: yajl decodes a \u escape of a high surrogate followed
 * by any other \u escape as a pair (\ud834\u0041 becomes U+1D041, the 'A' is lost) and a
 * lone high surrogate as '?'; the hand parser writes U+FFFD for the lone surrogate and
 * keeps what follows. When the input holds such an escape, strings are not compared (nor
 * the warning counts, which count replacements); everything else still is. */
static bool g_loose_strings;

static bool has_high_surrogate_escape(const uint8_t *p, size_t n) {
  for (size_t i = 0; i + 3 < n; i++)
    if (p[i] == '\\' && p[i + 1] == 'u' && (p[i + 2] | 0x20) == 'd' && strchr("89abAB", p[i + 3]) &&
        p[i + 3])
      return true;
  return false;
}

/* The same for gzip input (the reader inflates gzip by its magic bytes): looked for in the
 * inflated bytes, up to 4 MiB of them. */
static bool gz_has_high_surrogate_escape(const uint8_t *p, size_t n) {
  if (n < 2 || p[0] != 0x1f || p[1] != 0x8b) return false;
  static uint8_t out[4u << 20];
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) return true;
  zs.next_in = (Bytef *)p;
  zs.avail_in = (uInt)n;
  zs.next_out = out;
  zs.avail_out = sizeof out;
  int zr;
  do { /* gzip members one after the other, as the reader reads them */
    zr = inflate(&zs, Z_NO_FLUSH);
    if (zr == Z_STREAM_END && zs.avail_in > 0) zr = inflateReset(&zs);
  } while (zr == Z_OK && zs.avail_in > 0 && zs.avail_out > 0);
  size_t got = sizeof out - zs.avail_out;
  inflateEnd(&zs);
  return has_high_surrogate_escape(out, got);
}

static bool same_str(const char *a, size_t an, const char *b, size_t bn) {
  return g_loose_strings || (an == bn && !memcmp(a, b, an));
}

static void same_val(const rd_jval *a, const rd_jval *b, int64_t id, int depth) {
  CHECK(a->kind == b->kind, "node %lld: value kinds %d vs %d (depth %d)", (long long)id,
        (int)a->kind, (int)b->kind, depth);
  switch (a->kind) {
    case ETR_J_NULL:
      break;
    case ETR_J_BOOL:
      CHECK(a->v.b == b->v.b, "node %lld: bool", (long long)id);
      break;
    case ETR_J_INT:
      CHECK(a->v.i == b->v.i, "node %lld: int", (long long)id);
      break;
    case ETR_J_UINT:
      CHECK(a->v.u == b->v.u, "node %lld: uint", (long long)id);
      break;
    case ETR_J_DOUBLE:
      CHECK(memcmp(&a->v.d, &b->v.d, sizeof(double)) == 0, "node %lld: double %.17g vs %.17g",
            (long long)id, a->v.d, b->v.d);
      break;
    case ETR_J_STRING:
      CHECK(same_str(a->v.str.s, a->v.str.len, b->v.str.s, b->v.str.len), "node %lld: string",
            (long long)id);
      break;
    case ETR_J_ARRAY:
      CHECK(a->v.arr.n == b->v.arr.n, "node %lld: array length", (long long)id);
      for (size_t i = 0; i < a->v.arr.n; i++)
        same_val(&a->v.arr.items[i], &b->v.arr.items[i], id, depth + 1);
      break;
    case ETR_J_OBJECT:
      CHECK(a->v.obj.n == b->v.obj.n, "node %lld: object size", (long long)id);
      for (size_t i = 0; i < a->v.obj.n; i++) {
        const rd_jmember *x = &a->v.obj.items[i], *y = &b->v.obj.items[i];
        CHECK(same_str(x->key, x->key_len, y->key, y->key_len), "node %lld: key", (long long)id);
        same_val(&x->val, &y->val, id, depth + 1);
      }
      break;
  }
}

static void same_node(const rd_rnode *a, const rd_rnode *b) {
  CHECK(a->offset == b->offset, "node offsets %llu vs %llu", (unsigned long long)a->offset,
        (unsigned long long)b->offset);
  CHECK(a->id == b->id, "ids");
  CHECK(same_str(a->name, a->name_len, b->name, b->name_len), "names");
  CHECK(a->ctrl_deps == b->ctrl_deps, "ctrl_deps");
  CHECK(a->has_timing == b->has_timing && a->ts == b->ts && a->inclusive_dur == b->inclusive_dur &&
            a->exclusive_dur == b->exclusive_dur,
        "timing");
  CHECK(a->missing_attrs == b->missing_attrs && a->n_attrs == b->n_attrs, "attrs");
  CHECK(a->has_traceback == b->has_traceback && a->traceback == b->traceback, "traceback");
  CHECK(a->rf_id == b->rf_id && a->tid == b->tid && a->seq_id == b->seq_id, "base attrs");
  CHECK((a->raw == NULL) == (b->raw == NULL), "raw");
  if (a->raw) same_val(a->raw, b->raw, a->id, 0);
}

static bool too_deep(const rd_reader *r) { return strstr(rd_error(r), "nesting too deep") != NULL; }

static int open_with(const char *backend, rd_reader **r) {
  setenv("ETR_READER_BACKEND", backend, 1);
  return rd_open(g_path, NULL, r);
}

static void compare_backends(void) {
  rd_reader *h = NULL, *y = NULL;
  int rh = open_with("hand", &h);
  int ry = open_with("yajl", &y);
  CHECK(h && y, "out of memory");
  if (rh == 0 && ry == 0) {
    const rd_rheader *hh = rd_header(h), *yh = rd_header(y);
    CHECK(hh->pid == yh->pid && hh->start_ts == yh->start_ts, "header numbers");
    CHECK((hh->schema == NULL) == (yh->schema == NULL) &&
              (!hh->schema || g_loose_strings || !strcmp(hh->schema, yh->schema)),
          "schema \"%s\" vs \"%s\"", hh->schema ? hh->schema : "(null)",
          yh->schema ? yh->schema : "(null)");
    CHECK((hh->time == NULL) == (yh->time == NULL) &&
              (!hh->time || g_loose_strings || !strcmp(hh->time, yh->time)),
          "time");
    for (;;) {
      const rd_rnode *a, *b;
      rh = rd_next(h, &a);
      ry = rd_next(y, &b);
      if (rh == 1 && ry == 1) {
        same_node(a, b);
        continue;
      }
      /* Both stop at the same node: the end of "nodes" (0) or an error (< 0). Known
       * difference: the hand parser recurses and refuses nesting deeper than 1024; yajl's
       * builder does not recurse and has no limit (tests/cli/test_reader.c). */
      if (rh < 0 && ry >= 0 && too_deep(h)) break;
      CHECK(rh == ry || (rh < 0 && ry < 0), "next: hand %d, yajl %d (%s | %s)", rh, ry, rd_error(h),
            rd_error(y));
      break;
    }
    if (rh == 0 && ry == 0) {
      rh = rd_finish(h);
      ry = rd_finish(y);
      if (rh < 0 && ry == 0 && too_deep(h)) ry = rh;
      CHECK((rh == 0) == (ry == 0), "finish: hand %d, yajl %d (%s | %s)", rh, ry, rd_error(h),
            rd_error(y));
      if (rh == 0) {
        CHECK(rd_finish_ts(h) == rd_finish_ts(y), "finish_ts");
        size_t nh, ny;
        const char *const *kh = rd_top_keys(h, &nh);
        const char *const *ky = rd_top_keys(y, &ny);
        CHECK(nh == ny, "top-level key count %zu vs %zu", nh, ny);
        for (size_t i = 0; i < nh; i++) {
          CHECK(g_loose_strings || !strcmp(kh[i], ky[i]), "top-level key %zu", i);
          const rd_jval *th = rd_trailer(h, kh[i]), *ty = rd_trailer(y, ky[i]);
          CHECK((th == NULL) == (ty == NULL), "trailer %s", kh[i]);
          if (th) same_val(th, ty, -1, 0);
        }
        CHECK(g_loose_strings || rd_warnings(h) == rd_warnings(y), "warnings %llu vs %llu",
              (unsigned long long)rd_warnings(h), (unsigned long long)rd_warnings(y));
      }
    }
  } else if (!(rh < 0 && ry == 0 && too_deep(h))) {
    CHECK(rh != 0 && ry != 0, "open: hand %d, yajl %d (%s | %s)", rh, ry, rd_error(h), rd_error(y));
  }
  rd_close(h);
  rd_close(y);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  uint8_t mode = data[0];
  put_file(data + 1, size - 1);
  if ((mode & 3) == 2) {
    g_loose_strings = has_high_surrogate_escape(data + 1, size - 1) ||
                      gz_has_high_surrogate_escape(data + 1, size - 1);
    compare_backends();
    return 0;
  }
  setenv("ETR_READER_BACKEND", (mode & 3) == 1 ? "yajl" : "hand", 1);
  char *argv[8];
  int argc = 0;
  argv[argc++] = "validate";
  if (mode & 4) argv[argc++] = "--strict";
  if (!(mode & 8)) argv[argc++] = "--quiet";
  argv[argc++] = "--max";
  argv[argc++] = "3";
  argv[argc++] = g_path;
  argv[argc] = NULL;
  int rc = cmd_validate(argc, argv);
  CHECK(rc == 0 || rc == 1, "etr validate returned %d", rc);
  return 0;
}
