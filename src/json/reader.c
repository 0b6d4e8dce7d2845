/* Streaming trace reader (reader.h): the parts both parsers share, and the API.
 *
 * Input comes from the byte source (reader_input.c: files, pipes, gzip, zstd). Parsing,
 * either
 *  - the hand parser (default, reader_hand.c): pulls one step at a time (a top-level member
 *    or one node) from an input window, building the value tree directly in an arena; a
 *    step that runs off the window is rolled back and redone after a refill;
 *  - or yajl (ETR_READER_BACKEND=yajl, reader_yajl.c): yajl calls us back token by token and
 *    the callbacks build the same trees. yajl is a push parser and one block holds many
 *    nodes, so the completed nodes of a block wait in a queue until rd_next hands them over.
 * Both hand each node's tree to the node builder (reader_node.c, etr__rd_node_done).
 * This file: the arenas, errors and warnings, UTF-8 checks, the top-level keys and header
 * values, the source's answers as the parsers take them, and the API. reader_int.h holds
 * what the files share.
 * Node trees live in a FIFO arena whose blocks are recycled once every node in them has been
 * handed over, so memory stays bounded by one input block's worth of nodes plus the largest
 * node. Header values and the tables after "nodes" live in a second arena until close.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "json/reader_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "etr/common.h"

/* ---------------------------------------------------------------- arena ---- */

static void blk_free(arena *a, ablk *b) {
  if (b->cap == ARENA_BLOCK && a->n_spare < ARENA_SPARE) {
    b->next = a->spare;
    a->spare = b;
    a->n_spare++;
  } else {
    free(b);
  }
}

/* arena_alloc when the tail block has no room: a new (or recycled) block. */
void *etr__rd_arena_alloc_slow(arena *a, size_t n) {
  ablk *b;
  if (n <= ARENA_BLOCK && a->spare) {
    b = a->spare;
    a->spare = b->next;
    a->n_spare--;
  } else {
    size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;
    b = malloc(sizeof(ablk) + cap);
    if (!b) return NULL;
    b->cap = cap;
  }
  b->used = n;
  b->next = NULL;
  if (a->tail)
    a->tail->next = b;
  else
    a->head = b;
  a->tail = b;
  a->live += b->cap;
  return b->data;
}

/* Recycle every block older than `keep` (NULL: all of them). */
void etr__rd_arena_release_before(arena *a, ablk *keep) {
  while (a->head && a->head != keep) {
    ablk *b = a->head;
    a->head = b->next;
    if (a->tail == b) a->tail = NULL;
    a->live -= b->cap;
    blk_free(a, b);
  }
}

void etr__rd_arena_destroy(arena *a) {
  etr__rd_arena_release_before(a, NULL);
  while (a->spare) {
    ablk *b = a->spare;
    a->spare = b->next;
    free(b);
  }
  a->n_spare = 0;
}

void etr__rd_arena_restore(arena *a, amark m) {
  ablk *b = m.tail ? m.tail->next : a->head;
  if (m.tail)
    m.tail->next = NULL;
  else
    a->head = NULL;
  while (b) {
    ablk *nx = b->next;
    a->live -= b->cap;
    blk_free(a, b);
    b = nx;
  }
  a->tail = m.tail;
  if (m.tail) m.tail->used = m.used;
}

/* ---------------------------------------------------------------- reader ---- */

