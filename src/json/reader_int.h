/* Internals of the streaming trace reader (reader.h), shared by its files:
 *  - reader.c        arenas, errors, UTF-8 checks, the top-level keys and header values, the
 *                    byte source's answers as the parsers take them, and the API;
 *  - reader_input.c  the byte source: files, pipes, gzip, zstd (rd_source in reader.h, also
 *                    read by `etr repair`);
 *  - reader_node.c   the node builder (etr__rd_node_done) both parsers hand their trees to;
 *  - reader_hand.c   the hand parser (the default), its values; reader_hand_fast.c its
 *                    shortcuts for what nodes hold most; reader_hand_step.c its input
 *                    window and top-level steps (reader_hand.h between them);
 *  - reader_yajl.c   the yajl backend (ETR_READER_BACKEND=yajl): callbacks building the
 *                    same trees.
 * Not installed; nothing here is part of any API. Functions shared between the files are
 * etr__rd_*; each file keeps the rest static.
 */
#ifndef ETR_JSON_READER_INT_H
#define ETR_JSON_READER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "json/reader.h"

#define IN_BLOCK (256u * 1024u)  /* bytes read from the file at once */
#define FEED_BLOCK (64u * 1024u) /* bytes handed to yajl at once */
#define ARENA_BLOCK (64u * 1024u)
#define ARENA_SPARE 8 /* standard blocks kept for reuse */

/* Compiler extensions, behind macros (STYLE.md): branch hints, bit scans, inlining. */
#if defined(__GNUC__) || defined(__clang__)
#define ETR_RD_LIKELY(x) __builtin_expect(!!(x), 1)
#define ETR_RD_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define ETR_RD_CTZ32(x) ((unsigned)__builtin_ctz(x))
#define ETR_RD_CTZ64(x) ((unsigned)__builtin_ctzll(x))
#define ETR_RD_NOINLINE __attribute__((noinline))
#define ETR_RD_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ETR_RD_NOINLINE
#define ETR_RD_ALWAYS_INLINE inline
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

void *etr__rd_arena_alloc_slow(arena *a, size_t n);

/* n bytes, 16-aligned, rounded up to a multiple of 16 (callers may write up to that). */
static inline void *arena_alloc(arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  ablk *t = a->tail;
  if (ETR_RD_LIKELY(t && t->cap - t->used >= n)) {
    void *p = t->data + t->used;
    t->used += n;
    return p;
  }
  return etr__rd_arena_alloc_slow(a, n);
}

/* Recycle every block older than `keep` (NULL: all of them). */
void etr__rd_arena_release_before(arena *a, ablk *keep);
void etr__rd_arena_destroy(arena *a);

typedef struct amark {
  ablk *tail;
  size_t used;
} amark;

static inline amark arena_save(const arena *a) {
  amark m = {a->tail, a->tail ? a->tail->used : 0};
  return m;
}

/* Back to mark m: the blocks after it are recycled. */
void etr__rd_arena_restore(arena *a, amark m);

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
  bool err_limit; /* the error is a limit of ours (size, nesting), not the input's fault */
  char *path;     /* for messages */
  int fd;
  bool own_fd;
  rd_source *src;   /* the input's (decompressed) bytes */
  uint64_t in_size; /* file size; 0 if unknown */
  /* parser */
  struct yajl_handle_t *yh; /* yajl_handle */
  bool yajl_eof;            /* yajl_complete_parse is running: the input has ended */
  uint64_t feed_base;       /* decompressed offset of the current feed's first byte */
  uint64_t top_end;         /* offset just after the top-level object's '}' (yajl) */
  const unsigned char *feed_ptr;
  /* yajl lexes a token that spans its feeds (one long string) again from its start at each
   * feed: after a feed that gave no callback, the blocks are gathered here until twice as
   * many bytes wait (y_want), so such a token costs about twice its length, not its square */
  uint64_t y_events; /* callbacks so far */
  bool y_pending;    /* the last parse gave no callback: a token spans it, from y_from on */
  uint64_t y_from;
  unsigned char *y_stage;
  size_t y_stage_len, y_stage_cap, y_want;
  uint64_t consumed; /* decompressed bytes handed to the parser and fully parsed */
  uint64_t fed;      /* decompressed bytes handed to the parser (source_answer) */
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
  bool need_item;       /* a ',' was read: a node, or a top-level member, must follow */
  bool have_key;        /* a top-level key and its ':' were read: its value must follow */
  size_t limit;         /* the most the value being read may take: a node's, or trailer_limit */
  size_t trailer_limit; /* the most everything after "nodes" may take together */
  /* a top-level value over the limit is skipped: brackets and strings are followed */
  bool skip_next, skipping, sk_started, sk_str, sk_esc;
  uint64_t sk_depth;
  uint64_t redone; /* bytes of steps undone to be parsed again (rd_redone) */
  /* hb[..h_nul_end) holds the NULs the current step wrote over closing quotes (strings of a
   * node are read in place): an undone step gives them back before it is redone */
  size_t h_nul_end;
  int read_err;      /* an input error met while reading ahead, reported when reached */
  bool discard;      /* yajl: passing over a top-level value over the limit */
  amark disc_mark;   /* r->keep before that value */
  size_t disc_depth; /* its containers still open */
  const char **skipped;
  size_t n_skipped, skipped_cap;
  size_t n_skipped_whole; /* skipped[0..n) were passed over to their end (rd_skipped_whole) */
  /* a string of the node being read holds a NUL byte (from a \u0000 escape): node_done then
   * compares names as C strings (strcmp), as commands do, not by length */
  bool nul_str;
};

