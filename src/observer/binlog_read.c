/* The binary event log's reading side (binlog.h): `etr convert` (every record of a log,
 * checked before emit.c reads it) and `etr repair` (the tables a JSON trace kept beside
 * it). The writing side is binlog.c. */
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
#include "json/check.h"
#include "observer/trace_internal.h"

static inline size_t round8(size_t n) { return (n + 7) & ~(size_t)7; }

/* One encoded value in [p, end) (encode.c, emit.c); the position after it, NULL when it is
 * malformed. Nesting is bounded as the recorder bounds it, so emit.c's recursion is too. A
 * tensor reference is taken only with the decoder dec whose slot it names. */
static const uint8_t *check_value(const uint8_t *p, const uint8_t *end, unsigned depth,
                                  etr__cev_dec *dec) {
  if (p >= end) return NULL;
  size_t left = (size_t)(end - p);
  switch (p[0]) {
    case ETR__V_NONE:
    case ETR__V_CUT:
      return p + 1;
    case ETR__V_BOOL:
      return left >= 2 ? p + 2 : NULL;
    case ETR__V_INT:
    case ETR__V_DOUBLE:
      return left >= 9 ? p + 9 : NULL;
    case ETR__V_STRING:
    case ETR__V_DEVICE:
    case ETR__V_OBJECT: {
      if (left < 5) return NULL;
      uint32_t n = etr__rd32(p + 1);
      return n <= left - 5 ? p + 5 + n : NULL;
    }
    case ETR__V_TENSOR: {
      if (left < 45 || etr__rd64(p + 5) > INT64_MAX || etr__rd64(p + 13) > INT64_MAX ||
          p[2] > ETR_MAX_NDIM)
        return NULL; /* ids; dimensions past what the recorder keeps */
      size_t need = 45;
      if (p[1]) need += (size_t)p[3] + p[4] + (size_t)p[2] * 16;
      return need <= left ? p + need : NULL;
    }
    case ETR__V_TREF: { /* its slot's tensor checked as if it stood here */
      etr__tfrag *f;
      size_t n = 0;
      const uint8_t *t = dec && left >= 2 ? etr__cev_slot(dec, p[1], &n, &f) : NULL;
      return t && check_value(t, t + n, depth, NULL) == t + n ? p + 2 : NULL;
    }
    case ETR__V_LIST:
    case ETR__V_TUPLE: {
      if (left < 5 || depth > ETR__DEPTH_MAX) return NULL;
      uint32_t n = etr__rd32(p + 1);
      if (n > ETR__LIST_MAX) return NULL;
      const uint8_t *q = p + 5;
      for (uint32_t i = 0; i < n && q; i++) q = check_value(q, end, depth + 1, dec);
      return q;
    }
    default:
      return NULL;
  }
}

static bool check_values(const uint8_t *p, size_t len, uint32_t n, etr__cev_dec *dec) {
  if (n > ETR__LIST_MAX) return false;
  const uint8_t *end = p + len;
  for (uint32_t i = 0; i < n && p; i++) p = check_value(p, end, 0, dec);
  return p != NULL;
}

/* A length-prefixed string of the collective block. */
static const uint8_t *check_str(const uint8_t *p, const uint8_t *end) {
  if (!p || end - p < 4) return NULL;
  uint32_t n = etr__rd32(p);
  return n <= (size_t)(end - p) - 4 ? p + 4 + n : NULL;
}

static const uint8_t *check_split(const uint8_t *p, const uint8_t *end) {
  if (!p || end - p < 4) return NULL;
  uint64_t n = etr__rd32(p);
  return n * 8 <= (uint64_t)(end - p) - 4 ? p + 4 + n * 8 : NULL;
}

static bool check_collective(const uint8_t *p, size_t len) {
  const uint8_t *end = p + len;
  p = check_str(check_str(p, end), end);
  if (!p || end - p < 16) return false;
  p = check_split(check_split(p + 16, end), end);
  if (!p || end - p < 16) return false;
  p = check_str(check_str(p + 16, end), end);
  return p && end - p >= 9;
}

