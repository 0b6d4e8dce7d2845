/* `etr validate`: the tree of a trace, checked while it streams by, in bounded memory
 * (validate.h): ids unique, every ctrl_deps parent and fw_parent a node of the file, every op
 * reaching a thread node through its parents (no cycle, not the process node first) with the
 * thread node's tid.
 *
 * etr and PyTorch write a node when it completes, so children come before their parent (and
 * a thread node before its ops, the process node last). What is kept:
 * - the ids seen: a bitmap in leaves of 65,536 ids (8 KiB) found through a small hash, at
 *   most SEEN_MAX_LEAVES of them (24 MiB: ids up to ~200 million when dense, as ours are);
 * - the thread and process nodes (id -> tid), at most SPECIAL_MAX;
 * - for each id named but not seen yet, one pending entry (at most PEND_MAX): how many nodes
 *   name it as parent or fw_parent, and the "group" of ops whose chain of parents leads up to
 *   it, summed up per tid (up to NB tids). When that id arrives its group moves up to its own
 *   parent, or is resolved against the thread node reached: the members whose tid differs are
 *   the errors. Ids still pending at the end are the missing parents;
 * - the first few nodes of each list (64, or --max up to 1,024, in an arena of at most REC_MAX
 *   records) to name them in the report; the others are counted;
 * - the last RECENT nodes by id (a direct-mapped cache), for what the order above does not
 *   give: a parent written before its child (followed through the cache), and the offset of
 *   the first node of a duplicate id.
 * What these bounds leave unchecked is counted and said in the verdict (vd_tree_unchecked),
 * never taken for valid or invalid.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "validate.h"

enum {
  LEAF_SHIFT = 16,
  SEEN_MAX_LEAVES = 3072, /* x 8 KiB = 24 MiB */
  SPECIAL_MAX = 1 << 16,
  PEND_MAX = 1 << 14,
  REC_MAX = 1 << 17,
  REC_PER_LIST = 64,
  REC_LIST_MAX = 1024,
  RECENT = 1 << 16,
  CHAIN_MAX = 4096,
  NB = 2
};

typedef struct leaf {
  uint64_t key; /* (id >> LEAF_SHIFT) + 1; 0 = empty */
  uint64_t *bits;
} leaf;

typedef struct special {
  int64_t id;
  uint64_t tid;
  uint32_t used, is_process;
} special;

/* A node named in a report: a child of a missing parent, a member of a group. */
typedef struct vrec {
  int64_t id;
  uint64_t off;
  uint64_t tid;
  uint32_t next; /* index + 1, 0 = end */
  uint32_t is_op;
} vrec;

typedef struct rlist {
  uint32_t head, tail, listed;
} rlist;

typedef struct bucket {
  uint64_t tid, n;
  rlist l;
} bucket;

/* The ops whose chain of parents leads to one id not seen yet. */
typedef struct group {
  uint64_t n;    /* members */
  bucket b[NB];  /* members per tid, for the first NB tids */
  rlist over;    /* members of the other tids, each with its tid */
  uint64_t lost; /* members of other tids not in `over` (the lists' bounds): unchecked */
} group;

typedef struct pend {
  int64_t key;
  uint32_t used;
  uint64_t n_ctrl, n_ctrl_ops, n_fw;
  rlist ctrl, fw;
  group g;
} pend;

typedef struct recent {
  int64_t id, parent;
  uint64_t off1; /* offset + 1; 0 = empty */
} recent;

struct vtree {
  leaf *leaves;
  size_t leaf_mask, n_leaves;
  bool leaves_full;
  uint64_t last_key;
  uint64_t *last_bits;
  special *sp;
  size_t sp_mask, n_sp;
  bool sp_full; /* a thread node could not be kept: a chain that seems broken may not be */
  pend *pd;
  size_t pd_mask, n_pd;
  vrec *rec;
  size_t n_rec, cap_rec;
  uint32_t free_rec; /* index + 1 */
  uint32_t per_list;
  recent *rc;
  /* what the bounds left unchecked */
  uint64_t un_ids, un_refs, un_chains;
};

static inline size_t hash64(uint64_t x) {
  x *= 0x9E3779B97F4A7C15ull;
  return (size_t)(x ^ (x >> 29));
}

/* ---- ids seen ---- */

