/* The module map: which loaded object holds an address, per generation (see cfi.h); and
 * the mapping that holds an address (a thread's stack bounds, etr__maps_find).
 *
 * A map is built from dl_iterate_phdr and published through an atomic pointer; it is
 * immutable once published (a new generation links to the older one), so a capture can use
 * the current map without a lock, and an address captured before a library was closed still
 * resolves through the map of its generation. A map is an array of pointers to module
 * records; a module that is the same as in an earlier generation (same addresses, file,
 * build-id and class) keeps its record, so a reload costs a map header, 8 bytes per module
 * and a record per module that changed. Maps and records of earlier generations are freed only
 * when no trace is open (etr__modules_release_old): until then any of them may be asked for
 * by a writer resolving older events, or held by a capture that began before the reload
 * (captures publish nothing per call that would tell when they are done).
 *
 * Changes are found through dl_iterate_phdr's dlpi_adds/dlpi_subs counters. Reading them
 * takes the loader's lock (about 8 ns uncontended), so captures do not read them on every
 * call: capture.c refreshes on an unwind-rule miss, when an address lies outside every
 * known module, every 64th capture of a thread, and after every capture whose stack holds
 * a frame of a module that may be unloaded (not `permanent`: one closed and another opened
 * at the same addresses changes no address, so nothing else would tell).
 *
 * Which modules are permanent is found from the dynamic sections, read while
 * dl_iterate_phdr holds the loader's lock (so no module goes away meanwhile): the main
 * program and libetr, and the modules they need (DT_NEEDED, matched by DT_SONAME or file
 * name, transitively), which the loader never unloads; and the vDSO. Any other module
 * (opened with dlopen, or preloaded) counts as one that may be unloaded.
 */
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "unwind/cfi.h"

static _Atomic(etr__modmap *) g_current;
static pthread_mutex_t g_build_lock = PTHREAD_MUTEX_INITIALIZER;
static etr__modent *g_records; /* every record kept (next_rec), g_build_lock held */
/* Where the holder of g_build_lock is, for refresh_sync's waiters: a holder that may still
 * need the loader's lock (BUILD_ENTERING: before its dl_iterate_phdr call has run a
 * callback) can be stuck behind a waiter that holds that lock (a host recording inside its
 * own dl_iterate_phdr callback), so waiters give up on it after a while; a holder past it
 * needs nothing a waiter can hold (the loader's lock is exclusive: while the holder's
 * callbacks run, no waiter is inside one), so waiters wait for its map however slow it is
 * (a loaded machine, a sanitizer). */
enum { BUILD_NONE, BUILD_ENTERING, BUILD_PAST_LOADER };
static _Atomic int g_build_phase;

static inline void build_phase(int p) {
  atomic_store_explicit(&g_build_phase, p, memory_order_relaxed);
}

/* Whether this thread holds g_build_lock: a signal handler that lands while it does and
 * captures must not wait for the build it interrupted (refresh_sync). */
static _Thread_local bool t_build_locked __attribute__((tls_model("initial-exec")));

static void build_lock(void) {
  pthread_mutex_lock(&g_build_lock);
  t_build_locked = true;
}

static bool build_trylock(void) {
  if (pthread_mutex_trylock(&g_build_lock) != 0) return false;
  t_build_locked = true;
  return true;
}

static void build_unlock(void) {
  build_phase(BUILD_NONE);
  t_build_locked = false;
  pthread_mutex_unlock(&g_build_lock);
}
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

/* What a module's dynamic section says of its dependencies, copied (the module may be
 * unloaded once dl_iterate_phdr returns): its DT_SONAME, and its DT_NEEDED names one after
 * the other, each ending with a NUL, the list with an empty name. */
typedef struct deps {
  char *soname;
  char *needed;
} deps;

static const etr__modent *find_in(const etr__modmap *map, uintptr_t ip);

/* A mapping of a file at offset 0 (where a module's first segment is), from /proc/self/maps. */
typedef struct fmap {
  uintptr_t lo, hi;
  uint64_t dev, ino;
} fmap;

typedef struct build {
  const etr__modmap *older; /* the map this one follows (records to take identities from) */
  etr__modent *mods;
  deps *deps; /* parallel to mods, in dl_iterate_phdr's order */
  size_t n, cap;
  bool oom;
  counts c;
  fmap *maps; /* sorted by lo (the kernel lists mappings in address order) */
  size_t nmaps;
} build;

