/* The binary event log's writing side (binlog.h), in the writer thread: header, compact
 * events, tables, trailer. binlog_read.c reads it. */
#include "observer/binlog.h"

#include <errno.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "etr/version.h"
#include "observer/tbtable.h"
#include "observer/trace_internal.h"

static inline size_t round8(size_t n) { return (n + 7) & ~(size_t)7; }

/* ---- the event layout, as text ---- */

/* The event header's fields: a reader checks that the file's layout is its own, and a
 * reader in another language finds the fields by name. */
#define FIELD(f) \
  { #f, offsetof(etr__ev, f), sizeof(((etr__ev *)0)->f) }
static const struct {
  const char *name;
  size_t off, size;
} fields[] = {
    FIELD(size),      FIELD(type),      FIELD(flags),    FIELD(id),       FIELD(parent),
    FIELD(rf_id),     FIELD(fw_parent), FIELD(fw_tid),   FIELD(tid),      FIELD(seq),
    FIELD(ts_ns),     FIELD(incl_ns),   FIELD(excl_us),  FIELD(kstream),  FIELD(kgrid),
    FIELD(scope),     FIELD(n_in),      FIELD(n_out),    FIELD(name_len), FIELD(schema_len),
    FIELD(kback_len), FIELD(kfile_len), FIELD(coll_len), FIELD(in_len),   FIELD(out_len),
    FIELD(tb_n),      FIELD(tb_gen),
};
#undef FIELD

/* "etr__ev:<size>;<name>:<offset>:<size>;...;values:1" into buf; its length. */
size_t etr__bin_layout_text(char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "etr__ev:%zu;", sizeof(etr__ev));
  for (size_t i = 0; i < sizeof fields / sizeof fields[0] && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s:%zu:%zu;", fields[i].name, fields[i].off,
                          fields[i].size);
  if (n < cap) n += (size_t)snprintf(buf + n, cap - n, "values:1");
  return n < cap ? n : cap - 1;
}

/* ---- writing (the writer thread) ---- */

static void put_record(etr__jw *w, uint32_t type, const void *p, size_t n) {
  etr__bin_record r = {type, (uint32_t)n};
  static const char zeros[8] = {0};
  etr__jw_raw(w, (const char *)&r, sizeof r);
  etr__jw_raw(w, p, n);
  etr__jw_raw(w, zeros, round8(n) - n);
}

void etr__bin_header_of(const etr_trace *tr, etr__bin_header *hp) {
  etr__bin_header h;
  memset(&h, 0, sizeof h);
  memcpy(h.magic, ETR__BIN_MAGIC, 8);
  h.version = ETR__BIN_VERSION;
  h.header_size = sizeof h;
  h.byte_order = ETR__BIN_BYTE_ORDER;
  h.schema = (uint32_t)tr->opt.schema;
  h.pid = tr->pid;
  h.start_ms = tr->start_ms;
  h.flags = tr->opt.ns_timing ? ETR__BINF_NS_TIMING : 0;
  memcpy(h.time, tr->when, sizeof h.time);
  strncpy(h.version_s, ETR_VERSION_STRING, sizeof h.version_s);
  *hp = h;
}

void etr__bin_emit_header(etr_trace *tr) {
  etr__bin_header h;
  etr__bin_header_of(tr, &h);
  etr__jw_raw(&tr->jw, (const char *)&h, sizeof h);
  char layout[1024];
  put_record(&tr->jw, ETR__BIN_LAYOUT, layout, etr__bin_layout_text(layout, sizeof layout));
}