/* ---------------------------------------------------------------- shared ---- */

/* The first error (the later ones are dropped): "FILE: byte OFF: reason" in r->msg. */
void etr__rd_set_error(rd_reader *r, int code, uint64_t off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A warning: counted, and handed to the warning callback. */
void etr__rd_warn(rd_reader *r, uint64_t off, int64_t id, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Decompressed offset just after the token being parsed (either backend). */
uint64_t etr__rd_cur_off(rd_reader *r);

/* Room for one more element of elem bytes in the array *p of *cap (len used); the first
 * allocation holds `first`. False when memory is exhausted. */
static inline bool grow(void **p, size_t *cap, size_t len, size_t elem, size_t first) {
  if (len < *cap) return true;
  size_t n = *cap ? *cap * 2 : first;
  void *q = realloc(*p, n * elem);
  if (!q) return false;
  *p = q;
  *cap = n;
  return true;
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

/* Length of the valid UTF-8 sequence at p (lead byte >= 0x80), 0 if invalid, (size_t)-1 if
 * it may be complete after a refill (it runs past end). */
size_t etr__rd_utf8_len(const unsigned char *p, const unsigned char *end);
/* Bytes of the invalid sequence at p (< end) that one U+FFFD replaces. */
size_t etr__rd_bad_len(const unsigned char *p, const unsigned char *end);
/* Copy the non-ASCII sequence at x (< end) to *q: valid UTF-8 as it is, else one U+FFFD. */
const unsigned char *etr__rd_put_utf8_seq(unsigned char **q, const unsigned char *x,
                                          const unsigned char *end);

/* A NUL-terminated copy of the n bytes at s in arena a, invalid UTF-8 replaced by U+FFFD
 * (with a warning); *out_len (when not NULL) gets its length. NULL when memory ran out. */
char *etr__rd_copy_str(rd_reader *r, arena *a, const unsigned char *s, size_t n, size_t *out_len);

/* A top-level key (r->ph HEADER or TRAILER) was read: note it (r->tkey). 1, or 0 on error. */
int etr__rd_top_key(rd_reader *r, const unsigned char *k, size_t len);
/* The value of top-level key r->tkey (not "nodes") was read. 1, or 0 on error. */
int etr__rd_top_value_done(rd_reader *r, const rd_jval *v);
/* The value of top-level key r->tkey is over the limit and skipped: note it, warn. 1 or 0. */
int etr__rd_skip_note(rd_reader *r, uint64_t off);
/* The value of top-level key k is after "nodes" and not among rd_options.trailer_keys: the
 * built-in parser passes over it. */
bool etr__rd_trailer_unwanted(const rd_reader *r, const char *k);
/* A node's tree was read (at r->node_off, its blocks from r->node_mark): pull out its parts,
 * warn about what is missing, queue it for rd_next. 1, or 0 on error. */
int etr__rd_node_done(rd_reader *r, const rd_jval *root);

/* Next block of decompressed bytes: *p and length; 0 at EOF, -1 on error. */
ssize_t etr__rd_next_block(rd_reader *r, const unsigned char **p);
/* Up to n decompressed bytes copied to dst: bytes read, 0 at EOF, -1 on error. */
ssize_t etr__rd_read_into(rd_reader *r, unsigned char *dst, size_t n);

/* Queue node n (its blocks from r->node_mark) for rd_next. 1, or 0 when memory ran out. */
int etr__rd_node_queue(rd_reader *r, rd_rnode *n);

/* rd_base_attr of a name of n bytes with no NUL among them: by its length, then memcmp of
 * a constant length (a compare or two, no call). */
static inline int etr__rd_base_attr_len(const char *nm, size_t n) {
#define IS(lit) !memcmp(nm, lit, sizeof lit - 1)
  switch (n) {
    case 3:
      return IS("tid") ? 4 : -1;
    case 5:
      return IS("rf_id") ? 0 : IS("scope") ? 3 : -1;
    case 6:
      return IS("seq_id") ? 2 : IS("fw_tid") ? 5 : -1;
    case 9:
      return IS("fw_parent") ? 1 : IS("op_schema") ? 6 : -1;
    case 11:
      return IS("kernel_file") ? 8 : -1;
    case 14:
      return IS("kernel_backend") ? 7 : -1;
    default:
      return -1;
  }
#undef IS
}

/* The keys of the attr objects the hand parser reads by its shortcut: the node builder knows
 * such an attr by their addresses, without comparing names. */
extern const char etr__rd_key_name[], etr__rd_key_type[], etr__rd_key_value[];
/* The same for the inputs/outputs objects it reads by its shortcut. */
extern const char etr__rd_key_values[], etr__rd_key_shapes[], etr__rd_key_types[],
    etr__rd_key_strides[];

/* One more step of the hand parser (reader_hand_step.c), or one more block through yajl
 * (reader_yajl.c): 1 = progress, 0 = parse complete, -1 = error (set). */
int etr__rd_hand_feed(rd_reader *r);
int etr__rd_yajl_feed(rd_reader *r);
/* The yajl handle of r (r->yh): true when it could be made. */
bool etr__rd_yajl_open(rd_reader *r);
void etr__rd_yajl_close(rd_reader *r);
/* yajl's offset: just after the token it is reporting. */
uint64_t etr__rd_yajl_offset(rd_reader *r);

#endif /* ETR_JSON_READER_INT_H */