/* Whether the event at ev (avail bytes from it in the record) is whole and well-formed,
 * so that emit.c reads only inside it (with dec, the decoder of its tensor references). */
static bool event_ok(const etr__ev *ev, size_t avail, etr__cev_dec *dec) {
  if (ev->size < sizeof *ev || ev->size % 8 || ev->size > avail) return false;
  uint64_t payload = (uint64_t)ev->tb_n * 8 + ev->name_len + ev->schema_len + ev->kback_len +
                     ev->kfile_len + (uint64_t)ev->coll_len + ev->in_len + ev->out_len;
  if (payload > ev->size - sizeof *ev) return false;
  /* Ids are int64 in the format, and times must not overflow when added up (emit.c). */
  if ((ev->id | ev->parent | ev->rf_id | ev->fw_parent | ev->tid) > INT64_MAX) return false;
  if (ev->ts_ns < 0 || ev->incl_ns < 0 || ev->ts_ns > INT64_MAX - ev->incl_ns) return false;
  if (ev->type == ETR__EV_THREAD) return ev->name_len <= ETR__STRING_MAX;
  if (ev->type != ETR__EV_OP) return false;
  /* No part past what the recorder writes (trace_internal.h): a node made of a damaged or
   * forged event stays as small as the recorder's (a compact event's tensor references were
   * counted as their tensors when it was decoded, cev.c). */
  if (ev->name_len > ETR__STRING_MAX || ev->schema_len > ETR__STRING_MAX ||
      ev->kback_len > ETR__STRING_MAX || ev->kfile_len > ETR__STRING_MAX ||
      ev->coll_len > ETR__COLL_MAX || ev->in_len > ETR__VALUES_MAX || ev->out_len > ETR__VALUES_MAX)
    return false;
  const uint8_t *p = (const uint8_t *)(ev + 1) + (size_t)ev->tb_n * 8 + ev->name_len +
                     ev->schema_len + ev->kback_len + ev->kfile_len;
  if ((ev->flags & ETR__EVF_COLLECTIVE) && !check_collective(p, ev->coll_len)) return false;
  p += ev->coll_len;
  return check_values(p, ev->in_len, ev->n_in, dec) &&
         check_values(p + ev->in_len, ev->out_len, ev->n_out, dec);
}

typedef struct reader {
  const etr__bin_source *src;
  uint64_t off; /* bytes consumed */
  uint8_t *buf; /* one record, 8-aligned */
  size_t cap;
} reader;

/* A file descriptor as a source: read(2), and its size by lseek when it has one. */
static long fd_read(void *user, void *buf, size_t n) {
  return (long)read(*(const int *)user, buf, n);
}

static long long fd_size(void *user) {
  off_t end = lseek(*(const int *)user, 0, SEEK_END);
  return end >= 0 ? (long long)end : -1;
}

/* Read exactly n bytes into p; the count read (short at the end of the file or on error,
 * *err then set). */
static size_t read_full(reader *r, void *p, size_t n, int *err) {
  size_t got = 0;
  while (got < n) {
    long k = r->src->read(r->src->user, (char *)p + got, n - got);
    if (k > 0) {
      got += (size_t)k;
    } else if (k == 0) {
      break;
    } else if (errno != EINTR) {
      *err = errno;
      break;
    }
  }
  r->off += got;
  return got;
}

#define FAIL(res, ...) snprintf((res)->error, sizeof(res)->error, __VA_ARGS__)

/* What a log cut short still gives for its footer: the tables of its TABLES records, and
 * what its events name (traceback indices) and span (time). */
typedef struct recovered {
  etr__jw frames, tbs; /* table elements, comma-separated */
  uint64_t n_tbs;
  uint64_t tbs_named;   /* 1 + the largest traceback index an event names (0: none) */
  uint64_t tbs_damaged; /* events whose index was past the next new one (written without) */
  int64_t end_ns;       /* the latest end of a timed event */
  bool timed;
} recovered;