bool etr__bin_new_tables(etr_trace *tr, etr__jw *out) {
  if (!tr->tbtab) return false;
  for (int i = 0; i < 2; i++)
    if (!tr->scratch[i].buf && etr__jw_init(&tr->scratch[i], -1, 0) != 0) return false;
  etr__jw *f = &tr->scratch[0], *t = &tr->scratch[1];
  f->len = t->len = 0;
  etr__bin_tables h = {0, 0, 0, 0, 0, 0};
  etr__tbtab_emit_new(tr->tbtab, f, t, &h.n_frames, &h.n_tbs);
  if (!h.n_frames && !h.n_tbs) return false;
  h.frames_len = (uint32_t)f->len;
  h.tbs_len = (uint32_t)t->len;
  uLong crc = crc32(0L, (const Bytef *)f->buf, (uInt)f->len);
  h.crc = (uint32_t)crc32(crc, (const Bytef *)t->buf, (uInt)t->len);
  size_t len = sizeof h + f->len + t->len;
  etr__bin_record r = {ETR__BIN_TABLES, (uint32_t)len};
  static const char zeros[8] = {0};
  etr__jw_raw(out, (const char *)&r, sizeof r);
  etr__jw_raw(out, (const char *)&h, sizeof h);
  etr__jw_raw(out, f->buf, f->len);
  etr__jw_raw(out, t->buf, t->len);
  etr__jw_raw(out, zeros, round8(len) - len);
  return true;
}

/* A TABLES record with the tracebacks (and their frames) made since the last one: in the
 * same buffer as the EVENTS record that named them, so they reach the file with it. */
static void put_new_tables(etr_trace *tr) { etr__bin_new_tables(tr, &tr->jw); }

/* The index of ev's traceback in the tables (interned here, in the process that captured
 * it), UINT64_MAX when there is none or memory ran out. */
static uint64_t traceback_index(etr_trace *tr, const etr__ev *ev) {
  if (!tr->tbtab) tr->tbtab = etr__tbtab_new(tr->tb_symbolize);
  if (!tr->tbtab) return UINT64_MAX;
  const uint64_t *words = (const uint64_t *)(const void *)(ev + 1);
  uint64_t idx = etr__tbtab_intern(tr->tbtab, ev->tb_gen, words, ev->tb_n);
  atomic_store_explicit(&tr->tb_unique, etr__tbtab_tracebacks(tr->tbtab), memory_order_relaxed);
  return idx;
}

uint32_t etr__bin_emit_events(etr_trace *tr, const uint8_t *data, uint32_t *off, uint32_t to,
                              size_t max_bytes) {
  etr__jw *w = &tr->jw;
  if (*off + sizeof(etr__ev) > to) return 0;
  /* The tracebacks of the events this record will hold go first, in a TABLES record: a log
   * cut inside the events then still has the tables of those that were written. */
  size_t ahead = 0;
  for (uint32_t o = *off; o + sizeof(etr__ev) <= to && ahead < max_bytes;) {
    const etr__ev *ev = (const etr__ev *)(const void *)(data + o);
    if ((ev->flags & ETR__EVF_TRACEBACK) && ev->tb_n) traceback_index(tr, ev);
    ahead += ev->size;
    o += ev->size;
  }
  if (tr->tbtab) put_new_tables(tr);
  if (!etr__jw_reserve(w, sizeof(etr__bin_record))) return 0;
  size_t at = w->len; /* the record header, filled in below */
  w->len += sizeof(etr__bin_record);
  uint32_t n = 0;
  while (*off + sizeof(etr__ev) <= to && w->len - at < max_bytes) {
    const etr__ev *ev = (const etr__ev *)(const void *)(data + *off);
    *off += ev->size;
    n++;
    if (!(ev->flags & ETR__EVF_TRACEBACK) || ev->tb_n == 0) {
      etr__jw_raw(w, (const char *)ev, ev->size);
      continue;
    }
    /* The frame words mean something only in this process: the traceback is interned here
     * (its frames go to the trailer's tables) and the event keeps its index. */
    etr__ev h = *ev;
    uint64_t idx = traceback_index(tr, ev); /* (interned above: found at once) */
    size_t words_len = (size_t)ev->tb_n * 8;
    h.size = (uint32_t)(ev->size - words_len);
    h.tb_n = 0;
    h.tb_gen = idx == UINT64_MAX ? 0 : idx;
    h.flags = (uint8_t)(idx == UINT64_MAX ? (ev->flags & ~ETR__EVF_TRACEBACK)
                                          : (ev->flags | ETR__EVF_TBINDEX));
    etr__jw_raw(w, (const char *)&h, sizeof h);
    etr__jw_raw(w, (const char *)(ev + 1) + words_len, h.size - sizeof h);
  }
  if (w->err == 0 && w->buf) {
    etr__bin_record r = {ETR__BIN_EVENTS, (uint32_t)(w->len - at - sizeof r)};
    memcpy(w->buf + at, &r, sizeof r);
  }
  return n;
}