static int hexval(char ch) {
  return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

/* One line's head of /proc/self/maps ("lo-hi perms offset major:minor inode ..."), added to
 * b->maps when it maps a file at offset 0. */
static void maps_line(build *b, const char *l, size_t n) {
  uint64_t v[7] = {0}; /* lo, hi, (perms), offset, major, minor, inode */
  size_t f = 0;
  bool any = false;
  for (size_t i = 0; i < n && f < 7; i++) {
    if (f == 2) { /* perms: letters that read as hex digits */
      if (l[i] == ' ') f++;
      continue;
    }
    int d = f == 6 ? (l[i] >= '0' && l[i] <= '9' ? l[i] - '0' : -1) : hexval(l[i]);
    if (d >= 0) {
      v[f] = v[f] * (f == 6 ? 10 : 16) + (uint64_t)d;
      any = true;
    } else if (any) {
      f++;
      any = false;
    }
  }
  if (any) f++;
  if (f < 7 || v[3] != 0 || v[6] == 0) return;
  if (b->nmaps % 64 == 0) {
    fmap *m = realloc(b->maps, (b->nmaps + 64) * sizeof *m);
    if (!m) return; /* (then the modules there have no identity) */
    b->maps = m;
  }
  b->maps[b->nmaps++] =
      (fmap){(uintptr_t)v[0], (uintptr_t)v[1], makedev((unsigned)v[4], (unsigned)v[5]), v[6]};
}

/* The files mapped at offset 0, read while the loader's lock is held (dl_iterate_phdr's
 * callback), so that they are the files of the modules it lists. */
static void read_file_maps(build *b) {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char buf[4096], line[160];
  size_t ln = 0;
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) {
    for (ssize_t i = 0; i < n; i++) {
      if (buf[i] == '\n') {
        maps_line(b, line, ln);
        ln = 0;
      } else if (ln < sizeof line) {
        line[ln++] = buf[i];
      }
    }
  }
  close(fd);
}

/* The identity of the file mapped where module e begins. */
static void set_identity(const build *b, etr__modent *e) {
  size_t lo = 0, hi = b->nmaps;
  while (lo < hi) { /* first mapping with lo > e's */
    size_t mid = lo + (hi - lo) / 2;
    if (b->maps[mid].lo <= e->m.lo)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0 || e->m.lo >= b->maps[lo - 1].hi) return;
  const fmap *f = &b->maps[lo - 1];
  e->m.map_dev = f->dev;
  e->m.ino = f->ino;
  e->m.map_lo = f->lo;
  e->m.map_hi = f->hi;
  /* Device, size and time: the older map's when it has this mapping of this file, else
   * stat'ed now (under the loader's lock: the mapping cannot change meanwhile). The device
   * is stat's, which the symbolizer compares with (maps shows btrfs's another number). */
  const etr__modent *r = b->older ? find_in(b->older, e->m.lo) : NULL;
  if (r && r->m.lo == e->m.lo && r->m.map_dev == f->dev && r->m.ino == f->ino &&
      r->m.map_lo == f->lo && r->m.map_hi == f->hi) {
    e->m.dev = r->m.dev;
    e->m.size = r->m.size;
    e->m.mtime_ns = r->m.mtime_ns;
    return;
  }
  char path[64];
  struct stat st;
  snprintf(path, sizeof path, "/proc/self/map_files/%lx-%lx", (unsigned long)f->lo,
           (unsigned long)f->hi);
  if (stat(path, &st) == 0 && (uint64_t)st.st_ino == f->ino) {
    e->m.dev = (uint64_t)st.st_dev;
    e->m.size = (uint64_t)st.st_size;
    e->m.mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec;
  }
}

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

/* The string at offset off of a string table [tab, tab + size) that lies inside the module
 * [lo, hi); NULL when it does not (a damaged or unusual dynamic section). */
static const char *dyn_str(uintptr_t tab, uint64_t size, uint64_t off, uintptr_t lo, uintptr_t hi) {
  if (tab < lo || tab >= hi || size > hi - tab || off >= size) return NULL;
  const char *s = (const char *)(tab + off);
  return memchr(s, '\0', size - off) ? s : NULL;
}

