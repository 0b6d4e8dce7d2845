/* Compact events to full events (the format is in trace_internal.h and docs/FORMAT.md). The
 * writer thread decodes each thread's stream as it takes its chunks; `etr convert` decodes a
 * binary log's streams. A decoder keeps the copies of its stream's string and tensor tables
 * that the definitions give. Every read is bounds-checked: a log may be damaged or hostile.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "observer/trace_internal.h"

/* A full event larger than this is malformed: the recorder's budget keeps a node's values to
 * about ETR__NODE_BUDGET, its strings to a few times ETR__STRING_MAX. Each part is checked
 * against its own bound as it is read (ETR__VALUES_MAX, ETR__STRING_MAX, ETR__COLL_MAX,
 * counting a tensor reference as its tensor, also when references stay references). */
#define DECODED_MAX (64u << 20)

typedef struct dstr {
  char *s;
  uint32_t len, cap;
  bool set;
  bool plain; /* no byte needs JSON escaping (etr__json_plain) */
} dstr;

typedef struct dten {
  uint8_t *b; /* one V_TENSOR value; NULL = never defined */
  uint32_t len, cap;
  etr__tfrag frag; /* its JSON texts (emit_values.c) */
} dten;

/* The tables are allocated at their first definition: a stream that defines nothing (a
 * thread that recorded no op, or a forged log naming a million streams) costs a few bytes. */
struct etr__cev_dec {
  dstr *str;            /* ETR__CSTR_SLOTS, or NULL */
  dten *ten;            /* ETR__CTEN_SLOTS, or NULL */
  uint64_t thread_node; /* the id of the stream's last thread event (its thread's node) */
};

uint64_t etr__cev_dec_thread_node(const etr__cev_dec *d) { return d ? d->thread_node : 0; }

etr__cev_dec *etr__cev_dec_new(void) { return calloc(1, sizeof(etr__cev_dec)); }

size_t etr__cev_dec_bytes(const etr__cev_dec *d) {
  return (d->str ? ETR__CSTR_SLOTS * sizeof(dstr) : 0) +
         (d->ten ? ETR__CTEN_SLOTS * sizeof(dten) : 0);
}

const char etr__cev_oom[] = "out of memory";

void etr__cev_dec_free(etr__cev_dec *d) {
  if (!d) return;
  if (d->str)
    for (uint32_t i = 0; i < ETR__CSTR_SLOTS; i++) free(d->str[i].s);
  if (d->ten)
    for (uint32_t i = 0; i < ETR__CTEN_SLOTS; i++) {
      free(d->ten[i].b);
      free(d->ten[i].frag.buf);
    }
  free(d->str);
  free(d->ten);
  free(d);
}

const uint8_t *etr__cev_slot(etr__cev_dec *d, uint32_t k, size_t *len, etr__tfrag **frag) {
  if (k >= ETR__CTEN_SLOTS || !d->ten || !d->ten[k].b) return NULL;
  if (len) *len = d->ten[k].len;
  *frag = &d->ten[k].frag;
  return d->ten[k].b;
}

/* ---- reading the compact event ---- */

typedef struct rd {
  const uint8_t *p, *end;
  const char *bad; /* why it is malformed, NULL while it is not */
  bool refs;       /* tensor references stay references (etr__cev_decode) */
} rd;

static inline uint64_t get_uv(rd *r) {
  if (r->p < r->end && *r->p < 0x80) return *r->p++; /* (most numbers are small) */
  uint64_t v = 0;
  for (unsigned sh = 0; sh < 64; sh += 7) {
    if (r->p >= r->end) break;
    uint8_t b = *r->p++;
    v |= (uint64_t)(b & 0x7f) << sh;
    if (!(b & 0x80)) return v;
  }
  if (!r->bad) r->bad = "a number runs past the event's end";
  return 0;
}

static const uint8_t *take(rd *r, uint64_t n) {
  if (r->bad) return NULL;
  if (n > (uint64_t)(r->end - r->p)) {
    r->bad = "a field runs past the event's end";
    return NULL;
  }
  const uint8_t *p = r->p;
  r->p += n;
  return p;
}

/* ---- writing the full event ---- */

typedef struct wr {
  etr__cev_out *o;
  size_t len;
  size_t cost; /* of the values being read, as the recorder's budget counts it (values) */
  bool bad;    /* out of memory, or beyond DECODED_MAX */
  bool oom;    /* out of memory */
} wr;

