/* The hand parser of the trace reader (the default; reader_int.h), its steps: the input
 * window and the top-level state machine. The window always holds the current step (the
 * top-level '{', one top-level member, or one node) whole; a step that runs off its end is
 * undone (arenas rolled back, the NULs of in-place strings turned back into quotes) and
 * redone after the window has at least doubled, so no parser state spans a refill and the
 * time stays linear in the input. A top-level value over the limit is passed over (its
 * strings and brackets followed) instead of built. Values are read by reader_hand.c.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <string.h>

#include "etr/common.h"
#include "json/reader_hand.h"

/* The value of the top-level key r->tkey (at p) needs more than the limit (note: note it and
 * warn), or is not wanted (rd_options.trailer_keys): pass over it in later steps without
 * building it. */
static int h_skip_start(rd_reader *r, const unsigned char *p, bool note) {
  r->skip_next = false;
  r->have_key = false;
  r->hpos = (size_t)(p - r->hb);
  if (note && !etr__rd_skip_note(r, r->hb_base + r->hpos)) return H_ERR;
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
  if (done) {
    r->skipping = false;
    r->n_skipped_whole = r->n_skipped;
  }
  return H_OK;
}

/* Give back the closing quotes that an undone step, parsed from hb[start], turned into NULs
 * (h_string). Every NUL byte before r->h_nul_end is one of them: a NUL of the input before the
 * point the step reached would have ended it in an error, never in an undo. */
static void h_restore_quotes(rd_reader *r, size_t start) {
  if (r->h_nul_end > start) {
    unsigned char *p = r->hb + start, *end = r->hb + r->h_nul_end;
    while ((p = memchr(p, '\0', (size_t)(end - p))) != NULL) *p++ = '"';
  }
  r->h_nul_end = 0;
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
        etr__rd_set_error(r, ETR_EFORMAT, r->hb_base + r->hpos, "the trace is not a JSON object");
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
        if (*p != ',') return etr__rd_h_fail(r, p, "expected ',' or '}'");
        r->need_item = true;
        r->hpos = (size_t)(p + 1 - r->hb);
        return H_OK;
      }
      if (!r->have_key) {
        /* the key and its ':' are a step of their own: whitespace after them is never held */
        if (*p != '"') return etr__rd_h_fail(r, p, "expected a key");
        const char *key;
        size_t klen;
        int st = etr__rd_h_string(r, &p, end, &r->keep, &key, &klen);
        if (st) return st;
        const unsigned char *q = h_ws(p, end);
        if (q >= end) return H_MORE;
        if (*q != ':') return etr__rd_h_fail(r, q, "expected ':'");
        r->hpos = (size_t)(p - r->hb); /* offsets of top_key's messages: after the key */
        if (!etr__rd_top_key(r, (const unsigned char *)key, klen)) return H_ERR;
        r->have_key = true;
        r->hpos = (size_t)(q + 1 - r->hb);
        return H_OK;
      }
      if (!strcmp(r->tkey, "nodes")) {
        if (r->ph != PH_HEADER || *p != '[') {
          etr__rd_set_error(
              r, ETR_EFORMAT, r->hb_base + r->hpos,
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
      if (r->skip_next) return h_skip_start(r, p, true);
      if (etr__rd_trailer_unwanted(r, r->tkey)) return h_skip_start(r, p, false);
      rd_jval v;
      r->stk_len = 0;
      int st = etr__rd_h_value(r, &p, end, &r->keep, 0, &v);
      if (st) return st;
      r->hpos = (size_t)(p - r->hb);
      if (!etr__rd_top_value_done(r, &v)) return H_ERR;
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
        if (*p != ',') return etr__rd_h_fail(r, p, "expected ',' or ']'");
        r->need_item = true;
        r->hpos = (size_t)(p + 1 - r->hb);
        return H_OK;
      }
      if (*p != '{') {
        if (*p == '[' || *p == '"' || *p == '-' || (*p >= '0' && *p <= '9') || *p == 't' ||
            *p == 'f' || *p == 'n') {
          etr__rd_set_error(r, ETR_EFORMAT, r->hb_base + (uint64_t)(p - r->hb),
                            "an element of \"nodes\" is not an object");
          return H_ERR;
        }
        return etr__rd_h_fail(r, p, "expected a node");
      }
      r->node_off = r->hb_base + (uint64_t)(p - r->hb);
      if (!r->nodes.tail && !arena_alloc(&r->nodes, 0)) {
        etr__rd_set_error(r, ETR_ENOMEM, r->node_off, "out of memory");
        return H_ERR;
      }
      r->node_mark = r->nodes.tail;
      r->stk_len = 0;
      r->nul_str = false;
      if (r->opt.conform) { /* etr validate: a node that conforms needs no tree */
        const unsigned char *q = p;
        int lst = etr__rd_h_lean(r, &q, end);
        if (lst == H_ERR) return H_ERR;
        if (lst == H_OK) {
          r->hpos = (size_t)(q - r->hb);
          r->n_first = false;
          r->need_item = false;
          return H_OK;
        }
      }
      const unsigned char *node_start = p;
      rd_jval v;
      int st = etr__rd_h_value(r, &p, end, &r->nodes, 0, &v);
      if (st) return st;
      if ((size_t)(p - node_start) > r->opt.max_node_bytes) {
        etr__rd_set_error(r, ETR_EFORMAT, r->node_off, "node larger than %zu bytes",
                          r->opt.max_node_bytes);
        return H_ERR;
      }
      r->hpos = (size_t)(p - r->hb);
      if (!etr__rd_node_done(r, &v)) return H_ERR;
      r->n_first = false;
      r->need_item = false;
      return H_OK;
    }
    default:
      return etr__rd_h_fail(r, p, "trailing garbage");
  }
}