static bool leaves_grow(vtree *t) {
  size_t cap = t->leaves ? (t->leaf_mask + 1) * 2 : 64;
  leaf *l = calloc(cap, sizeof *l);
  if (!l) return false;
  for (size_t i = 0; t->leaves && i <= t->leaf_mask; i++) {
    if (!t->leaves[i].key) continue;
    size_t h = hash64(t->leaves[i].key) & (cap - 1);
    while (l[h].key) h = (h + 1) & (cap - 1);
    l[h] = t->leaves[i];
  }
  free(t->leaves);
  t->leaves = l;
  t->leaf_mask = cap - 1;
  return true;
}

/* The leaf of id, or NULL; creates it when add (NULL when over the budget). */
static uint64_t *leaf_of(vtree *t, int64_t id, bool add) {
  uint64_t key = ((uint64_t)id >> LEAF_SHIFT) + 1;
  if (key == t->last_key) return t->last_bits;
  if (t->leaves) {
    size_t h = hash64(key) & t->leaf_mask;
    while (t->leaves[h].key) {
      if (t->leaves[h].key == key) {
        t->last_key = key;
        return t->last_bits = t->leaves[h].bits;
      }
      h = (h + 1) & t->leaf_mask;
    }
  }
  if (!add || t->leaves_full) return NULL;
  if (t->n_leaves >= SEEN_MAX_LEAVES ||
      ((!t->leaves || (t->n_leaves + 1) * 2 > t->leaf_mask + 1) && !leaves_grow(t))) {
    t->leaves_full = true;
    return NULL;
  }
  uint64_t *bits = calloc((size_t)1 << (LEAF_SHIFT - 6), sizeof *bits);
  if (!bits) {
    t->leaves_full = true;
    return NULL;
  }
  size_t h = hash64(key) & t->leaf_mask;
  while (t->leaves[h].key) h = (h + 1) & t->leaf_mask;
  t->leaves[h] = (leaf){key, bits};
  t->n_leaves++;
  t->last_key = key;
  return t->last_bits = bits;
}

/* 1 seen, 0 not seen, -1 unknown (its leaf was over the budget). */
static int seen_test(vtree *t, int64_t id) {
  uint64_t *b = leaf_of(t, id, false);
  if (!b) return t->leaves_full ? -1 : 0;
  uint64_t i = (uint64_t)id & ((1u << LEAF_SHIFT) - 1);
  return (int)((b[i >> 6] >> (i & 63)) & 1);
}

/* Marks id seen: returns 1 when it was, 0 when not, -1 when it cannot be kept. */
static int seen_add(vtree *t, int64_t id) {
  uint64_t *b = leaf_of(t, id, true);
  if (!b) return -1;
  uint64_t i = (uint64_t)id & ((1u << LEAF_SHIFT) - 1), m = 1ull << (i & 63);
  if (b[i >> 6] & m) return 1;
  b[i >> 6] |= m;
  return 0;
}

/* ---- thread and process nodes ---- */

static special *special_get(const vtree *t, int64_t id) {
  if (!t->sp) return NULL;
  for (size_t h = hash64((uint64_t)id) & t->sp_mask; t->sp[h].used; h = (h + 1) & t->sp_mask)
    if (t->sp[h].id == id) return &t->sp[h];
  return NULL;
}

static bool special_put(vtree *t, int64_t id, uint64_t tid, bool is_process) {
  if (!t->sp || (t->n_sp + 1) * 2 > t->sp_mask + 1) {
    if (t->n_sp >= SPECIAL_MAX) return false;
    size_t cap = t->sp ? (t->sp_mask + 1) * 2 : 64;
    special *s = calloc(cap, sizeof *s);
    if (!s) return false;
    for (size_t i = 0; t->sp && i <= t->sp_mask; i++) {
      if (!t->sp[i].used) continue;
      size_t h = hash64((uint64_t)t->sp[i].id) & (cap - 1);
      while (s[h].used) h = (h + 1) & (cap - 1);
      s[h] = t->sp[i];
    }
    free(t->sp);
    t->sp = s;
    t->sp_mask = cap - 1;
  }
  size_t h = hash64((uint64_t)id) & t->sp_mask;
  while (t->sp[h].used && t->sp[h].id != id) h = (h + 1) & t->sp_mask;
  if (!t->sp[h].used) t->n_sp++;
  t->sp[h] = (special){id, tid, 1, is_process};
  return true;
}

/* ---- records ---- */