/* Elements of one TABLES record appended to the recovered tables; false when damaged. */
static bool take_tables(recovered *rc, const uint8_t *p, size_t len) {
  etr__bin_tables h;
  if (len < sizeof h) return false;
  memcpy(&h, p, sizeof h);
  if ((uint64_t)h.frames_len + h.tbs_len > len - sizeof h) return false;
  const char *f = (const char *)p + sizeof h, *t = f + h.frames_len;
  uLong crc = crc32(0L, (const Bytef *)f, (uInt)h.frames_len);
  if ((uint32_t)crc32(crc, (const Bytef *)t, (uInt)h.tbs_len) != h.crc) return false;
  /* Copied into the JSON as they are: made to break it, they are refused like damage. The
   * counts, outside the checksum, must be the texts' own (they size a cut log's footer). */
  uint64_t n_frames, n_tbs;
  if (!etr__json_elements_count(f, h.frames_len, &n_frames) ||
      !etr__json_elements_count(t, h.tbs_len, &n_tbs) || n_frames != h.n_frames || n_tbs != h.n_tbs)
    return false;
  if (h.frames_len) {
    if (rc->frames.len) etr__jw_char(&rc->frames, ',');
    etr__jw_raw(&rc->frames, f, h.frames_len);
  }
  if (h.tbs_len) {
    if (rc->tbs.len) etr__jw_char(&rc->tbs, ',');
    etr__jw_raw(&rc->tbs, t, h.tbs_len);
  }
  rc->n_tbs += h.n_tbs;
  return true;
}

/* The footer of a log cut short: the process node, finish_ts (the end of the last timed
 * event), the tables recovered (a traceback named but lost: []), and counters that say so. */
static bool cut_footer(etr_trace *tr, recovered *rc, etr__bin_result *res) {
  etr__jw tables;
  if (etr__jw_init(&tables, -1, 0) != 0) return false;
  uint64_t missing = rc->tbs_named > rc->n_tbs ? rc->tbs_named - rc->n_tbs : 0;
  uint64_t lost = missing + rc->tbs_damaged;
  if (rc->n_tbs || missing) {
    ETR__JW_LIT(&tables, "\"frames\": [");
    etr__jw_raw(&tables, rc->frames.buf, rc->frames.len);
    ETR__JW_LIT(&tables, "\n  ],\n  \"tracebacks\": [");
    etr__jw_raw(&tables, rc->tbs.buf, rc->tbs.len);
    for (uint64_t i = 0; i < missing; i++) {
      if (i || rc->n_tbs) etr__jw_char(&tables, ',');
      ETR__JW_LIT(&tables, "\n    []");
    }
    ETR__JW_LIT(&tables, "\n  ],\n  ");
  }
  res->tables_recovered = rc->n_tbs;
  res->tables_lost = lost;
  int64_t finish = tr->start_ms;
  if (rc->timed && rc->end_ns / 1000000 > finish) finish = rc->end_ns / 1000000;
  /* No process node and no nodes_written: etr repair adds placeholders for the ops that
   * were open, then the process node, last as always. */
  etr__stat_pair st[2] = {{"log_cut", 1}, {"tracebacks_lost", lost}};
  etr__emit_held(tr); /* (counted as events when they were read) */
  etr__emit_footer_with(tr, false, finish, 0, tables.buf, tables.len, st, 2);
  bool ok = !tables.err;
  etr__jw_free(&tables);
  return ok;
}