/* feed() of the hand backend: one step. 1 = progress, 0 = parse complete, -1 = error.
 * Linear in the input whatever its shape: whitespace between steps is consumed before the
 * step (never held), and a step that runs off the end of the window is redone only after
 * the window has at least doubled; a step needing more than r->limit ends in an error (a
 * node) or is skipped (a top-level value). */
int etr__rd_hand_feed(rd_reader *r) {
  if (r->parse_done) return 0;
  for (;;) {
    if (r->err) return -1;
    if (r->hb) r->hpos = (size_t)(h_ws(r->hb + r->hpos, r->hb + r->hb_len) - r->hb);
    size_t start = r->hpos;
    amark mn = arena_save(&r->nodes), mk = arena_save(&r->keep);
    r->h_nul_end = 0;
    int st = r->skipping ? h_skip(r) : h_step(r);
    r->consumed = r->hb_base + r->hpos;
    if (st == H_OK) return 1;
    if (st == H_ERR) return -1;
    /* ran off the end of the window, or over the limit: undo the step */
    h_restore_quotes(r, start);
    r->redone += r->hb_len - start;
    etr__rd_arena_restore(&r->nodes, mn);
    etr__rd_arena_restore(&r->keep, mk);
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
      etr__rd_set_error(r, ETR_EFORMAT, r->hb_base + r->hb_len,
                        "unexpected end of input (truncated file?)");
      return -1;
    }
    if (st == H_BIG || (st == H_MORE && r->hb_len - r->hpos > r->limit)) {
      if (r->ph == PH_NODES || r->ph == PH_START) {
        r->err_limit = true;
        etr__rd_set_error(r, ETR_EFORMAT, r->hb_base + r->hpos,
                          "node needs more than %zu MiB to read (its text, or the values it holds; "
                          "ETR_READER_LIMIT_MB raises the limit)",
                          r->limit >> 20);
        return -1;
      }
      if (r->skip_next || !r->have_key) { /* a key, not a value, is over the limit */
        r->err_limit = true;
        etr__rd_set_error(r, ETR_EFORMAT, r->hb_base + r->hpos,
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
        etr__rd_set_error(r, ETR_ENOMEM, r->hb_base + r->hb_len, "out of memory");
        return -1;
      }
      r->hb = nb;
      r->hb_cap = cap;
    }
    memset(r->hb + r->hb_len, 0, H_PAD);
    size_t had = r->hb_len;
    while (r->hb_len < want) {
      /* at most FEED_BLOCK at once: the window has room for want + FEED_BLOCK */
      ssize_t k = etr__rd_read_into(r, r->hb + r->hb_len, FEED_BLOCK);
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
