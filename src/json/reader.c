/* Streaming trace reader (reader.h), with two parsers behind one node builder.
 *
 * Input: a file descriptor read in large blocks, inflated by zlib when it starts with the
 * gzip magic bytes. Parsing, either
 *  - the hand parser (default, "hand parser" section below): pulls one step at a time (a
 *    top-level member or one node) from an input window, building the value tree directly
 *    in an arena; a step that runs off the window is rolled back and redone after a refill;
 *  - or yajl (ETR_READER_BACKEND=yajl): yajl calls us back token by token and the callbacks
 *    build the same trees. yajl is a push parser and one block holds many nodes, so the
 *    completed nodes of a block wait in a queue until rd_next hands them over.
 * Node trees live in a FIFO arena whose blocks are recycled once every node in them has been
 * handed over, so memory stays bounded by one input block's worth of nodes plus the largest
 * node. Header values and the tables after "nodes" live in a second arena until close.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "json/reader.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yajl/yajl_parse.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <zlib.h>
#include <zstd.h>

#include "etr/common.h"

#define IN_BLOCK (256u * 1024u)  /* bytes read from the file at once */
#define FEED_BLOCK (64u * 1024u) /* bytes handed to yajl at once */
#define ARENA_BLOCK (64u * 1024u)
#define ARENA_SPARE 8 /* standard blocks kept for reuse */

/* Compiler extensions, behind macros (STYLE.md): branch hints and bit scans. */
#if defined(__GNUC__) || defined(__clang__)
#define ETR_RD_LIKELY(x) __builtin_expect(!!(x), 1)
#define ETR_RD_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define ETR_RD_CTZ32(x) ((unsigned)__builtin_ctz(x))
#define ETR_RD_CTZ64(x) ((unsigned)__builtin_ctzll(x))
#define ETR_RD_NOINLINE __attribute__((noinline))
#else
#define ETR_RD_NOINLINE
#define ETR_RD_LIKELY(x) (x)
#define ETR_RD_UNLIKELY(x) (x)
static inline unsigned etr_rd_ctz64(uint64_t x) {
  unsigned n = 0;
  while (!(x & 1)) x >>= 1, n++;
  return n;
}
#define ETR_RD_CTZ32(x) etr_rd_ctz64(x)
#define ETR_RD_CTZ64(x) etr_rd_ctz64(x)
#endif

/* ---------------------------------------------------------------- arena ---- */

typedef struct ablk {
  struct ablk *next;
  size_t cap, used;
  _Alignas(16) unsigned char data[];
} ablk;

