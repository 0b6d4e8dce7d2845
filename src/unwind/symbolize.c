/* Symbolization of native addresses: module file + ELF virtual address -> function, source
 * file, line (unwind.h, "symbolization").
 *
 * Everything is read from the module FILE on disk, never from live memory, so an address of
 * a library unloaded since capture still resolves. Per module, once (cold):
 *   - the file is opened and mapped (libelf), its build-id checked against the recorded one;
 *   - names: our own sorted symbol table (symtab.c) from .symtab, or .dynsym when stripped;
 *   - lines: libdw on the file's DWARF, or on a separate debug file found by build-id
 *     (/usr/lib/debug/.build-id/xx/rest.debug and the search dirs) or by .gnu_debuglink;
 *     our own sorted table of compile-unit address ranges picks the CU of an address, and
 *     libdw's line table of that CU (parsed on first use, then cached by libdw) gives the line.
 * Per CU, on its first address: a tree of its inlined calls (DW_TAG_inlined_subroutine, nested
 * ones under the range of the call that holds them, each level sorted by address) with their
 * call sites.
 * Per unique address (warm): a binary search in the symbol table, one in the CU table, one in
 * the CU's line table, one per level of inlining in the CU's tree, and a cache insert. Names
 * and file names are pointers into the mapped file and libdw's tables (no copy); only
 * demangled names (once per symbol, once per inlined call) and fallback names are copied into
 * the symbolizer's arena, and so are the frames of inlined calls.
 *
 * One address gives a chain of frames (etr__symbolize_frames), innermost first, as
 * `addr2line -i` prints it: in inlined code, the inlined function (named by the call's
 * DW_AT_abstract_origin, through DW_AT_specification: DW_AT_linkage_name demangled, else
 * DW_AT_name) at the code's own line; then each enclosing inlined function at the call site
 * of the call it holds (DW_AT_call_file/line); last the real function, named by the symbol
 * table, at the call site of the outermost inlined call. etr__symbolize returns that last
 * frame only. Inlined frames of etr/record.h (etr's record-site helpers) are not returned.
 *
 * Fallbacks: dladdr on the live address (when given), then "<basename>+0x<vaddr>", file = the
 * module path (or the source file when only the name was missing), line 0 when unknown.
 * Without libdw (ETR_WITH_LIBDW unset) only the fallbacks exist.
 */
#include "unwind/unwind.h"
#include "unwind/symbolize_search.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef ETR_WITH_LIBDW
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <gelf.h>
#include <libelf.h>

#include "unwind/symtab.h"
#endif

/* ---- process-wide counters ---- */

static _Atomic uint64_t g_hits, g_misses, g_fallbacks;

void etr__symbolize_stats_add(etr_traceback_stats *out) {
  out->symbol_cache_hits += atomic_load_explicit(&g_hits, memory_order_relaxed);
  out->symbol_cache_misses += atomic_load_explicit(&g_misses, memory_order_relaxed);
  out->symbolize_fallbacks += atomic_load_explicit(&g_fallbacks, memory_order_relaxed);
}

/* ---- C++ demangling without a C++ dependency ---- */

typedef char *(*demangle_fn)(const char *, char *, size_t *, int *);
static demangle_fn g_demangle;
static pthread_once_t g_demangle_once = PTHREAD_ONCE_INIT;

static void demangle_init(void) {
  void *f = dlsym(RTLD_DEFAULT, "__cxa_demangle");
  if (f == NULL) {
    /* Not in the process: load libstdc++ privately (kept for the process's lifetime). */
    void *h = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL);
    if (h != NULL) f = dlsym(h, "__cxa_demangle");
  }
  /* Casting a data pointer to a function pointer, as dlsym requires. */
  memcpy(&g_demangle, &f, sizeof f);
}

/* ---- arena for the strings the symbolizer makes ---- */

typedef struct arena_block {
  struct arena_block *next;
  size_t used, cap;
  char data[];
} arena_block;

static char *arena_alloc(arena_block **head, size_t n) {
  arena_block *b = *head;
  if (b == NULL || b->cap - b->used < n) {
    size_t cap = n > 60000 ? n : 60000;
    arena_block *nb = malloc(sizeof *nb + cap);
    if (nb == NULL) return NULL;
    nb->next = b;
    nb->used = 0;
    nb->cap = cap;
    *head = b = nb;
  }
  char *p = b->data + b->used;
  b->used += n;
  return p;
}

/* n bytes aligned for pointers (arrays of etr__symbol). */
static void *arena_alloc_aligned(arena_block **head, size_t n) {
  arena_block *b = *head;
  if (b != NULL) {
    size_t pad = (size_t)(-(uintptr_t)(b->data + b->used)) & (sizeof(void *) - 1);
    b->used = b->used + pad <= b->cap ? b->used + pad : b->cap;
  }
  /* A new block's data is pointer-aligned (it follows a pointer and two size_t). */
  return arena_alloc(head, n);
}

static const char *arena_strdup(arena_block **head, const char *s) {
  size_t n = strlen(s) + 1;
  char *p = arena_alloc(head, n);
  if (p != NULL) memcpy(p, s, n);
  return p;
}

/* ---- modules ---- */

