/* The flight recorder's ring (ring.h). */
#include "observer/ring.h"

#include "observer/openrefs.h"

#include <stdlib.h>
#include <string.h>

static inline size_t round8(size_t n) { return (n + 7) & ~(size_t)7; }

/* Copies of the newest process-group nodes kept (as many as the writer holds back before a
 * collective, emit.c: a dump's first such node is then the newest, which lists every
 * group). */
enum { RING_PG_KEEP = 64 };

struct etr__ring {
  uint8_t *buf;
  size_t cap;
  size_t head, tail; /* oldest event; where the next one goes */
  size_t n;          /* op events kept */
  uint64_t dropped;
  /* thread events, copies back to back (8-aligned) */
  uint8_t *threads;
  size_t threads_len, threads_cap;
  /* The process-group nodes (dist.c's `## process_group:init ##`, which says the process's
   * rank) go to the ring like any op, to keep their place among the ops, and a copy of each
   * is kept here, oldest first: a dump writes the copies of those the ring dropped. */
  struct {
    etr__ev *ev;
    bool in_ring;
  } groups[RING_PG_KEEP];
  uint32_t groups_n;
};

etr__ring *etr__ring_new(size_t bytes) {
  etr__ring *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->cap = round8(bytes < 4096 ? 4096 : bytes);
  r->buf = malloc(r->cap);
  if (!r->buf) {
    free(r);
    return NULL;
  }
  return r;
}

void etr__ring_free(etr__ring *r) {
  if (!r) return;
  free(r->buf);
  free(r->threads);
  for (uint32_t i = 0; i < r->groups_n; i++) free(r->groups[i].ev);
  free(r);
}

uint64_t etr__ring_dropped(const etr__ring *r) { return r->dropped; }

static inline uint32_t size_at(const etr__ring *r, size_t p) {
  uint32_t v;
  memcpy(&v, r->buf + p, 4);
  return v;
}

/* Where the event at p really starts: a wrap mark (size 0), or the end of the buffer,
 * sends the reader back to 0. */
static inline size_t event_at(const etr__ring *r, size_t p) {
  return p + 8 > r->cap || size_at(r, p) == 0 ? 0 : p;
}

/* The copy of a process-group node the ring no longer holds is what a dump writes. */
static void group_left_ring(etr__ring *r, uint64_t id) {
  for (uint32_t i = 0; i < r->groups_n; i++)
    if (r->groups[i].ev->id == id) r->groups[i].in_ring = false;
}

static void drop_oldest(etr__ring *r) {
  r->head = event_at(r, r->head);
  const etr__ev *ev = (const etr__ev *)(const void *)(r->buf + r->head);
  if (ETR__UNLIKELY(r->groups_n) && etr__ev_is_pg_init(ev)) group_left_ring(r, ev->id);
  r->head += size_at(r, r->head);
  r->n--;
  r->dropped++;
  if (r->n == 0) r->head = r->tail = 0;
}

static bool keep_thread(etr__ring *r, const etr__ev *ev) {
  if (r->threads_len + ev->size > r->threads_cap) {
    size_t cap = r->threads_cap ? r->threads_cap : 4096;
    while (cap < r->threads_len + ev->size) cap *= 2;
    uint8_t *p = realloc(r->threads, cap);
    if (!p) return false;
    r->threads = p;
    r->threads_cap = cap;
  }
  memcpy(r->threads + r->threads_len, ev, ev->size);
  r->threads_len += ev->size;
  return true;
}

/* A copy of a process-group node (the oldest copy goes when there are RING_PG_KEEP). */
static void keep_group(etr__ring *r, const etr__ev *ev) {
  etr__ev *copy = malloc(ev->size);
  if (!copy) return; /* (it is in the ring all the same, until dropped) */
  memcpy(copy, ev, ev->size);
  if (r->groups_n == RING_PG_KEEP) {
    free(r->groups[0].ev);
    memmove(r->groups, r->groups + 1, (RING_PG_KEEP - 1) * sizeof r->groups[0]);
    r->groups_n--;
  }
  r->groups[r->groups_n].ev = copy;
  r->groups[r->groups_n].in_ring = true;
  r->groups_n++;
}