void etr__rd_set_error(rd_reader *r, int code, uint64_t off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void etr__rd_set_error(rd_reader *r, int code, uint64_t off, const char *fmt, ...) {
  if (r->err) return;
  r->err = code;
  char reason[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  snprintf(r->msg, sizeof r->msg, "%s: byte %llu: %s", r->path, (unsigned long long)off, reason);
}

void etr__rd_warn(rd_reader *r, uint64_t off, int64_t id, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void etr__rd_warn(rd_reader *r, uint64_t off, int64_t id, const char *fmt, ...) {
  r->warnings++;
  if (!r->opt.warn) return;
  char m[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m, sizeof m, fmt, ap);
  va_end(ap);
  r->opt.warn(off, id, m, r->opt.user);
}

/* Decompressed offset just after the token being parsed. */
uint64_t etr__rd_cur_off(rd_reader *r) {
  if (r->hand) return r->hb_base + r->hpos;
  return etr__rd_yajl_offset(r);
}

/* ---- UTF-8 ---- */

/* Length of the valid UTF-8 sequence at p (lead byte >= 0x80), or 0. */
size_t etr__rd_utf8_len(const unsigned char *p, const unsigned char *end) {
  unsigned c = p[0];
  size_t n;
  uint32_t min, v;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
    min = 0x80;
    v = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    min = 0x800;
    v = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    min = 0x10000;
    v = c & 0x07;
  } else {
    return 0;
  }
  if ((size_t)(end - p) < n) return (size_t)-1; /* may be complete after a refill */
  for (size_t i = 1; i < n; i++) {
    if ((p[i] & 0xC0) != 0x80) return 0;
    v = (v << 6) | (p[i] & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  return n;
}

/* Bytes of the invalid sequence at p (< end) that one U+FFFD replaces: an encoded surrogate
 * (what yajl makes of a lone "\\udc00" escape) as a whole, like the hand parser; else one. */
size_t etr__rd_bad_len(const unsigned char *p, const unsigned char *end) {
  if (p[0] == 0xED && end - p > 2 && (p[1] & 0xE0) == 0xA0 && (p[2] & 0xC0) == 0x80) return 3;
  return 1;
}

/* Copy the non-ASCII sequence at x (< end) to *q: a valid UTF-8 character as it is, an
 * invalid sequence as one U+FFFD. Returns the position after it. */
const unsigned char *etr__rd_put_utf8_seq(unsigned char **q, const unsigned char *x,
                                          const unsigned char *end) {
  size_t n = etr__rd_utf8_len(x, end);
  if (n == 0 || n == (size_t)-1) {
    put_utf8(q, 0xFFFD);
    return x + etr__rd_bad_len(x, end);
  }
  memcpy(*q, x, n);
  *q += n;
  return x + n;
}

/* A NUL-terminated copy of n bytes; invalid UTF-8 (which yajl passes through, as it does not
 * validate strings here) is replaced by U+FFFD and warned about, like the hand parser does.
 * *out_len (when not NULL) receives the copy's length. */
char *etr__rd_copy_str(rd_reader *r, arena *a, const unsigned char *s, size_t n, size_t *out_len) {
  size_t bad = 0;
  size_t i = 0;
  /* 8 bytes at a time while they are ASCII without a NUL (the common string) */
  const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, s + i, 8);
    if ((w | ((w - ones) & ~w)) & highs) break;
  }
  while (i < n) {
    if (s[i] < 0x80) {
      if (!s[i]) r->nul_str = true;
      i++;
      continue;
    }
    size_t k = etr__rd_utf8_len(s + i, s + n);
    if (k == 0 || k == (size_t)-1) {
      bad++;
      k = etr__rd_bad_len(s + i, s + n);
    }
    i += k;
  }
  char *p = arena_alloc(a, n + 2 * bad + 1);
  if (!p) {
    etr__rd_set_error(r, ETR_ENOMEM, etr__rd_cur_off(r), "out of memory");
    return NULL;
  }
  size_t len = n;
  if (!bad) {
    memcpy(p, s, n);
  } else {
    unsigned char *q = (unsigned char *)p;
    for (const unsigned char *x = s; x < s + n;) {
      if (*x < 0x80)
        *q++ = *x++;
      else
        x = etr__rd_put_utf8_seq(&q, x, s + n);
    }
    len = (size_t)(q - (unsigned char *)p);
    etr__rd_warn(r, etr__rd_cur_off(r), -1,
                 "invalid UTF-8 in a string (%zu sequence%s replaced by U+FFFD)", bad,
                 bad == 1 ? "" : "s");
  }
  p[len] = '\0';
  if (out_len) *out_len = len;
  return p;
}

/* ---- top level ---- */

static bool is_header_key(const char *k) {
  return !strcmp(k, "schema") || !strcmp(k, "pid") || !strcmp(k, "time") ||
         !strcmp(k, "start_ts") || !strcmp(k, "finish_ts");
}

bool etr__rd_trailer_unwanted(const rd_reader *r, const char *k) {
  const char *const *want = r->opt.trailer_keys;
  if (want == NULL || r->ph != PH_TRAILER || is_header_key(k)) return false;
  for (; *want; want++)
    if (!strcmp(*want, k)) return false;
  return true;
}

static int64_t int_of(const rd_jval *v, bool *ok) {
  if (v->kind == ETR_J_INT) {
    *ok = true;
    return v->v.i;
  }
  *ok = false;
  return -1;
}

static void parse_schema(rd_reader *r, const char *s) {
  int a = 0, b = 0, c = 0, n = 0;
  if (sscanf(s, "%d.%d.%d%n", &a, &b, &c, &n) == 3) {
    r->hdr.schema_major = a;
    r->hdr.schema_minor = b;
    r->hdr.schema_patch = c;
    bool known = a == 1 && ((b == 0 && (c == 2 || c == 3)) || (b == 1 && (c == 0 || c == 1)));
    const char *rest = s + n;
    if (!known || (*rest && strcmp(rest, "-chakra.0.0.4")))
      etr__rd_warn(r, etr__rd_cur_off(r), -1, "unknown schema \"%s\" (read as %d.%d.%d)", s, a, b,
                   c);
  } else {
    etr__rd_warn(r, etr__rd_cur_off(r), -1, "schema \"%s\" is not a version number", s);
  }
}

/* A complete top-level member value other than "nodes" (key in r->tkey). */
int etr__rd_top_value_done(rd_reader *r, const rd_jval *v) {
  const char *k = r->tkey;
  bool ok;
  if (!strcmp(k, "schema")) {
    if (v->kind == ETR_J_STRING) {
      r->hdr.schema = v->v.str.s;
      parse_schema(r, v->v.str.s);
    } else {
      etr__rd_warn(r, etr__rd_cur_off(r), -1, "\"schema\" is not a string");
    }
  } else if (!strcmp(k, "pid")) {
    r->hdr.pid = int_of(v, &ok);
    if (!ok) etr__rd_warn(r, etr__rd_cur_off(r), -1, "\"pid\" is not an integer");
  } else if (!strcmp(k, "time")) {
    if (v->kind == ETR_J_STRING)
      r->hdr.time = v->v.str.s;
    else
      etr__rd_warn(r, etr__rd_cur_off(r), -1, "\"time\" is not a string");
  } else if (!strcmp(k, "start_ts")) {
    r->hdr.start_ts = int_of(v, &ok);
    if (!ok) etr__rd_warn(r, etr__rd_cur_off(r), -1, "\"start_ts\" is not an integer");
  } else if (!strcmp(k, "finish_ts")) {
    r->finish_ts = int_of(v, &ok);
    if (!ok) etr__rd_warn(r, etr__rd_cur_off(r), -1, "\"finish_ts\" is not an integer");
  } else {
    if (!grow((void **)&r->extras, &r->extras_cap, r->n_extras, sizeof *r->extras, 8)) {
      etr__rd_set_error(r, ETR_ENOMEM, etr__rd_cur_off(r), "out of memory");
      return 0;
    }
    r->extras[r->n_extras].key = k;
    r->extras[r->n_extras].val = *v;
    r->n_extras++;
  }
  return 1;
}

int etr__rd_top_key(rd_reader *r, const unsigned char *k, size_t len) {
  char *p = etr__rd_copy_str(r, &r->keep, k, len, &len);
  if (!p) return 0;
  r->tkey = p;
  if (!grow((void **)&r->top_keys, &r->top_keys_cap, r->n_top_keys, sizeof *r->top_keys, 16)) {
    etr__rd_set_error(r, ETR_ENOMEM, etr__rd_cur_off(r), "out of memory");
    return 0;
  }
  for (size_t i = 0; i < r->n_top_keys; i++)
    if (!strcmp(r->top_keys[i], p)) {
      etr__rd_set_error(r, ETR_EFORMAT, etr__rd_cur_off(r) - len - 2,
                        "top-level key \"%s\" appears twice", p);
      return 0;
    }
  r->top_keys[r->n_top_keys++] = p;
  /* After "nodes" (the tables, the footer, kept together): ETR_READER_TABLES_FACTOR times the
   * node limit, so that a trace's traceback tables (docs/FORMAT.md, "How large the tables may
   * grow") are read whole; before: the limit of a node. */
  r->limit = r->ph == PH_TRAILER ? r->trailer_limit : r->opt.max_node_bytes;
  if (strcmp(p, "nodes") && !is_header_key(p) && r->ph == PH_HEADER)
    etr__rd_warn(r, etr__rd_cur_off(r) - len - 2, -1,
                 "unknown top-level key \"%s\" before \"nodes\"", p);
  return 1;
}

/* Both backends: the value of top-level key r->tkey is skipped. 1, or 0 on error. */
int etr__rd_skip_note(rd_reader *r, uint64_t off) {
  if (!grow((void **)&r->skipped, &r->skipped_cap, r->n_skipped, sizeof *r->skipped, 4)) {
    etr__rd_set_error(r, ETR_ENOMEM, off, "out of memory");
    return 0;
  }
  r->skipped[r->n_skipped++] = r->tkey;
  etr__rd_warn(
      r, off, -1,
      "the value of \"%s\" needs more than %zu MiB: skipped, not loaded (ETR_READER_LIMIT_MB "
      "raises the limit)",
      r->tkey, r->limit >> 20);
  return 1;
}

/* ---- input ---- */

static const char *display_path(const char *path) { return strcmp(path, "-") ? path : "<stdin>"; }

/* A byte source's answer k as the parsers take it: the bytes, 0 at the end of the input, or
 * -1 with the error set, an input that ends early (a cut or corrupt compressed stream) being
 * one: its last bytes are dropped with it, the offset of the message counting them. */
static ssize_t source_answer(rd_reader *r, ssize_t k) {
  if (k < 0) {
    int e = rd_source_errno(r->src);
    if (e == ENOMEM)
      etr__rd_set_error(r, ETR_ENOMEM, r->consumed, "cannot start decompression: out of memory");
    else
      etr__rd_set_error(r, ETR_EIO, r->consumed, "read error: %s", strerror(e));
    return -1;
  }
  const char *detail = NULL;
  rd_source_end end = rd_source_ended(r->src, &detail);
  if (end == RD_SRC_OPEN || end == RD_SRC_DONE) {
    r->fed += (uint64_t)k;
    return k;
  }
  const char *z = rd_source_is_gzip(r->src) ? "gzip" : "zstd";
  /* (where the decompressed bytes stop, as etr repair says: past the window the parser may
   * still hold, and the last block, dropped with the error) */
  if (end == RD_SRC_CUT)
    etr__rd_set_error(r, ETR_EFORMAT, r->fed + (uint64_t)k,
                      "%s: the compressed stream is truncated", z);
  else if (end == RD_SRC_CORRUPT)
    etr__rd_set_error(r, ETR_EFORMAT, r->fed + (uint64_t)k, "%s: %s", z, detail);
  else
    etr__rd_set_error(r, ETR_EFORMAT, r->consumed, "gzip: cannot reset");
  return -1;
}

/* Next block of decompressed bytes: *p and length; 0 at EOF, -1 on error. */
ssize_t etr__rd_next_block(rd_reader *r, const unsigned char **p) {
  return source_answer(r, rd_source_read(r->src, p));
}

/* Up to n decompressed bytes copied to dst: bytes read, 0 at EOF, -1 on error. */
ssize_t etr__rd_read_into(rd_reader *r, unsigned char *dst, size_t n) {
  return source_answer(r, rd_source_read_into(r->src, dst, n));
}

static int feed(rd_reader *r) { return r->hand ? etr__rd_hand_feed(r) : etr__rd_yajl_feed(r); }

/* ---- API ---- */

int rd_open(const char *path, const rd_options *opt, rd_reader **out) {
  *out = NULL;
  rd_reader *r = calloc(1, sizeof *r);
  if (!r) return ETR_ENOMEM;
  *out = r;
  rd_options o = ETR_READER_OPTIONS_INIT;
  if (opt) memcpy(&o, opt, opt->struct_size < sizeof o ? opt->struct_size : sizeof o);
  o.struct_size = sizeof o;
  if (!o.max_node_bytes) {
    /* ETR_READER_LIMIT_MB, else 16 MiB: a recorded node is a few KB (strings and lists are
     * cut at record time, docs/FORMAT.md), PyTorch's own nodes rarely reach 1 MB */
    const char *lim = getenv("ETR_READER_LIMIT_MB");
    char *e = NULL;
    unsigned long long mb = lim ? strtoull(lim, &e, 10) : 0;
    o.max_node_bytes = (size_t)(mb && e && !*e && mb <= (1ull << 20) ? mb : 16) << 20;
  }
  r->opt = o;
  r->limit = o.max_node_bytes;
  r->trailer_limit = o.max_node_bytes > SIZE_MAX / ETR_READER_TABLES_FACTOR
                         ? SIZE_MAX
                         : o.max_node_bytes * ETR_READER_TABLES_FACTOR;
  r->fd = -1;
  r->hdr.pid = -1;
  r->hdr.start_ts = -1;
  r->finish_ts = -1;
  r->path = strdup(display_path(path ? path : "-"));
  if (!r->path) {
    snprintf(r->msg, sizeof r->msg, "%s: byte 0: out of memory", path);
    return r->err = ETR_ENOMEM;
  }
  if (!path || !strcmp(path, "-")) {
    r->fd = 0;
  } else {
    r->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (r->fd < 0) {
      etr__rd_set_error(r, ETR_EOPEN, 0, "cannot open: %s", strerror(errno));
      return r->err;
    }
    r->own_fd = true;
    struct stat st;
    if (fstat(r->fd, &st) == 0 && S_ISREG(st.st_mode)) r->in_size = (uint64_t)st.st_size;
    if (fstat(r->fd, &st) == 0 && S_ISDIR(st.st_mode)) {
      etr__rd_set_error(r, ETR_EOPEN, 0, "is a directory");
      return r->err;
    }
#ifdef POSIX_FADV_SEQUENTIAL
    posix_fadvise(r->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
  }
  if (rd_source_open(r->fd, 0, false, IN_BLOCK, &r->src)) {
    etr__rd_set_error(r, ETR_ENOMEM, 0, "out of memory");
    return r->err;
  }
  const char *be = getenv("ETR_READER_BACKEND");
  r->hand = !be || strcmp(be, "yajl") != 0;
  if (!r->hand && !etr__rd_yajl_open(r)) {
    etr__rd_set_error(r, ETR_ENOMEM, 0, "out of memory");
    return r->err;
  }
  while (!r->nodes_seen) {
    int f = feed(r);
    if (f < 0 && r->nodes_seen) break; /* nodes before the error are still handed over */
    if (f < 0) return r->err;
    if (f == 0) {
      etr__rd_set_error(r, ETR_EFORMAT, r->consumed, "no \"nodes\" array in the trace");
      return r->err;
    }
  }
  return 0;
}

const rd_rheader *rd_header(const rd_reader *r) { return &r->hdr; }

int rd_next(rd_reader *r, const rd_rnode **node) {
  *node = NULL;
  for (;;) {
    if (r->q_len) {
      qent e = r->q[r->q_head];
      r->q_head = (r->q_head + 1) % r->q_cap;
      r->q_len--;
      etr__rd_arena_release_before(&r->nodes, e.mark);
      *node = e.node;
      return 1;
    }
    if (r->nodes_done) return 0;
    if (r->err) return r->err;
    /* nothing queued: every block older than the node being built can go */
    if (r->building && r->build_node)
      etr__rd_arena_release_before(&r->nodes, r->node_mark);
    else if (r->nodes.tail)
      etr__rd_arena_release_before(&r->nodes, r->nodes.tail), r->nodes.tail->used = 0;
    int f = feed(r);
    if (f < 0 && !r->q_len) return r->err;
    if (f == 0 && !r->q_len && !r->nodes_done) return r->err ? r->err : ETR_EFORMAT;
  }
}

int rd_finish(rd_reader *r) {
  const rd_rnode *n;
  int rc;
  while ((rc = rd_next(r, &n)) == 1) {
  }
  if (rc < 0) return rc;
  etr__rd_arena_release_before(&r->nodes, NULL);
  for (;;) {
    int f = feed(r);
    if (f < 0) return r->err;
    if (f == 0) break;
  }
  return 0;
}

int64_t rd_finish_ts(const rd_reader *r) { return r->finish_ts; }

const rd_jval *rd_trailer(const rd_reader *r, const char *key) {
  for (size_t i = 0; i < r->n_extras; i++)
    if (!strcmp(r->extras[i].key, key)) return &r->extras[i].val;
  return NULL;
}

uint64_t rd_redone(const rd_reader *r) { return r->redone; }

bool rd_skipped(const rd_reader *r, const char *key) {
  for (size_t i = 0; i < r->n_skipped; i++)
    if (!strcmp(r->skipped[i], key)) return true;
  return false;
}

bool rd_skipped_whole(const rd_reader *r, const char *key) {
  for (size_t i = 0; i < r->n_skipped_whole; i++)
    if (!strcmp(r->skipped[i], key)) return true;
  return false;
}

const char *const *rd_top_keys(const rd_reader *r, size_t *n) {
  *n = r->n_top_keys;
  return r->top_keys;
}

const char *rd_error(const rd_reader *r) { return r && r->err ? r->msg : ""; }
bool rd_error_is_limit(const rd_reader *r) { return r && r->err && r->err_limit; }
uint64_t rd_warnings(const rd_reader *r) { return r->warnings; }
uint64_t rd_offset(const rd_reader *r) { return r->consumed; }
uint64_t rd_input_size(const rd_reader *r) { return r->in_size; }
uint64_t rd_input_consumed(const rd_reader *r) { return r->src ? rd_source_input_read(r->src) : 0; }
const char *rd_path(const rd_reader *r) { return r->path; }
const char *rd_backend(const rd_reader *r) { return r->hand ? "hand" : "yajl"; }

uint64_t rd_memory(const rd_reader *r) {
  uint64_t m = sizeof *r + rd_source_memory(r->src);
  m += r->nodes.live + r->keep.live + (uint64_t)r->nodes.n_spare * ARENA_BLOCK;
  m += r->stk_cap * sizeof *r->stk + r->frames_cap * sizeof *r->frames;
  m += r->q_cap * sizeof *r->q + r->extras_cap * sizeof *r->extras;
  m += r->top_keys_cap * sizeof *r->top_keys + r->hb_cap;
  return m;
}

void rd_close(rd_reader *r) {
  if (!r) return;
  etr__rd_yajl_close(r);
  rd_source_close(r->src);
  if (r->own_fd && r->fd >= 0) close(r->fd);
  etr__rd_arena_destroy(&r->nodes);
  etr__rd_arena_destroy(&r->keep);
  free(r->stk);
  free(r->frames);
  free(r->q);
  free(r->extras);
  free(r->top_keys);
  free(r->skipped);
  free(r->hb);
  free(r->path);
  free(r);
}