/* The SONAME and NEEDED names of the module whose dynamic section is at dyn (count entries
 * at most), copied into *d; false when memory runs out. */
static bool read_deps(const etr__modent *e, const ElfW(Dyn) * dyn, size_t count, deps *d) {
  uintptr_t strtab = 0;
  uint64_t strsz = 0, soname = UINT64_MAX;
  size_t n_needed = 0;
  for (size_t i = 0; i < count && dyn[i].d_tag != DT_NULL; i++) {
    if (dyn[i].d_tag == DT_STRTAB) strtab = (uintptr_t)dyn[i].d_un.d_ptr;
    if (dyn[i].d_tag == DT_STRSZ) strsz = dyn[i].d_un.d_val;
    if (dyn[i].d_tag == DT_SONAME) soname = dyn[i].d_un.d_val;
    if (dyn[i].d_tag == DT_NEEDED) n_needed++;
  }
  /* The loader relocates DT_STRTAB in place where the section is writable (x86_64), not in
   * a read-only one (the vDSO's): an address outside the module is taken as unrelocated. */
  if (strtab && (strtab < e->m.lo || strtab >= e->m.hi)) strtab += e->m.bias;
  if (!strtab) return true;
  const char *so = soname == UINT64_MAX ? NULL : dyn_str(strtab, strsz, soname, e->m.lo, e->m.hi);
  if (so && !(d->soname = strdup(so))) return false;
  size_t len = 1;
  for (size_t i = 0; i < count && dyn[i].d_tag != DT_NULL; i++) {
    const char *nd = dyn[i].d_tag == DT_NEEDED
                         ? dyn_str(strtab, strsz, dyn[i].d_un.d_val, e->m.lo, e->m.hi)
                         : NULL;
    if (nd) len += strlen(nd) + 1;
  }
  if (n_needed == 0 || !(d->needed = malloc(len))) return n_needed == 0;
  char *o = d->needed;
  for (size_t i = 0; i < count && dyn[i].d_tag != DT_NULL; i++) {
    const char *nd = dyn[i].d_tag == DT_NEEDED
                         ? dyn_str(strtab, strsz, dyn[i].d_un.d_val, e->m.lo, e->m.hi)
                         : NULL;
    if (!nd) continue;
    size_t k = strlen(nd) + 1;
    memcpy(o, nd, k);
    o += k;
  }
  *o = '\0';
  return true;
}

static int build_cb(struct dl_phdr_info *info, size_t size, void *data) {
  build *b = data;
  if (b->n == 0) build_phase(BUILD_PAST_LOADER);
  if (b->oom) return 1;
  if (b->n == 0 && !b->maps) read_file_maps(b);
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
  const ElfW(Dyn) *dyn = NULL;
  size_t dyn_count = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t a = info->dlpi_addr + ph->p_vaddr, z = a + ph->p_memsz;
    if (ph->p_type == PT_DYNAMIC) {
      dyn = (const ElfW(Dyn) *)a;
      dyn_count = ph->p_memsz / sizeof *dyn;
    } else if (ph->p_type == PT_LOAD) {
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
  set_identity(b, &e);
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
    deps *d = m ? realloc(b->deps, cap * sizeof *d) : NULL;
    if (m) b->mods = m;
    if (!d) {
      free((void *)e.m.path);
      b->oom = true;
      return 1;
    }
    b->deps = d;
    b->cap = cap;
  }
  deps *d = &b->deps[b->n];
  d->soname = d->needed = NULL;
  b->mods[b->n++] = e;
  if (dyn && !read_deps(&e, dyn, dyn_count, d)) {
    b->oom = true;
    return 1;
  }
  return 0;
}

/* Whether module i of b answers to the DT_NEEDED name `need`: its SONAME, else its file
 * name (a path when the name holds a '/'). */
static bool answers_to(const build *b, size_t i, const char *need) {
  if (b->deps[i].soname) return strcmp(b->deps[i].soname, need) == 0;
  const char *path = b->mods[i].m.path;
  if (strchr(need, '/')) return strcmp(path, need) == 0;
  const char *base = strrchr(path, '/');
  return strcmp(base ? base + 1 : path, need) == 0;
}

/* Mark the roots permanent (the main program, libetr, the vDSO) and what they need,
 * transitively (b in dl_iterate_phdr's order: the main program first). A worklist, not
 * recursion: this runs on a recording thread's stack. */