#ifdef ETR_WITH_LIBDW
typedef struct cu_range {
  uint64_t lo, hi; /* [lo, hi) */
  size_t cu;       /* index into module.cus */
} cu_range;

/* One inlined call (a DW_TAG_inlined_subroutine): its call site, in the function or the
 * inlined function that holds it, and the name of the function inlined there. */
typedef struct inl_sub {
  const char *call_file; /* owned by libdw's file table of the CU; NULL when not given */
  int64_t call_line;
  const char *name; /* demangled, made on first use; NULL until then */
  Dwarf_Off die;    /* offset of the DW_TAG_inlined_subroutine */
} inl_sub;

/* One address range of an inlined call, and the inlined calls nested in that range. */
typedef struct inl_range {
  uint64_t lo, hi;        /* [lo, hi) */
  uint32_t sub;           /* index into cu_info.subs */
  uint32_t child, nchild; /* nested calls: cu_info.inl[child, child + nchild), sorted by lo */
} inl_range;

/* Most inlined calls nested at one address that are followed (deeper ones are cut). */
#define INL_MAX_DEPTH 64

typedef struct cu_info {
  Dwarf_Die die;
  inl_range *inl; /* outermost calls first (inl[0, ntop), sorted by lo), then the nested
                   * ones grouped by the range they are in; built on the CU's first address */
  size_t ninl, ntop;
  inl_sub *subs;
  size_t nsubs;
  int inl_state; /* 0 not built, 1 built, -1 could not be built */
} cu_info;
#endif

typedef struct module {
  char *path;       /* as given (the key, with the build-id) */
  const char *base; /* basename of path, for fallback names */
  uint8_t build_id[64];
  uint8_t build_id_len;
  int state; /* 0 not loaded yet, 1 loaded, -1 no usable file */
  uint64_t hash;
#ifdef ETR_WITH_LIBDW
  int fd, dbg_fd;
  Elf *elf, *dbg_elf;
  Dwarf *dwarf;
  etr__symtab symtab;
  const char **demangled; /* per symtab entry, filled on first use; NULL until needed */
  cu_info *cus;
  size_t ncus;
  cu_range *ranges;
  size_t nranges;
#endif
} module;

/* One cached answer, keyed by (module index + 1, vaddr): the outermost frame, and the
 * frames of the calls inlined at vaddr, innermost first (in the arena). */
typedef struct cache_entry {
  uint64_t vaddr;
  uint32_t mod1; /* 0 = empty slot */
  int16_t rc;
  uint16_t ninner;
  etr__symbol sym;
  const etr__symbol *inner;
} cache_entry;

struct etr__symbolizer {
  module **mods;
  size_t nmods, capmods;
  uint32_t *modtab;  /* open addressing: module index + 1, 0 = empty */
  size_t modtab_cap; /* power of two */
  module *last;
  size_t last_index;
  cache_entry *cache;
  size_t cache_cap, cache_n; /* power of two; grown at 1/2 load */
  arena_block *arena;
  char **dirs;
  size_t ndirs;
};

static const char *demangle_copy(etr__symbolizer *s, const char *raw);

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

etr__symbolizer *etr__symbolizer_new(void) {
  etr__symbolizer *s = calloc(1, sizeof *s);
  if (s == NULL) return NULL;
  s->cache_cap = 1024;
  s->cache = calloc(s->cache_cap, sizeof *s->cache);
  s->modtab_cap = 64;
  s->modtab = calloc(s->modtab_cap, sizeof *s->modtab);
  if (s->cache == NULL || s->modtab == NULL) {
    free(s->cache);
    free(s->modtab);
    free(s);
    return NULL;
  }
  return s;
}

static void module_unload(module *m) {
#ifdef ETR_WITH_LIBDW
  if (m->dwarf != NULL) dwarf_end(m->dwarf);
  if (m->dbg_elf != NULL) elf_end(m->dbg_elf);
  if (m->elf != NULL) elf_end(m->elf);
  if (m->dbg_fd >= 0) close(m->dbg_fd);
  if (m->fd >= 0) close(m->fd);
  etr__symtab_free(&m->symtab);
  free(m->demangled);
  for (size_t i = 0; i < m->ncus; i++) {
    free(m->cus[i].inl);
    free(m->cus[i].subs);
  }
  free(m->cus);
  free(m->ranges);
#else
  (void)m;
#endif
}

void etr__symbolizer_free(etr__symbolizer *s) {
  if (s == NULL) return;
  for (size_t i = 0; i < s->nmods; i++) {
    module_unload(s->mods[i]);
    free(s->mods[i]->path);
    free(s->mods[i]);
  }
  free(s->mods);
  free(s->modtab);
  free(s->cache);
  for (size_t i = 0; i < s->ndirs; i++) free(s->dirs[i]);
  free(s->dirs);
  arena_block *b = s->arena;
  while (b != NULL) {
    arena_block *next = b->next;
    free(b);
    b = next;
  }
  free(s);
}

int etr__symbolizer_add_search_dir(etr__symbolizer *s, const char *dir) {
  char **d = realloc(s->dirs, (s->ndirs + 1) * sizeof *d);
  if (d == NULL) return ETR_ENOMEM;
  s->dirs = d;
  d[s->ndirs] = strdup(dir);
  if (d[s->ndirs] == NULL) return ETR_ENOMEM;
  s->ndirs++;
  return 0;
}