/* Lists a node in l unless l holds per_list nodes or the arena is full (returns false). */
static bool list_add(vtree *t, rlist *l, int64_t id, uint64_t off, uint64_t tid, bool is_op) {
  if (l->listed >= t->per_list) return false;
  uint32_t r;
  if (t->free_rec) {
    r = t->free_rec;
    t->free_rec = t->rec[r - 1].next;
  } else {
    if (t->n_rec == t->cap_rec) {
      if (t->cap_rec >= REC_MAX) return false;
      size_t cap = t->cap_rec ? t->cap_rec * 2 : 1024;
      vrec *nr = realloc(t->rec, cap * sizeof *nr);
      if (!nr) return false;
      t->rec = nr;
      t->cap_rec = cap;
    }
    r = (uint32_t)++t->n_rec;
  }
  t->rec[r - 1] = (vrec){id, off, tid, 0, is_op};
  if (l->tail)
    t->rec[l->tail - 1].next = r;
  else
    l->head = r;
  l->tail = r;
  l->listed++;
  return true;
}

static void list_free(vtree *t, rlist *l) {
  if (!l->head) return;
  t->rec[l->tail - 1].next = t->free_rec;
  t->free_rec = l->head;
  *l = (rlist){0, 0, 0};
}

/* Appends src to dst (src is emptied); drops it when dst lists enough already, and returns
 * how many nodes were dropped. */
static uint64_t list_cat(vtree *t, rlist *dst, rlist *src) {
  if (!src->head) return 0;
  if (dst->listed >= t->per_list) {
    uint64_t n = src->listed;
    list_free(t, src);
    return n;
  }
  if (dst->tail)
    t->rec[dst->tail - 1].next = src->head;
  else
    dst->head = src->head;
  dst->tail = src->tail;
  dst->listed += src->listed;
  *src = (rlist){0, 0, 0};
  return 0;
}

/* ---- groups ---- */

static bucket *group_bucket(group *g, uint64_t tid) {
  for (int i = 0; i < NB; i++)
    if (g->b[i].n == 0 || g->b[i].tid == tid) {
      g->b[i].tid = tid;
      return &g->b[i];
    }
  return NULL;
}

static void group_add(vtree *t, group *g, int64_t id, uint64_t off, uint64_t tid) {
  g->n++;
  bucket *b = group_bucket(g, tid);
  if (!b) {
    if (!list_add(t, &g->over, id, off, tid, true)) g->lost++;
    return;
  }
  b->n++;
  list_add(t, &b->l, id, off, tid, true);
}

static void group_free(vtree *t, group *g) {
  for (int i = 0; i < NB; i++) list_free(t, &g->b[i].l);
  list_free(t, &g->over);
  memset(g, 0, sizeof *g);
}

/* A group whose chain is broken (a missing parent, a cycle, the process node reached without a
 * thread node: reported where it breaks). When a thread node could not be kept, the chain
 * may have gone through it: its members are then counted as unchecked. */
static void group_drop(vtree *t, group *g) {
  if (t->sp_full) t->un_chains += g->n;
  group_free(t, g);
}

/* Moves src's members into dst. */
static void group_merge(vtree *t, group *dst, group *src) {
  dst->n += src->n;
  dst->lost += src->lost;
  for (int i = 0; i < NB && src->b[i].n; i++) {
    bucket *b = group_bucket(dst, src->b[i].tid);
    if (!b) { /* its listed members go to `over`, with their tid */
      dst->lost += src->b[i].n - src->b[i].l.listed;
      dst->lost += list_cat(t, &dst->over, &src->b[i].l);
      continue;
    }
    b->n += src->b[i].n;
    list_cat(t, &b->l, &src->b[i].l);
  }
  dst->lost += list_cat(t, &dst->over, &src->over);
  memset(src, 0, sizeof *src);
}