static void classify(build *b) {
  size_t *work = malloc((b->n ? b->n : 1) * sizeof *work), top = 0;
  if (!work) return; /* (every module then counts as one that may be unloaded) */
  uintptr_t self = (uintptr_t)&etr__modmap_refresh;
  for (size_t i = 0; i < b->n; i++) {
    const etr__modent *e = &b->mods[i];
    const char *so = b->deps[i].soname;
    bool vdso = so && (!strcmp(so, "linux-vdso.so.1") || !strcmp(so, "linux-gate.so.1"));
    if (i == 0 || vdso || (self >= e->m.lo && self < e->m.hi)) {
      b->mods[i].permanent = true;
      work[top++] = i;
    }
  }
  while (top) {
    size_t i = work[--top];
    for (const char *nd = b->deps[i].needed; nd && *nd; nd += strlen(nd) + 1)
      for (size_t j = 0; j < b->n; j++)
        if (answers_to(b, j, nd)) {
          if (!b->mods[j].permanent) {
            b->mods[j].permanent = true;
            work[top++] = j;
          }
          break;
        }
  }
  free(work);
}

static int cmp_lo(const void *a, const void *b) {
  const etr__modent *x = a, *y = b;
  return x->m.lo < y->m.lo ? -1 : x->m.lo > y->m.lo;
}

static void free_deps(build *b) {
  for (size_t i = 0; i < b->n && b->deps; i++) {
    free(b->deps[i].soname);
    free(b->deps[i].needed);
  }
  free(b->deps);
  b->deps = NULL;
}

static void free_build(build *b) {
  for (size_t i = 0; i < b->n; i++) free((void *)b->mods[i].m.path);
  free(b->mods);
  free_deps(b);
  free(b->maps);
}

/* Whether record r describes module e exactly (the same object still loaded). */
static bool same_module(const etr__modent *r, const etr__modent *e) {
  return r->m.lo == e->m.lo && r->m.hi == e->m.hi && r->m.bias == e->m.bias && r->xlo == e->xlo &&
         r->xhi == e->xhi && r->eh_frame_hdr == e->eh_frame_hdr && r->permanent == e->permanent &&
         r->m.build_id_len == e->m.build_id_len && r->m.dev == e->m.dev &&
         r->m.map_dev == e->m.map_dev && r->m.ino == e->m.ino && r->m.size == e->m.size &&
         r->m.mtime_ns == e->m.mtime_ns && r->m.map_lo == e->m.map_lo &&
         r->m.map_hi == e->m.map_hi &&
         memcmp(r->m.build_id, e->m.build_id, e->m.build_id_len) == 0 &&
         strcmp(r->m.path, e->m.path) == 0;
}

/* The record for module e (its path strdup'ed, freed here): older's when older holds the
 * same module, else any kept record of the same module, else a new one (path stored after
 * it) added to g_records. NULL on ENOMEM. A plugin closed and opened again unchanged thus
 * keeps its record even when a map was built while it was closed: the trace writer keys
 * its traceback tables by record (tbtable.c), so such a reload adds nothing there either. */
static const etr__modent *record_for(const etr__modmap *older, etr__modent *e) {
  const etr__modent *r = older ? find_in(older, e->m.lo) : NULL;
  if (!r || r->m.lo != e->m.lo || !same_module(r, e)) {
    r = g_records; /* (only modules new since older are looked for here) */
    while (r && !(r->m.lo == e->m.lo && same_module(r, e))) r = r->next_rec;
  }
  if (r) {
    free((void *)e->m.path);
    return r;
  }
  size_t len = strlen(e->m.path) + 1;
  etr__modent *n = malloc(sizeof *n + len);
  if (n) {
    *n = *e;
    n->m.path = memcpy((char *)(n + 1), e->m.path, len);
    n->next_rec = g_records;
    g_records = n;
  }
  free((void *)e->m.path);
  return n;
}