static int module_matches(const module *m, const char *path, const uint8_t *bid, size_t bid_len) {
  return m->build_id_len == bid_len && strcmp(m->path, path) == 0 &&
         (bid_len == 0 || memcmp(m->build_id, bid, bid_len) == 0);
}

static int modtab_grow(etr__symbolizer *s) {
  size_t cap = s->modtab_cap * 2;
  uint32_t *t = calloc(cap, sizeof *t);
  if (t == NULL) return -1;
  for (size_t i = 0; i < s->nmods; i++) {
    size_t j = s->mods[i]->hash & (cap - 1);
    while (t[j] != 0) j = (j + 1) & (cap - 1);
    t[j] = (uint32_t)(i + 1);
  }
  free(s->modtab);
  s->modtab = t;
  s->modtab_cap = cap;
  return 0;
}

/* The module entry for (path, build-id), created (not loaded) when new. Sets *index. */
static module *module_get(etr__symbolizer *s, const char *path, const uint8_t *bid, size_t bid_len,
                          size_t *index) {
  if (s->last != NULL && module_matches(s->last, path, bid, bid_len)) {
    *index = s->last_index;
    return s->last;
  }
  size_t plen = strlen(path);
  uint64_t h = hash_bytes(hash_bytes(0xcbf29ce484222325ull, path, plen), bid, bid_len);
  size_t j = h & (s->modtab_cap - 1);
  while (s->modtab[j] != 0) {
    module *m = s->mods[s->modtab[j] - 1];
    if (m->hash == h && module_matches(m, path, bid, bid_len)) {
      s->last = m;
      s->last_index = s->modtab[j] - 1;
      *index = s->last_index;
      return m;
    }
    j = (j + 1) & (s->modtab_cap - 1);
  }
  if ((s->nmods + 1) * 2 > s->modtab_cap) {
    if (modtab_grow(s) != 0) return NULL;
    j = h & (s->modtab_cap - 1);
    while (s->modtab[j] != 0) j = (j + 1) & (s->modtab_cap - 1);
  }
  if (s->nmods == s->capmods) {
    size_t cap = s->capmods ? s->capmods * 2 : 16;
    module **mods = realloc(s->mods, cap * sizeof *mods);
    if (mods == NULL) return NULL;
    s->mods = mods;
    s->capmods = cap;
  }
  module *m = calloc(1, sizeof *m);
  if (m == NULL) return NULL;
  m->path = malloc(plen + 1);
  if (m->path == NULL) {
    free(m);
    return NULL;
  }
  memcpy(m->path, path, plen + 1);
  const char *slash = strrchr(m->path, '/');
  m->base = slash != NULL ? slash + 1 : m->path;
  if (bid_len > sizeof m->build_id) bid_len = sizeof m->build_id;
  if (bid_len != 0) memcpy(m->build_id, bid, bid_len);
  m->build_id_len = (uint8_t)bid_len;
  m->hash = h;
#ifdef ETR_WITH_LIBDW
  m->fd = m->dbg_fd = -1;
#endif
  s->mods[s->nmods] = m;
  s->modtab[j] = (uint32_t)(s->nmods + 1);
  *index = s->nmods;
  s->nmods++;
  s->last = m;
  s->last_index = *index;
  return m;
}

#ifdef ETR_WITH_LIBDW

static pthread_once_t g_elf_once = PTHREAD_ONCE_INIT;
static void elf_init(void) { elf_version(EV_CURRENT); }

/* Open path as an ELF file; when want_len != 0 its build-id must equal want. */
static Elf *open_elf(const char *path, const uint8_t *want, size_t want_len, int *fd_out) {
  /* O_NONBLOCK: a path naming a FIFO must not hang us (only regular files are read). */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return NULL;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return NULL;
  }
  Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
  if (elf == NULL || elf_kind(elf) != ELF_K_ELF) goto fail;
  if (want_len != 0) {
    const void *bid = NULL;
    ssize_t n = dwelf_elf_gnu_build_id(elf, &bid);
    if (n <= 0 || (size_t)n != want_len || memcmp(bid, want, want_len) != 0) goto fail;
  }
  *fd_out = fd;
  return elf;
fail:
  if (elf != NULL) elf_end(elf);
  close(fd);
  return NULL;
}

/* "dir/.build-id/xx/rest<suffix>" */
static void build_id_path(char *buf, size_t cap, const char *dir, const uint8_t *bid, size_t len,
                          const char *suffix) {
  char hex[2 * 64 + 1];
  for (size_t i = 0; i < len; i++) snprintf(hex + 2 * i, 3, "%02x", bid[i]);
  snprintf(buf, cap, "%s/.build-id/%.2s/%s%s", dir, hex, hex + 2, suffix);
}

/* The module's file found elsewhere: by build-id under the search dirs and /usr/lib/debug,
 * then by basename under the search dirs. */