/* The group reaches thread node thread_id of tid: members of another tid are errors. */
static void group_resolve(vrun *w, group *g, int64_t thread_id, uint64_t tid) {
  vtree *t = w->tree;
  for (int i = 0; i < NB && g->b[i].n; i++) {
    bucket *b = &g->b[i];
    if (b->tid == tid) continue;
    for (uint32_t r = b->l.head; r; r = t->rec[r - 1].next)
      vd_problem(&w->v, SEV_ERROR, K_REACH, t->rec[r - 1].off, t->rec[r - 1].id,
                 "tid %" PRIu64 ", but it hangs under the thread node %" PRId64 " of tid %" PRIu64,
                 b->tid, thread_id, tid);
    vd_unlisted(&w->v, SEV_ERROR, K_REACH, b->n - b->l.listed);
  }
  for (uint32_t r = g->over.head; r; r = t->rec[r - 1].next)
    if (t->rec[r - 1].tid != tid)
      vd_problem(&w->v, SEV_ERROR, K_REACH, t->rec[r - 1].off, t->rec[r - 1].id,
                 "tid %" PRIu64 ", but it hangs under the thread node %" PRId64 " of tid %" PRIu64,
                 t->rec[r - 1].tid, thread_id, tid);
  t->un_chains += g->lost;
  group_free(t, g);
}

/* ---- pending ids ---- */

static pend *pend_find(const vtree *t, int64_t key) {
  if (!t->n_pd) return NULL;
  for (size_t h = hash64((uint64_t)key) & t->pd_mask; t->pd[h].used; h = (h + 1) & t->pd_mask)
    if (t->pd[h].key == key) return &t->pd[h];
  return NULL;
}

/* The entry of key, created when absent; NULL over PEND_MAX or out of memory. The pointer
 * holds until the next pend_get or pend_take. */
static pend *pend_get(vtree *t, int64_t key) {
  pend *p = pend_find(t, key);
  if (p) return p;
  if (!t->pd || (t->n_pd + 1) * 2 > t->pd_mask + 1) {
    if (t->n_pd >= PEND_MAX) return NULL;
    size_t cap = t->pd ? (t->pd_mask + 1) * 2 : 256;
    pend *np = calloc(cap, sizeof *np);
    if (!np) return NULL;
    for (size_t i = 0; t->pd && i <= t->pd_mask; i++) {
      if (!t->pd[i].used) continue;
      size_t h = hash64((uint64_t)t->pd[i].key) & (cap - 1);
      while (np[h].used) h = (h + 1) & (cap - 1);
      np[h] = t->pd[i];
    }
    free(t->pd);
    t->pd = np;
    t->pd_mask = cap - 1;
  }
  size_t h = hash64((uint64_t)key) & t->pd_mask;
  while (t->pd[h].used) h = (h + 1) & t->pd_mask;
  memset(&t->pd[h], 0, sizeof t->pd[h]);
  t->pd[h].key = key;
  t->pd[h].used = 1;
  t->n_pd++;
  return &t->pd[h];
}

/* Removes key's entry into *out; false when there is none. */
static bool pend_take(vtree *t, int64_t key, pend *out) {
  pend *p = pend_find(t, key);
  if (!p) return false;
  *out = *p;
  /* backward-shift deletion keeps linear probing without tombstones */
  size_t i = (size_t)(p - t->pd), j = i;
  for (;;) {
    t->pd[i].used = 0;
    for (;;) {
      j = (j + 1) & t->pd_mask;
      if (!t->pd[j].used) {
        t->n_pd--;
        return true;
      }
      size_t k = hash64((uint64_t)t->pd[j].key) & t->pd_mask;
      if (i <= j ? (i < k && k <= j) : (i < k || k <= j)) continue;
      break;
    }
    t->pd[i] = t->pd[j];
    i = j;
  }
}

/* ---- the recent nodes ---- */

static recent *recent_get(vtree *t, int64_t id) {
  recent *c = &t->rc[(uint64_t)id & (RECENT - 1)];
  return c->off1 && c->id == id ? c : NULL;
}

/* ---- per node ---- */

int vd_tree_init(vrun *w) {
  w->tree = calloc(1, sizeof *w->tree);
  if (!w->tree) return -1;
  w->tree->rc = calloc(RECENT, sizeof *w->tree->rc);
  if (!w->tree->rc) return -1;
  /* enough to name --max nodes of a list, and a group's members of its other tids */
  uint64_t k = w->v.max_per_kind;
  w->tree->per_list = k < REC_PER_LIST   ? REC_PER_LIST
                      : k > REC_LIST_MAX ? REC_LIST_MAX
                                         : (uint32_t)k;
  return 0;
}

void vd_tree_free(vrun *w) {
  vtree *t = w->tree;
  if (!t) return;
  for (size_t i = 0; t->leaves && i <= t->leaf_mask; i++) free(t->leaves[i].bits);
  free(t->leaves);
  free(t->sp);
  free(t->pd);
  free(t->rec);
  free(t->rc);
  free(t);
  w->tree = NULL;
}

