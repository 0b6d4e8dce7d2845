/* The yajl backend of the trace reader (ETR_READER_BACKEND=yajl; reader_int.h): yajl calls
 * us back token by token and the callbacks build the same trees the hand parser builds.
 * yajl is a push parser and one block holds many nodes, so the completed nodes of a block
 * wait in the reader's queue until rd_next hands them over.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "json/reader_int.h"

#include <stdio.h>
#include <string.h>
#include <yajl/yajl_parse.h>

#include "etr/common.h"

uint64_t etr__rd_yajl_offset(rd_reader *r) { return r->feed_base + yajl_get_bytes_consumed(r->yh); }

/* ---- building values ---- */

static bool push_member(rd_reader *r, const char *key, size_t key_len, const rd_jval *v) {
  if (!grow((void **)&r->stk, &r->stk_cap, r->stk_len, sizeof *r->stk, 256)) return false;
  rd_jmember *m = &r->stk[r->stk_len++];
  m->key = key;
  m->key_len = key_len;
  m->val = *v;
  return true;
}

/* yajl backend: the top-level value being built is over the limit: drop what was built and
 * pass over the rest (b_discard), as the hand backend does. */
static int b_over_limit(rd_reader *r) {
  r->discard = true;
  r->disc_depth = r->n_frames;
  r->n_frames = 0;
  r->stk_len = 0;
  etr__rd_arena_restore(&r->keep, r->disc_mark);
  return etr__rd_skip_note(r, etr__rd_cur_off(r));
}

/* A value ended while discarding: 1 to go on, 0 on error. */
static int b_discard_close(rd_reader *r, bool container) {
  if (container) r->disc_depth--;
  if (r->disc_depth == 0) {
    r->discard = false;
    r->building = false;
    r->n_skipped_whole = r->n_skipped;
  }
  return 1;
}