typedef struct arena {
  ablk *head, *tail; /* FIFO: oldest first */
  ablk *spare;       /* recycled standard blocks */
  int n_spare;
  size_t live; /* bytes in blocks head..tail */
} arena;

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
static void *arena_alloc_slow(arena *a, size_t n) {
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

/* n bytes, 16-aligned, rounded up to a multiple of 16 (callers may write up to that). */
static inline void *arena_alloc(arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  ablk *t = a->tail;
  if (ETR_RD_LIKELY(t && t->cap - t->used >= n)) {
    void *p = t->data + t->used;
    t->used += n;
    return p;
  }
  return arena_alloc_slow(a, n);
}

/* Recycle every block older than `keep` (NULL: all of them). */
static void arena_release_before(arena *a, ablk *keep) {
  while (a->head && a->head != keep) {
    ablk *b = a->head;
    a->head = b->next;
    if (a->tail == b) a->tail = NULL;
    a->live -= b->cap;
    blk_free(a, b);
  }
}

static void arena_destroy(arena *a) {
  arena_release_before(a, NULL);
  while (a->spare) {
    ablk *b = a->spare;
    a->spare = b->next;
    free(b);
  }
  a->n_spare = 0;
}

typedef struct amark {
  ablk *tail;
  size_t used;
} amark;

static amark arena_save(const arena *a) {
  amark m = {a->tail, a->tail ? a->tail->used : 0};
  return m;
}

static void arena_restore(arena *a, amark m) {
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

typedef enum phase {
  PH_START = 0,   /* before the top-level '{' */
  PH_HEADER = 1,  /* top-level keys before "nodes" */
  PH_NODES = 2,   /* inside the "nodes" array */
  PH_TRAILER = 3, /* top-level keys after "nodes" */
  PH_END = 4      /* after the top-level '}' */
} phase;

typedef struct qent {
  rd_rnode *node;
  ablk *mark; /* arena block where the node's data starts */
} qent;

typedef struct frame {
  size_t start; /* index in the member stack of the first child */
  bool is_obj;
  const char *key; /* the key this container is the value of (in its parent) */
  size_t key_len;
} frame;

typedef struct extra {
  const char *key;
  rd_jval val;
} extra;

struct rd_reader {
  rd_options opt;
  char *path; /* for messages */
  int fd;
  bool own_fd;
  bool eof;
  /* raw input */
  unsigned char *in;
  size_t in_len, in_pos;
  uint64_t in_consumed, in_size;
  /* gzip */
  bool gz, gz_init, gz_end;
  /* zstd */
  ZSTD_DStream *zst;
  size_t zst_last; /* ZSTD_decompressStream's last answer: 0 = a frame just ended */
  z_stream zs;
  unsigned char *out; /* decompressed bytes */
  size_t out_len, out_pos;
  bool sniffed;
  /* parser */
  yajl_handle yh;
  bool yajl_eof;      /* yajl_complete_parse is running: the input has ended */
  uint64_t feed_base; /* decompressed offset of the current feed's first byte */
  uint64_t top_end;   /* offset just after the top-level object's '}' (yajl) */
  const unsigned char *feed_ptr;
  uint64_t consumed; /* decompressed bytes handed to the parser and fully parsed */
  phase ph;
  int depth;        /* open containers in the file */
  const char *tkey; /* pending top-level key (depth 1) */
  char tkey_buf[64];
  bool tkey_known_scalar;
  /* builder */
  bool building;
  bool build_node; /* the value being built is a node (else a top-level value) */
  arena *target;
  rd_jmember *stk;
  size_t stk_len, stk_cap;
  frame *frames;
  size_t n_frames, frames_cap;
  const char *bkey; /* pending key inside the value being built */
  size_t bkey_len;
  uint64_t node_off;
  ablk *node_mark;
  /* nodes */
  arena nodes; /* FIFO arena of node trees */
  qent *q;
  size_t q_head, q_len, q_cap;
  /* header and trailer */
  arena keep; /* header strings, trailer tables, key list */
  rd_rheader hdr;
  int64_t finish_ts;
  extra *extras;
  size_t n_extras, extras_cap;
  const char **top_keys;
  size_t n_top_keys, top_keys_cap;
  /* status */
  int err; /* first error (negative ETR_E*), 0 if none */
  char msg[512];
  uint64_t warnings;
  bool nodes_seen, nodes_done, parse_done;
  /* hand backend */
  bool hand;
  unsigned char *hb; /* input window; hb[0] is at decompressed offset hb_base */
  size_t hb_cap, hb_len, hpos;
  uint64_t hb_base;
  bool heof, h_first, n_first;
  bool need_item; /* a ',' was read: a node, or a top-level member, must follow */
  bool have_key;  /* a top-level key and its ':' were read: its value must follow */
  size_t limit;   /* opt.max_node_bytes: the most a node, or all tables, may take */
  /* a top-level value over the limit is skipped: brackets and strings are followed */
  bool skip_next, skipping, sk_started, sk_str, sk_esc;
  uint64_t sk_depth;
  uint64_t redone;   /* bytes of steps undone to be parsed again (rd_redone) */
  int read_err;      /* an input error met while reading ahead, reported when reached */
  bool discard;      /* yajl: passing over a top-level value over the limit */
  amark disc_mark;   /* r->keep before that value */
  size_t disc_depth; /* its containers still open */
  const char **skipped;
  size_t n_skipped, skipped_cap;
  /* a string of the node being read holds a NUL byte (from a \u0000 escape): node_done then
   * compares names as C strings (strcmp), as commands do, not by length */
  bool nul_str;
};

static void set_error(rd_reader *r, int code, uint64_t off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void set_error(rd_reader *r, int code, uint64_t off, const char *fmt, ...) {
  if (r->err) return;
  r->err = code;
  char reason[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  snprintf(r->msg, sizeof r->msg, "%s: byte %llu: %s", r->path, (unsigned long long)off, reason);
}

static void warn(rd_reader *r, uint64_t off, int64_t id, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void warn(rd_reader *r, uint64_t off, int64_t id, const char *fmt, ...) {
  r->warnings++;
  if (!r->opt.warn) return;
  char m[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m, sizeof m, fmt, ap);
  va_end(ap);
  r->opt.warn(off, id, m, r->opt.user);
}

/* Decompressed offset just after the token yajl is reporting. */
static uint64_t cur_off(rd_reader *r) {
  if (r->hand) return r->hb_base + r->hpos;
  return r->feed_base + yajl_get_bytes_consumed(r->yh);
}

/* ---- building values ---- */

/* Room for one more element of elem bytes in the array *p of *cap (len used); the first
 * allocation holds `first`. False when memory is exhausted. */
static bool grow(void **p, size_t *cap, size_t len, size_t elem, size_t first) {
  if (len < *cap) return true;
  size_t n = *cap ? *cap * 2 : first;
  void *q = realloc(*p, n * elem);
  if (!q) return false;
  *p = q;
  *cap = n;
  return true;
}

static bool push_member(rd_reader *r, const char *key, size_t key_len, const rd_jval *v) {
  if (!grow((void **)&r->stk, &r->stk_cap, r->stk_len, sizeof *r->stk, 256)) return false;
  rd_jmember *m = &r->stk[r->stk_len++];
  m->key = key;
  m->key_len = key_len;
  m->val = *v;
  return true;
}

static size_t utf8_len(const unsigned char *p, const unsigned char *end);
static inline void put_utf8(unsigned char **o, uint32_t c);

/* Bytes of the invalid sequence at p (< end) that one U+FFFD replaces: an encoded surrogate
 * (what yajl makes of a lone "\\udc00" escape) as a whole, like the hand parser; else one. */
static size_t bad_len(const unsigned char *p, const unsigned char *end) {
  if (p[0] == 0xED && end - p > 2 && (p[1] & 0xE0) == 0xA0 && (p[2] & 0xC0) == 0x80) return 3;
  return 1;
}

/* Copy the non-ASCII sequence at x (< end) to *q: a valid UTF-8 character as it is, an
 * invalid sequence as one U+FFFD. Returns the position after it. */
static const unsigned char *put_utf8_seq(unsigned char **q, const unsigned char *x,
                                         const unsigned char *end) {
  size_t n = utf8_len(x, end);
  if (n == 0 || n == (size_t)-1) {
    put_utf8(q, 0xFFFD);
    return x + bad_len(x, end);
  }
  memcpy(*q, x, n);
  *q += n;
  return x + n;
}

/* A NUL-terminated copy of n bytes; invalid UTF-8 (which yajl passes through, as it does not
 * validate strings here) is replaced by U+FFFD and warned about, like the hand parser does.
 * *out_len (when not NULL) receives the copy's length. */
static char *copy_str(rd_reader *r, arena *a, const unsigned char *s, size_t n, size_t *out_len) {
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
    size_t k = utf8_len(s + i, s + n);
    if (k == 0 || k == (size_t)-1) {
      bad++;
      k = bad_len(s + i, s + n);
    }
    i += k;
  }
  char *p = arena_alloc(a, n + 2 * bad + 1);
  if (!p) {
    set_error(r, ETR_ENOMEM, cur_off(r), "out of memory");
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
        x = put_utf8_seq(&q, x, s + n);
    }
    len = (size_t)(q - (unsigned char *)p);
    warn(r, cur_off(r), -1, "invalid UTF-8 in a string (%zu sequence%s replaced by U+FFFD)", bad,
         bad == 1 ? "" : "s");
  }
  p[len] = '\0';
  if (out_len) *out_len = len;
  return p;
}

static int node_done(rd_reader *r, const rd_jval *root);
static int top_value_done(rd_reader *r, const rd_jval *v);

static int skip_note(rd_reader *r, uint64_t off);

/* yajl backend: the top-level value being built is over the limit: drop what was built and
 * pass over the rest (b_discard), as the hand backend does. */
static int b_over_limit(rd_reader *r) {
  r->discard = true;
  r->disc_depth = r->n_frames;
  r->n_frames = 0;
  r->stk_len = 0;
  arena_restore(&r->keep, r->disc_mark);
  return skip_note(r, cur_off(r));
}

/* A value ended while discarding: 1 to go on, 0 on error. */
static int b_discard_close(rd_reader *r, bool container) {
  if (container) r->disc_depth--;
  if (r->disc_depth == 0) {
    r->discard = false;
    r->building = false;
  }
  return 1;
}

/* A complete value (scalar, or a closed container) inside the value being built. */
static int b_value(rd_reader *r, const rd_jval *v) {
  if (r->discard) return b_discard_close(r, false);
  if (r->n_frames == 0) { /* the root itself */
    r->building = false;
    return r->build_node ? node_done(r, v) : top_value_done(r, v);
  }
  frame *f = &r->frames[r->n_frames - 1];
  const char *k = NULL;
  size_t kl = 0;
  if (f->is_obj) {
    k = r->bkey;
    kl = r->bkey_len;
    r->bkey = NULL;
  }
  if (!push_member(r, k, kl, v)) {
    set_error(r, ETR_ENOMEM, cur_off(r), "out of memory");
    return 0;
  }
  if ((r->stk_len & 1023) == 0 && r->build_node &&
      cur_off(r) - r->node_off > r->opt.max_node_bytes) {
    set_error(r, ETR_EFORMAT, r->node_off, "node larger than %zu bytes", r->opt.max_node_bytes);
    return 0;
  }
  if ((r->stk_len & 1023) == 0 && r->stk_len * sizeof *r->stk + r->target->live > r->limit) {
    if (!r->build_node) return b_over_limit(r);
    set_error(r, ETR_EFORMAT, r->node_off,
              "node needs more than %zu MiB to read (its text, or the values it holds; "
              "ETR_READER_LIMIT_MB raises the limit)",
              r->limit >> 20);
    return 0;
  }
  return 1;
}

static int b_open(rd_reader *r, bool is_obj) {
  if (r->discard) {
    r->disc_depth++;
    return 1;
  }
  if (!grow((void **)&r->frames, &r->frames_cap, r->n_frames, sizeof *r->frames, 32)) {
    set_error(r, ETR_ENOMEM, cur_off(r), "out of memory");
    return 0;
  }
  frame *f = &r->frames[r->n_frames++];
  f->start = r->stk_len;
  f->is_obj = is_obj;
  f->key = r->bkey;
  f->key_len = r->bkey_len;
  r->bkey = NULL;
  return 1;
}

static int b_close(rd_reader *r) {
  if (r->discard) return b_discard_close(r, true);
  frame f = r->frames[--r->n_frames];
  size_t n = r->stk_len - f.start;
  rd_jval v;
  if (f.is_obj) {
    v.kind = ETR_J_OBJECT;
    rd_jmember *items = NULL;
    if (n) {
      items = arena_alloc(r->target, n * sizeof *items);
      if (!items) goto oom;
      memcpy(items, r->stk + f.start, n * sizeof *items);
    }
    v.v.obj.items = items;
    v.v.obj.n = n;
  } else {
    v.kind = ETR_J_ARRAY;
    rd_jval *items = NULL;
    if (n) {
      items = arena_alloc(r->target, n * sizeof *items);
      if (!items) goto oom;
      for (size_t i = 0; i < n; i++) items[i] = r->stk[f.start + i].val;
    }
    v.v.arr.items = items;
    v.v.arr.n = n;
  }
  r->stk_len = f.start;
  if (r->build_node && cur_off(r) - r->node_off > r->opt.max_node_bytes) {
    set_error(r, ETR_EFORMAT, r->node_off, "node larger than %zu bytes", r->opt.max_node_bytes);
    return 0;
  }
  r->bkey = f.key;
  r->bkey_len = f.key_len;
  return b_value(r, &v);
oom:
  set_error(r, ETR_ENOMEM, cur_off(r), "out of memory");
  return 0;
}

static void begin_build(rd_reader *r, bool node) {
  r->building = true;
  r->build_node = node;
  r->target = node ? &r->nodes : &r->keep;
  if (!node) r->disc_mark = arena_save(&r->keep);
  r->stk_len = 0;
  r->n_frames = 0;
  r->bkey = NULL;
  r->nul_str = false;
}

/* ---- top level ---- */

static bool is_header_key(const char *k) {
  return !strcmp(k, "schema") || !strcmp(k, "pid") || !strcmp(k, "time") ||
         !strcmp(k, "start_ts") || !strcmp(k, "finish_ts");
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
      warn(r, cur_off(r), -1, "unknown schema \"%s\" (read as %d.%d.%d)", s, a, b, c);
  } else {
    warn(r, cur_off(r), -1, "schema \"%s\" is not a version number", s);
  }
}

/* A complete top-level member value other than "nodes" (key in r->tkey). */
static int top_value_done(rd_reader *r, const rd_jval *v) {
  const char *k = r->tkey;
  bool ok;
  if (!strcmp(k, "schema")) {
    if (v->kind == ETR_J_STRING) {
      r->hdr.schema = v->v.str.s;
      parse_schema(r, v->v.str.s);
    } else {
      warn(r, cur_off(r), -1, "\"schema\" is not a string");
    }
  } else if (!strcmp(k, "pid")) {
    r->hdr.pid = int_of(v, &ok);
    if (!ok) warn(r, cur_off(r), -1, "\"pid\" is not an integer");
  } else if (!strcmp(k, "time")) {
    if (v->kind == ETR_J_STRING)
      r->hdr.time = v->v.str.s;
    else
      warn(r, cur_off(r), -1, "\"time\" is not a string");
  } else if (!strcmp(k, "start_ts")) {
    r->hdr.start_ts = int_of(v, &ok);
    if (!ok) warn(r, cur_off(r), -1, "\"start_ts\" is not an integer");
  } else if (!strcmp(k, "finish_ts")) {
    r->finish_ts = int_of(v, &ok);
    if (!ok) warn(r, cur_off(r), -1, "\"finish_ts\" is not an integer");
  } else {
    if (!grow((void **)&r->extras, &r->extras_cap, r->n_extras, sizeof *r->extras, 8)) {
      set_error(r, ETR_ENOMEM, cur_off(r), "out of memory");
      return 0;
    }
    r->extras[r->n_extras].key = k;
    r->extras[r->n_extras].val = *v;
    r->n_extras++;
  }
  return 1;
}

/* ---- node extraction ---- */

static const char *const base_attrs[9] = {"rf_id",      "fw_parent", "seq_id",    "scope",
                                          "tid",        "fw_tid",    "op_schema", "kernel_backend",
                                          "kernel_file"};

const rd_jval *rd_jobj_get(const rd_jval *obj, const char *key) {
  if (!obj || obj->kind != ETR_J_OBJECT) return NULL;
  for (size_t i = 0; i < obj->v.obj.n; i++)
    if (!strcmp(obj->v.obj.items[i].key, key)) return &obj->v.obj.items[i].val;
  return NULL;
}

int rd_base_attr(const char *nm) {
  int b = -1;
  switch (nm[0]) {
    case 'r':
      b = 0;
      break;
    case 'f':
      b = nm[1] == 'w' && nm[2] == '_' && nm[3] == 'p' ? 1 : 5;
      break;
    case 's':
      b = nm[1] == 'e' ? 2 : 3;
      break;
    case 't':
      b = 4;
      break;
    case 'o':
      b = 6;
      break;
    case 'k':
      b = strncmp(nm, "kernel_b", 8) ? 8 : 7;
      break;
    default:
      return -1;
  }
  return strcmp(nm, base_attrs[b]) ? -1 : b;
}

/* True when name s (n bytes, NUL-terminated) equals lit as strcmp compares them: by length
 * and memcmp, unless a string of the node holds a NUL (nul: r->nul_str). */
static inline bool name_is(const char *s, size_t n, const char *lit, size_t lit_len, bool nul) {
  if (ETR_RD_UNLIKELY(nul)) return !strcmp(s, lit);
  return n == lit_len && !memcmp(s, lit, lit_len);
}
#define NAME_IS(s, n, lit, nul) name_is(s, n, lit, sizeof lit - 1, nul)

/* rd_jobj_get by name_is. */
static const rd_jval *obj_get(const rd_jval *obj, const char *key, size_t key_len, bool nul) {
  if (!obj || obj->kind != ETR_J_OBJECT) return NULL;
  for (size_t i = 0; i < obj->v.obj.n; i++) {
    const rd_jmember *m = &obj->v.obj.items[i];
    if (name_is(m->key, m->key_len, key, key_len, nul)) return &m->val;
  }
  return NULL;
}

/* rd_base_attr of a name of n bytes: by its length and one character, then one memcmp. */
static int base_attr_n(const char *nm, size_t n, bool nul) {
  if (ETR_RD_UNLIKELY(nul)) return rd_base_attr(nm);
  int b;
  switch (n) {
    case 3:
      b = 4;
      break;
    case 5:
      b = nm[0] == 'r' ? 0 : 3;
      break;
    case 6:
      b = nm[0] == 's' ? 2 : 5;
      break;
    case 9:
      b = nm[0] == 'f' ? 1 : 6;
      break;
    case 11:
      b = 8;
      break;
    case 14:
      b = 7;
      break;
    default:
      return -1;
  }
  return memcmp(nm, base_attrs[b], n) ? -1 : b;
}

static bool as_u64(const rd_jval *v, uint64_t *out) {
  if (v->kind == ETR_J_INT) {
    *out = (uint64_t)v->v.i;
    return true;
  }
  if (v->kind == ETR_J_UINT) {
    *out = v->v.u;
    return true;
  }
  return false;
}

static void check_io(rd_reader *r, rd_rnode *n, const rd_jval *io, const char *which) {
  if (!io) {
    warn(r, n->offset, n->id, "node has no \"%s\"", which);
    return;
  }
  if (io->kind != ETR_J_OBJECT) {
    warn(r, n->offset, n->id, "\"%s\" is not an object", which);
    return;
  }
  /* one pass over the members: values, shapes, types, strides (the first of each, as
   * rd_jobj_get finds them) */
  static const char *const parts[4] = {"values", "shapes", "types", "strides"};
  const rd_jval *got[4] = {NULL, NULL, NULL, NULL};
  bool nul = r->nul_str;
  for (size_t i = 0; i < io->v.obj.n; i++) {
    const rd_jmember *m = &io->v.obj.items[i];
    int w = -1;
    if (ETR_RD_UNLIKELY(nul)) {
      for (int j = 0; j < 4 && w < 0; j++)
        if (!strcmp(m->key, parts[j])) w = j;
    } else if (m->key_len == 6) {
      w = !memcmp(m->key, "values", 6) ? 0 : !memcmp(m->key, "shapes", 6) ? 1 : -1;
    } else if (m->key_len == 5) {
      w = !memcmp(m->key, "types", 5) ? 2 : -1;
    } else if (m->key_len == 7) {
      w = !memcmp(m->key, "strides", 7) ? 3 : -1;
    }
    if (w >= 0 && !got[w]) got[w] = &m->val;
  }
  const rd_jval *vals = got[0];
  if (!vals || vals->kind != ETR_J_ARRAY) {
    warn(r, n->offset, n->id, "%s: \"values\" is missing or not an array", which);
    return;
  }
  for (int i = 1; i < 4; i++) {
    const rd_jval *p = got[i];
    if (!p) {
      if (i < 3) /* "strides" is optional (schemas before 1.1.1 have none) */
        warn(r, n->offset, n->id, "%s: \"%s\" is missing", which, parts[i]);
      continue;
    }
    if (p->kind != ETR_J_ARRAY) {
      warn(r, n->offset, n->id, "%s: \"%s\" is not an array", which, parts[i]);
    } else if (p->v.arr.n != vals->v.arr.n) {
      warn(r, n->offset, n->id, "%s: \"%s\" has %zu entries, \"values\" %zu", which, parts[i],
           p->v.arr.n, vals->v.arr.n);
    }
  }
}

static int node_done(rd_reader *r, const rd_jval *root) {
  rd_rnode *n = arena_alloc(&r->nodes, sizeof *n);
  rd_jval *raw = arena_alloc(&r->nodes, sizeof *raw);
  if (!n || !raw) {
    set_error(r, ETR_ENOMEM, r->node_off, "out of memory");
    return 0;
  }
  memset(n, 0, sizeof *n);
  *raw = *root;
  n->raw = raw;
  n->offset = r->node_off;
  n->id = -1;
  n->ctrl_deps = -1;
  n->name = "";
  n->seq_id = 0;
  n->missing_attrs = 0x1ff;
  bool has_id = false, has_name = false, has_ts = false, has_inc = false, has_exc = false;
  const rd_jval *attrs = NULL;
  bool nul = r->nul_str;
  for (size_t i = 0; i < root->v.obj.n; i++) {
    const rd_jmember *m = &root->v.obj.items[i];
    const char *k = m->key;
    size_t kl = m->key_len;
    const rd_jval *v = &m->val;
    switch (k[0]) {
      case 'i':
        if (NAME_IS(k, kl, "id", nul)) {
          if (v->kind == ETR_J_INT) {
            n->id = v->v.i;
            has_id = true;
          }
        } else if (NAME_IS(k, kl, "inputs", nul)) {
          n->inputs = v;
        } else if (NAME_IS(k, kl, "inclusive_dur", nul) && v->kind == ETR_J_INT) {
          n->inclusive_dur = v->v.i;
          has_inc = true;
        }
        break;
      case 'n':
        if (NAME_IS(k, kl, "name", nul) && v->kind == ETR_J_STRING) {
          n->name = v->v.str.s;
          n->name_len = v->v.str.len;
          has_name = true;
        }
        break;
      case 'c':
        if (NAME_IS(k, kl, "ctrl_deps", nul) && v->kind == ETR_J_INT) n->ctrl_deps = v->v.i;
        break;
      case 'o':
        if (NAME_IS(k, kl, "outputs", nul)) n->outputs = v;
        break;
      case 't':
        if (NAME_IS(k, kl, "ts", nul) && v->kind == ETR_J_INT) {
          n->ts = v->v.i;
          has_ts = true;
        }
        break;
      case 'e':
        if (NAME_IS(k, kl, "exclusive_dur", nul) && v->kind == ETR_J_INT) {
          n->exclusive_dur = v->v.i;
          has_exc = true;
        }
        break;
      case 'a':
        if (NAME_IS(k, kl, "attrs", nul)) attrs = v;
        break;
      default:
        break;
    }
  }
  n->has_timing = has_ts && has_inc && has_exc;
  if (!has_id) warn(r, n->offset, -1, "node has no integer \"id\"");
  if (!has_name) warn(r, n->offset, n->id, "node has no string \"name\"");
  if (n->ctrl_deps < 0) warn(r, n->offset, n->id, "node has no integer \"ctrl_deps\"");
  check_io(r, n, n->inputs, "inputs");
  check_io(r, n, n->outputs, "outputs");
  if (n->inputs && n->inputs->kind != ETR_J_OBJECT) n->inputs = NULL;
  if (n->outputs && n->outputs->kind != ETR_J_OBJECT) n->outputs = NULL;

  if (attrs && attrs->kind == ETR_J_ARRAY) {
    size_t na = attrs->v.arr.n;
    rd_rattr *ra = na ? arena_alloc(&r->nodes, na * sizeof *ra) : NULL;
    if (na && !ra) {
      set_error(r, ETR_ENOMEM, r->node_off, "out of memory");
      return 0;
    }
    size_t k = 0;
    for (size_t i = 0; i < na; i++) {
      const rd_jval *a = &attrs->v.arr.items[i];
      const rd_jval *an, *at, *av;
      const rd_jmember *am = a->kind == ETR_J_OBJECT ? a->v.obj.items : NULL;
      if (am && a->v.obj.n == 3 && NAME_IS(am[0].key, am[0].key_len, "name", nul) &&
          NAME_IS(am[1].key, am[1].key_len, "type", nul) &&
          NAME_IS(am[2].key, am[2].key_len, "value", nul)) {
        an = &a->v.obj.items[0].val;
        at = &a->v.obj.items[1].val;
        av = &a->v.obj.items[2].val;
      } else {
        an = obj_get(a, "name", 4, nul);
        at = obj_get(a, "type", 4, nul);
        av = obj_get(a, "value", 5, nul);
      }
      if (!an || an->kind != ETR_J_STRING || !av) {
        warn(r, n->offset, n->id, "attr %zu is not a {\"name\", \"type\", \"value\"} object", i);
        continue;
      }
      rd_rattr *x = &ra[k++];
      x->name = an->v.str.s;
      x->type = at && at->kind == ETR_J_STRING ? at->v.str.s : "";
      x->value = *av;
      const char *nm = x->name;
      size_t nm_len = an->v.str.len;
      int b = base_attr_n(nm, nm_len, nul);
      if (b >= 0) {
        bool ok = true;
        switch (b) {
          case 0:
            ok = as_u64(av, &n->rf_id);
            break;
          case 1:
            ok = as_u64(av, &n->fw_parent);
            break;
          case 2:
            ok = av->kind == ETR_J_INT;
            if (ok) n->seq_id = av->v.i;
            break;
          case 3:
            ok = as_u64(av, &n->scope);
            break;
          case 4:
            ok = as_u64(av, &n->tid);
            break;
          case 5:
            ok = as_u64(av, &n->fw_tid);
            break;
          default:
            ok = av->kind == ETR_J_STRING;
            if (ok) {
              if (b == 6)
                n->op_schema = av->v.str.s;
              else if (b == 7)
                n->kernel_backend = av->v.str.s;
              else
                n->kernel_file = av->v.str.s;
            }
            break;
        }
        if (ok)
          n->missing_attrs &= ~(1u << b);
        else
          warn(r, n->offset, n->id, "attr \"%s\" has a value of the wrong kind", nm);
      }
      if (nm[0] == 't' && NAME_IS(nm, nm_len, "traceback", nul))
        n->has_traceback = as_u64(av, &n->traceback);
    }
    n->attrs = ra;
    n->n_attrs = k;
  } else {
    warn(r, n->offset, n->id, "node has no \"attrs\" array");
  }
  if (n->missing_attrs & 0x7f) {
    for (int b = 0; b < 7; b++)
      if (n->missing_attrs & (1u << b))
        warn(r, n->offset, n->id, ETR_READER_WARN_MISSING_ATTR " \"%s\"", base_attrs[b]);
  }
  /* queue it */
  if (r->q_len == r->q_cap) {
    size_t cap = r->q_cap ? r->q_cap * 2 : 64;
    qent *q = malloc(cap * sizeof *q);
    if (!q) {
      set_error(r, ETR_ENOMEM, r->node_off, "out of memory");
      return 0;
    }
    for (size_t i = 0; i < r->q_len; i++) q[i] = r->q[(r->q_head + i) % r->q_cap];
    free(r->q);
    r->q = q;
    r->q_cap = cap;
    r->q_head = 0;
  }
  qent *e = &r->q[(r->q_head + r->q_len) % r->q_cap];
  e->node = n;
  e->mark = r->node_mark;
  r->q_len++;
  return 1;
}

/* ---- yajl callbacks ---- */

/* Where a value starts: inside a value being built, a node, a top-level member, or the
 * top-level object itself. Returns 1 to go on, 0 to stop (error set). `is_open` tells
 * whether the value is a container being opened. */
static int value_start(rd_reader *r, bool is_map, bool is_open) {
  if (r->building) return 1;
  switch (r->ph) {
    case PH_START:
      if (is_map && is_open) {
        r->ph = PH_HEADER;
        return 2; /* the top-level object: nothing to build */
      }
      set_error(r, ETR_EFORMAT, cur_off(r) - 1, "the trace is not a JSON object");
      return 0;
    case PH_NODES:
      if (is_map && is_open) {
        r->node_off = cur_off(r) - 1;
        if (!r->nodes.tail && !arena_alloc(&r->nodes, 0)) {
          set_error(r, ETR_ENOMEM, r->node_off, "out of memory");
          return 0;
        }
        r->node_mark = r->nodes.tail;
        begin_build(r, true);
        return 1;
      }
      set_error(r, ETR_EFORMAT, cur_off(r) - 1, "an element of \"nodes\" is not an object");
      return 0;
    case PH_HEADER:
    case PH_TRAILER:
      if (!strcmp(r->tkey, "nodes")) {
        if (r->ph == PH_HEADER && !is_map && is_open) {
          r->ph = PH_NODES;
          r->nodes_seen = true;
          return 2;
        }
        set_error(r, ETR_EFORMAT, cur_off(r) - 1,
                  r->ph == PH_HEADER ? "\"nodes\" is not an array" : "a second \"nodes\" key");
        return 0;
      }
      begin_build(r, false);
      return 1;
    default:
      set_error(r, ETR_EFORMAT, cur_off(r) - 1, "data after the top-level object");
      return 0;
  }
}

static int scalar(rd_reader *r, const rd_jval *v) {
  int s = value_start(r, false, false);
  if (s != 1) return s ? 1 : 0;
  return b_value(r, v);
}

static int cb_null(void *ctx) {
  rd_jval v = {.kind = ETR_J_NULL};
  return scalar(ctx, &v);
}

static int cb_bool(void *ctx, int b) {
  rd_jval v = {.kind = ETR_J_BOOL};
  v.v.b = b != 0;
  return scalar(ctx, &v);
}

static int cb_number(void *ctx, const char *s, size_t len) {
  rd_reader *r = ctx;
  /* At the end of the input yajl hands over the digits it has; inside the document they
   * may be the start of a longer number ("finish_ts": 1234 cut to 12): not a value. */
  if (r->yajl_eof && r->depth > 0) return 0;
  rd_jval v;
  size_t i = 0;
  bool neg = false;
  if (len && s[0] == '-') {
    neg = true;
    i = 1;
  }
  uint64_t acc = 0;
  bool is_int = i < len, overflow = false;
  for (; i < len; i++) {
    unsigned d = (unsigned char)s[i] - '0';
    if (d > 9) {
      is_int = false;
      break;
    }
    if (acc > (UINT64_MAX - d) / 10) overflow = true;
    acc = acc * 10 + d;
  }
  if (is_int && !overflow && !neg && acc <= (uint64_t)INT64_MAX) {
    v.kind = ETR_J_INT;
    v.v.i = (int64_t)acc;
  } else if (is_int && !overflow && neg && acc <= (uint64_t)INT64_MAX + 1) {
    v.kind = ETR_J_INT;
    v.v.i = acc == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)acc;
  } else if (is_int && !overflow && !neg) {
    v.kind = ETR_J_UINT;
    v.v.u = acc;
  } else {
    char buf[128];
    size_t n = len < sizeof buf - 1 ? len : sizeof buf - 1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    v.kind = ETR_J_DOUBLE;
    v.v.d = strtod(buf, NULL);
  }
  return scalar(r, &v);
}

static int cb_string(void *ctx, const unsigned char *s, size_t len) {
  rd_reader *r = ctx;
  int st = value_start(r, false, false);
  if (st != 1) return st ? 1 : 0;
  rd_jval v = {.kind = ETR_J_STRING};
  if (r->discard) return b_value(r, &v);
  char *p = copy_str(r, r->target, s, len, &v.v.str.len);
  if (!p) return 0;
  v.v.str.s = p;
  return b_value(r, &v);
}

/* yajl opened an object (map) or an array. */
static int start_container(rd_reader *r, bool map) {
  int st = value_start(r, map, true);
  if (st == 2) {
    r->depth++;
    return 1;
  }
  if (!st) return 0;
  r->depth++;
  return b_open(r, map);
}

static int cb_start_map(void *ctx) { return start_container(ctx, true); }

static int cb_start_array(void *ctx) { return start_container(ctx, false); }

static int top_key(rd_reader *r, const unsigned char *k, size_t len) {
  char *p = copy_str(r, &r->keep, k, len, &len);
  if (!p) return 0;
  r->tkey = p;
  if (!grow((void **)&r->top_keys, &r->top_keys_cap, r->n_top_keys, sizeof *r->top_keys, 16)) {
    set_error(r, ETR_ENOMEM, cur_off(r), "out of memory");
    return 0;
  }
  for (size_t i = 0; i < r->n_top_keys; i++)
    if (!strcmp(r->top_keys[i], p)) {
      set_error(r, ETR_EFORMAT, cur_off(r) - len - 2, "top-level key \"%s\" appears twice", p);
      return 0;
    }
  r->top_keys[r->n_top_keys++] = p;
  if (strcmp(p, "nodes") && !is_header_key(p) && r->ph == PH_HEADER)
    warn(r, cur_off(r) - len - 2, -1, "unknown top-level key \"%s\" before \"nodes\"", p);
  return 1;
}

static int cb_key(void *ctx, const unsigned char *k, size_t len) {
  rd_reader *r = ctx;
  if (!r->building) return top_key(r, k, len);
  if (r->discard) return 1;
  char *p = copy_str(r, r->target, k, len, &len);
  if (!p) return 0;
  r->bkey = p;
  r->bkey_len = len;
  return 1;
}

static int end_container(rd_reader *r) {
  r->depth--;
  if (r->building) return b_close(r);
  if (r->ph == PH_NODES && r->depth == 1) {
    r->ph = PH_TRAILER;
    r->nodes_done = true;
    return 1;
  }
  if (r->depth == 0) {
    r->ph = PH_END;
    r->top_end = cur_off(r);
    return 1;
  }
  return 1;
}

static int cb_end_map(void *ctx) { return end_container(ctx); }
static int cb_end_array(void *ctx) { return end_container(ctx); }

static const yajl_callbacks callbacks = {cb_null,    cb_bool,        NULL,         NULL,
                                         cb_number,  cb_string,      cb_start_map, cb_key,
                                         cb_end_map, cb_start_array, cb_end_array};

/* ---- input ---- */

static const char *display_path(const char *path) { return strcmp(path, "-") ? path : "<stdin>"; }

/* Fill r->in when it is empty. Returns bytes available, 0 at EOF, -1 on error. */
static ssize_t fill_raw(rd_reader *r) {
  if (r->in_pos < r->in_len) return (ssize_t)(r->in_len - r->in_pos);
  if (r->eof) return 0;
  for (;;) {
    ssize_t k = read(r->fd, r->in, IN_BLOCK);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      set_error(r, ETR_EIO, r->consumed, "read error: %s", strerror(errno));
      return -1;
    }
    r->in_pos = 0;
    r->in_len = (size_t)k;
    r->in_consumed += (uint64_t)k;
    if (k == 0) r->eof = true;
    return k;
  }
}