/* One full event (checked) into the JSON trace, noting what a cut log's footer needs. */
static void convert_one(etr_trace *tr, etr__ev *ev, etr__bin_result *res, recovered *rc,
                        etr__cev_dec *dec) {
  if ((ev->flags & ETR__EVF_TRACEBACK) && !(ev->flags & ETR__EVF_TBINDEX))
    ev->flags &= (uint8_t)~ETR__EVF_TRACEBACK; /* raw frames: meaningless out of process */
  if (ev->flags & ETR__EVF_TBINDEX) {
    /* Indices are made in the order of the log's events, a new one by the first event that
     * names it, and its tables go before that event (or, for the last few of a record, in
     * the next record's): an index past the next new one is damage. Kept, it would ask a
     * cut log's footer for as many empty tracebacks (one event could ask for 2^64); the node
     * is written without its traceback instead, and counted. */
    uint64_t next = rc->tbs_named > rc->n_tbs ? rc->tbs_named : rc->n_tbs;
    if (ev->tb_gen > next) {
      ev->flags &= (uint8_t) ~(ETR__EVF_TBINDEX | ETR__EVF_TRACEBACK);
      rc->tbs_damaged++;
      res->tracebacks_damaged++;
    } else if (ev->tb_gen >= rc->tbs_named) {
      rc->tbs_named = ev->tb_gen + 1;
    }
  }
  if (ev->type == ETR__EV_OP && (ev->flags & ETR__EVF_TIMING) &&
      (!rc->timed || ev->ts_ns + ev->incl_ns > rc->end_ns)) {
    rc->end_ns = ev->ts_ns + ev->incl_ns;
    rc->timed = true;
  }
  etr__emit_event(tr, ev, dec);
  res->events++;
  if (tr->jw.len >= (1u << 20)) etr__jw_flush(&tr->jw);
}

/* Whether none of n bytes at s needs JSON escaping. */
static bool bytes_plain(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!etr__json_plain[(unsigned char)s[i]]) return false;
  return true;
}

/* The full events of an EVENTS record (a flight recorder's dump). */
static int convert_events(etr_trace *tr, uint8_t *p, size_t len, etr__bin_result *res,
                          uint64_t rec_off, recovered *rc) {
  size_t off = 0;
  while (off < len) {
    if (len - off < sizeof(etr__ev)) break;
    etr__ev *ev = (etr__ev *)(void *)(p + off);
    if (!event_ok(ev, len - off, NULL)) break;
    /* Which of the name and schema need no escaping (emit.c copies those as they are) is
     * worked out again from their bytes, never taken from the file: one damaged byte there
     * would put a raw control character into the JSON. (A compact event's are cev.c's.) */
    const char *name = (const char *)(ev + 1) + (size_t)ev->tb_n * 8;
    ev->plain =
        (uint16_t)((bytes_plain(name, ev->name_len) ? ETR__EVP_NAME : 0) |
                   (bytes_plain(name + ev->name_len, ev->schema_len) ? ETR__EVP_SCHEMA : 0));
    convert_one(tr, ev, res, rc, NULL);
    off += ev->size;
  }
  res->bytes_read = rec_off + sizeof(etr__bin_record) + off;
  return off == len ? 0 : -1;
}

/* The decoders of a log's streams, by number. Their tables (about 23 KiB a stream that
 * defines strings and tensors) are bounded as a whole: a log names one stream per thread
 * state its process made, and a forged one that names a million streams, each with a
 * definition, would otherwise take tens of GiB. */
#define STREAM_TABLES_MAX ((size_t)512 << 20)
typedef struct streams {
  etr__cev_dec **dec;
  size_t n;
  size_t table_bytes; /* the decoders' tables */
  etr__cev_out out;
} streams;

static void streams_free(streams *st) {
  for (size_t i = 0; i < st->n; i++) etr__cev_dec_free(st->dec[i]);
  free(st->dec);
  free(st->out.buf);
}

static etr__cev_dec *stream_dec(streams *st, uint32_t k) {
  if (k >= ETR__BIN_STREAMS_MAX) return NULL;
  if (k >= st->n) {
    size_t n = st->n ? st->n : 16;
    while (n <= k) n *= 2;
    etr__cev_dec **d = realloc(st->dec, n * sizeof *d);
    if (!d) return NULL;
    memset(d + st->n, 0, (n - st->n) * sizeof *d);
    st->dec = d;
    st->n = n;
  }
  if (!st->dec[k]) st->dec[k] = etr__cev_dec_new();
  return st->dec[k];
}

/* The compact events of a CEVENTS record (len bytes at p): 0 done, -1 stopped (corrupt or
 * cut data: the events before are kept, as for a cut log), -2 failed (memory ran out, or
 * the decoders' tables outgrew their bound): *why says which. */