static Elf *find_elsewhere(etr__symbolizer *s, const module *m, int *fd, char *buf) {
  Elf *elf;
  if (m->build_id_len != 0) {
    for (size_t i = 0; i <= s->ndirs; i++) {
      const char *dir = i < s->ndirs ? s->dirs[i] : "/usr/lib/debug";
      build_id_path(buf, PATH_MAX, dir, m->build_id, m->build_id_len, ".debug");
      if ((elf = open_elf(buf, m->build_id, m->build_id_len, fd)) != NULL) return elf;
      if (i == s->ndirs) break;
      build_id_path(buf, PATH_MAX, dir, m->build_id, m->build_id_len, "");
      if ((elf = open_elf(buf, m->build_id, m->build_id_len, fd)) != NULL) return elf;
    }
  }
  for (size_t i = 0; i < s->ndirs && m->base[0] != '\0'; i++) {
    snprintf(buf, PATH_MAX, "%s/%s", s->dirs[i], m->base);
    if ((elf = open_elf(buf, m->build_id, m->build_id_len, fd)) != NULL) return elf;
  }
  return NULL;
}

/* A separate debug file for elf (at file path `path`): by the file's build-id, then by its
 * .gnu_debuglink next to it, in .debug/ beside it and under /usr/lib/debug. */
static Elf *find_debug_file(etr__symbolizer *s, Elf *elf, const char *path, int *fd) {
  char buf[PATH_MAX];
  Elf *dbg;
  const void *bidp = NULL;
  ssize_t n = dwelf_elf_gnu_build_id(elf, &bidp);
  if (n > 0 && (size_t)n <= 64) {
    for (size_t i = 0; i <= s->ndirs; i++) {
      const char *dir = i < s->ndirs ? s->dirs[i] : "/usr/lib/debug";
      build_id_path(buf, PATH_MAX, dir, bidp, (size_t)n, ".debug");
      if ((dbg = open_elf(buf, bidp, (size_t)n, fd)) != NULL) return dbg;
    }
  }
  GElf_Word crc;
  const char *link = dwelf_elf_gnu_debuglink(elf, &crc);
  if (link == NULL || strchr(link, '/') != NULL) return NULL;
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash == NULL) return NULL;
  *slash = '\0';
  static const char *const fmts[] = {"%s/%s", "%s/.debug/%s", "/usr/lib/debug%s/%s"};
  for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++) {
    snprintf(buf, sizeof buf, fmts[i], dir, link);
    if (strcmp(buf, path) == 0) continue;
    /* The debug file has the same build-id as the module when it has one. */
    if ((dbg = open_elf(buf, n > 0 ? bidp : NULL, n > 0 ? (size_t)n : 0, fd)) != NULL) return dbg;
  }
  return NULL;
}

static int range_cmp(const void *a, const void *b) {
  const cu_range *x = a, *y = b;
  if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
  return x->hi < y->hi ? -1 : (x->hi > y->hi);
}

/* Our own table of compile-unit address ranges (.debug_aranges is often absent). 0, or -1
 * when memory ran out. */
static int build_cu_table(module *m) {
  Dwarf_CU *cu = NULL;
  Dwarf_Half version;
  uint8_t unit_type;
  Dwarf_Die cudie, subdie;
  size_t capc = 0, capr = 0;
  while (dwarf_get_units(m->dwarf, cu, &cu, &version, &unit_type, &cudie, &subdie) == 0) {
    if (unit_type != DW_UT_compile && unit_type != DW_UT_skeleton && unit_type != DW_UT_partial)
      continue;
    size_t first = m->nranges;
    ptrdiff_t off = 0;
    Dwarf_Addr base, lo, hi;
    while ((off = dwarf_ranges(&cudie, off, &base, &lo, &hi)) > 0) {
      if (lo == 0 || lo >= hi) continue; /* discarded code (garbage-collected sections) */
      if (m->nranges == capr) {
        capr = capr ? capr * 2 : 64;
        cu_range *r = realloc(m->ranges, capr * sizeof *r);
        if (r == NULL) return -1;
        m->ranges = r;
      }
      m->ranges[m->nranges++] = (cu_range){lo, hi, m->ncus};
    }
    if (m->nranges == first) continue;
    if (m->ncus == capc) {
      capc = capc ? capc * 2 : 16;
      cu_info *c = realloc(m->cus, capc * sizeof *c);
      if (c == NULL) return -1;
      m->cus = c;
    }
    m->cus[m->ncus++] = (cu_info){.die = cudie};
  }
  if (m->nranges > 1) qsort(m->ranges, m->nranges, sizeof *m->ranges, range_cmp);
  return 0;
}

/* Open the DWARF of elf and index its CUs; 1 when it has any, 0 when none, -1 on ENOMEM. */
static int load_dwarf(module *m, Elf *elf) {
  m->dwarf = dwarf_begin_elf(elf, DWARF_C_READ, NULL);
  if (m->dwarf == NULL) return 0;
  if (build_cu_table(m) != 0) return -1;
  if (m->nranges != 0) return 1;
  dwarf_end(m->dwarf);
  m->dwarf = NULL;
  free(m->cus);
  free(m->ranges);
  m->cus = NULL;
  m->ranges = NULL;
  m->ncus = m->nranges = 0;
  return 0;
}

/* Close fd once libelf holds all of elf's data (mapped, or read in now). */
static void release_fd(Elf *elf, int *fd) {
  if (elf != NULL && *fd >= 0 && elf_cntl(elf, ELF_C_FDREAD) == 0) {
    close(*fd);
    *fd = -1;
  }
}