/* Next block of decompressed bytes: *p and length; 0 at EOF, -1 on error. */
static ssize_t next_block(rd_reader *r, const unsigned char **p) {
  if (!r->sniffed) {
    r->sniffed = true;
    /* gather at least four bytes to look for the gzip (2 bytes) and zstd (4) magic */
    ssize_t k = fill_raw(r);
    if (k < 0) return -1;
    while (r->in_len < 4 && !r->eof) {
      ssize_t m = read(r->fd, r->in + r->in_len, IN_BLOCK - r->in_len);
      if (m < 0 && errno == EINTR) continue;
      if (m < 0) {
        set_error(r, ETR_EIO, 0, "read error: %s", strerror(errno));
        return -1;
      }
      if (m == 0) r->eof = true;
      r->in_len += (size_t)m;
      r->in_consumed += (uint64_t)m;
    }
    if (r->in_len >= 4 && r->in[0] == 0x28 && r->in[1] == 0xb5 && r->in[2] == 0x2f &&
        r->in[3] == 0xfd) {
      r->zst = ZSTD_createDStream();
      r->out = malloc(IN_BLOCK);
      if (!r->zst || !r->out || ZSTD_isError(ZSTD_initDStream(r->zst))) {
        set_error(r, ETR_ENOMEM, 0, "cannot start zstd decompression");
        return -1;
      }
      r->zst_last = 1;
    } else if (r->in_len >= 2 && r->in[0] == 0x1f && r->in[1] == 0x8b) {
      r->gz = true;
      memset(&r->zs, 0, sizeof r->zs);
      if (inflateInit2(&r->zs, 15 + 32) != Z_OK) {
        set_error(r, ETR_ENOMEM, 0, "cannot start gzip decompression");
        return -1;
      }
      r->gz_init = true;
      r->out = malloc(IN_BLOCK);
      if (!r->out) {
        set_error(r, ETR_ENOMEM, 0, "out of memory");
        return -1;
      }
    }
  }
  if (r->zst) {
    /* frames one after the other (zstd -c a b > c) are read as one stream */
    for (;;) {
      ssize_t k = fill_raw(r);
      if (k < 0) return -1;
      if (k == 0) {
        if (r->zst_last != 0) {
          set_error(r, ETR_EFORMAT, r->consumed, "zstd: the compressed stream is truncated");
          return -1;
        }
        return 0;
      }
      ZSTD_inBuffer in = {r->in + r->in_pos, r->in_len - r->in_pos, 0};
      ZSTD_outBuffer out = {r->out, FEED_BLOCK, 0};
      size_t z = ZSTD_decompressStream(r->zst, &out, &in);
      r->in_pos += in.pos;
      if (ZSTD_isError(z)) {
        set_error(r, ETR_EFORMAT, r->consumed + out.pos, "zstd: %s", ZSTD_getErrorName(z));
        return -1;
      }
      r->zst_last = z;
      if (out.pos) {
        *p = r->out;
        return (ssize_t)out.pos;
      }
    }
  }
  if (!r->gz) {
    ssize_t k = fill_raw(r);
    if (k <= 0) return k;
    size_t n = k > (ssize_t)FEED_BLOCK ? FEED_BLOCK : (size_t)k;
    *p = r->in + r->in_pos;
    r->in_pos += n;
    return (ssize_t)n;
  }
  for (;;) {
    if (r->gz_end) {
      /* a member ended: another one may follow (concatenated gzip) */
      ssize_t k = fill_raw(r);
      if (k <= 0) return k;
      if (inflateReset(&r->zs) != Z_OK) {
        set_error(r, ETR_EFORMAT, r->consumed, "gzip: cannot reset");
        return -1;
      }
      r->gz_end = false;
    }
    ssize_t k = fill_raw(r);
    if (k < 0) return -1;
    if (k == 0) {
      set_error(r, ETR_EFORMAT, r->consumed, "gzip: the compressed stream is truncated");
      return -1;
    }
    r->zs.next_in = r->in + r->in_pos;
    r->zs.avail_in = (uInt)(r->in_len - r->in_pos);
    r->zs.next_out = r->out;
    r->zs.avail_out = FEED_BLOCK;
    int zr = inflate(&r->zs, Z_NO_FLUSH);
    r->in_pos = r->in_len - r->zs.avail_in;
    if (zr == Z_STREAM_END) {
      r->gz_end = true;
    } else if (zr != Z_OK && zr != Z_BUF_ERROR) {
      set_error(r, ETR_EFORMAT, r->consumed + (FEED_BLOCK - r->zs.avail_out), "gzip: %s",
                r->zs.msg ? r->zs.msg : "corrupt data");
      return -1;
    }
    size_t produced = FEED_BLOCK - r->zs.avail_out;
    if (produced) {
      *p = r->out;
      return (ssize_t)produced;
    }
  }
}

