/* The module map: which loaded object holds an address, per generation (see cfi.h).
 *
 * A map is built from dl_iterate_phdr and published through an atomic pointer; it is
 * immutable once published and never freed (a new generation links to the older one), so
 * a capture can use the current map without a lock, and an address captured before a
 * library was closed still resolves through the map of its generation. Memory grows only
 * when the set of loaded objects changes.
 *
 * Changes are found through dl_iterate_phdr's dlpi_adds/dlpi_subs counters. Reading them
 * takes the loader's lock (about 8 ns uncontended), so captures do not read them on every
 * call: capture.c refreshes on an unwind-rule miss, when an address lies outside every
 * known module, and every 64th capture of a thread.
 */
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unwind/cfi.h"

static _Atomic(etr__modmap *) g_current;
static pthread_mutex_t g_build_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_exe_path[4096];

typedef struct counts {
  unsigned long long adds, subs;
} counts;

static int counts_cb(struct dl_phdr_info *info, size_t size, void *data) {
  counts *c = data;
  if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
    c->adds = info->dlpi_adds;
    c->subs = info->dlpi_subs;
  }
  return 1; /* the counters are the same in every entry: stop after the first */
}

static counts read_counts(void) {
  counts c = {0, 0};
  dl_iterate_phdr(counts_cb, &c);
  return c;
}

typedef struct build {
  etr__modent *mods;
  size_t n, cap;
  bool oom;
  counts c;
} build;

static void read_build_id(etr__module *m, uintptr_t bias, const ElfW(Phdr) * ph) {
  const uint8_t *p = (const uint8_t *)(bias + ph->p_vaddr);
  const uint8_t *end = p + ph->p_memsz;
  size_t align = ph->p_align > 4 ? 8 : 4;
  while ((size_t)(end - p) >= sizeof(ElfW(Nhdr))) {
    ElfW(Nhdr) nh;
    memcpy(&nh, p, sizeof nh);
    const uint8_t *name = p + sizeof nh;
    size_t namesz = (nh.n_namesz + align - 1) & ~(align - 1);
    const uint8_t *desc = name + namesz;
    size_t descsz = (nh.n_descsz + align - 1) & ~(align - 1);
    if (desc > end || (size_t)(end - desc) < nh.n_descsz) return;
    if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
      size_t n = nh.n_descsz < sizeof m->build_id ? nh.n_descsz : sizeof m->build_id;
      memcpy(m->build_id, desc, n);
      m->build_id_len = (uint8_t)n;
      return;
    }
    if ((size_t)(end - desc) < descsz) return;
    p = desc + descsz;
  }
}

static int build_cb(struct dl_phdr_info *info, size_t size, void *data) {
  build *b = data;
  if (b->oom) return 1;
  if (b->n == 0 && b->c.adds == 0 &&
      size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
    b->c.adds = info->dlpi_adds;
    b->c.subs = info->dlpi_subs;
  }
  etr__modent e;
  memset(&e, 0, sizeof e);
  e.m.bias = info->dlpi_addr;
  e.m.lo = UINTPTR_MAX;
  e.xlo = UINTPTR_MAX;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t a = info->dlpi_addr + ph->p_vaddr, z = a + ph->p_memsz;
    if (ph->p_type == PT_LOAD) {
      if (a < e.m.lo) e.m.lo = a;
      if (z > e.m.hi) e.m.hi = z;
      if (ph->p_flags & PF_X) {
        if (a < e.xlo) e.xlo = a;
        if (z > e.xhi) e.xhi = z;
      }
    } else if (ph->p_type == PT_GNU_EH_FRAME) {
      e.eh_frame_hdr = a;
    }
  }
  if (e.m.lo >= e.m.hi) return 0; /* nothing loaded */
  if (e.xlo >= e.xhi) e.xlo = e.xhi = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    if (info->dlpi_phdr[i].p_type == PT_NOTE && e.m.build_id_len == 0)
      read_build_id(&e.m, info->dlpi_addr, &info->dlpi_phdr[i]);
  }
  const char *name = info->dlpi_name ? info->dlpi_name : "";
  if (name[0] == '\0' && b->n == 0) name = g_exe_path; /* the main program comes first */
  e.m.path = strdup(name);
  if (!e.m.path) {
    b->oom = true;
    return 1;
  }
  if (b->n == b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 64;
    etr__modent *m = realloc(b->mods, cap * sizeof *m);
    if (!m) {
      free((void *)e.m.path);
      b->oom = true;
      return 1;
    }
    b->mods = m;
    b->cap = cap;
  }
  b->mods[b->n++] = e;
  return 0;
}