/* A complete value (scalar, or a closed container) inside the value being built. */
static int b_value(rd_reader *r, const rd_jval *v) {
  if (r->discard) return b_discard_close(r, false);
  if (r->n_frames == 0) { /* the root itself */
    r->building = false;
    return r->build_node ? etr__rd_node_done(r, v) : etr__rd_top_value_done(r, v);
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
    etr__rd_set_error(r, ETR_ENOMEM, etr__rd_cur_off(r), "out of memory");
    return 0;
  }
  if ((r->stk_len & 1023) == 0 && r->build_node &&
      etr__rd_cur_off(r) - r->node_off > r->opt.max_node_bytes) {
    etr__rd_set_error(r, ETR_EFORMAT, r->node_off, "node larger than %zu bytes",
                      r->opt.max_node_bytes);
    return 0;
  }
  if ((r->stk_len & 1023) == 0 && r->stk_len * sizeof *r->stk + r->target->live > r->limit) {
    if (!r->build_node) return b_over_limit(r);
    r->err_limit = true;
    etr__rd_set_error(r, ETR_EFORMAT, r->node_off,
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
    etr__rd_set_error(r, ETR_ENOMEM, etr__rd_cur_off(r), "out of memory");
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
  if (r->build_node && etr__rd_cur_off(r) - r->node_off > r->opt.max_node_bytes) {
    etr__rd_set_error(r, ETR_EFORMAT, r->node_off, "node larger than %zu bytes",
                      r->opt.max_node_bytes);
    return 0;
  }
  r->bkey = f.key;
  r->bkey_len = f.key_len;
  return b_value(r, &v);
oom:
  etr__rd_set_error(r, ETR_ENOMEM, etr__rd_cur_off(r), "out of memory");
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

/* ---- yajl callbacks ---- */

/* Where a value starts: inside a value being built, a node, a top-level member, or the
 * top-level object itself. Returns 1 to go on, 0 to stop (error set). `is_open` tells
 * whether the value is a container being opened. */
static int value_start(rd_reader *r, bool is_map, bool is_open) {
  r->y_events++;
  if (r->building) return 1;
  switch (r->ph) {
    case PH_START:
      if (is_map && is_open) {
        r->ph = PH_HEADER;
        return 2; /* the top-level object: nothing to build */
      }
      etr__rd_set_error(r, ETR_EFORMAT, etr__rd_cur_off(r) - 1, "the trace is not a JSON object");
      return 0;
    case PH_NODES:
      if (is_map && is_open) {
        r->node_off = etr__rd_cur_off(r) - 1;
        if (!r->nodes.tail && !arena_alloc(&r->nodes, 0)) {
          etr__rd_set_error(r, ETR_ENOMEM, r->node_off, "out of memory");
          return 0;
        }
        r->node_mark = r->nodes.tail;
        begin_build(r, true);
        return 1;
      }
      etr__rd_set_error(r, ETR_EFORMAT, etr__rd_cur_off(r) - 1,
                        "an element of \"nodes\" is not an object");
      return 0;
    case PH_HEADER:
    case PH_TRAILER:
      if (!strcmp(r->tkey, "nodes")) {
        if (r->ph == PH_HEADER && !is_map && is_open) {
          r->ph = PH_NODES;
          r->nodes_seen = true;
          return 2;
        }
        etr__rd_set_error(
            r, ETR_EFORMAT, etr__rd_cur_off(r) - 1,
            r->ph == PH_HEADER ? "\"nodes\" is not an array" : "a second \"nodes\" key");
        return 0;
      }
      begin_build(r, false);
      return 1;
    default:
      etr__rd_set_error(r, ETR_EFORMAT, etr__rd_cur_off(r) - 1, "data after the top-level object");
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
  char *p = etr__rd_copy_str(r, r->target, s, len, &v.v.str.len);
  if (!p) return 0;
  v.v.str.s = p;
  return b_value(r, &v);
}

/* yajl opened an object (map) or an array. Nesting past the built-in reader's limit (1024
 * levels in a value, reader_hand.h) is refused the same way, as a limit of ours. */
#define RD_YAJL_DEPTH_MAX (1024 + 2) /* (+ the top-level object and "nodes") */
static int start_container(rd_reader *r, bool map) {
  if (r->depth >= RD_YAJL_DEPTH_MAX) {
    r->err_limit = true;
    etr__rd_set_error(r, ETR_EFORMAT, r->node_off, "nesting too deep (past 1024 levels)");
    return 0;
  }
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

static int cb_key(void *ctx, const unsigned char *k, size_t len) {
  rd_reader *r = ctx;
  r->y_events++;
  if (!r->building) return etr__rd_top_key(r, k, len);
  if (r->discard) return 1;
  char *p = etr__rd_copy_str(r, r->target, k, len, &len);
  if (!p) return 0;
  r->bkey = p;
  r->bkey_len = len;
  return 1;
}

static int end_container(rd_reader *r) {
  r->y_events++;
  r->depth--;
  if (r->building) return b_close(r);
  if (r->ph == PH_NODES && r->depth == 1) {
    r->ph = PH_TRAILER;
    r->nodes_done = true;
    return 1;
  }
  if (r->depth == 0) {
    r->ph = PH_END;
    r->top_end = etr__rd_cur_off(r);
    return 1;
  }
  return 1;
}

static int cb_end_map(void *ctx) { return end_container(ctx); }
static int cb_end_array(void *ctx) { return end_container(ctx); }

static const yajl_callbacks callbacks = {cb_null,    cb_bool,        NULL,         NULL,
                                         cb_number,  cb_string,      cb_start_map, cb_key,
                                         cb_end_map, cb_start_array, cb_end_array};

static void yajl_fail(rd_reader *r, const unsigned char *buf, size_t len) {
  uint64_t off = r->feed_base + yajl_get_bytes_consumed(r->yh);
  unsigned char *m = yajl_get_error(r->yh, 0, buf, len);
  char reason[256];
  snprintf(reason, sizeof reason, "%s", m ? (const char *)m : "parse error");
  if (m) yajl_free_error(r->yh, m);
  size_t n = strlen(reason);
  while (n && (reason[n - 1] == '\n' || reason[n - 1] == ' ' || reason[n - 1] == '.'))
    reason[--n] = '\0';
  etr__rd_set_error(r, ETR_EFORMAT, off, "invalid JSON (%s)", reason);
}

/* After the top-level object only whitespace may follow. yajl checks this itself, except
 * for an unterminated string there: it takes that for a token still coming and never
 * reports it (found by tests/fuzz/fuzz_reader). True after setting the error. */
static bool yajl_trailing_garbage(rd_reader *r, const unsigned char *p, size_t n) {
  size_t i = r->top_end > r->feed_base ? (size_t)(r->top_end - r->feed_base) : 0;
  for (; i < n; i++)
    if (p[i] != ' ' && p[i] != '\n' && p[i] != '\r' && p[i] != '\t') {
      if (!r->err)
        etr__rd_set_error(r, ETR_EFORMAT, r->feed_base + i, "invalid JSON (trailing garbage)");
      return true;
    }
  return false;
}

static bool all_space(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != ' ' && p[i] != '\n' && p[i] != '\r' && p[i] != '\t') return false;
  return true;
}

/* The node being built needs more than the limit by its text alone (a token yajl is still
 * gathering, one long string, is only seen when it ends): true after the error. */
static bool node_over_limit(rd_reader *r, uint64_t end) {
  if (!r->building || !r->build_node || end - r->node_off <= r->limit) return false;
  r->err_limit = true;
  etr__rd_set_error(r, ETR_EFORMAT, r->node_off,
                    "node needs more than %zu MiB to read (its text, or the values it holds; "
                    "ETR_READER_LIMIT_MB raises the limit)",
                    r->limit >> 20);
  return true;
}

/* Hands p[0..k) (the input's bytes from r->consumed on) to yajl: 1, or -1 after the error. */
static int parse(rd_reader *r, const unsigned char *p, size_t k) {
  if (r->y_pending) r->redone += r->consumed - r->y_from; /* (lexed again: rd_redone) */
  r->feed_base = r->consumed;
  r->feed_ptr = p;
  uint64_t events = r->y_events;
  /* yajl takes \v and \f for whitespace; RFC 8259 (and the hand parser) do not, and they
   * are invalid anywhere in JSON (raw control bytes in strings too): stop the block there. */
  size_t n = k;
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
    if (!r->err)
      etr__rd_set_error(r, ETR_EFORMAT, r->consumed + n, "invalid JSON (unexpected character)");
    return -1;
  }
  r->consumed += (uint64_t)k;
  if (node_over_limit(r, r->consumed)) return -1;
  /* No callback in all of it, and not only whitespace (which yajl does not keep): a token
   * spans it. Gather twice as much before the next parse. */
  if (r->y_events == events && !all_space(p, k)) {
    if (!r->y_pending) r->y_from = r->feed_base;
    r->y_pending = true;
    r->y_want = r->y_want ? 2 * r->y_want : 2 * k;
  } else {
    r->y_pending = false;
    r->y_want = 0;
  }
  return 1;
}

int etr__rd_yajl_feed(rd_reader *r) {
  if (r->err) return -1;
  if (r->parse_done) return 0;
  for (;;) {
    const unsigned char *p = NULL;
    ssize_t k = etr__rd_next_block(r, &p);
    if (k < 0) return -1;
    if (k == 0) {
      if (r->y_stage_len) {
        size_t n = r->y_stage_len;
        r->y_stage_len = 0;
        if (parse(r, r->y_stage, n) < 0) return -1;
      }
      r->feed_base = r->consumed;
      r->yajl_eof = true;
      yajl_status st = yajl_complete_parse(r->yh);
      if (r->err) return -1;
      if (st != yajl_status_ok || r->ph != PH_END) {
        etr__rd_set_error(r, ETR_EFORMAT, r->consumed, "unexpected end of input (truncated file?)");
        return -1;
      }
      r->parse_done = true;
      return 0;
    }
    if (r->y_want == 0) return parse(r, p, (size_t)k);
    /* gathering (at most the limit at once: beyond, a token costs its square again) */
    size_t need = r->y_stage_len + (size_t)k;
    if (need > r->y_stage_cap) {
      size_t cap = r->y_stage_cap ? r->y_stage_cap : 4 * FEED_BLOCK;
      while (cap < need) cap *= 2;
      unsigned char *np = realloc(r->y_stage, cap);
      if (!np) {
        etr__rd_set_error(r, ETR_ENOMEM, r->consumed, "out of memory");
        return -1;
      }
      r->y_stage = np;
      r->y_stage_cap = cap;
    }
    memcpy(r->y_stage + r->y_stage_len, p, (size_t)k);
    r->y_stage_len = need;
    if (node_over_limit(r, r->consumed + need)) return -1;
    if (need < r->y_want && need < r->limit) continue;
    r->y_stage_len = 0;
    return parse(r, r->y_stage, need);
  }
}

bool etr__rd_yajl_open(rd_reader *r) {
  r->yh = yajl_alloc(&callbacks, NULL, r);
  /* Strings are checked by copy_str, which replaces invalid UTF-8 instead of failing. */
  if (r->yh) yajl_config(r->yh, yajl_dont_validate_strings, 1);
  return r->yh != NULL;
}

void etr__rd_yajl_close(rd_reader *r) {
  if (r->yh) yajl_free(r->yh);
  free(r->y_stage);
}