/* Up to n decompressed bytes copied to dst: bytes read, 0 at EOF, -1 on error. Plain input
 * is read straight into dst once the bytes read to sniff its magic are used up, not through
 * r->in (one copy of every byte less). */
static ssize_t read_into(rd_reader *r, unsigned char *dst, size_t n) {
  if (r->sniffed && !r->zst && !r->gz && r->in_pos == r->in_len) {
    if (r->eof) return 0;
    for (;;) {
      ssize_t k = read(r->fd, dst, n);
      if (k < 0 && errno == EINTR) continue;
      if (k < 0) {
        set_error(r, ETR_EIO, r->consumed, "read error: %s", strerror(errno));
        return -1;
      }
      r->in_consumed += (uint64_t)k;
      if (k == 0) r->eof = true;
      return k;
    }
  }
  const unsigned char *blk = NULL;
  ssize_t k = next_block(r, &blk);
  if (k > 0) memcpy(dst, blk, (size_t)k);
  return k;
}

static void yajl_fail(rd_reader *r, const unsigned char *buf, size_t len) {
  uint64_t off = r->feed_base + yajl_get_bytes_consumed(r->yh);
  unsigned char *m = yajl_get_error(r->yh, 0, buf, len);
  char reason[256];
  snprintf(reason, sizeof reason, "%s", m ? (const char *)m : "parse error");
  if (m) yajl_free_error(r->yh, m);
  size_t n = strlen(reason);
  while (n && (reason[n - 1] == '\n' || reason[n - 1] == ' ' || reason[n - 1] == '.'))
    reason[--n] = '\0';
  set_error(r, ETR_EFORMAT, off, "invalid JSON (%s)", reason);
}