static int convert_cevents(etr_trace *tr, const uint8_t *p, size_t len, etr__bin_result *res,
                           uint64_t rec_off, recovered *rc, streams *st, const char **why) {
  etr__bin_cevents h;
  if (len < sizeof h) {
    *why = "a record too short for its header";
    return -1;
  }
  memcpy(&h, p, sizeof h);
  if (h.stream >= ETR__BIN_STREAMS_MAX) {
    *why = "a stream number out of range: corrupt data";
    return -1;
  }
  etr__cev_dec *d = stream_dec(st, h.stream);
  if (!d) {
    *why = etr__cev_oom;
    return -2;
  }
  size_t off = sizeof h;
  while (off < len) {
    const etr__ev *ev;
    size_t before = etr__cev_dec_bytes(d);
    size_t n = etr__cev_decode(d, &st->out, p + off, len - off, h.tid, h.base_ns, true, &ev, why);
    if (!n && *why == etr__cev_oom) return -2;
    st->table_bytes += etr__cev_dec_bytes(d) - before;
    if (st->table_bytes > STREAM_TABLES_MAX) {
      *why =
          "the log's streams define more tables than any process of etr makes (over 512 MiB "
          "of them; stream numbers are one per recording thread): corrupt data";
      return -2;
    }
    if (!n) break;
    if (ev) {
      etr__ev *e = (etr__ev *)(void *)st->out.buf;
      if (!event_ok(e, e->size, d)) {
        *why = "a malformed event: corrupt data";
        break;
      }
      convert_one(tr, e, res, rc, d);
    }
    off += n;
    res->bytes_read = rec_off + sizeof(etr__bin_record) + off;
  }
  return off == len ? 0 : -1;
}

static int convert_trailer(etr_trace *tr, const uint8_t *p, size_t len, etr__bin_result *res) {
  etr__bin_trailer t;
  if (len < sizeof t) return -1;
  memcpy(&t, p, sizeof t);
  res->signal = t.signal;
  if (t.n_stats > ETR__STATS_MAX ||
      (uint64_t)t.n_stats * sizeof(etr__bin_stat) + t.tables_len > len - sizeof t)
    return -1;
  if ((uint32_t)crc32(0L, p + sizeof t, (uInt)(len - sizeof t)) != t.crc) return -1;
  const char *tables_text = (const char *)p + sizeof t + t.n_stats * sizeof(etr__bin_stat);
  if (!etr__json_members_ok(tables_text, t.tables_len)) return -1;
  etr__stat_pair st[ETR__STATS_MAX];
  etr__bin_stat s[ETR__STATS_MAX];
  memcpy(s, p + sizeof t, t.n_stats * sizeof *s);
  for (uint32_t i = 0; i < t.n_stats; i++) {
    s[i].name[sizeof s[i].name - 1] = '\0';
    for (char *c = s[i].name; *c; c++) /* names are written unescaped: keep them tame */
      if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_')) *c = '_';
    st[i].name = s[i].name;
    st[i].value = s[i].value > INT64_MAX ? INT64_MAX : s[i].value;
    /* Strings are made valid here, not when recorded: the JSON writer's own counts. */
    if (strcmp(s[i].name, "utf8_replaced") == 0) st[i].value = tr->jw.replaced;
    if (strcmp(s[i].name, "values_fixed") == 0) st[i].value = tr->jw.fixed;
    if (strcmp(s[i].name, "nodes_dropped") == 0) res->nodes_lost = s[i].value;
  }
  const char *tables = (const char *)p + sizeof t + t.n_stats * sizeof *s;
  etr__emit_held(tr);
  etr__emit_footer_with(tr, true, t.finish_ms, t.signal, tables, t.tables_len, st, t.n_stats);
  return 0;
}

