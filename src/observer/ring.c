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
  /* thread events, copies back to back (8-aligned); pruned (etr__ring_prune_threads) once
   * threads_len reaches prune_at */
  uint8_t *threads;
  size_t threads_len, threads_cap, prune_at;
  uint64_t threads_pruned;
  /* The process-group nodes (dist.c's `## process_group:init ##`, which says the process's
   * rank) go to the ring like any op, to keep their place among the ops, and a copy of each
   * is kept here, oldest first: a dump writes the copies of those the ring dropped. */
  struct {
    etr__ev *ev;
    bool in_ring;
  } groups[RING_PG_KEEP];
  uint32_t groups_n;
};

/* The thread nodes' size below which they are not pruned: a sixteenth of the ring (a prune
 * reads every op the ring holds), at least 64 KiB (about 400 nodes). */
static size_t prune_floor(const etr__ring *r) {
  return r->cap / 16 > ((size_t)64 << 10) ? r->cap / 16 : (size_t)64 << 10;
}

etr__ring *etr__ring_new(size_t bytes) {
  etr__ring *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->cap = round8(bytes < 4096 ? 4096 : bytes);
  r->buf = malloc(r->cap);
  if (!r->buf) {
    free(r);
    return NULL;
  }
  r->prune_at = prune_floor(r);
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

bool etr__ring_threads_due(const etr__ring *r) { return r->threads_len >= r->prune_at; }

uint64_t etr__ring_threads_pruned(const etr__ring *r) { return r->threads_pruned; }

/* A thread node stays while its thread may record (live), while an op the ring (or a
 * process-group copy) holds is on its thread or names it as its forward thread (fw_tid:
 * the placeholder of a forward op dropped goes under it), or names the node itself as
 * fw_parent (the forward thread had no op open). */
bool etr__ring_prune_threads(etr__ring *r, const etr__refmap *live) {
  etr__refmap need = {0}; /* tid + 1 of the threads whose ops are kept; ids named fw_parent */
  if (!etr__refmap_init(&need, 64)) return false; /* (grows: few threads, as a rule) */
  bool ok = true;
  size_t p = r->head;
  for (size_t i = 0; ok && i < r->n; i++) {
    p = event_at(r, p);
    const etr__ev *ev = (const etr__ev *)(const void *)(r->buf + p);
    /* (tids and node ids are told apart by the top bit: a node id never has it) */
    if (!etr__refmap_put(&need, (ev->tid + 1) | ((uint64_t)1 << 63)) ||
        (ev->fw_parent > 1 && !etr__refmap_put(&need, ev->fw_parent)) ||
        (ev->fw_tid && !etr__refmap_put(&need, (ev->fw_tid + 1) | ((uint64_t)1 << 63))))
      ok = false;
    p += ev->size;
  }
  for (uint32_t i = 0; ok && i < r->groups_n; i++)
    if (!etr__refmap_put(&need, (r->groups[i].ev->tid + 1) | ((uint64_t)1 << 63))) ok = false;
  if (ok) {
    size_t to = 0;
    for (size_t off = 0; off < r->threads_len;) {
      const etr__ev *ev = (const etr__ev *)(const void *)(r->threads + off);
      size_t size = ev->size;
      if (etr__refmap_find(live, ev->tid + 1) ||
          etr__refmap_find(&need, (ev->tid + 1) | ((uint64_t)1 << 63)) ||
          etr__refmap_find(&need, ev->id)) {
        if (to != off) memmove(r->threads + to, r->threads + off, size);
        to += size;
      } else {
        r->threads_pruned++;
      }
      off += size;
    }
    r->threads_len = to;
    if (r->threads_cap > 4 * to && r->threads_cap > 4096) { /* give the memory back */
      size_t cap = 2 * to > 4096 ? 2 * to : 4096;
      uint8_t *q = realloc(r->threads, cap);
      if (q) {
        r->threads = q;
        r->threads_cap = cap;
      }
    }
  }
  etr__refmap_free(&need);
  /* (the nodes that stay are not read again before they have doubled) */
  r->prune_at = 2 * r->threads_len > prune_floor(r) ? 2 * r->threads_len : prune_floor(r);
  return ok;
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

/* A reference to a thread whose node was pruned: a backward op recorded after its forward
 * thread had exited names that thread's node as fw_parent (recorder.c), which nothing kept
 * holds (a forward op of the thread that a kept op names keeps the node: prune above). It
 * gets a thread node again, under its id, without the OS thread id and name it had; a
 * placeholder op there would hang under no thread. */
static bool thread_stubs(etr__refmap *miss, etr__refmap *threads,
                         void (*put)(void *ctx, const etr__ev *ev), void *ctx) {
  size_t k = 0;
  for (size_t i = 0; i <= miss->mask && miss->e; i++)
    if (miss->e[i].id && !etr__refmap_find(threads, miss->e[i].tid + 1)) k++;
  if (!k) return true;
  etr__missing *v = malloc(k * sizeof *v);
  if (!v) return false;
  k = 0;
  for (size_t i = 0; i <= miss->mask; i++)
    if (miss->e[i].id && !etr__refmap_find(threads, miss->e[i].tid + 1)) v[k++] = miss->e[i];
  bool ok = true;
  for (size_t i = 0; ok && i < k; i++) {
    if (etr__refmap_find(threads, v[i].tid + 1)) continue; /* (made for an earlier one) */
    _Alignas(8) etr__ev ev;
    memset(&ev, 0, sizeof ev);
    ev.size = (uint32_t)sizeof ev;
    ev.type = ETR__EV_THREAD;
    ev.id = v[i].id;
    ev.parent = 1;
    ev.tid = v[i].tid;
    ev.kstream = -1;
    etr__missing *t = etr__refmap_put(threads, v[i].tid + 1);
    if (!t) {
      ok = false;
      break;
    }
    t->tid = v[i].id;
    put(ctx, &ev);
    etr__refmap_del(miss, v[i].id);
  }
  free(v);
  return ok;
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
  if (ok && !thread_stubs(&miss, &threads, put, ctx)) ok = false;
  if (ok && !etr__put_placeholders(&miss, &threads, ETR__RING_PLACEHOLDER, put, ctx, &made))
    ok = false;
  etr__refmap_free(&kept);
  etr__refmap_free(&miss);
  etr__refmap_free(&threads);
  return ok ? made : UINT64_MAX;
}