/* Parse one more block. 1 = parsed, 0 = end of input (parse completed), -1 = error. */
static int hand_feed(rd_reader *r);

/* After the top-level object only whitespace may follow. yajl checks this itself, except
 * for an unterminated string there: it takes that for a token still coming and never
 * reports it (found by tests/fuzz/fuzz_reader). True after setting the error. */
static bool yajl_trailing_garbage(rd_reader *r, const unsigned char *p, size_t n) {
  size_t i = r->top_end > r->feed_base ? (size_t)(r->top_end - r->feed_base) : 0;
  for (; i < n; i++)
    if (p[i] != ' ' && p[i] != '\n' && p[i] != '\r' && p[i] != '\t') {
      if (!r->err) set_error(r, ETR_EFORMAT, r->feed_base + i, "invalid JSON (trailing garbage)");
      return true;
    }
  return false;
}

static int feed(rd_reader *r) {
  if (r->hand) return hand_feed(r);
  if (r->err) return -1;
  if (r->parse_done) return 0;
  const unsigned char *p = NULL;
  ssize_t k = next_block(r, &p);
  if (k < 0) return -1;
  if (k == 0) {
    r->feed_base = r->consumed;
    r->yajl_eof = true;
    yajl_status st = yajl_complete_parse(r->yh);
    if (r->err) return -1;
    if (st != yajl_status_ok || r->ph != PH_END) {
      set_error(r, ETR_EFORMAT, r->consumed, "unexpected end of input (truncated file?)");
      return -1;
    }
    r->parse_done = true;
    return 0;
  }
  r->feed_base = r->consumed;
  r->feed_ptr = p;
  /* yajl takes \v and \f for whitespace; RFC 8259 (and the hand parser) do not, and they
   * are invalid anywhere in JSON (raw control bytes in strings too): stop the block there. */
  size_t n = (size_t)k;
  const unsigned char *bad = memchr(p, '\f', n), *vt = memchr(p, '\v', n);
  if (vt && (!bad || vt < bad)) bad = vt;
  if (bad) n = (size_t)(bad - p);
  yajl_status st = yajl_parse(r->yh, p, n);
  if (st != yajl_status_ok) {
    if (!r->err) yajl_fail(r, p, n);
    return -1;
  }
  if (r->ph == PH_END && yajl_trailing_garbage(r, p, n)) return -1;
  if (bad) {
    if (!r->err) set_error(r, ETR_EFORMAT, r->consumed + n, "invalid JSON (unexpected character)");
    return -1;
  }
  r->consumed += (uint64_t)k;
  /* a token yajl is still gathering (one long string) is only seen when it ends */
  if (r->building && r->build_node && r->consumed - r->node_off > r->limit) {
    set_error(r, ETR_EFORMAT, r->node_off,
              "node needs more than %zu MiB to read (its text, or the values it holds; "
              "ETR_READER_LIMIT_MB raises the limit)",
              r->limit >> 20);
    return -1;
  }
  return 1;
}

/* ---------------------------------------------------------- hand parser ---- */
/*
 * The second backend (ETR_READER_BACKEND=hand; see reader.h): a pull parser specialised for
 * traces. The input sits in one buffer that always holds the current step (the top-level
 * '{', one top-level member, or one node) whole; a step that runs off the end of the buffer
 * is undone (arenas rolled back) and redone after the buffer is refilled, so no parser state
 * spans a refill. Values are built directly into the arenas: no callback per token, no
 * intermediate copies. It accepts exactly RFC 8259 JSON, strings checked to be UTF-8.
 */

/* H_BIG: the step needs more memory than r->limit (its text, or the values it builds) */
enum { H_OK = 0, H_MORE = 1, H_ERR = 2, H_BIG = 3 };
#define H_MAX_DEPTH 1024
/* Zero bytes kept after the window's data (hb[hb_len..hb_len + H_PAD)): a NUL stops every
 * scanning loop at the end (it is not whitespace, a digit or a plain string byte), so the
 * loops need no bounds check, and the string scanner may load 16 bytes from any position up
 * to the end. Whatever stops at the end then checks p >= end and asks for more input. */
#define H_PAD 64

static int h_fail(rd_reader *r, const unsigned char *at, const char *what) {
  uint64_t off = r->hb_base + (uint64_t)(at - r->hb);
  set_error(r, ETR_EFORMAT, off, "invalid JSON (%s)", what);
  return H_ERR;
}

static inline const unsigned char *h_ws(const unsigned char *p, const unsigned char *end) {
  (void)end; /* the NUL after the window stops the loop (H_PAD) */
  while (*p <= ' ' && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
  return p;
}

static inline void put_utf8(unsigned char **o, uint32_t c) {
  unsigned char *q = *o;
  if (c < 0x80) {
    *q++ = (unsigned char)c;
  } else if (c < 0x800) {
    *q++ = (unsigned char)(0xC0 | (c >> 6));
    *q++ = (unsigned char)(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    *q++ = (unsigned char)(0xE0 | (c >> 12));
    *q++ = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
    *q++ = (unsigned char)(0x80 | (c & 0x3F));
  } else {
    *q++ = (unsigned char)(0xF0 | (c >> 18));
    *q++ = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
    *q++ = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
    *q++ = (unsigned char)(0x80 | (c & 0x3F));
  }
  *o = q;
}

static int hex4(const unsigned char *p, uint32_t *out) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) {
    unsigned c = p[i], d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
      d = (c | 0x20) - 'a' + 10;
    else
      return 0;
    v = v * 16 + d;
  }
  *out = v;
  return 1;
}

/* Length of the valid UTF-8 sequence at p (lead byte >= 0x80), or 0. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end) {
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

/* The first byte at or after p that a string cannot simply copy: '"', '\\', a control byte
 * (< 0x20) or a non-ASCII one (>= 0x80). The window's NUL padding (H_PAD) stops it at the
 * end; it reads at most 15 bytes past that. 16 bytes at a time with SSE2 (every x86-64 has
 * it), 8 at a time on other little-endian machines (SWAR), else one at a time. */
static inline const unsigned char *scan_plain(const unsigned char *p) {
#if defined(__SSE2__)
  const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'),
                space = _mm_set1_epi8(0x20);
  for (;; p += 16) {
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
    /* signed compare: bytes >= 0x80 are negative, so "< 0x20" catches them too */
    __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, bslash)),
                             _mm_cmplt_epi8(x, space));
    unsigned bits = (unsigned)_mm_movemask_epi8(m);
    if (bits) return p + ETR_RD_CTZ32(bits);
  }