/* Load the module's file, names and line tables. 0 (state set to 1 or -1) or -1 on ENOMEM. */
static int module_load(etr__symbolizer *s, module *m, uintptr_t live_ip) {
  pthread_once(&g_elf_once, elf_init);
  m->state = -1;
  char exe[PATH_MAX], found[PATH_MAX];
  const char *path = m->path;
  if (path[0] == '\0') {
    /* The main program of this process (only meaningful in process). */
    ssize_t n = live_ip != 0 ? readlink("/proc/self/exe", exe, sizeof exe - 1) : -1;
    exe[n > 0 ? n : 0] = '\0';
    path = exe;
  }
  if (path[0] != '\0') m->elf = open_elf(path, m->build_id, m->build_id_len, &m->fd);
  if (m->elf == NULL) {
    m->elf = find_elsewhere(s, m, &m->fd, found);
    path = found;
  }
  if (m->elf == NULL) return 0;

  if (etr__symtab_build(m->elf, &m->symtab) != 0) return -1;
  int rc = load_dwarf(m, m->elf);
  if (rc < 0) return -1;
  if (rc == 0 || m->symtab.n == 0 || m->symtab.from_dynsym) {
    /* Stripped: line info (and the full symbol table) from a separate debug file. */
    m->dbg_elf = find_debug_file(s, m->elf, path, &m->dbg_fd);
    if (m->dbg_elf != NULL) {
      if (rc == 0 && load_dwarf(m, m->dbg_elf) < 0) return -1;
      etr__symtab dt;
      if (etr__symtab_build(m->dbg_elf, &dt) != 0) return -1;
      if (!dt.from_dynsym && dt.n != 0) {
        etr__symtab_free(&m->symtab);
        m->symtab = dt;
      } else {
        etr__symtab_free(&dt);
      }
    }
  }
  m->state = 1;
  /* The files stay mapped; their descriptors are not needed any more (a process may have
   * hundreds of modules). */
  release_fd(m->elf, &m->fd);
  release_fd(m->dbg_elf, &m->dbg_fd);
  return 0;
}

/* ---- inlined calls ---- */

typedef struct inl_tmp {
  uint64_t lo, hi;
  uint32_t sub;
  int64_t parent; /* index of the enclosing call's range in the walk's order, -1 outermost */
  size_t order;   /* position in the walk (ties keep it) */
} inl_tmp;

static int inl_tmp_cmp(const void *a, const void *b) {
  const inl_tmp *x = a, *y = b;
  if (x->parent != y->parent) return x->parent < y->parent ? -1 : 1;
  if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
  return (x->order > y->order) - (x->order < y->order);
}

typedef struct inl_build {
  cu_info *cu;
  inl_tmp *r; /* ranges in walk order */
  size_t n, cap, capsub;
  Dwarf_Files *files;
  size_t nfiles;
} inl_build;

/* The inlined calls under die (a function, a lexical block or an inlined call) whose ranges
 * fall in the enclosing call's ranges r[pfirst, pfirst + pn) (pn 0: die is a function). 0 or
 * -1 on ENOMEM. */
static int collect_inlined(inl_build *b, Dwarf_Die *die, int depth, size_t pfirst, size_t pn) {
  Dwarf_Die child;
  if (depth > 2 * INL_MAX_DEPTH || dwarf_child(die, &child) != 0) return 0;
  do {
    int tag = dwarf_tag(&child);
    if (tag == DW_TAG_lexical_block) {
      if (collect_inlined(b, &child, depth + 1, pfirst, pn) != 0) return -1;
      continue;
    }
    if (tag != DW_TAG_inlined_subroutine) continue;
    cu_info *cu = b->cu;
    Dwarf_Attribute a;
    Dwarf_Word fidx, ln;
    const char *f = NULL;
    if (dwarf_formudata(dwarf_attr(&child, DW_AT_call_file, &a), &fidx) == 0 &&
        dwarf_formudata(dwarf_attr(&child, DW_AT_call_line, &a), &ln) == 0 && fidx < b->nfiles)
      f = dwarf_filesrc(b->files, fidx, NULL, NULL);
    if (f == NULL) ln = 0;
    if (cu->nsubs == b->capsub) {
      b->capsub = b->capsub ? b->capsub * 2 : 64;
      inl_sub *ns = realloc(cu->subs, b->capsub * sizeof *ns);
      if (ns == NULL) return -1;
      cu->subs = ns;
    }
    uint32_t sub = (uint32_t)cu->nsubs;
    cu->subs[cu->nsubs++] = (inl_sub){f, (int64_t)ln, NULL, dwarf_dieoffset(&child)};
    size_t first = b->n;
    ptrdiff_t off = 0;
    Dwarf_Addr base, lo, hi;
    while ((off = dwarf_ranges(&child, off, &base, &lo, &hi)) > 0) {
      if (lo == 0 || lo >= hi) continue;
      int64_t parent = -1;
      if (pn != 0) { /* the enclosing call's range holding this one, else unreachable */
        for (size_t k = pfirst; k < pfirst + pn && parent < 0; k++)
          if (lo >= b->r[k].lo && lo < b->r[k].hi) parent = (int64_t)k;
        if (parent < 0) continue;
      }
      if (b->n == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 64;
        inl_tmp *nr = realloc(b->r, b->cap * sizeof *nr);
        if (nr == NULL) return -1;
        b->r = nr;
      }
      b->r[b->n] = (inl_tmp){lo, hi, sub, parent, b->n};
      b->n++;
    }
    if (b->n > first && collect_inlined(b, &child, depth + 1, first, b->n - first) != 0) return -1;
  } while (dwarf_siblingof(&child, &child) == 0);
  return 0;
}