/* Skips one varint; NULL when it runs past end. */
static const uint8_t *skip_uv(const uint8_t *p, const uint8_t *end) {
  while (p < end && (*p & 0x80)) p++;
  return p < end ? p + 1 : NULL;
}

/* The traceback part of a compact op event's body (flags has ETR__EVF_TRACEBACK): where it
 * starts and ends, its generation and words (copied, aligned, into words[256]). False when
 * malformed or longer than any capture. */
static bool tb_part(const uint8_t *body, size_t len, uint8_t flags, size_t *start, size_t *end,
                    uint64_t *gen, uint64_t *words, uint32_t *n) {
  const uint8_t *e = body + len, *p = body;
  for (int i = (flags & ETR__EVF_TIMING) ? 5 : 2; i > 0 && p; i--) p = skip_uv(p, e);
  if (!p || e - p < 12) return false;
  *gen = etr__rd64(p);
  *n = etr__rd32(p + 8);
  if (*n > ETR__TB_DEPTH_MAX || (size_t)(e - p - 12) < (size_t)*n * 8) return false;
  memcpy(words, p + 12, (size_t)*n * 8);
  *start = (size_t)(p - body);
  *end = *start + 12 + (size_t)*n * 8;
  return true;
}

uint32_t etr__bin_emit_cevents(etr_trace *tr, const uint8_t *data, uint32_t stream, uint64_t tid,
                               uint32_t *off, uint32_t to, size_t max_bytes) {
  etr__jw *w = &tr->jw;
  uint64_t words[ETR__TB_DEPTH_MAX];
  uint8_t type, flags;
  size_t at, start, end;
  uint64_t gen;
  uint32_t n_words;
  /* As for full events: the tables of the tracebacks these events name go first. */
  size_t ahead = 0;
  for (uint32_t o = *off; o < to && ahead < max_bytes;) {
    size_t size = etr__cev_size(data + o, to - o, &type, &flags, &at);
    if (!size) break;
    if (type == ETR__CEV_OP && (flags & ETR__EVF_TRACEBACK) &&
        tb_part(data + o + at, size - at, flags, &start, &end, &gen, words, &n_words) &&
        (tr->tbtab || (tr->tbtab = etr__tbtab_new(tr->tb_symbolize)))) {
      etr__tbtab_intern(tr->tbtab, gen, words, n_words);
      atomic_store_explicit(&tr->tb_unique, etr__tbtab_tracebacks(tr->tbtab), memory_order_relaxed);
    }
    ahead += size;
    o += (uint32_t)size;
  }
  if (tr->tbtab) put_new_tables(tr);
  if (!etr__jw_reserve(w, sizeof(etr__bin_record) + sizeof(etr__bin_cevents))) return 0;
  size_t rec_at = w->len;
  w->len += sizeof(etr__bin_record);
  etr__bin_cevents ch = {stream, 0, tid, tr->base_ns};
  etr__jw_raw(w, (const char *)&ch, sizeof ch);
  uint32_t nodes = 0;
  while (*off < to && w->len - rec_at < max_bytes) {
    const uint8_t *ev = data + *off;
    size_t size = etr__cev_size(ev, to - *off, &type, &flags, &at);
    if (!size) { /* (cannot happen: the recorder wrote it) */
      *off = to;
      break;
    }
    *off += (uint32_t)size;
    if (type == ETR__CEV_OP || type == ETR__CEV_THREAD) nodes++;
    if (type != ETR__CEV_OP || !(flags & ETR__EVF_TRACEBACK)) {
      etr__jw_raw(w, (const char *)ev, size);
      continue;
    }
    /* The frame words mean something only in this process: the event keeps the index of
     * its traceback in the tables (interned above), or loses it. */
    const uint8_t *body = ev + at;
    size_t body_len = size - at;
    uint8_t hd[2 + 10 + 10];
    if (!tb_part(body, body_len, flags, &start, &end, &gen, words, &n_words)) {
      etr__jw_raw(w, (const char *)ev, size);
      continue;
    }
    uint64_t idx = tr->tbtab ? etr__tbtab_intern(tr->tbtab, gen, words, n_words) : UINT64_MAX;
    size_t idx_len = idx == UINT64_MAX ? 0 : etr__uv_len(idx);
    size_t nb = body_len - (end - start) + idx_len;
    hd[0] = type;
    hd[1] = (uint8_t)(idx == UINT64_MAX ? (flags & ~ETR__EVF_TRACEBACK)
                                        : ((flags & ~ETR__EVF_TRACEBACK) | ETR__EVF_TBINDEX));
    uint8_t *h = etr__put_uv(hd + 2, nb);
    if (idx != UINT64_MAX) { /* the index goes where the words were */
      etr__jw_raw(w, (const char *)hd, (size_t)(h - hd));
      etr__jw_raw(w, (const char *)body, start);
      uint8_t ib[10];
      etr__jw_raw(w, (const char *)ib, (size_t)(etr__put_uv(ib, idx) - ib));
    } else {
      etr__jw_raw(w, (const char *)hd, (size_t)(h - hd));
      etr__jw_raw(w, (const char *)body, start);
    }
    etr__jw_raw(w, (const char *)body + end, body_len - end);
  }
  if (w->err == 0 && w->buf) {
    size_t len = w->len - rec_at - sizeof(etr__bin_record);
    etr__bin_record r = {ETR__BIN_CEVENTS, (uint32_t)len};
    memcpy(w->buf + rec_at, &r, sizeof r);
    static const char zeros[8] = {0};
    etr__jw_raw(w, zeros, round8(len) - len);
  }
  return nodes;
}