bool etr__ring_add(etr__ring *r, const etr__ev *ev) {
  if (ev->type == ETR__EV_THREAD) return keep_thread(r, ev);
  if (ETR__UNLIKELY(etr__ev_is_pg_init(ev))) keep_group(r, ev);
  size_t size = ev->size;
  if (size > r->cap) { /* larger than the whole ring */
    r->dropped++;
    if (r->groups_n && etr__ev_is_pg_init(ev)) group_left_ring(r, ev->id);
    return true;
  }
  for (;;) {
    size_t pos;
    if (r->n == 0) {
      r->head = r->tail = pos = 0;
    } else if (r->tail > r->head) { /* used: [head, tail) */
      if (r->cap - r->tail >= size) {
        pos = r->tail;
      } else if (size <= r->head) { /* wrap: mark the rest of the buffer unused */
        if (r->cap - r->tail >= 4) memset(r->buf + r->tail, 0, 4);
        pos = 0;
      } else {
        drop_oldest(r);
        continue;
      }
    } else if (r->tail + size <= r->head) { /* used: [head, cap) and [0, tail) */
      pos = r->tail;
    } else {
      drop_oldest(r);
      continue;
    }
    memcpy(r->buf + pos, ev, size);
    r->tail = pos + size;
    r->n++;
    return true;
  }
}

/* ---- writing out ---- */

/* A reference from ev to id: remembered unless id is a kept op or a thread node. */
static bool note_ref(etr__refmap *missing_ids, const etr__refmap *kept, uint64_t id, uint64_t tid,
                     const etr__ev *ev, bool span) {
  if (id <= 1 || etr__refmap_find(kept, id)) return true;
  etr__missing *m = etr__refmap_put(missing_ids, id);
  if (!m) return false;
  etr__missing_note(m, tid, ev, span);
  return true;
}

/* An op event to put, and the references it makes that may need a placeholder. */
static void put_op(etr__refmap *miss, const etr__refmap *kept, const etr__ev *ev,
                   void (*put)(void *ctx, const etr__ev *ev), void *ctx, bool *ok) {
  put(ctx, ev);
  if (*ok && (!note_ref(miss, kept, ev->parent, ev->tid, ev, true) ||
              !note_ref(miss, kept, ev->fw_parent, ev->fw_tid ? ev->fw_tid : ev->tid, ev, false)))
    *ok = false;
}

uint64_t etr__ring_write(etr__ring *r, void (*put)(void *ctx, const etr__ev *ev), void *ctx) {
  /* the thread nodes, and the ids that need no placeholder: thread nodes and kept ops */
  etr__refmap kept = {0}, miss = {0}, threads = {0};
  bool ok = etr__refmap_init(&kept, r->n + r->groups_n + r->threads_len / sizeof(etr__ev) + 1) &&
            etr__refmap_init(&miss, 64) &&
            etr__refmap_init(&threads, r->threads_len / sizeof(etr__ev) + 1);
  for (size_t off = 0; off < r->threads_len;) {
    const etr__ev *ev = (const etr__ev *)(const void *)(r->threads + off);
    put(ctx, ev);
    etr__missing *t = NULL;
    if (ok && (!etr__refmap_put(&kept, ev->id) || !(t = etr__refmap_put(&threads, ev->tid + 1))))
      ok = false;
    if (ok) t->tid = ev->id; /* tid + 1 -> its thread node (a tid may be 0) */
    off += ev->size;
  }
  for (uint32_t i = 0; ok && i < r->groups_n; i++)
    if (!r->groups[i].in_ring && !etr__refmap_put(&kept, r->groups[i].ev->id)) ok = false;
  size_t p = r->head;
  for (size_t i = 0; ok && i < r->n; i++) {
    p = event_at(r, p);
    const etr__ev *ev = (const etr__ev *)(const void *)(r->buf + p);
    if (!etr__refmap_put(&kept, ev->id)) ok = false;
    p += ev->size;
  }
  /* The process-group nodes the ring dropped, where they were: before every op it kept
   * (the writer then holds them back until the first collective, emit.c, as it does the
   * others). */
  for (uint32_t i = 0; i < r->groups_n; i++)
    if (!r->groups[i].in_ring) put_op(&miss, &kept, r->groups[i].ev, put, ctx, &ok);
  p = r->head;
  for (size_t i = 0; i < r->n; i++) {
    p = event_at(r, p);
    const etr__ev *ev = (const etr__ev *)(const void *)(r->buf + p);
    put_op(&miss, &kept, ev, put, ctx, &ok);
    p += ev->size;
  }
  uint64_t made = 0;
  if (ok && !etr__put_placeholders(&miss, &threads, ETR__RING_PLACEHOLDER, put, ctx, &made))
    ok = false;
  etr__refmap_free(&kept);
  etr__refmap_free(&miss);
  etr__refmap_free(&threads);
  return ok ? made : UINT64_MAX;
}