/* Every function under parent (namespaces and classes are looked into). 0 or -1. */
static int collect_functions(inl_build *b, Dwarf_Die *parent, int depth) {
  Dwarf_Die child;
  if (depth > 32 || dwarf_child(parent, &child) != 0) return 0;
  do {
    int tag = dwarf_tag(&child);
    if (tag == DW_TAG_subprogram) {
      if (dwarf_hasattr(&child, DW_AT_low_pc) || dwarf_hasattr(&child, DW_AT_ranges))
        if (collect_inlined(b, &child, 0, 0, 0) != 0) return -1;
    } else if (tag == DW_TAG_namespace || tag == DW_TAG_class_type ||
               tag == DW_TAG_structure_type || tag == DW_TAG_union_type || tag == DW_TAG_module) {
      if (collect_functions(b, &child, depth + 1) != 0) return -1;
    }
  } while (dwarf_siblingof(&child, &child) == 0);
  return 0;
}

/* Lay the walk's ranges out as a tree in cu->inl: the outermost calls first, then each
 * range's nested calls together, each group sorted by lo. 0 or -1 on ENOMEM. */
static int inl_layout(inl_build *b) {
  cu_info *cu = b->cu;
  size_t n = b->n;
  if (n == 0) return 0;
  if (n > UINT32_MAX) return -1;
  size_t *pos = malloc(n * sizeof *pos);
  cu->inl = calloc(n, sizeof *cu->inl);
  if (pos == NULL || cu->inl == NULL) {
    free(pos);
    return -1;
  }
  inl_tmp *r = b->r;
  qsort(r, n, sizeof *r, inl_tmp_cmp);
  for (size_t i = 0; i < n; i++) pos[r[i].order] = i;
  size_t ntop = 0;
  for (size_t i = 0; i < n; i++) {
    inl_range *e = &cu->inl[i];
    e->lo = r[i].lo;
    e->hi = r[i].hi;
    e->sub = r[i].sub;
    if (r[i].parent < 0) {
      ntop++;
      continue;
    }
    inl_range *p = &cu->inl[pos[r[i].parent]]; /* a parent comes before its ranges */
    if (p->nchild++ == 0) p->child = (uint32_t)i;
  }
  cu->ninl = n;
  cu->ntop = ntop;
  free(pos);
  return 0;
}

/* Build the CU's tree of inlined calls (once: a walk over its functions' DIEs, like the
 * line table's parse). */
static void inl_build_tree(cu_info *cu) {
  inl_build b = {.cu = cu};
  cu->inl_state = -1;
  if (dwarf_getsrcfiles(&cu->die, &b.files, &b.nfiles) != 0) return;
  if (collect_functions(&b, &cu->die, 0) == 0 && inl_layout(&b) == 0) cu->inl_state = 1;
  free(b.r);
  if (cu->inl_state < 0) {
    free(cu->inl);
    free(cu->subs);
    cu->inl = NULL;
    cu->subs = NULL;
    cu->ninl = cu->ntop = cu->nsubs = 0;
  }
}

/* The inlined calls holding vaddr in cu, outermost first, into chain (at most
 * INL_MAX_DEPTH); the count. One binary search per level. */
static size_t inline_chain(cu_info *cu, uint64_t vaddr, inl_sub **chain) {
  if (cu->inl_state == 0) inl_build_tree(cu);
  if (cu->inl_state < 0) return 0;
  size_t first = 0, count = cu->ntop, depth = 0;
  while (count != 0 && depth < INL_MAX_DEPTH) {
    const inl_range *g = cu->inl + first;
    size_t lo = 0, hi = count;
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (g[mid].lo <= vaddr)
        lo = mid + 1;
      else
        hi = mid;
    }
    /* Calls at one level do not overlap; look back one in case of odd ranges. */
    const inl_range *r = NULL;
    for (size_t k = 0; k < 2 && k < lo && r == NULL; k++)
      if (vaddr < g[lo - 1 - k].hi) r = &g[lo - 1 - k];
    if (r == NULL) break;
    chain[depth++] = &cu->subs[r->sub];
    first = r->child;
    count = r->nchild;
  }
  return depth;
}

/* File and line of vaddr from the module's DWARF (the line table's: in inlined code, the
 * inlined code's own line), and the CU it is in; 1 when found. */