/* A reference from node (id, off) to key, not seen, as its parent (ctrl) or fw_parent: kept
 * pending. Returns key's pending entry (NULL over the bounds). */
static pend *refer_pending(vtree *t, int64_t key, bool ctrl, bool is_op, int64_t id, uint64_t off) {
  pend *p = pend_get(t, key);
  if (!p) {
    t->un_refs++;
    return NULL;
  }
  if (ctrl) {
    p->n_ctrl++;
    p->n_ctrl_ops += is_op;
    list_add(t, &p->ctrl, id, off, 0, is_op);
  } else {
    p->n_fw++;
    list_add(t, &p->fw, id, off, 0, false);
  }
  return p;
}

/* The same, checked now when key was seen. */
static pend *refer(vtree *t, int64_t key, bool ctrl, bool is_op, int64_t id, uint64_t off) {
  if (seen_test(t, key) == 1 || special_get(t, key)) return NULL;
  return refer_pending(t, key, ctrl, is_op, id, off);
}

/* Op x's group g (x included) goes up from x's parent y, a node seen before x. */
static void follow(vrun *w, group *g, int64_t x, int64_t y) {
  vtree *t = w->tree;
  int64_t cur = y, mark = y; /* Brent's cycle detection: mark is where the walk was */
  for (int steps = 1, power = 1; steps < CHAIN_MAX; steps++) {
    special *s = special_get(t, cur);
    if (s) {
      if (s->is_process) /* the op right under it was reported when it came */
        group_drop(t, g);
      else
        group_resolve(w, g, cur, s->tid);
      return;
    }
    if (cur == x) {
      vd_problem(&w->v, SEV_ERROR, K_REACH, recent_get(t, x)->off1 - 1, x,
                 "does not reach a thread node: its chain of parents has a cycle");
      group_drop(t, g);
      return;
    }
    recent *c = recent_get(t, cur);
    if (!c) break;
    if (c->parent == cur) { /* a node its own parent: reported when it came */
      group_drop(t, g);
      return;
    }
    int seen = seen_test(t, c->parent);
    if (seen != 1 && !special_get(t, c->parent)) {
      pend *p = seen == 0 ? pend_get(t, c->parent) : NULL;
      if (p) {
        group_merge(t, &p->g, g);
        return;
      }
      break;
    }
    cur = c->parent;
    if (cur == mark) { /* a cycle above x, reported when it closed */
      group_drop(t, g);
      return;
    }
    if (steps == power) {
      mark = cur;
      power *= 2;
    }
  }
  t->un_chains += g->n;
  group_free(t, g);
}

void vd_tree_node(vrun *w, const rd_rnode *n, int kind) {
  vtree *t = w->tree;
  vstate *v = &w->v;
  int64_t id = n->id;
  int s = seen_add(t, id);
  recent *c = &t->rc[(uint64_t)id & (RECENT - 1)];
  if (s == 1) {
    if (c->off1 && c->id == id)
      vd_problem(v, SEV_ERROR, K_DUPID, n->offset, id,
                 "id %" PRId64 " already used by the node at byte %" PRIu64, id, c->off1 - 1);
    else
      vd_problem(v, SEV_ERROR, K_DUPID, n->offset, id,
                 "id %" PRId64 " already used by an earlier node", id);
    return;
  }
  if (s < 0) t->un_ids++;
  *c = (recent){id, n->ctrl_deps, n->offset + 1};
  if (n->fw_parent != 0) refer(t, (int64_t)n->fw_parent, false, false, id, n->offset);
  pend own;
  bool had = pend_take(t, id, &own);
  group g;
  memset(&g, 0, sizeof g);
  if (had) {
    list_free(t, &own.fw);
    g = own.g;
  }
  if (kind == NK_PROCESS) {
    w->have_process = true;
    if (!special_put(t, id, n->tid, true)) t->sp_full = true;
    if (had) { /* ops right under the process node */
      uint64_t listed = 0;
      for (uint32_t r = own.ctrl.head; r; r = t->rec[r - 1].next)
        if (t->rec[r - 1].is_op) {
          listed++;
          vd_problem(v, SEV_ERROR, K_REACH, t->rec[r - 1].off, t->rec[r - 1].id,
                     "does not reach a thread node: reaches the process node without a thread "
                     "node");
        }
      vd_unlisted(v, SEV_ERROR, K_REACH, own.n_ctrl_ops - listed);
      list_free(t, &own.ctrl);
      group_drop(t, &g);
    }
    return;
  }
  if (had) list_free(t, &own.ctrl);
  int64_t y = n->ctrl_deps;
  if (kind == NK_THREAD) {
    if (special_put(t, id, n->tid, false)) {
      group_resolve(w, &g, id, n->tid);
    } else {
      t->sp_full = true;
      t->un_chains += g.n;
      group_free(t, &g);
    }
    if (y != id) refer(t, y, true, false, id, n->offset);
    return;
  }
  group_add(t, &g, id, n->offset, n->tid);
  if (y == id) {
    vd_problem(v, SEV_ERROR, K_REACH, n->offset, id,
               "does not reach a thread node: its chain of parents has a cycle");
    group_drop(t, &g);
    return;
  }
  special *sp = special_get(t, y);
  if (sp) {
    if (sp->is_process) {
      vd_problem(v, SEV_ERROR, K_REACH, n->offset, id,
                 "does not reach a thread node: reaches the process node without a thread node");
      group_drop(t, &g);
    } else {
      group_resolve(w, &g, y, sp->tid);
    }
    return;
  }
  if (seen_test(t, y) == 1) {
    follow(w, &g, id, y);
    return;
  }
  pend *p = refer_pending(t, y, true, true, id, n->offset); /* y is not seen (above) */
  if (p)
    group_merge(t, &p->g, &g);
  else {
    t->un_chains += g.n;
    group_free(t, &g);
  }
}