void etr__bin_emit_trailer(etr_trace *tr, int fatal_sig) {
  etr__jw tables;
  bool have = etr__jw_init(&tables, -1, 0) == 0;
  if (have) etr__footer_tables(tr, &tables);
  etr__stat_pair st[ETR__STATS_MAX];
  size_t n = etr__footer_stats(tr, st);
  etr__bin_trailer t = {etr__footer_time_ms(), fatal_sig, (uint32_t)n,
                        have ? (uint32_t)tables.len : 0, 0};
  etr__bin_stat s[ETR__STATS_MAX];
  memset(s, 0, sizeof s);
  for (size_t i = 0; i < n; i++) {
    s[i].value = st[i].value;
    strncpy(s[i].name, st[i].name, sizeof s[i].name - 1);
  }
  uLong crc = crc32(0L, (const Bytef *)s, (uInt)(n * sizeof *s));
  if (have) crc = crc32(crc, (const Bytef *)tables.buf, (uInt)tables.len);
  t.crc = (uint32_t)crc;
  size_t len = sizeof t + n * sizeof(etr__bin_stat) + t.tables_len;
  etr__jw *w = &tr->jw;
  etr__bin_record r = {ETR__BIN_TRAILER, (uint32_t)len};
  etr__jw_raw(w, (const char *)&r, sizeof r);
  etr__jw_raw(w, (const char *)&t, sizeof t);
  etr__jw_raw(w, (const char *)s, n * sizeof *s);
  if (have) etr__jw_raw(w, tables.buf, tables.len);
  static const char zeros[8] = {0};
  etr__jw_raw(w, zeros, round8(len) - len);
  if (have) etr__jw_free(&tables);
}