static int cmp_lo(const void *a, const void *b) {
  const etr__modent *x = a, *y = b;
  return x->m.lo < y->m.lo ? -1 : x->m.lo > y->m.lo;
}

static void free_build(build *b) {
  for (size_t i = 0; i < b->n; i++) free((void *)b->mods[i].m.path);
  free(b->mods);
}

/* Build a new generation and publish it. Caller holds g_build_lock. */
static etr__modmap *build_map(etr__modmap *older) {
  if (!g_exe_path[0]) {
    ssize_t n = readlink("/proc/self/exe", g_exe_path, sizeof g_exe_path - 1);
    g_exe_path[n > 0 ? n : 0] = '\0';
  }
  build b = {NULL, 0, 0, false, {0, 0}};
  dl_iterate_phdr(build_cb, &b);
  etr__modmap *m = b.oom ? NULL : calloc(1, sizeof *m);
  if (!m) {
    free_build(&b);
    return NULL;
  }
  qsort(b.mods, b.n, sizeof *b.mods, cmp_lo);
  m->gen = older ? older->gen + 1 : 1;
  m->adds = b.c.adds;
  m->subs = b.c.subs;
  m->n = b.n;
  m->mods = b.mods;
  m->older = older;
  atomic_store_explicit(&g_current, m, memory_order_release);
  return m;
}

const etr__modmap *etr__modmap_current(void) {
  etr__modmap *m = atomic_load_explicit(&g_current, memory_order_acquire);
  if (m) return m;
  pthread_mutex_lock(&g_build_lock);
  m = atomic_load_explicit(&g_current, memory_order_acquire);
  if (!m) m = build_map(NULL);
  pthread_mutex_unlock(&g_build_lock);
  return m;
}

const etr__modmap *etr__modmap_refresh(void) {
  etr__modmap *m = atomic_load_explicit(&g_current, memory_order_acquire);
  if (!m) return etr__modmap_current();
  counts c = read_counts();
  if (c.adds == m->adds && c.subs == m->subs) return m;
  if (pthread_mutex_trylock(&g_build_lock) != 0) return m;
  m = atomic_load_explicit(&g_current, memory_order_acquire);
  if (c.adds != m->adds || c.subs != m->subs) {
    etr__modmap *n = build_map(m);
    if (n) m = n;
  }
  pthread_mutex_unlock(&g_build_lock);
  return m;
}

static const etr__modent *find_in(const etr__modmap *map, uintptr_t ip) {
  size_t lo = 0, hi = map->n;
  while (lo < hi) { /* first module with lo > ip */
    size_t mid = lo + (hi - lo) / 2;
    if (map->mods[mid].m.lo <= ip)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0) return NULL;
  const etr__modent *e = &map->mods[lo - 1];
  return ip < e->m.hi ? e : NULL;
}

const etr__modent *etr__modmap_exec(const etr__modmap *map, uintptr_t ip) {
  if (!map) return NULL;
  const etr__modent *e = find_in(map, ip);
  return e && ip >= e->xlo && ip < e->xhi ? e : NULL;
}

const etr__module *etr__modules_find(uint64_t gen, uintptr_t ip) {
  const etr__modmap *m = etr__modmap_current();
  if (!m) return NULL;
  if (m->gen != gen) {
    /* An older generation: the chain is immutable, the lock only orders us after a
     * concurrent build (as the interface promises). */
    pthread_mutex_lock(&g_build_lock);
    m = atomic_load_explicit(&g_current, memory_order_acquire);
    while (m && m->gen > gen) m = m->older;
    pthread_mutex_unlock(&g_build_lock);
    if (!m || m->gen != gen) return NULL;
  }
  const etr__modent *e = find_in(m, ip);
  return e ? &e->m : NULL;
}

uint64_t etr__modules_generation(void) {
  const etr__modmap *m = etr__modmap_refresh();
  return m ? m->gen : 0;
}