#elif defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && \
    defined(__SIZEOF_POINTER__) && __SIZEOF_POINTER__ == 8
  const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
  for (;; p += 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
    /* a borrow only carries into bytes above a flagged one: the lowest flag is exact */
    uint64_t t = ((w - ones * 0x20) | w | ((q - ones) & ~q) | ((b - ones) & ~b)) & highs;
    if (t) return p + ETR_RD_CTZ64(t) / 8;
  }
#else
  while (*p >= 0x20 && *p != '"' && *p != '\\' && *p < 0x80) p++;
  return p;
#endif
}

static int h_string_slow(rd_reader *r, const unsigned char **pp, const unsigned char *end, arena *a,
                         const char **s, size_t *len);

/* A string; *pp at the opening quote. The result is NUL-terminated in arena a. Inline: the
 * common string, printable ASCII without escapes. */
static inline int h_string(rd_reader *r, const unsigned char **pp, const unsigned char *end,
                           arena *a, const char **s, size_t *len) {
  const unsigned char *p = *pp + 1, *start = p;
  p = scan_plain(p);
  if (ETR_RD_LIKELY(*p == '"')) {
    size_t raw = (size_t)(p - start);
    *pp = p + 1;
    *len = raw;
    unsigned char *o = arena_alloc(a, raw + 1);
    if (!o) {
      set_error(r, ETR_ENOMEM, 0, "out of memory");
      return H_ERR;
    }
    if (raw < 16)           /* arena_alloc gave 16 bytes, the window has them (H_PAD): */
      memcpy(o, start, 16); /* one fixed-size copy */
    else
      memcpy(o, start, raw);
    o[raw] = '\0';
    *s = (const char *)o;
    return H_OK;
  }
  return h_string_slow(r, pp, end, a, s, len);
}

/* h_string for the other strings (escapes, non-ASCII, control bytes, cut by the end). */
static ETR_RD_NOINLINE int h_string_slow(rd_reader *r, const unsigned char **pp,
                                         const unsigned char *end, arena *a, const char **s,
                                         size_t *len) {
  const unsigned char *p = *pp + 1, *start = p;
  bool simple = true;
  size_t bad = 0; /* bytes of invalid UTF-8: each becomes U+FFFD (3 bytes) */
  /* pass 1: find the closing quote, check the bytes */
  for (;;) {
    p = scan_plain(p);
    if (p >= end) return H_MORE;
    unsigned c = *p;
    if (c == '"') break;
    if (c < 0x20) return h_fail(r, p, "control character in a string");
    simple = false;
    if (c == '\\') {
      if (end - p < 2) return H_MORE;
      unsigned e = p[1];
      if (e == 'u') {
        if (end - p < 6) return H_MORE;
        uint32_t u;
        if (!hex4(p + 2, &u)) return h_fail(r, p, "bad \\u escape");
        p += 6;
      } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' ||
                 e == 'r' || e == 't') {
        p += 2;
      } else {
        return h_fail(r, p, "bad escape in a string");
      }
    } else {
      size_t n = utf8_len(p, end);
      if (n == (size_t)-1) return H_MORE;
      if (!n) { /* a writer that passed raw bytes through: keep reading, replace them */
        bad++;
        n = bad_len(p, end);
      }
      p += n;
    }
  }
  if (bad)
    warn(r, r->hb_base + (uint64_t)(start - r->hb), -1,
         "invalid UTF-8 in a string (%zu sequence%s replaced by U+FFFD)", bad, bad == 1 ? "" : "s");
  size_t raw = (size_t)(p - start);
  unsigned char *o = arena_alloc(a, raw + 2 * bad + 1);
  if (!o) {
    set_error(r, ETR_ENOMEM, 0, "out of memory");
    return H_ERR;
  }
  *s = (const char *)o;
  if (simple) {
    memcpy(o, start, raw);
    o[raw] = '\0';
    *len = raw;
    *pp = p + 1;
    return H_OK;
  }
  /* pass 2: decode (never longer than the source plus 2 bytes per replaced byte) */
  unsigned char *q = o;
  size_t lone = 0;
  for (const unsigned char *x = start; x < p;) {
    if (*x >= 0x80) {
      x = put_utf8_seq(&q, x, p);
      continue;
    }
    if (*x != '\\') {
      *q++ = *x++;
      continue;
    }
    unsigned e = x[1];
    x += 2;
    switch (e) {
      case 'b':
        *q++ = '\b';
        break;
      case 'f':
        *q++ = '\f';
        break;
      case 'n':
        *q++ = '\n';
        break;
      case 'r':
        *q++ = '\r';
        break;
      case 't':
        *q++ = '\t';
        break;
      case 'u': {
        uint32_t u = 0, lo = 0;
        hex4(x, &u);
        x += 4;
        if (u >= 0xD800 && u <= 0xDBFF && p - x >= 6 && x[0] == '\\' && x[1] == 'u' &&
            hex4(x + 2, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
          u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
          x += 6;
        } else if (u >= 0xD800 && u <= 0xDFFF) {
          u = 0xFFFD; /* a lone surrogate */
          lone++;
        } else if (u == 0) {
          r->nul_str = true;
        }
        put_utf8(&q, u);
        break;
      }
      default:
        *q++ = (unsigned char)e;
        break; /* " \ / */
    }
  }
  if (lone)
    warn(r, r->hb_base + (uint64_t)(start - r->hb), -1,
         "invalid UTF-8 in a string (%zu sequence%s replaced by U+FFFD)", lone,
         lone == 1 ? "" : "s");
  *q = '\0';
  *len = (size_t)(q - o);
  *pp = p + 1;
  return H_OK;
}

static inline int h_number(rd_reader *r, const unsigned char **pp, const unsigned char *end,
                           rd_jval *v) {
  const unsigned char *p = *pp, *s = p;
  bool neg = *p == '-';
  p += neg;
  if (p >= end) return H_MORE;
  const unsigned char *digits = p;
  uint64_t acc = 0;
  if (*p == '0') {
    p++;
  } else if ((unsigned)(*p - '1') < 9) {
    /* no overflow check per digit: 19 digits always fit, longer ones are redone below */
    do acc = acc * 10 + (unsigned)(*p++ - '0');
    while ((unsigned)(*p - '0') < 10); /* the NUL after the window stops it */
  } else {
    return h_fail(r, p, "bad number");
  }
  size_t n_digits = (size_t)(p - digits);
  bool is_int = true;
  if (*p == '.') {
    is_int = false;
    p++;
    if (p >= end) return H_MORE;
    if (*p < '0' || *p > '9') return h_fail(r, p, "bad number");
    while ((unsigned)(*p - '0') < 10) p++;
  }
  if (*p == 'e' || *p == 'E') {
    is_int = false;
    p++;
    if (p < end && (*p == '+' || *p == '-')) p++;
    if (p >= end) return H_MORE;
    if (*p < '0' || *p > '9') return h_fail(r, p, "bad number");
    while ((unsigned)(*p - '0') < 10) p++;
  }
  if (p >= end) return H_MORE; /* the number may go on */
  bool overflow = false;
  if (is_int && n_digits > 19) {
    acc = 0;
    for (const unsigned char *x = digits; x < digits + n_digits; x++) {
      unsigned d = *x - '0';
      if (acc > (UINT64_MAX - d) / 10) overflow = true;
      acc = acc * 10 + d;
    }
  }
  if (is_int && !overflow && !neg && acc <= (uint64_t)INT64_MAX) {
    v->kind = ETR_J_INT;
    v->v.i = (int64_t)acc;
  } else if (is_int && !overflow && neg && acc <= (uint64_t)INT64_MAX + 1) {
    v->kind = ETR_J_INT;
    v->v.i = acc == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)acc;
  } else if (is_int && !overflow && !neg) {
    v->kind = ETR_J_UINT;
    v->v.u = acc;
  } else {
    char buf[128];
    size_t n = (size_t)(p - s);
    if (n > sizeof buf - 1) n = sizeof buf - 1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    v->kind = ETR_J_DOUBLE;
    v->v.d = strtod(buf, NULL);
  }
  *pp = p;
  return H_OK;
}

static int h_value(rd_reader *r, const unsigned char **pp, const unsigned char *end, arena *a,
                   int depth, rd_jval *v);

static int h_literal(rd_reader *r, const unsigned char **pp, const unsigned char *end,
                     const char *lit, size_t n);