static uint8_t *room_slow(wr *w, size_t n) {
  if (w->bad || n > DECODED_MAX - w->len) {
    w->bad = true;
    return NULL;
  }
  if (w->len + n > w->o->cap) {
    size_t cap = w->o->cap ? w->o->cap : 4096;
    while (cap < w->len + n) cap *= 2;
    uint8_t *b = realloc(w->o->buf, cap); /* (malloc's alignment is at least 8) */
    if (!b) {
      w->bad = w->oom = true;
      return NULL;
    }
    w->o->buf = b;
    w->o->cap = cap;
  }
  uint8_t *p = w->o->buf + w->len;
  w->len += n;
  return p;
}

static inline uint8_t *room(wr *w, size_t n) {
  if (w->len + n <= w->o->cap && w->len + n <= DECODED_MAX && !w->bad) {
    uint8_t *p = w->o->buf + w->len;
    w->len += n;
    return p;
  }
  return room_slow(w, n);
}

static inline void put(wr *w, const void *p, size_t n) {
  uint8_t *d = room(w, n);
  if (d && n) memcpy(d, p, n);
}

/* ---- values ---- */

/* The length of the V_TENSOR value at v (left bytes from it), 0 when it does not fit or has
 * more dimensions than the recorder keeps. */
static size_t tensor_len(const uint8_t *v, size_t left) {
  if (left < 45 || v[2] > ETR_MAX_NDIM) return 0;
  size_t need = 45;
  if (v[1]) need += (size_t)v[3] + v[4] + (size_t)v[2] * 16;
  return need <= left ? need : 0;
}

/* Copy one value, a tensor reference replaced by the tensor (or kept, r->refs), its cost
 * added to w->cost as encode.c counts it. */
static void value(const etr__cev_dec *d, rd *r, wr *w, unsigned depth) {
  if (r->bad || w->bad) return;
  if (w->cost > ETR__VALUES_MAX) { /* (checked before each value: a list of references too) */
    r->bad = "values larger than the recorder writes";
    return;
  }
  w->cost += ETR__VALUE_COST;
  if (r->p >= r->end) {
    r->bad = "a value runs past the event's end";
    return;
  }
  const uint8_t *v = r->p;
  size_t left = (size_t)(r->end - r->p), n = 0;
  switch (v[0]) {
    case ETR__V_NONE:
      n = 1;
      break;
    case ETR__V_CUT:
      n = 1;
      w->cost += 16;
      break;
    case ETR__V_BOOL:
      n = 2;
      break;
    case ETR__V_INT:
    case ETR__V_DOUBLE:
      n = 9;
      break;
    case ETR__V_STRING:
    case ETR__V_DEVICE:
    case ETR__V_OBJECT:
      n = left >= 5 && etr__rd32(v + 1) <= left - 5 ? 5 + (size_t)etr__rd32(v + 1) : left + 1;
      break;
    case ETR__V_TENSOR:
      n = tensor_len(v, left);
      if (!n) n = left + 1;
      break;
    case ETR__V_TREF: {
      const dten *t = left >= 2 && d->ten ? &d->ten[v[1]] : NULL;
      if (!t || !t->b) {
        r->bad = "a tensor reference to a slot never defined";
        return;
      }
      if (r->refs)
        put(w, v, 2);
      else
        put(w, t->b, t->len);
      w->cost += t->len;
      r->p += 2;
      return;
    }
    case ETR__V_LIST:
    case ETR__V_TUPLE: {
      if (left < 5 || depth > ETR__DEPTH_MAX) {
        r->bad = "a malformed list";
        return;
      }
      uint32_t count = etr__rd32(v + 1);
      if (count > ETR__LIST_MAX) {
        r->bad = "a list longer than the recorder writes";
        return;
      }
      put(w, v, 5);
      w->cost += 5 + 24;
      r->p += 5;
      for (uint32_t i = 0; i < count && !r->bad && !w->bad; i++) value(d, r, w, depth + 1);
      return;
    }
    default:
      r->bad = "a value of an unknown kind";
      return;
  }
  if (n > left) {
    r->bad = "a value runs past the event's end";
    return;
  }
  put(w, v, n);
  w->cost += n;
  r->p += n;
}

/* uv count, then the values; their length in *len. */
static uint32_t values(const etr__cev_dec *d, rd *r, wr *w, uint32_t *len) {
  const uint8_t *count_at = r->p;
  uint64_t n = get_uv(r);
  if (n > ETR__LIST_MAX && !r->bad) r->bad = "more values than the recorder writes";
  size_t at = w->len;
  w->cost = (size_t)(r->p - count_at);
  for (uint64_t i = 0; i < n && !r->bad && !w->bad; i++) value(d, r, w, 0);
  if (w->cost > ETR__VALUES_MAX && !r->bad) r->bad = "values larger than the recorder writes";
  *len = (uint32_t)(w->len - at);
  return (uint32_t)n;
}