/* Build a new generation and publish it. Caller holds g_build_lock. */
static etr__modmap *build_map(etr__modmap *older) {
  if (!g_exe_path[0]) {
    ssize_t n = readlink("/proc/self/exe", g_exe_path, sizeof g_exe_path - 1);
    g_exe_path[n > 0 ? n : 0] = '\0';
  }
  build b = {older, NULL, NULL, 0, 0, false, {0, 0}, NULL, 0};
  build_phase(BUILD_ENTERING);
  dl_iterate_phdr(build_cb, &b);
  build_phase(BUILD_PAST_LOADER);
  etr__modmap *m = b.oom ? NULL : calloc(1, sizeof *m + b.n * sizeof *m->mods);
  if (!m) {
    free_build(&b);
    return NULL;
  }
  classify(&b); /* (in dl_iterate_phdr's order: the main program first) */
  free_deps(&b);
  free(b.maps);
  qsort(b.mods, b.n, sizeof *b.mods, cmp_lo);
  bool oom = false;
  for (size_t i = 0; i < b.n; i++) {
    if (oom) { /* (the records made so far stay in g_records, freed by release_old) */
      free((void *)b.mods[i].m.path);
      continue;
    }
    m->mods[i] = record_for(older, &b.mods[i]);
    oom = m->mods[i] == NULL;
  }
  free(b.mods);
  if (oom) {
    free(m);
    return NULL;
  }
  m->gen = older ? older->gen + 1 : 1;
  m->adds = b.c.adds;
  m->subs = b.c.subs;
  m->n = b.n;
  m->older = older;
  atomic_store_explicit(&g_current, m, memory_order_release);
  return m;
}

const etr__modmap *etr__modmap_current(void) {
  etr__modmap *m = atomic_load_explicit(&g_current, memory_order_acquire);
  if (m) return m;
  build_lock();
  m = atomic_load_explicit(&g_current, memory_order_acquire);
  if (!m) m = build_map(NULL);
  build_unlock();
  return m;
}

const etr__modmap *etr__modmap_refresh(void) {
  etr__modmap *m = atomic_load_explicit(&g_current, memory_order_acquire);
  if (!m) return etr__modmap_current();
  counts c = read_counts();
  if (c.adds == m->adds && c.subs == m->subs) return m;
  if (!build_trylock()) return m;
  m = atomic_load_explicit(&g_current, memory_order_acquire);
  if (c.adds != m->adds || c.subs != m->subs) {
    etr__modmap *n = build_map(m);
    if (n) m = n;
  }
  build_unlock();
  return m;
}

const etr__modmap *etr__modmap_refresh_sync(void) {
  etr__modmap *m = atomic_load_explicit(&g_current, memory_order_acquire);
  if (!m) return etr__modmap_current();
  counts c = read_counts();
  if (c.adds == m->adds && c.subs == m->subs) return m;
  if (t_build_locked) return m; /* (a handler that interrupted this thread's build) */
  /* Another thread may be building: wait for it, but never block on our lock. The
   * caller may hold the loader's lock (a host that records inside its own dl_iterate_phdr
   * callback), which that builder needs: a builder that has not got past the loader for
   * 2 ms is given up on, and the older map returned. One past it is waited for (g_build_phase):
   * giving up on a slow builder left captures through a library just opened cut at its
   * first frame, about 1 in 100 runs of a test under TSan on a loaded machine. */
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    if (build_trylock()) {
      m = atomic_load_explicit(&g_current, memory_order_acquire);
      build_phase(BUILD_ENTERING);
      c = read_counts(); /* (the other thread may have built it meanwhile) */
      if (c.adds != m->adds || c.subs != m->subs) {
        etr__modmap *n = build_map(m);
        if (n) m = n;
      }
      build_unlock();
      return m;
    }
    m = atomic_load_explicit(&g_current, memory_order_acquire);
    if (m->adds == c.adds && m->subs == c.subs) return m; /* (built meanwhile) */
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (atomic_load_explicit(&g_build_phase, memory_order_relaxed) != BUILD_ENTERING)
      t0 = t; /* (the builder needs nothing we may hold: its time does not count) */
    else if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) > 2000000L)
      return m;
    sched_yield();
  }
}

static const etr__modent *find_in(const etr__modmap *map, uintptr_t ip) {
  size_t lo = 0, hi = map->n;
  while (lo < hi) { /* first module with lo > ip */
    size_t mid = lo + (hi - lo) / 2;
    if (map->mods[mid]->m.lo <= ip)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0) return NULL;
  const etr__modent *e = map->mods[lo - 1];
  return ip < e->m.hi ? e : NULL;
}