static int h_container(rd_reader *r, const unsigned char **pp, const unsigned char *end, arena *a,
                       int depth, rd_jval *v) {
  const unsigned char *p = *pp;
  bool is_obj = *p == '{';
  unsigned char close = is_obj ? '}' : ']';
  if (depth >= H_MAX_DEPTH) return h_fail(r, p, "nesting too deep");
  p = h_ws(p + 1, end);
  if (p >= end) return H_MORE;
  size_t start = r->stk_len;
  if (*p != close) {
    for (;;) {
      /* the member's slot is taken before its value is read: a container's children go
       * above it on the stack */
      if (ETR_RD_UNLIKELY(r->stk_len == r->stk_cap) &&
          !grow((void **)&r->stk, &r->stk_cap, r->stk_len, sizeof *r->stk, 256)) {
        set_error(r, ETR_ENOMEM, 0, "out of memory");
        return H_ERR;
      }
      size_t slot = r->stk_len++;
      rd_jmember *m = &r->stk[slot];
      int st;
      if (is_obj) {
        if (*p != '"') return h_fail(r, p, "expected a key");
        st = h_string(r, &p, end, a, &m->key, &m->key_len);
        if (st) return st;
        if (*p != ':') {
          p = h_ws(p, end);
          if (p >= end) return H_MORE;
          if (*p != ':') return h_fail(r, p, "expected ':'");
        }
        p = h_ws(p + 1, end);
        if (p >= end) return H_MORE;
      } else {
        m->key = NULL;
        m->key_len = 0;
      }
      /* the value: scalars straight into the slot, containers through the recursion */
      unsigned c = *p;
      if (c == '"') {
        m->val.kind = ETR_J_STRING;
        st = h_string(r, &p, end, a, &m->val.v.str.s, &m->val.v.str.len);
      } else if (c == '-' || c - '0' < 10) {
        st = h_number(r, &p, end, &m->val);
      } else if (((c == '[' && p[1] == ']') || (c == '{' && p[1] == '}')) &&
                 depth + 1 < H_MAX_DEPTH) {
        /* an empty container ("shapes": [[],[]]): no recursion; p[1] is in the window or
         * its NUL padding */
        if (c == '[') {
          m->val.kind = ETR_J_ARRAY;
          m->val.v.arr.items = NULL;
          m->val.v.arr.n = 0;
        } else {
          m->val.kind = ETR_J_OBJECT;
          m->val.v.obj.items = NULL;
          m->val.v.obj.n = 0;
        }
        p += 2;
        st = H_OK;
      } else if (c == '{' || c == '[') {
        rd_jval item;
        st = h_container(r, &p, end, a, depth + 1, &item);
        r->stk[slot].val = item; /* the stack may have moved */
      } else if (c == 't') {
        m->val.kind = ETR_J_BOOL;
        m->val.v.b = true;
        st = h_literal(r, &p, end, "true", 4);
      } else if (c == 'f') {
        m->val.kind = ETR_J_BOOL;
        m->val.v.b = false;
        st = h_literal(r, &p, end, "false", 5);
      } else if (c == 'n') {
        m->val.kind = ETR_J_NULL;
        st = h_literal(r, &p, end, "null", 4);
      } else {
        return h_fail(r, p, "unexpected character");
      }
      if (st) return st;
      /* a few hundred thousand tiny values build a tree far larger than their text */
      if ((r->stk_len & 1023) == 0 && r->stk_len * sizeof *r->stk + a->live > r->limit)
        return H_BIG;
      if (*p != ',') p = h_ws(p, end); /* the NUL after the window ends it (H_PAD) */
      if (*p == ',') {
        p = h_ws(p + 1, end);
        if (p >= end) return H_MORE;
        continue;
      }
      if (p >= end) return H_MORE;
      if (*p == close) break;
      return h_fail(r, p, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
  }
  size_t n = r->stk_len - start;
  if (is_obj) {
    v->kind = ETR_J_OBJECT;
    rd_jmember *items = NULL;
    if (n) {
      items = arena_alloc(a, n * sizeof *items);
      if (!items) goto oom;
      memcpy(items, r->stk + start, n * sizeof *items);
    }
    v->v.obj.items = items;
    v->v.obj.n = n;
  } else {
    v->kind = ETR_J_ARRAY;
    rd_jval *items = NULL;
    if (n) {
      items = arena_alloc(a, n * sizeof *items);
      if (!items) goto oom;
      const rd_jmember *src = r->stk + start;
      for (size_t i = 0; i < n; i++) items[i] = src[i].val;
    }
    v->v.arr.items = items;
    v->v.arr.n = n;
  }
  r->stk_len = start;
  *pp = p + 1;
  return H_OK;
oom:
  set_error(r, ETR_ENOMEM, 0, "out of memory");
  return H_ERR;
}

static int h_literal(rd_reader *r, const unsigned char **pp, const unsigned char *end,
                     const char *lit, size_t n) {
  const unsigned char *p = *pp;
  size_t have = (size_t)(end - p) < n ? (size_t)(end - p) : n;
  if (memcmp(p, lit, have)) return h_fail(r, p, "invalid literal");
  if (have < n) return H_MORE;
  *pp = p + n;
  return H_OK;
}

static int h_value(rd_reader *r, const unsigned char **pp, const unsigned char *end, arena *a,
                   int depth, rd_jval *v) {
  const unsigned char *p = *pp;
  switch (*p) {
    case '"': {
      v->kind = ETR_J_STRING;
      return h_string(r, pp, end, a, &v->v.str.s, &v->v.str.len);
    }
    case '{':
    case '[':
      return h_container(r, pp, end, a, depth, v);
    case 't':
      v->kind = ETR_J_BOOL;
      v->v.b = true;
      return h_literal(r, pp, end, "true", 4);
    case 'f':
      v->kind = ETR_J_BOOL;
      v->v.b = false;
      return h_literal(r, pp, end, "false", 5);
    case 'n':
      v->kind = ETR_J_NULL;
      return h_literal(r, pp, end, "null", 4);
    default:
      if (*p == '-' || (*p >= '0' && *p <= '9')) return h_number(r, pp, end, v);
      return h_fail(r, p, "unexpected character");
  }
}

/* Both backends: the value of top-level key r->tkey is skipped. 1, or 0 on error. */
static int skip_note(rd_reader *r, uint64_t off) {
  if (!grow((void **)&r->skipped, &r->skipped_cap, r->n_skipped, sizeof *r->skipped, 4)) {
    set_error(r, ETR_ENOMEM, off, "out of memory");
    return 0;
  }
  r->skipped[r->n_skipped++] = r->tkey;
  warn(r, off, -1,
       "the value of \"%s\" needs more than %zu MiB: skipped, not loaded (ETR_READER_LIMIT_MB "
       "raises the limit)",
       r->tkey, r->limit >> 20);
  return 1;
}

/* The value of the top-level key r->tkey (at p) needs more than the limit: note it, warn, and
 * pass over it in later steps without building it. */
static int h_skip_start(rd_reader *r, const unsigned char *p) {
  r->skip_next = false;
  r->have_key = false;
  r->hpos = (size_t)(p - r->hb);
  if (!skip_note(r, r->hb_base + r->hpos)) return H_ERR;
  r->skipping = true;
  r->sk_started = r->sk_str = r->sk_esc = false;
  r->sk_depth = 0;
  r->h_first = false;
  r->need_item = false;
  return H_OK;
}

/* Pass over the skipped value in hb[hpos..hb_len): strings and bracket depth only. */
static int h_skip(rd_reader *r) {
  const unsigned char *p = r->hb + r->hpos, *end = r->hb + r->hb_len;
  if (p >= end) return H_MORE;
  bool done = true;
  for (;; p++) {
    if (p >= end) {
      done = false;
      break;
    }
    unsigned c = *p;
    if (r->sk_str) {
      if (r->sk_esc) {
        r->sk_esc = false;
      } else if (c == '\\') {
        r->sk_esc = true;
      } else if (c == '"') {
        r->sk_str = false;
        if (r->sk_depth == 0) {
          p++;
          break;
        }
      }
      continue;
    }
    bool ws = c == ' ' || c == '\n' || c == '\r' || c == '\t';
    if (!r->sk_started) {
      if (ws) continue;
      r->sk_started = true;
    }
    if (c == '"') {
      r->sk_str = true;
    } else if (c == '[' || c == '{') {
      r->sk_depth++;
    } else if (c == ']' || c == '}') {
      if (r->sk_depth == 0) break; /* the end of a scalar: the top-level object's '}' */
      if (--r->sk_depth == 0) {
        p++;
        break;
      }
    } else if (r->sk_depth == 0 && (ws || c == ',')) {
      break; /* the end of a scalar */
    }
  }
  r->hpos = (size_t)(p - r->hb);
  if (done) r->skipping = false;
  return H_OK;
}

/* One step of the top-level state machine on hb[hpos..hb_len). */
static int h_step(rd_reader *r) {
  if (!r->hb) return H_MORE; /* nothing read yet (and NULL + 0 is undefined behaviour) */
  const unsigned char *p = r->hb + r->hpos, *end = r->hb + r->hb_len;
  p = h_ws(p, end);
  if (p >= end) {
    if (r->ph == PH_END) {
      r->hpos = r->hb_len;
      return H_MORE; /* the caller sees EOF: done */
    }
    return H_MORE;
  }
  switch (r->ph) {
    case PH_START:
      if (*p != '{') {
        r->hpos = (size_t)(p - r->hb);
        set_error(r, ETR_EFORMAT, r->hb_base + r->hpos, "the trace is not a JSON object");
        return H_ERR;
      }
      r->ph = PH_HEADER;
      r->h_first = true;
      r->hpos = (size_t)(p + 1 - r->hb);
      return H_OK;
    case PH_HEADER:
    case PH_TRAILER: {
      if (*p == '}' && !r->need_item) {
        r->ph = PH_END;
        r->hpos = (size_t)(p + 1 - r->hb);
        return H_OK;
      }
      if (!r->h_first && !r->need_item) {
        /* a step of its own, so that whitespace after it is never held */
        if (*p != ',') return h_fail(r, p, "expected ',' or '}'");
        r->need_item = true;
        r->hpos = (size_t)(p + 1 - r->hb);
        return H_OK;
      }
      if (!r->have_key) {
        /* the key and its ':' are a step of their own: whitespace after them is never held */
        if (*p != '"') return h_fail(r, p, "expected a key");
        const char *key;
        size_t klen;
        int st = h_string(r, &p, end, &r->keep, &key, &klen);
        if (st) return st;
        const unsigned char *q = h_ws(p, end);
        if (q >= end) return H_MORE;
        if (*q != ':') return h_fail(r, q, "expected ':'");
        r->hpos = (size_t)(p - r->hb); /* offsets of top_key's messages: after the key */
        if (!top_key(r, (const unsigned char *)key, klen)) return H_ERR;
        r->have_key = true;
        r->hpos = (size_t)(q + 1 - r->hb);
        return H_OK;
      }
      if (!strcmp(r->tkey, "nodes")) {
        if (r->ph != PH_HEADER || *p != '[') {
          set_error(r, ETR_EFORMAT, r->hb_base + r->hpos,
                    r->ph == PH_HEADER ? "\"nodes\" is not an array" : "a second \"nodes\" key");
          return H_ERR;
        }
        r->ph = PH_NODES;
        r->nodes_seen = true;
        r->n_first = true;
        r->h_first = false;
        r->need_item = false;
        r->have_key = false;
        r->hpos = (size_t)(p + 1 - r->hb);
        return H_OK;
      }
      if (r->skip_next) return h_skip_start(r, p);
      rd_jval v;
      r->stk_len = 0;
      int st = h_value(r, &p, end, &r->keep, 0, &v);
      if (st) return st;
      r->hpos = (size_t)(p - r->hb);
      if (!top_value_done(r, &v)) return H_ERR;
      r->h_first = false;
      r->need_item = false;
      r->have_key = false;
      return H_OK;
    }
    case PH_NODES: {
      if (*p == ']' && !r->need_item) {
        r->ph = PH_TRAILER;
        r->nodes_done = true;
        r->hpos = (size_t)(p + 1 - r->hb);
        return H_OK;
      }
      if (!r->n_first && !r->need_item) {
        if (*p != ',') return h_fail(r, p, "expected ',' or ']'");
        r->need_item = true;
        r->hpos = (size_t)(p + 1 - r->hb);
        return H_OK;
      }
      if (*p != '{') {
        if (*p == '[' || *p == '"' || *p == '-' || (*p >= '0' && *p <= '9') || *p == 't' ||
            *p == 'f' || *p == 'n') {
          set_error(r, ETR_EFORMAT, r->hb_base + (uint64_t)(p - r->hb),
                    "an element of \"nodes\" is not an object");
          return H_ERR;
        }
        return h_fail(r, p, "expected a node");
      }
      r->node_off = r->hb_base + (uint64_t)(p - r->hb);
      if (!r->nodes.tail && !arena_alloc(&r->nodes, 0)) {
        set_error(r, ETR_ENOMEM, r->node_off, "out of memory");
        return H_ERR;
      }
      r->node_mark = r->nodes.tail;
      r->stk_len = 0;
      r->nul_str = false;
      const unsigned char *node_start = p;
      rd_jval v;
      int st = h_value(r, &p, end, &r->nodes, 0, &v);
      if (st) return st;
      if ((size_t)(p - node_start) > r->opt.max_node_bytes) {
        set_error(r, ETR_EFORMAT, r->node_off, "node larger than %zu bytes", r->opt.max_node_bytes);
        return H_ERR;
      }
      r->hpos = (size_t)(p - r->hb);
      if (!node_done(r, &v)) return H_ERR;
      r->n_first = false;
      r->need_item = false;
      return H_OK;
    }
    default:
      return h_fail(r, p, "trailing garbage");
  }
}

/* feed() of the hand backend: one step. 1 = progress, 0 = parse complete, -1 = error.
 * Linear in the input whatever its shape: whitespace between steps is consumed before the
 * step (never held), and a step that runs off the end of the window is redone only after
 * the window has at least doubled; a step needing more than r->limit ends in an error (a
 * node) or is skipped (a top-level value). */
static int hand_feed(rd_reader *r) {
  if (r->parse_done) return 0;
  for (;;) {
    if (r->err) return -1;
    if (r->hb) r->hpos = (size_t)(h_ws(r->hb + r->hpos, r->hb + r->hb_len) - r->hb);
    size_t start = r->hpos;
    amark mn = arena_save(&r->nodes), mk = arena_save(&r->keep);
    int st = r->skipping ? h_skip(r) : h_step(r);
    r->consumed = r->hb_base + r->hpos;
    if (st == H_OK) return 1;
    if (st == H_ERR) return -1;
    /* ran off the end of the window, or over the limit: undo the step */
    r->redone += r->hb_len - start;
    arena_restore(&r->nodes, mn);
    arena_restore(&r->keep, mk);
    r->stk_len = 0;
    if (r->stk_cap > 4096) { /* give back what a large step took */
      free(r->stk);
      r->stk = NULL;
      r->stk_cap = 0;
    }
    if (r->ph != PH_END) r->hpos = start;
    if (st == H_MORE && r->heof) {
      if (r->ph == PH_END) {
        r->parse_done = true;
        return 0;
      }
      set_error(r, ETR_EFORMAT, r->hb_base + r->hb_len,
                "unexpected end of input (truncated file?)");
      return -1;
    }
    if (st == H_BIG || (st == H_MORE && r->hb_len - r->hpos > r->limit)) {
      if (r->ph == PH_NODES || r->ph == PH_START) {
        set_error(r, ETR_EFORMAT, r->hb_base + r->hpos,
                  "node needs more than %zu MiB to read (its text, or the values it holds; "
                  "ETR_READER_LIMIT_MB raises the limit)",
                  r->limit >> 20);
        return -1;
      }
      if (r->skip_next || !r->have_key) { /* a key, not a value, is over the limit */
        set_error(r, ETR_EFORMAT, r->hb_base + r->hpos,
                  "a top-level key needs more than %zu MiB (ETR_READER_LIMIT_MB raises the "
                  "limit)",
                  r->limit >> 20);
        return -1;
      }
      r->skip_next = true; /* redo the step: it skips the value */
      continue;
    }
    if (r->read_err) { /* met while reading ahead: the data before it has been parsed now */
      r->err = r->read_err;
      return -1;
    }
    /* keep hb[hpos..): shift it to the front, then read until the window has doubled */
    if (r->hpos) {
      memmove(r->hb, r->hb + r->hpos, r->hb_len - r->hpos);
      r->hb_base += r->hpos;
      r->hb_len -= r->hpos;
      r->hpos = 0;
    }
    size_t want = r->hb_len + (r->hb_len > FEED_BLOCK ? r->hb_len : FEED_BLOCK);
    if (want > r->limit + FEED_BLOCK) want = r->limit + FEED_BLOCK;
    if (want < r->hb_len + 1) want = r->hb_len + 1;
    if (r->hb_cap < want + FEED_BLOCK + H_PAD) {
      size_t cap = r->hb_cap ? r->hb_cap : 4 * FEED_BLOCK;
      while (cap < want + FEED_BLOCK + H_PAD) cap *= 2;
      unsigned char *nb = realloc(r->hb, cap);
      if (!nb) {
        set_error(r, ETR_ENOMEM, r->hb_base + r->hb_len, "out of memory");
        return -1;
      }
      r->hb = nb;
      r->hb_cap = cap;
    }
    memset(r->hb + r->hb_len, 0, H_PAD);
    size_t had = r->hb_len;
    while (r->hb_len < want) {
      /* at most FEED_BLOCK at once: the window has room for want + FEED_BLOCK */
      ssize_t k = read_into(r, r->hb + r->hb_len, FEED_BLOCK);
      if (k < 0 && r->hb_len == had) return -1;
      if (k < 0) { /* parse what was read first (a cut gzip stream still yields its nodes) */
        r->read_err = r->err;
        r->err = 0;
        break;
      }
      if (k == 0) {
        r->heof = true;
        break;
      }
      r->hb_len += (size_t)k;
    }
    memset(r->hb + r->hb_len, 0, H_PAD);
  }
}

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
  r->fd = -1;
  r->hdr.pid = -1;
  r->hdr.start_ts = -1;
  r->finish_ts = -1;
  r->path = strdup(display_path(path ? path : "-"));
  r->in = malloc(IN_BLOCK);
  if (!r->path || !r->in) {
    snprintf(r->msg, sizeof r->msg, "%s: byte 0: out of memory", path);
    return r->err = ETR_ENOMEM;
  }
  if (!path || !strcmp(path, "-")) {
    r->fd = 0;
  } else {
    r->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (r->fd < 0) {
      set_error(r, ETR_EOPEN, 0, "cannot open: %s", strerror(errno));
      return r->err;
    }
    r->own_fd = true;
    struct stat st;
    if (fstat(r->fd, &st) == 0 && S_ISREG(st.st_mode)) r->in_size = (uint64_t)st.st_size;
    if (fstat(r->fd, &st) == 0 && S_ISDIR(st.st_mode)) {
      set_error(r, ETR_EOPEN, 0, "is a directory");
      return r->err;
    }
#ifdef POSIX_FADV_SEQUENTIAL
    posix_fadvise(r->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
  }
  const char *be = getenv("ETR_READER_BACKEND");
  r->hand = !be || strcmp(be, "yajl") != 0;
  if (!r->hand) {
    r->yh = yajl_alloc(&callbacks, NULL, r);
    /* Strings are checked by copy_str, which replaces invalid UTF-8 instead of failing. */
    if (r->yh) yajl_config(r->yh, yajl_dont_validate_strings, 1);
  }
  if (!r->hand && !r->yh) {
    set_error(r, ETR_ENOMEM, 0, "out of memory");
    return r->err;
  }
  while (!r->nodes_seen) {
    int f = feed(r);
    if (f < 0 && r->nodes_seen) break; /* nodes before the error are still handed over */
    if (f < 0) return r->err;
    if (f == 0) {
      set_error(r, ETR_EFORMAT, r->consumed, "no \"nodes\" array in the trace");
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
      arena_release_before(&r->nodes, e.mark);
      *node = e.node;
      return 1;
    }
    if (r->nodes_done) return 0;
    if (r->err) return r->err;
    /* nothing queued: every block older than the node being built can go */
    if (r->building && r->build_node)
      arena_release_before(&r->nodes, r->node_mark);
    else if (r->nodes.tail)
      arena_release_before(&r->nodes, r->nodes.tail), r->nodes.tail->used = 0;
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
  arena_release_before(&r->nodes, NULL);
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

const char *const *rd_top_keys(const rd_reader *r, size_t *n) {
  *n = r->n_top_keys;
  return r->top_keys;
}

const char *rd_error(const rd_reader *r) { return r && r->err ? r->msg : ""; }
uint64_t rd_warnings(const rd_reader *r) { return r->warnings; }
uint64_t rd_offset(const rd_reader *r) { return r->consumed; }
uint64_t rd_input_size(const rd_reader *r) { return r->in_size; }
uint64_t rd_input_consumed(const rd_reader *r) { return r->in_consumed; }
const char *rd_path(const rd_reader *r) { return r->path; }
const char *rd_backend(const rd_reader *r) { return r->hand ? "hand" : "yajl"; }

uint64_t rd_memory(const rd_reader *r) {
  uint64_t m = sizeof *r + IN_BLOCK + (r->out ? IN_BLOCK : 0);
  m += r->nodes.live + r->keep.live + (uint64_t)r->nodes.n_spare * ARENA_BLOCK;
  m += r->stk_cap * sizeof *r->stk + r->frames_cap * sizeof *r->frames;
  m += r->q_cap * sizeof *r->q + r->extras_cap * sizeof *r->extras;
  m += r->top_keys_cap * sizeof *r->top_keys + r->hb_cap;
  return m;
}

void rd_close(rd_reader *r) {
  if (!r) return;
  if (r->yh) yajl_free(r->yh);
  if (r->gz_init) inflateEnd(&r->zs);
  if (r->zst) ZSTD_freeDStream(r->zst);
  if (r->own_fd && r->fd >= 0) close(r->fd);
  arena_destroy(&r->nodes);
  arena_destroy(&r->keep);
  free(r->stk);
  free(r->frames);
  free(r->q);
  free(r->extras);
  free(r->top_keys);
  free(r->skipped);
  free(r->in);
  free(r->out);
  free(r->hb);
  free(r->path);
  free(r);
}