/* A string reference: its bytes copied, their length; *plain tells whether its slot's
 * bytes need no escaping (false for a string written in the op). */
static uint32_t sref(const etr__cev_dec *d, rd *r, wr *w, bool *plain) {
  uint64_t k = get_uv(r);
  *plain = false;
  if (r->bad) return 0;
  if (k == 0) {
    uint64_t n = get_uv(r);
    if (n > ETR__STRING_MAX && !r->bad) r->bad = "a string longer than the recorder writes";
    const uint8_t *s = take(r, n);
    if (s) put(w, s, (size_t)n);
    return s ? (uint32_t)n : 0;
  }
  if (k > ETR__CSTR_SLOTS || !d->str || !d->str[k - 1].set) {
    r->bad = "a string reference to a slot never defined";
    return 0;
  }
  put(w, d->str[k - 1].s, d->str[k - 1].len);
  *plain = d->str[k - 1].plain;
  return d->str[k - 1].len;
}

/* uv length and the bytes, copied. */
static uint32_t inline_str(rd *r, wr *w) {
  uint64_t n = get_uv(r);
  if (n > ETR__STRING_MAX && !r->bad) r->bad = "a string longer than the recorder writes";
  const uint8_t *s = take(r, n);
  if (s) put(w, s, (size_t)n);
  return s ? (uint32_t)n : 0;
}

/* ---- events ---- */

size_t etr__cev_size(const uint8_t *p, size_t avail, uint8_t *type, uint8_t *flags,
                     size_t *body_at) {
  if (avail < 3) return 0;
  rd r = {p + 2, p + avail, NULL, false};
  uint64_t body = get_uv(&r);
  if (r.bad) return 0;
  size_t at = (size_t)(r.p - p);
  if (body > avail - at) return 0;
  *type = p[0];
  *flags = p[1];
  *body_at = at;
  return at + (size_t)body;
}

/* A definition into the decoder's table: 1 done, 0 malformed, -1 out of memory. */
static int define_str(etr__cev_dec *d, rd *r) {
  uint64_t k = get_uv(r);
  if (r->bad || k >= ETR__CSTR_SLOTS) return 0;
  size_t n = (size_t)(r->end - r->p);
  if (n > ETR__STRING_MAX) return 0;
  if (!d->str && !(d->str = calloc(ETR__CSTR_SLOTS, sizeof *d->str))) return -1;
  dstr *s = &d->str[k];
  if (n + 1 > s->cap) {
    char *b = realloc(s->s, n + 1);
    if (!b) return -1;
    s->s = b;
    s->cap = (uint32_t)(n + 1);
  }
  memcpy(s->s, r->p, n);
  s->len = (uint32_t)n;
  s->set = true;
  s->plain = true;
  for (size_t i = 0; i < n && s->plain; i++) s->plain = etr__json_plain[(unsigned char)s->s[i]];
  r->p = r->end;
  return 1;
}

static int define_tensor(etr__cev_dec *d, rd *r) {
  uint64_t k = get_uv(r);
  if (r->bad || k >= ETR__CTEN_SLOTS) return 0;
  size_t n = (size_t)(r->end - r->p);
  if (n == 0 || r->p[0] != ETR__V_TENSOR || tensor_len(r->p, n) != n) return 0;
  if (!d->ten && !(d->ten = calloc(ETR__CTEN_SLOTS, sizeof *d->ten))) return -1;
  dten *t = &d->ten[k];
  if (n > t->cap) {
    uint8_t *b = realloc(t->b, n);
    if (!b) return -1;
    t->b = b;
    t->cap = (uint32_t)n;
  }
  memcpy(t->b, r->p, n);
  t->len = (uint32_t)n;
  t->frag.ok = false;
  r->p = r->end;
  return 1;
}

static void decode_thread(rd *r, wr *w, etr__ev *h) {
  h->type = ETR__EV_THREAD;
  h->id = get_uv(r);
  h->parent = 1;
  h->tid = get_uv(r);
  h->rf_id = get_uv(r);
  h->kstream = -1;
  size_t n = (size_t)(r->end - r->p);
  if (r->bad || n > ETR__STRING_MAX) {
    if (!r->bad) r->bad = "a thread name too long";
    return;
  }
  put(w, r->p, n);
  h->name_len = (uint32_t)n;
  r->p = r->end;
}