int etr__bin_read_tables(int fd, int64_t pid, int64_t start_ms, etr__jw *frames, etr__jw *tbs,
                         uint64_t *n_tbs, const char **stop) {
  etr__bin_source src = {fd_read, NULL, &fd};
  reader r = {&src, 0, NULL, 0};
  etr__bin_header h;
  int err = 0;
  *n_tbs = 0;
  *stop = NULL;
  size_t got = read_full(&r, &h, sizeof h, &err);
  if (got < sizeof h || !etr__bin_is_log(&h, got) || h.byte_order != ETR__BIN_BYTE_ORDER ||
      h.version != ETR__BIN_VERSION || h.header_size != sizeof h)
    return -1;
  if ((pid >= 0 && h.pid != pid) || (start_ms >= 0 && h.start_ms != start_ms)) return -1;
  recovered rc;
  memset(&rc, 0, sizeof rc);
  rc.frames = *frames;
  rc.tbs = *tbs;
  for (;;) {
    etr__bin_record rec;
    got = read_full(&r, &rec, sizeof rec, &err);
    if (got == 0 && !err) break;
    if (got < sizeof rec || rec.type != ETR__BIN_TABLES || rec.len > ETR__BIN_RECORD_MAX) {
      *stop = "a cut or damaged record";
      break;
    }
    size_t want = round8(rec.len);
    if (want > r.cap) {
      uint8_t *nb = NULL;
      if (posix_memalign((void **)&nb, 8, want) != 0) {
        *stop = "out of memory";
        break;
      }
      free(r.buf);
      r.buf = nb;
      r.cap = want;
    }
    if (read_full(&r, r.buf, want, &err) != want || !take_tables(&rc, r.buf, rec.len)) {
      *stop = "a cut or damaged record";
      break;
    }
  }
  *frames = rc.frames;
  *tbs = rc.tbs;
  *n_tbs = rc.n_tbs;
  free(r.buf);
  return 0;
}

int etr__bin_convert(int in_fd, int out_fd, etr__bin_result *res) {
  etr__bin_source src = {fd_read, fd_size, &in_fd};
  return etr__bin_convert_from(&src, out_fd, 0, res);
}

/* Whether the input holds only zero bytes from here on (read through: the bytes after a
 * stop are counted by the source's size, or by r->off). */
/* Where the bytes read past a stop go: the record buffer once it is large, else a small one
 * of the caller's (no static buffer: two conversions may run at once in one process). */
static uint8_t *tail_buffer(reader *r, uint8_t *small, size_t small_n, size_t *n) {
  if (r->buf && r->cap > small_n) {
    *n = r->cap;
    return r->buf;
  }
  *n = small_n;
  return small;
}

static bool zero_stretch(reader *r) {
  uint8_t small[4096];
  size_t cap;
  uint8_t *block = tail_buffer(r, small, sizeof small, &cap);
  int err = 0;
  for (;;) {
    size_t n = read_full(r, block, cap, &err);
    for (size_t i = 0; i < n; i++)
      if (block[i]) return false;
    if (n < cap) return true;
  }
}

/* What follows the bytes read, counted: by the source's size, else by reading it. */
static uint64_t input_size(reader *r) {
  long long size = r->src->size ? r->src->size(r->src->user) : -1;
  if (size >= 0) return (uint64_t)size > r->off ? (uint64_t)size : r->off;
  uint8_t small[4096];
  size_t cap;
  uint8_t *sink = tail_buffer(r, small, sizeof small, &cap);
  int err = 0;
  while (read_full(r, sink, cap, &err) == cap) {
  }
  return r->off;
}