static int lookup_line(module *m, uint64_t vaddr, const char **file, int64_t *line,
                       cu_info **cu_out) {
  const cu_range *r = m->ranges;
  size_t lo = 0, hi = m->nranges;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (r[mid].lo <= vaddr)
      lo = mid + 1;
    else
      hi = mid;
  }
  /* Overlapping CU ranges are rare; look back a little. */
  for (size_t k = 0; k < 4 && k < lo; k++) {
    const cu_range *c = &r[lo - 1 - k];
    if (vaddr >= c->hi) continue;
    cu_info *cu = &m->cus[c->cu];
    Dwarf_Line *l = dwarf_getsrc_die(&cu->die, vaddr);
    if (l == NULL) continue;
    int ln = 0;
    const char *f = dwarf_linesrc(l, NULL, NULL);
    if (f == NULL) continue;
    dwarf_lineno(l, &ln);
    *file = f;
    *line = ln;
    *cu_out = cu;
    return 1;
  }
  return 0;
}

/* The name of the function inlined by call sub (its abstract origin's, through
 * DW_AT_specification: the linkage name demangled, else DW_AT_name); "" when it has none.
 * Made once per call. NULL on ENOMEM. */
static const char *inl_name(etr__symbolizer *s, module *m, inl_sub *sub) {
  if (sub->name != NULL) return sub->name;
  Dwarf_Die die;
  Dwarf_Attribute a;
  const char *raw = NULL;
  if (dwarf_offdie(m->dwarf, sub->die, &die) != NULL) {
    raw = dwarf_formstring(dwarf_attr_integrate(&die, DW_AT_linkage_name, &a));
    if (raw == NULL)
      raw = dwarf_formstring(dwarf_attr_integrate(&die, DW_AT_MIPS_linkage_name, &a));
    if (raw == NULL) raw = dwarf_formstring(dwarf_attr_integrate(&die, DW_AT_name, &a));
  }
  if (raw == NULL) raw = "";
  sub->name = (raw[0] == '_' && raw[1] == 'Z') ? demangle_copy(s, raw) : raw;
  return sub->name;
}

/* The demangled name of symbol i (cached per symbol). NULL on ENOMEM. */
static const char *symbol_name(etr__symbolizer *s, module *m, size_t i) {
  const char *raw = etr__symtab_name(&m->symtab, i);
  if (raw[0] != '_' || raw[1] != 'Z') return raw;
  if (m->demangled == NULL) {
    m->demangled = calloc(m->symtab.n, sizeof *m->demangled);
    if (m->demangled == NULL) return NULL;
  }
  if (m->demangled[i] != NULL) return m->demangled[i];
  const char *name = demangle_copy(s, raw);
  if (name == NULL) return NULL;
  m->demangled[i] = name;
  return name;
}

#endif /* ETR_WITH_LIBDW */

/* A copy of raw in the arena, demangled when it is a C++ name. NULL on ENOMEM. */
static const char *demangle_copy(etr__symbolizer *s, const char *raw) {
  if (raw[0] == '_' && raw[1] == 'Z') {
    pthread_once(&g_demangle_once, demangle_init);
    if (g_demangle != NULL) {
      int status = -1;
      char *d = g_demangle(raw, NULL, NULL, &status);
      const char *r = (d != NULL && status == 0) ? arena_strdup(&s->arena, d) : NULL;
      free(d);
      if (r != NULL) return r;
    }
  }
  return arena_strdup(&s->arena, raw);
}

static int cache_grow(etr__symbolizer *s) {
  size_t cap = s->cache_cap * 2;
  cache_entry *t = calloc(cap, sizeof *t);
  if (t == NULL) return -1;
  for (size_t i = 0; i < s->cache_cap; i++) {
    cache_entry *e = &s->cache[i];
    if (e->mod1 == 0) continue;
    size_t j = mix64(e->vaddr ^ ((uint64_t)e->mod1 << 48)) & (cap - 1);
    while (t[j].mod1 != 0) j = (j + 1) & (cap - 1);
    t[j] = *e;
  }
  free(s->cache);
  s->cache = t;
  s->cache_cap = cap;
  return 0;
}

/* Resolve one address of module m: the outermost frame into *out, and the frames of the
 * calls inlined at vaddr, innermost first, into *inner (arena; *ninner of them, 0 without
 * inlining). The result goes into the cache. */
static int resolve(etr__symbolizer *s, module *m, uint64_t vaddr, uintptr_t live_ip,
                   etr__symbol *out, const etr__symbol **inner, size_t *ninner) {
  const char *name = NULL, *file = NULL;
  int64_t line = 0;
  *inner = NULL;
  *ninner = 0;
#ifdef ETR_WITH_LIBDW
  if (m->state == 0 && module_load(s, m, live_ip) != 0) return ETR_ENOMEM;
  if (m->state > 0) {
    ptrdiff_t i = m->symtab.n != 0 ? etr__symtab_find(&m->symtab, vaddr) : -1;
    if (i >= 0 && (name = symbol_name(s, m, (size_t)i)) == NULL) return ETR_ENOMEM;
    cu_info *cu = NULL;
    if (m->nranges != 0 && lookup_line(m, vaddr, &file, &line, &cu)) {
      inl_sub *chain[INL_MAX_DEPTH];
      size_t depth = inline_chain(cu, vaddr, chain);
      if (depth != 0) {
        /* chain[0] is the outermost call. The innermost frame is the inlined code itself
         * (the line table's line); each frame further out is at the call site of the call
         * it holds; the real function last (returned in *out). */
        etr__symbol *fr = arena_alloc_aligned(&s->arena, depth * sizeof *fr);
        if (fr == NULL) return ETR_ENOMEM;
        for (size_t k = 0; k < depth; k++) {
          inl_sub *c = chain[depth - 1 - k];
          const char *n = inl_name(s, m, c);
          if (n == NULL) return ETR_ENOMEM;
          fr[k] = (etr__symbol){n, file, line};
          if (c->call_file != NULL) { /* else the caller keeps the line inside (unknown) */
            file = c->call_file;
            line = c->call_line;
          }
        }
        *inner = fr;
        *ninner = depth;
      }
    }
  }
#endif
  int rc = 0;
  if (name == NULL) {
    rc = 1;
    Dl_info info;
    if (live_ip != 0 && dladdr((void *)live_ip, &info) != 0 && info.dli_sname != NULL &&
        info.dli_saddr != NULL) {
      name = demangle_copy(s, info.dli_sname);
    } else {
      char buf[PATH_MAX + 32];
      snprintf(buf, sizeof buf, "%s+0x%" PRIx64, m->base[0] ? m->base : "[unknown]", vaddr);
      name = arena_strdup(&s->arena, buf);
    }
    if (name == NULL) return ETR_ENOMEM;
  }
  if (file == NULL) {
    file = m->path; /* owned by the module entry, which lives as long as the symbolizer */
    line = 0;
  }
  out->name = name;
  out->filename = file;
  out->line = line;
  return rc;
}