const etr__modent *etr__modmap_exec(const etr__modmap *map, uintptr_t ip) {
  if (!map) return NULL;
  const etr__modent *e = find_in(map, ip);
  return e && ip >= e->xlo && ip < e->xhi ? e : NULL;
}

const etr__modmap *etr__modules_map(uint64_t gen) {
  const etr__modmap *m = etr__modmap_current();
  if (!m || m->gen == gen) return m;
  /* An older generation: the chain is immutable, the lock only orders us after a
   * concurrent build (as the interface promises). */
  build_lock();
  m = atomic_load_explicit(&g_current, memory_order_acquire);
  while (m && m->gen > gen) m = m->older;
  build_unlock();
  return m && m->gen == gen ? m : NULL;
}

const etr__module *etr__modules_in(const etr__modmap *map, uintptr_t ip) {
  const etr__modent *e = map ? find_in(map, ip) : NULL;
  return e ? &e->m : NULL;
}

const etr__module *etr__modules_find(uint64_t gen, uintptr_t ip) {
  return etr__modules_in(etr__modules_map(gen), ip);
}

void etr__modules_release_old(void) {
  if (!build_trylock()) return;
  etr__modmap *cur = atomic_load_explicit(&g_current, memory_order_acquire);
  if (cur) {
    for (etr__modmap *m = cur->older; m;) {
      etr__modmap *o = m->older;
      free(m);
      m = o;
    }
    cur->older = NULL;
    etr__modent *keep = NULL;
    for (etr__modent *r = g_records; r;) {
      etr__modent *next = r->next_rec;
      if (find_in(cur, r->m.lo) == r) {
        r->next_rec = keep;
        keep = r;
      } else {
        free(r);
      }
      r = next;
    }
    g_records = keep;
  }
  build_unlock();
}

void etr__modmap_mem_get(etr__modmap_mem *out) {
  memset(out, 0, sizeof *out);
  build_lock();
  const etr__modmap *cur = atomic_load_explicit(&g_current, memory_order_acquire);
  out->current_n = cur ? cur->n : 0;
  for (const etr__modmap *m = cur; m; m = m->older) {
    out->maps++;
    out->bytes += sizeof *m + m->n * sizeof *m->mods;
  }
  for (const etr__modent *r = g_records; r; r = r->next_rec) {
    out->records++;
    out->bytes += sizeof *r + strlen(r->m.path) + 1;
  }
  build_unlock();
}

uint64_t etr__modules_generation(void) {
  const etr__modmap *m = etr__modmap_refresh();
  return m ? m->gen : 0;
}

/* The mapping that holds addr and its permissions ("rwx", '-' where not) from
 * /proc/self/maps read with plain system calls (async-signal safe, no allocation). */
static bool maps_find(uintptr_t addr, uintptr_t *lo, uintptr_t *hi, char perms[3]) {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[4096];
  uintptr_t a = 0, b = 0;
  int field = 0; /* 0: start, 1: end, 2: perms (3 chars: r, w, x), 3: rest of the line */
  int pi = 0;    /* (the perms character at hand) */
  char pm[3] = {'-', '-', '-'};
  bool found = false;
  ssize_t n;
  while (!found && (n = read(fd, buf, sizeof buf)) > 0) {
    for (ssize_t i = 0; i < n; i++) {
      char ch = buf[i];
      if (ch == '\n') {
        if (addr >= a && addr < b) {
          found = true;
          break;
        }
        a = b = 0;
        field = pi = 0;
        continue;
      }
      if (field <= 1) {
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (d >= 0) {
          if (field == 0)
            a = a * 16 + (uintptr_t)d;
          else
            b = b * 16 + (uintptr_t)d;
        } else {
          field++;
        }
      } else if (field == 2) {
        pm[pi] = ch;
        if (++pi == 3) field = 3;
      }
    }
  }
  close(fd);
  if (found) {
    *lo = a;
    *hi = b;
    memcpy(perms, pm, 3);
  }
  return found;
}

bool etr__maps_find(uintptr_t addr, uintptr_t *lo, uintptr_t *hi) {
  char perms[3];
  return maps_find(addr, lo, hi, perms) && perms[0] == 'r';
}

bool etr__maps_find_any(uintptr_t addr, uintptr_t *lo, uintptr_t *hi, bool *exec) {
  char perms[3];
  if (!maps_find(addr, lo, hi, perms)) return false;
  *exec = perms[2] == 'x';
  return true;
}