int etr__bin_convert_from(const etr__bin_source *src, int out_fd, int gzip_level,
                          etr__bin_result *res) {
  memset(res, 0, sizeof *res);
  reader r = {src, 0, NULL, 0};
  etr__bin_header h;
  int err = 0;
  size_t got = read_full(&r, &h, sizeof h, &err);
  if (err) {
    FAIL(res, "cannot read the input: %s", strerror(err));
    return -1;
  }
  if (got == 0) {
    FAIL(res, "an empty log (no bytes to read)");
    return -1;
  }
  if (got < 8 && memcmp(&h, ETR__BIN_MAGIC, got) == 0) {
    FAIL(res, "the file ends inside its header (%zu of %zu bytes)", got, sizeof h);
    return -1;
  }
  if (!etr__bin_is_log(&h, got)) {
    FAIL(res, "not an etr binary event log (its first bytes are not the magic)");
    return -1;
  }
  if (got < sizeof h) {
    FAIL(res, "the file ends inside its header (%zu of %zu bytes)", got, sizeof h);
    return -1;
  }
  if (h.byte_order != ETR__BIN_BYTE_ORDER) {
    FAIL(res, "written on a machine of another byte order");
    return -1;
  }
  for (size_t i = 0; i < sizeof h.version_s; i++) /* shown in messages: printable only */
    if (h.version_s[i] && (h.version_s[i] < 0x21 || h.version_s[i] > 0x7e)) h.version_s[i] = '?';
  if (h.version != ETR__BIN_VERSION || h.header_size != sizeof h) {
    FAIL(res, "binary log format version %u; this etr reads version %u", h.version,
         ETR__BIN_VERSION);
    return -1;
  }
  etr_trace *tr = calloc(1, sizeof *tr);
  if (!tr || etr__jw_init(&tr->jw, out_fd, 1u << 20) != 0) {
    free(tr);
    FAIL(res, "out of memory");
    return -1;
  }
  if (gzip_level > 0 && etr__jw_set_gzip(&tr->jw, gzip_level) != 0) {
    etr__jw_free(&tr->jw);
    free(tr);
    FAIL(res, "out of memory");
    return -1;
  }
  tr->opt.schema = h.schema == ETR_SCHEMA_1_1_0 ? ETR_SCHEMA_1_1_0 : ETR_SCHEMA_1_1_1;
  tr->opt.ns_timing = (h.flags & ETR__BINF_NS_TIMING) != 0;
  tr->pid = (pid_t)h.pid;
  tr->start_ms = h.start_ms;
  memcpy(tr->when, h.time, sizeof tr->when);
  tr->when[sizeof tr->when - 1] = '\0';
  int rc = 0;
  bool layout_seen = false;
  streams st = {NULL, 0, 0, {NULL, 0}};
  recovered got_back;
  memset(&got_back, 0, sizeof got_back);
  if (etr__jw_init(&got_back.frames, -1, 0) != 0 || etr__jw_init(&got_back.tbs, -1, 0) != 0) {
    FAIL(res, "out of memory");
    etr__jw_free(&got_back.frames);
    etr__jw_free(&tr->jw);
    free(tr);
    return -1;
  }
  res->bytes_read = sizeof h;
  etr__emit_header(tr); /* a file cut before its first event still gives a trace (of none) */
  for (;;) {
    uint64_t rec_off = r.off;
    etr__bin_record rec;
    got = read_full(&r, &rec, sizeof rec, &err);
    if (got == 0 && !err) {
      res->stop_reason = "the file ends after a whole record, without the trailer";
      break;
    }
    if (got < sizeof rec) {
      res->stop_reason = err ? "a read error" : "the file ends inside a record header";
      break;
    }
    if (rec.type == 0 && rec.len == 0) {
      res->stop_reason = zero_stretch(&r) ? "zero bytes where a record starts: a zero-filled tail"
                                          : "zero bytes where a record starts, then other bytes: "
                                            "a zeroed stretch (damage)";
      break;
    }
    if (rec.len > ETR__BIN_RECORD_MAX) {
      res->stop_reason = "a record longer than any etr writes: corrupt data";
      break;
    }
    size_t want = round8(rec.len);
    if (want > r.cap) {
      uint8_t *nb = NULL;
      if (posix_memalign((void **)&nb, 8, want) != 0) {
        FAIL(res, "out of memory for a record of %zu bytes", want);
        rc = -1;
        break;
      }
      free(r.buf);
      r.buf = nb;
      r.cap = want;
    }
    got = read_full(&r, r.buf, want, &err);
    bool whole = got == want;
    if (!layout_seen && !whole && rec.type == ETR__BIN_LAYOUT) { /* a trace of no node */
      res->stop_reason = "the file ends inside the layout record, before any event";
      break;
    }
    if (!layout_seen) {
      char ours[1024];
      size_t n = etr__bin_layout_text(ours, sizeof ours);
      if (rec.type != ETR__BIN_LAYOUT || !whole || rec.len != n || memcmp(r.buf, ours, n) != 0) {
        /* A log of this very version whose layout differs is damaged, or from another build
         * of the version (a layout changes between releases too: the events cannot be read
         * with this one's then, and the record cannot tell which). Refused either way. */
        if (strncmp(h.version_s, ETR_VERSION_STRING, sizeof h.version_s) == 0) {
          size_t at = 0;
          if (rec.type == ETR__BIN_LAYOUT && whole)
            while (at < n && at < rec.len && r.buf[at] == (uint8_t)ours[at]) at++;
          FAIL(res,
               "the layout record (byte %llu on) differs from this etr's, though the header "
               "names this etr's own version (%.8s): the record is damaged, or the log comes "
               "from another build of that version; its events are not read",
               (unsigned long long)(rec_off + sizeof rec + at), h.version_s);
        } else {
          FAIL(res,
               "the events' layout is not this etr's (written by etr %.8s: convert it with "
               "that version)",
               h.version_s);
        }
        rc = -1;
        break;
      }
      layout_seen = true;
      res->bytes_read = r.off;
      continue;
    }
    if (rec.type == ETR__BIN_CEVENTS) {
      const char *why = "a malformed event: corrupt data";
      size_t have = whole ? rec.len : (got < rec.len ? got : rec.len);
      int cv = convert_cevents(tr, r.buf, have, res, rec_off, &got_back, &st, &why);
      if (cv == -2) { /* not the log's end: the conversion fails, as for any other record */
        FAIL(res, "%s (at the record at byte %llu; %llu events converted before it)", why,
             (unsigned long long)rec_off, (unsigned long long)res->events);
        rc = -1;
        break;
      }
      if (cv != 0 || !whole) {
        res->stop_reason = whole ? why : "the file ends inside a record";
        break;
      }
      res->bytes_read = r.off;
    } else if (rec.type == ETR__BIN_EVENTS) {
      if (convert_events(tr, r.buf, whole ? rec.len : (got < rec.len ? got : rec.len), res, rec_off,
                         &got_back) != 0 ||
          !whole) {
        res->stop_reason =
            whole ? "a malformed event: corrupt data" : "the file ends inside a record";
        break;
      }
      res->bytes_read = r.off;
    } else if (rec.type == ETR__BIN_TABLES) {
      if (!whole || !take_tables(&got_back, r.buf, rec.len)) {
        res->stop_reason = whole ? "damaged traceback tables (their checksum or counts fail)"
                                 : "the file ends inside a record";
        break;
      }
      res->bytes_read = r.off;
    } else if (rec.type == ETR__BIN_TRAILER) {
      if (!whole || convert_trailer(tr, r.buf, rec.len, res) != 0) {
        res->stop_reason =
            whole ? "a damaged trailer (its checksum fails)" : "the file ends inside the trailer";
        break;
      }
      res->bytes_read = r.off;
      res->complete = true;
      break;
    } else if (whole) {
      res->records_skipped++; /* a record of a later version: not needed for the trace */
      res->bytes_read = r.off;
    } else {
      res->stop_reason = "the file ends inside a record";
      break;
    }
  }
  if (rc == 0 && !res->complete && !cut_footer(tr, &got_back, res)) {
    FAIL(res, "out of memory for the footer of a cut log");
    rc = -1;
  }
  etr__jw_free(&got_back.frames);
  etr__jw_free(&got_back.tbs);
  streams_free(&st);
  if (rc == 0) {
    etr__jw_flush(&tr->jw);
    if (tr->jw.err) {
      FAIL(res, "cannot write the output: %s", strerror(tr->jw.err));
      rc = -1;
    }
  }
  if (rc == 0 && res->complete) res->stop_reason = NULL;
  if (rc == 0) {
    uint64_t size = input_size(&r);
    res->bytes_dropped = size > res->bytes_read ? size - res->bytes_read : 0;
  }
  etr__jw_free(&tr->jw);
  etr__emit_free(tr);
  free(tr);
  free(r.buf);
  return rc;
}