/* The cached answer for (module, vaddr), resolved first when new: rc (0 or 1) or negative;
 * the outermost frame in *out, inlined frames in *inner / *ninner. */
static int lookup(etr__symbolizer *s, const char *path, const uint8_t *build_id,
                  size_t build_id_len, uint64_t vaddr, uintptr_t live_ip, etr__symbol *out,
                  const etr__symbol **inner, size_t *ninner) {
  if (path == NULL) path = "";
  if (build_id == NULL) build_id_len = 0;
  size_t idx;
  module *m = module_get(s, path, build_id, build_id_len, &idx);
  if (m == NULL) return ETR_ENOMEM;
  uint32_t mod1 = (uint32_t)(idx + 1);
  size_t mask = s->cache_cap - 1;
  size_t j = mix64(vaddr ^ ((uint64_t)mod1 << 48)) & mask;
  while (s->cache[j].mod1 != 0) {
    const cache_entry *e = &s->cache[j];
    if (e->vaddr == vaddr && e->mod1 == mod1) {
      atomic_fetch_add_explicit(&g_hits, 1, memory_order_relaxed);
      *out = e->sym;
      *inner = e->inner;
      *ninner = e->ninner;
      return e->rc;
    }
    j = (j + 1) & mask;
  }
  int rc = resolve(s, m, vaddr, live_ip, out, inner, ninner);
  if (rc < 0) return rc;
  atomic_fetch_add_explicit(&g_misses, 1, memory_order_relaxed);
  if (rc == 1) atomic_fetch_add_explicit(&g_fallbacks, 1, memory_order_relaxed);
  if ((s->cache_n + 1) * 2 > s->cache_cap) {
    if (cache_grow(s) != 0) return rc; /* answer anyway, uncached */
    mask = s->cache_cap - 1;
    j = mix64(vaddr ^ ((uint64_t)mod1 << 48)) & mask;
    while (s->cache[j].mod1 != 0) j = (j + 1) & mask;
  }
  s->cache[j] = (cache_entry){vaddr, mod1, (int16_t)rc, (uint16_t)*ninner, *out, *inner};
  s->cache_n++;
  return rc;
}

int etr__symbolize(etr__symbolizer *s, const char *path, const uint8_t *build_id,
                   size_t build_id_len, uint64_t vaddr, uintptr_t live_ip, etr__symbol *out) {
  if (s == NULL || out == NULL) return ETR_EINVAL;
  const etr__symbol *inner;
  size_t ninner;
  return lookup(s, path, build_id, build_id_len, vaddr, live_ip, out, &inner, &ninner);
}

/* A source file that is etr's public header etr/record.h. */
static bool is_etr_record_site(const char *file) {
  static const char suffix[] = "/etr/record.h";
  size_t n = file ? strlen(file) : 0, m = sizeof suffix - 1;
  return n >= m && memcmp(file + n - m, suffix, m) == 0;
}

int etr__symbolize_frames(etr__symbolizer *s, const char *path, const uint8_t *build_id,
                          size_t build_id_len, uint64_t vaddr, uintptr_t live_ip, etr__symbol *out,
                          size_t max) {
  if (s == NULL || out == NULL || max == 0) return ETR_EINVAL;
  etr__symbol outer;
  const etr__symbol *inner;
  size_t ninner;
  int rc = lookup(s, path, build_id, build_id_len, vaddr, live_ip, &outer, &inner, &ninner);
  if (rc < 0) return rc;
  /* etr's own record-site functions (etr/record.h, always inlined into the runtime's code)
   * are the innermost inline frames of every traceback: they say nothing, leave them out. */
  while (ninner != 0 && is_etr_record_site(inner[0].filename)) {
    inner++;
    ninner--;
  }
  size_t n = ninner < max - 1 ? ninner : max - 1; /* the innermost ones, then the real one */
  if (n != 0) memcpy(out, inner, n * sizeof *out);
  out[n] = outer;
  return (int)(n + 1);
}