/* ---- at the end ---- */

typedef struct missing {
  uint64_t off;
  int64_t id, key;
  bool fw;
} missing;

static int missing_cmp(const void *a, const void *b) {
  const missing *x = a, *y = b;
  return x->off < y->off ? -1 : x->off > y->off;
}

void vd_tree_finish(vrun *w, uint64_t end_off) {
  vtree *t = w->tree;
  vstate *v = &w->v;
  if (!w->have_process)
    vd_problem(v, SEV_ERROR, K_SPECIAL, end_off, -1,
               "no process node (id 1, name " PROCESS_NAME ")");
  /* ids still pending were never seen: missing parents, listed in file order */
  missing *m = t->n_rec ? malloc(t->n_rec * sizeof *m) : NULL;
  size_t nm = 0;
  for (size_t i = 0; t->pd && i <= t->pd_mask; i++) {
    pend *p = &t->pd[i];
    if (!p->used) continue;
    /* an id whose leaf was over the budget may have come: not known */
    if (seen_test(t, p->key) < 0) {
      t->un_refs += p->n_ctrl + p->n_fw;
      t->un_chains += p->g.n;
      continue;
    }
    if (t->sp_full) t->un_chains += p->g.n;
    for (int fw = 0; fw < 2; fw++) {
      rlist *l = fw ? &p->fw : &p->ctrl;
      uint64_t listed = 0;
      for (uint32_t r = l->head; r && m; r = t->rec[r - 1].next, listed++)
        m[nm++] = (missing){t->rec[r - 1].off, t->rec[r - 1].id, p->key, fw};
      vd_unlisted(v, SEV_ERROR, K_PARENT, (fw ? p->n_fw : p->n_ctrl) - listed);
    }
  }
  if (nm) qsort(m, nm, sizeof *m, missing_cmp);
  for (size_t i = 0; i < nm; i++)
    if (m[i].fw)
      vd_problem(v, SEV_ERROR, K_PARENT, m[i].off, m[i].id, "fw_parent %" PRId64 " does not exist",
                 m[i].key);
    else
      vd_problem(v, SEV_ERROR, K_PARENT, m[i].off, m[i].id,
                 "parent %" PRId64 " (ctrl_deps) does not exist", m[i].key);
  free(m);
}

bool vd_tree_unchecked(const vrun *w, char *buf, size_t size) {
  const vtree *t = w->tree;
  if (!t || !(t->un_ids | t->un_refs | t->un_chains)) return false;
  snprintf(buf, size,
           "not checked (over validate's memory bounds): %" PRIu64 " ids for uniqueness, %" PRIu64
           " references to a parent, %" PRIu64 " ops reaching their thread",
           t->un_ids, t->un_refs, t->un_chains);
  return true;
}