static void decode_op(const etr__cev_dec *d, rd *r, wr *w, etr__ev *h, uint8_t flags,
                      int64_t base_ns) {
  h->type = ETR__EV_OP;
  h->flags = (uint8_t)(flags & ~ETR__EVF_FW);
  h->id = get_uv(r);
  h->parent = h->id - (uint64_t)etr__unzz(get_uv(r));
  h->kstream = -1;
  if (flags & ETR__EVF_TIMING) { /* (unsigned sums: a damaged log is caught by the caller) */
    h->ts_ns = (int64_t)((uint64_t)base_ns + (uint64_t)etr__unzz(get_uv(r)));
    h->incl_ns = (int64_t)get_uv(r);
    h->excl_us = (int64_t)get_uv(r);
  }
  if (flags & ETR__EVF_TBINDEX) {
    h->tb_gen = get_uv(r);
  } else if (flags & ETR__EVF_TRACEBACK) {
    const uint8_t *g = take(r, 12);
    if (!g) return;
    h->tb_gen = etr__rd64(g);
    h->tb_n = etr__rd32(g + 8);
    const uint8_t *words = take(r, (uint64_t)h->tb_n * 8);
    if (words) put(w, words, (size_t)h->tb_n * 8);
  }
  bool name_plain, schema_plain;
  h->name_len = sref(d, r, w, &name_plain);
  h->schema_len = sref(d, r, w, &schema_plain);
  h->plain = (uint16_t)((name_plain ? ETR__EVP_NAME : 0) | (schema_plain ? ETR__EVP_SCHEMA : 0));
  h->rf_id = get_uv(r);
  h->seq = etr__unzz(get_uv(r));
  h->scope = (uint32_t)get_uv(r);
  if (flags & ETR__EVF_FW) {
    h->fw_tid = get_uv(r);
    h->fw_parent = get_uv(r);
  }
  if (flags & ETR__EVF_KERNEL) {
    h->kback_len = inline_str(r, w);
    h->kfile_len = inline_str(r, w);
    for (int i = 0; i < 3; i++) h->kgrid[i] = (uint32_t)get_uv(r);
    h->kstream = etr__unzz(get_uv(r));
  }
  if (flags & ETR__EVF_COLLECTIVE) {
    const uint8_t *l = take(r, 4);
    if (l && etr__rd32(l) > ETR__COLL_MAX)
      r->bad = "a collective block larger than the recorder writes";
    const uint8_t *c = l ? take(r, etr__rd32(l)) : NULL;
    if (c) {
      h->coll_len = etr__rd32(l);
      put(w, c, h->coll_len);
    }
  }
  h->n_in = values(d, r, w, &h->in_len);
  h->n_out = values(d, r, w, &h->out_len);
}

size_t etr__cev_decode(etr__cev_dec *d, etr__cev_out *out, const uint8_t *p, size_t avail,
                       uint64_t tid, int64_t base_ns, bool refs, const etr__ev **ev,
                       const char **why) {
  *ev = NULL;
  uint8_t type, flags;
  size_t at;
  size_t size = etr__cev_size(p, avail, &type, &flags, &at);
  if (!size) {
    if (why) *why = "an event cut short";
    return 0;
  }
  rd r = {p + at, p + size, NULL, refs};
  if (type == ETR__CEV_DEF_STR || type == ETR__CEV_DEF_TEN) {
    int ok = type == ETR__CEV_DEF_STR ? define_str(d, &r) : define_tensor(d, &r);
    if (ok <= 0 && why) *why = ok < 0 ? etr__cev_oom : "a malformed definition";
    return ok > 0 ? size : 0;
  }
  if (type != ETR__CEV_OP && type != ETR__CEV_THREAD) {
    if (why) *why = "an event of an unknown type";
    return 0;
  }
  etr__ev h;
  memset(&h, 0, sizeof h);
  h.tid = tid;
  wr w = {out, 0, 0, false, false};
  room(&w, sizeof h); /* the header, written last */
  if (type == ETR__CEV_THREAD)
    decode_thread(&r, &w, &h);
  else
    decode_op(d, &r, &w, &h, flags, base_ns);
  if (!r.bad && r.p != r.end) r.bad = "bytes after the event's last field";
  if (!w.bad) {
    static const uint8_t zeros[8] = {0};
    put(&w, zeros, ((w.len + 7) & ~(size_t)7) - w.len);
  }
  if (w.oom) {
    if (why) *why = etr__cev_oom;
    return 0;
  }
  if (r.bad || w.bad) {
    if (why) *why = r.bad ? r.bad : "a decoded event too large";
    return 0;
  }
  h.size = (uint32_t)w.len;
  memcpy(out->buf, &h, sizeof h);
  *ev = (const etr__ev *)(const void *)out->buf;
  if (type == ETR__CEV_THREAD) d->thread_node = h.id;
  return size;
}
