/* Symbolization of native addresses: module file + ELF virtual address -> function, source
 * file, line (unwind.h, "symbolization"). This file is the symbolizer's memory: its table of
 * modules, the cache of answers per (module, address), the arena of the strings it makes,
 * demangling and the fallbacks; what a module's file says of an address is read by
 * symbolize_file.c (libelf, libdw).
 *
 * Per unique address (warm): a look-up in the module table (the last module used is tried
 * first), one in the answer cache, and on a miss the file side's binary searches (symbol
 * table, CU table, line table, inlined calls), the answer's strings interned in the arena
 * (one copy per distinct string) and a cache insert. The answers live as long as the
 * symbolizer, whatever happens to the file they came from.
 *
 * Files: a module (a recorded path and build-id, and in process the identity of the file
 * that was mapped: only that file is read for it, at its path or through
 * /proc/self/map_files, so a build replaced at the same path never lends its names) is
 * located once (again at a new address while it is still mapped, when it was not found)
 * (symbolize_file.c: which file on disk, and which debug file, by path and identity); modules whose
 * files are the same (links to one library, or absent paths whose build-id finds one debug file)
 * share one loaded file. At most max_loaded files (ETR__SYMBOLIZER_MAX_LOADED by default) are kept
 * loaded; loading another closes the least recently used, which is loaded again if a new
 * address of it comes (cached answers need no file). So memory for files does not grow with
 * the number of modules: it is at most max_loaded times the largest loaded file (libdw's
 * index of its DWARF, our tables, the mappings).
 *
 * One address gives a chain of frames (etr__symbolize_frames), innermost first, as
 * `addr2line -i` prints it: in inlined code, the inlined function at the code's own line;
 * then each enclosing inlined function at the call site of the call it holds
 * (DW_AT_call_file/line); last the real function, named by the symbol table, at the call
 * site of the outermost inlined call. etr__symbolize returns that last frame only. Inlined
 * frames of etr/record.h (etr's record-site helpers) are not returned.
 *
 * Fallbacks: dladdr on the live address (when given), then "<basename>+0x<vaddr>", file = the
 * module path (or the source file when only the name was missing), line 0 when unknown.
 * Without libdw (ETR_WITH_LIBDW unset) only the fallbacks exist.
 */
#include "unwind/arena.h"
#include "unwind/symbolize_file.h"
#include "unwind/symbolize_search.h"
#include "unwind/unwind.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- process-wide counters ---- */

static _Atomic uint64_t g_hits, g_misses, g_fallbacks;

void etr__symbolize_stats_add(etr_traceback_stats *out) {
  out->symbol_cache_hits += atomic_load_explicit(&g_hits, memory_order_relaxed);
  out->symbol_cache_misses += atomic_load_explicit(&g_misses, memory_order_relaxed);
  out->symbolize_fallbacks += atomic_load_explicit(&g_fallbacks, memory_order_relaxed);
}

/* ---- the symbolizer: modules, cached answers, strings ---- */

/* A file on disk (and its debug file) that one or more modules resolve to. */
typedef struct sfile {
  etr__symfile_loc loc; /* where, and the identity key */
  uint64_t hash;        /* of loc.key and loc.dbg_key */
  int state;            /* 0 not loaded (yet, or closed to make room), 1 loaded, -1 unusable */
  etr__symfile *mf;     /* when state is 1 */
  struct sfile *newer, *older; /* the list of loaded files, most recently used first */
  struct pstr *pstrs;          /* while loaded: the file's strings given so far -> copies */
  size_t pstrs_cap, pstrs_n;   /* power of two (or 0); grown at 1/2 load */
} sfile;

/* A string of a loaded file (its address) and its copy in the arena. */
typedef struct pstr {
  const char *raw, *str; /* raw NULL = empty slot */
} pstr;

typedef struct module {
  char *path;       /* as given (the key, with the build-id) */
  const char *base; /* basename of path, for fallback names */
  uint8_t build_id[64];
  uint8_t build_id_len;
  bool no_build_id; /* recorded without one: a file that has one is another build */
  int state;        /* 0 not located yet, 1 file located, -1 no usable file */
  uint64_t hash;
  sfile *file; /* when state is 1 (shared, owned by the symbolizer) */
  /* The file that was mapped (etr__module: in process; all 0 when not known, as for `etr
   * symbolize`): part of the key, and what the file found must be. */
  uint64_t dev, ino, size, mtime_ns;
  uintptr_t map_lo, map_hi;
} module;

/* A string of the arena, in the table that keeps one copy of each. */
typedef struct istr {
  uint64_t hash;
  const char *s; /* NULL = empty slot */
} istr;

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
  etr__arena_block *arena;
  istr *strs;
  size_t strs_cap, strs_n; /* power of two (or 0); grown at 1/2 load */
  sfile **files;
  size_t nfiles, capfiles;
  uint32_t *filetab;  /* open addressing: file index + 1, 0 = empty */
  size_t filetab_cap; /* power of two */
  sfile *mru, *lru;   /* loaded files, most and least recently used */
  size_t nloaded, max_loaded, loads;
  char **dirs;
  size_t ndirs;
};

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
  s->filetab_cap = 64;
  s->filetab = calloc(s->filetab_cap, sizeof *s->filetab);
  s->max_loaded = ETR__SYMBOLIZER_MAX_LOADED;
  if (s->cache == NULL || s->modtab == NULL || s->filetab == NULL) {
    free(s->cache);
    free(s->modtab);
    free(s->filetab);
    free(s);
    return NULL;
  }
  return s;
}

void etr__symbolizer_free(etr__symbolizer *s) {
  if (s == NULL) return;
  for (size_t i = 0; i < s->nmods; i++) {
    free(s->mods[i]->path);
    free(s->mods[i]);
  }
  for (size_t i = 0; i < s->nfiles; i++) {
    etr__symfile_close(s->files[i]->mf);
    free(s->files[i]->pstrs);
    etr__symfile_loc_free(&s->files[i]->loc);
    free(s->files[i]);
  }
  free(s->files);
  free(s->filetab);
  free(s->strs);
  free(s->mods);
  free(s->modtab);
  free(s->cache);
  for (size_t i = 0; i < s->ndirs; i++) free(s->dirs[i]);
  free(s->dirs);
  etr__arena_free(&s->arena);
  free(s);
}

/* ---- kept from one trace to the next ----
 *
 * Loading a module's file (libdw's index of its DWARF) is most of what symbolizing costs
 * (65 ms for a small program's modules), paid at every close when each trace had its own
 * symbolizer. The next trace's writer takes the last one's answers; its files are closed
 * when it is handed back (no descriptor or libdw memory stays behind a closed trace), and
 * one holding more than KEEP_MAX answers or search directories is freed instead. Answers
 * stay right across dlclose and dlopen: modules are keyed by file identity and address. */
#define KEEP_MAX ((size_t)1 << 16) /* (about 100-200 bytes each with their strings) */
static etr__symbolizer *_Atomic g_kept;

etr__symbolizer *etr__symbolizer_take(void) {
  etr__symbolizer *s = atomic_exchange_explicit(&g_kept, NULL, memory_order_acquire);
  return s != NULL ? s : etr__symbolizer_new();
}

static void file_unload(etr__symbolizer *s, sfile *f);

void etr__symbolizer_give_back(etr__symbolizer *s) {
  if (s == NULL) return;
  if (s->cache_n > KEEP_MAX || s->ndirs != 0) {
    etr__symbolizer_free(s);
    return;
  }
  while (s->lru != NULL) file_unload(s, s->lru);
  etr__symbolizer_free(atomic_exchange_explicit(&g_kept, s, memory_order_acq_rel));
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

void etr__symbolizer_set_max_loaded(etr__symbolizer *s, size_t n) {
  s->max_loaded = n != 0 ? n : 1;
  /* Fewer now: the others are closed when the next file is loaded. */
}

size_t etr__symbolizer_loads(const etr__symbolizer *s) { return s->loads; }

/* ---- interned strings ---- */

static int strs_grow(etr__symbolizer *s) {
  size_t cap = s->strs_cap ? s->strs_cap * 2 : 256;
  istr *t = calloc(cap, sizeof *t);
  if (t == NULL) return -1;
  for (size_t i = 0; i < s->strs_cap; i++) {
    if (s->strs[i].s == NULL) continue;
    size_t j = s->strs[i].hash & (cap - 1);
    while (t[j].s != NULL) j = (j + 1) & (cap - 1);
    t[j] = s->strs[i];
  }
  free(s->strs);
  s->strs = t;
  s->strs_cap = cap;
  return 0;
}

/* The arena's copy of str (made on its first time). NULL on ENOMEM. */
static const char *intern(etr__symbolizer *s, const char *str) {
  size_t n = strlen(str);
  uint64_t h = hash_bytes(0xcbf29ce484222325ull, str, n);
  if ((s->strs_n + 1) * 2 > s->strs_cap && strs_grow(s) != 0) return NULL;
  size_t mask = s->strs_cap - 1, j = h & mask;
  while (s->strs[j].s != NULL) {
    if (s->strs[j].hash == h && strcmp(s->strs[j].s, str) == 0) return s->strs[j].s;
    j = (j + 1) & mask;
  }
  char *p = etr__arena_alloc(&s->arena, n + 1);
  if (p == NULL) return NULL;
  memcpy(p, str, n + 1);
  s->strs[j] = (istr){h, p};
  s->strs_n++;
  return p;
}

/* ---- what the file side (symbolize_file.c) uses ---- */

size_t etr__symbolizer_search_dirs(const etr__symbolizer *s, const char *const **dirs) {
  *dirs = (const char *const *)s->dirs;
  return s->ndirs;
}

void *etr__symbolizer_alloc(etr__symbolizer *s, size_t n) {
  return etr__arena_alloc_aligned(&s->arena, n);
}

const char *etr__symbolizer_demangle(etr__symbolizer *s, const char *raw) {
  char *d = etr__demangle(raw);
  const char *r = d != NULL ? intern(s, d) : NULL;
  free(d);
  return r != NULL ? r : intern(s, raw);
}

/* ---- files shared by modules ---- */

static uint64_t file_hash(const etr__symfile_loc *loc) {
  return mix64(hash_bytes(hash_bytes(0xcbf29ce484222325ull, &loc->key, sizeof loc->key),
                          &loc->dbg_key, sizeof loc->dbg_key));
}

static bool file_matches(const sfile *f, const etr__symfile_loc *loc) {
  return memcmp(&f->loc.key, &loc->key, sizeof loc->key) == 0 &&
         memcmp(&f->loc.dbg_key, &loc->dbg_key, sizeof loc->dbg_key) == 0;
}

static int filetab_grow(etr__symbolizer *s) {
  size_t cap = s->filetab_cap * 2;
  uint32_t *t = calloc(cap, sizeof *t);
  if (t == NULL) return -1;
  for (size_t i = 0; i < s->nfiles; i++) {
    size_t j = s->files[i]->hash & (cap - 1);
    while (t[j] != 0) j = (j + 1) & (cap - 1);
    t[j] = (uint32_t)(i + 1);
  }
  free(s->filetab);
  s->filetab = t;
  s->filetab_cap = cap;
  return 0;
}

/* The file entry for a location just found: an existing one with the same keys (loc's
 * strings are then freed), else a new one that takes loc's strings. NULL on ENOMEM (loc's
 * strings freed). */
static sfile *file_get(etr__symbolizer *s, etr__symfile_loc *loc) {
  uint64_t h = file_hash(loc);
  size_t j = h & (s->filetab_cap - 1);
  while (s->filetab[j] != 0) {
    sfile *f = s->files[s->filetab[j] - 1];
    if (f->hash == h && file_matches(f, loc)) {
      if (f->state < 0 && strcmp(f->loc.path, loc->path) != 0) {
        /* The same file, unusable under its old path (a /proc/self/map_files name whose
         * mapping went away): try the new one. */
        etr__symfile_loc_free(&f->loc);
        f->loc = *loc;
        f->state = 0;
        return f;
      }
      etr__symfile_loc_free(loc);
      return f;
    }
    j = (j + 1) & (s->filetab_cap - 1);
  }
  sfile *f = NULL;
  if ((s->nfiles + 1) * 2 > s->filetab_cap) {
    if (filetab_grow(s) != 0) goto enomem;
    j = h & (s->filetab_cap - 1);
    while (s->filetab[j] != 0) j = (j + 1) & (s->filetab_cap - 1);
  }
  if (s->nfiles == s->capfiles) {
    size_t cap = s->capfiles ? s->capfiles * 2 : 16;
    sfile **files = realloc(s->files, cap * sizeof *files);
    if (files == NULL) goto enomem;
    s->files = files;
    s->capfiles = cap;
  }
  if ((f = calloc(1, sizeof *f)) == NULL) goto enomem;
  f->loc = *loc;
  f->hash = h;
  s->files[s->nfiles] = f;
  s->filetab[j] = (uint32_t)(s->nfiles + 1);
  s->nfiles++;
  return f;
enomem:
  etr__symfile_loc_free(loc);
  return NULL;
}

static void lru_unlink(etr__symbolizer *s, sfile *f) {
  if (f->newer != NULL)
    f->newer->older = f->older;
  else
    s->mru = f->older;
  if (f->older != NULL)
    f->older->newer = f->newer;
  else
    s->lru = f->newer;
  f->newer = f->older = NULL;
}

static void lru_push(etr__symbolizer *s, sfile *f) {
  f->newer = NULL;
  f->older = s->mru;
  if (s->mru != NULL) s->mru->newer = f;
  s->mru = f;
  if (s->lru == NULL) s->lru = f;
}

/* Whether loading f fits in the address-space limit (RLIMIT_AS), if one is set: libdw does
 * not survive running out of memory (it asserts or faults), so a load is not started
 * without room for it. The estimate is generous: twice the files' sizes (mapped, and libdw's
 * tables, which grow with the DWARF; a libc with its debug file takes 6 MB of files and
 * about 17 MB) plus 8 MiB. */
static bool load_fits(const sfile *f) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return true;
  unsigned long long pages = 0;
  FILE *st = fopen("/proc/self/statm", "re");
  if (st == NULL) return true;
  int n = fscanf(st, "%llu", &pages);
  fclose(st);
  if (n != 1) return true;
  uint64_t used = (uint64_t)pages * (uint64_t)sysconf(_SC_PAGESIZE);
  uint64_t files = f->loc.key.size;
  if (memcmp(&f->loc.dbg_key, &f->loc.key, sizeof f->loc.key) != 0) files += f->loc.dbg_key.size;
  uint64_t need = 2 * files + ((uint64_t)8 << 20);
  return used < (uint64_t)rl.rlim_cur && need <= (uint64_t)rl.rlim_cur - used;
}

static void file_unload(etr__symbolizer *s, sfile *f) {
  lru_unlink(s, f);
  etr__symfile_close(f->mf);
  free(f->pstrs); /* its addresses may hold other strings once the file is loaded again */
  f->pstrs = NULL;
  f->pstrs_cap = f->pstrs_n = 0;
  f->mf = NULL;
  f->state = 0;
  s->nloaded--;
}

/* The loaded file of f, loaded now when it is not (closing the least recently used ones
 * beyond max_loaded first, and all others when the address-space limit leaves too little
 * room); *mf NULL when f is unusable. 0 or ETR_ENOMEM (also when even then there is no room
 * for it). */
static int file_use(etr__symbolizer *s, sfile *f, etr__symfile **mf) {
  *mf = NULL;
  if (f->state == 1) {
    if (s->mru != f) {
      lru_unlink(s, f);
      lru_push(s, f);
    }
    *mf = f->mf;
    return 0;
  }
  if (f->state < 0) return 0;
  while (s->nloaded >= s->max_loaded && s->lru != NULL) file_unload(s, s->lru);
  if (!load_fits(f)) {
    while (s->lru != NULL) file_unload(s, s->lru);
    if (!load_fits(f)) return ETR_ENOMEM; /* f stays unloaded: a later address may try again */
  }
  f->state = -1; /* also after running out of memory: the fallbacks answer from then on */
  if (etr__symfile_load(&f->loc, &f->mf) != 0) return ETR_ENOMEM;
  if (f->mf == NULL) return 0; /* gone or changed on disk since it was located */
  f->state = 1;
  s->loads++;
  s->nloaded++;
  lru_push(s, f);
  *mf = f->mf;
  return 0;
}

/* The arena's copy of raw, a string of the loaded file f: by raw's address when it was given
 * before (no hashing of the string), else interned. NULL on ENOMEM. */
static const char *file_str(etr__symbolizer *s, sfile *f, const char *raw) {
  if ((f->pstrs_n + 1) * 2 > f->pstrs_cap) {
    size_t cap = f->pstrs_cap ? f->pstrs_cap * 2 : 256;
    pstr *t = calloc(cap, sizeof *t);
    if (t == NULL) return intern(s, raw);
    for (size_t i = 0; i < f->pstrs_cap; i++) {
      if (f->pstrs[i].raw == NULL) continue;
      size_t j = mix64((uintptr_t)f->pstrs[i].raw) & (cap - 1);
      while (t[j].raw != NULL) j = (j + 1) & (cap - 1);
      t[j] = f->pstrs[i];
    }
    free(f->pstrs);
    f->pstrs = t;
    f->pstrs_cap = cap;
  }
  size_t mask = f->pstrs_cap - 1, j = mix64((uintptr_t)raw) & mask;
  while (f->pstrs[j].raw != NULL) {
    if (f->pstrs[j].raw == raw) return f->pstrs[j].str;
    j = (j + 1) & mask;
  }
  const char *str = intern(s, raw);
  if (str == NULL) return NULL;
  f->pstrs[j] = (pstr){raw, str};
  f->pstrs_n++;
  return str;
}

/* ---- modules ---- */

/* What the caller knows of the mapped file (etr__module), or all 0. */
typedef struct mapped {
  uint64_t dev, ino, size, mtime_ns;
  uintptr_t map_lo, map_hi;
} mapped;

static int module_matches(const module *m, const char *path, const uint8_t *bid, size_t bid_len,
                          bool no_bid, const mapped *mp) {
  return m->build_id_len == bid_len && m->no_build_id == no_bid && m->dev == mp->dev &&
         m->ino == mp->ino && m->size == mp->size && m->mtime_ns == mp->mtime_ns &&
         m->map_lo == mp->map_lo && strcmp(m->path, path) == 0 &&
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
                          bool no_bid, const mapped *mp, size_t *index) {
  if (s->last != NULL && module_matches(s->last, path, bid, bid_len, no_bid, mp)) {
    *index = s->last_index;
    return s->last;
  }
  size_t plen = strlen(path);
  uint64_t h = hash_bytes(hash_bytes(0xcbf29ce484222325ull, path, plen), bid, bid_len);
  h = hash_bytes(h, &no_bid, sizeof no_bid);
  h = hash_bytes(hash_bytes(h, &mp->ino, sizeof mp->ino), &mp->mtime_ns, sizeof mp->mtime_ns);
  size_t j = h & (s->modtab_cap - 1);
  while (s->modtab[j] != 0) {
    module *m = s->mods[s->modtab[j] - 1];
    if (m->hash == h && module_matches(m, path, bid, bid_len, no_bid, mp)) {
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
  m->no_build_id = no_bid;
  m->hash = h;
  m->dev = mp->dev;
  m->ino = mp->ino;
  m->size = mp->size;
  m->mtime_ns = mp->mtime_ns;
  m->map_lo = mp->map_lo;
  m->map_hi = mp->map_hi;
  s->mods[s->nmods] = m;
  s->modtab[j] = (uint32_t)(s->nmods + 1);
  *index = s->nmods;
  s->nmods++;
  s->last = m;
  s->last_index = *index;
  return m;
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

/* Whether file identity k is m's mapped file (device, size and time only when they are
 * known). */
static bool same_file(const module *m, const etr__file_key *k) {
  return (m->dev == 0 || k->dev == m->dev) && k->ino == m->ino &&
         (m->mtime_ns == 0 || (k->size == m->size && k->mtime_ns == m->mtime_ns));
}

/* Whether the file located for m is the one that was mapped: any file when m's file is not
 * known; the build-id when m has one (etr__symfile_locate checked it); else the identity. */
static bool is_mapped_file(const module *m, const etr__symfile_loc *loc) {
  return m->ino == 0 || m->build_id_len != 0 || same_file(m, &loc->key);
}

/* m's mapping under /proc/self/map_files into buf; false when m has no known mapping. */
static bool map_files_path(const module *m, char *buf, size_t cap) {
  if (m->ino == 0 || m->map_hi <= m->map_lo) return false;
  snprintf(buf, cap, "/proc/self/map_files/%lx-%lx", (unsigned long)m->map_lo,
           (unsigned long)m->map_hi);
  return true;
}

/* Whether m's file is still mapped where it was (it may be found again later). */
static bool still_mapped(const module *m) {
  char mf[64];
  struct stat st;
  if (!map_files_path(m, mf, sizeof mf) || stat(mf, &st) != 0) return false;
  etr__file_key k = {(uint64_t)st.st_dev, (uint64_t)st.st_ino, (uint64_t)st.st_size,
                     (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec};
  return same_file(m, &k);
}

/* Locate m's file: at its path (or elsewhere by build-id) when that is the file that was
 * mapped, else the mapped file itself while it is mapped. m->state: 1 found, -1 not found,
 * 0 not found but still mapped (looked for again at the next new address). */
static int module_locate(etr__symbolizer *s, module *m, uintptr_t live_ip) {
  etr__symfile_id id = {m->path, m->base, m->build_id, m->build_id_len, m->no_build_id};
  etr__symfile_loc loc;
  m->state = -1; /* also after running out of memory: the fallbacks answer from then on */
  if (etr__symfile_locate(s, &id, live_ip, &loc) != 0) return ETR_ENOMEM;
  if (loc.path != NULL && !is_mapped_file(m, &loc)) etr__symfile_loc_free(&loc);
  char mf[64];
  if (loc.path == NULL && map_files_path(m, mf, sizeof mf)) {
    etr__symfile_id mid = {mf, m->base, m->build_id, m->build_id_len, m->no_build_id};
    if (etr__symfile_locate(s, &mid, live_ip, &loc) != 0) return ETR_ENOMEM;
    if (loc.path != NULL && !same_file(m, &loc.key)) etr__symfile_loc_free(&loc);
    if (loc.path == NULL && still_mapped(m)) m->state = 0;
  }
  if (loc.path != NULL) {
    if ((m->file = file_get(s, &loc)) == NULL) return ETR_ENOMEM;
    m->state = 1;
  }
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
  /* (a module not found before may have been found later: still mapped, at a new address) */
  if (m->state < 0 && m->ino != 0 && still_mapped(m)) m->state = 0;
  if (m->state == 0 && module_locate(s, m, live_ip) != 0) return ETR_ENOMEM;
  etr__symfile *mf = NULL;
  if (m->state > 0 && file_use(s, m->file, &mf) != 0) return ETR_ENOMEM;
  if (mf != NULL) {
    etr__symbol found;
    etr__symbol *fr;
    if (etr__symfile_resolve(s, mf, vaddr, &found, &fr, ninner) != 0) return ETR_ENOMEM;
    /* Copies in the arena: the file may be closed to make room for another. */
    sfile *f = m->file;
    for (size_t k = 0; k < *ninner; k++) {
      if ((fr[k].name = file_str(s, f, fr[k].name)) == NULL) return ETR_ENOMEM;
      if (fr[k].filename != NULL && (fr[k].filename = file_str(s, f, fr[k].filename)) == NULL)
        return ETR_ENOMEM;
    }
    *inner = fr;
    if (found.name != NULL && (name = file_str(s, f, found.name)) == NULL) return ETR_ENOMEM;
    if (found.filename != NULL && (file = file_str(s, f, found.filename)) == NULL)
      return ETR_ENOMEM;
    line = found.line;
  }
  int rc = 0;
  if (name == NULL) {
    rc = 1;
    Dl_info info;
    if (live_ip != 0 && dladdr((void *)live_ip, &info) != 0 && info.dli_sname != NULL &&
        info.dli_saddr != NULL) {
      name = etr__symbolizer_demangle(s, info.dli_sname);
    } else {
      char buf[PATH_MAX + 32];
      snprintf(buf, sizeof buf, "%s+0x%" PRIx64, m->base[0] ? m->base : "[unknown]", vaddr);
      name = etr__arena_strdup(&s->arena, buf);
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
                  size_t build_id_len, const mapped *mp, uint64_t vaddr, uintptr_t live_ip,
                  etr__symbol *out, const etr__symbol **inner, size_t *ninner) {
  static const mapped none = {0, 0, 0, 0, 0, 0};
  if (path == NULL) path = "";
  /* (a build id given with length 0: the module was recorded without one) */
  bool no_bid = build_id != NULL && build_id_len == 0;
  if (build_id == NULL) build_id_len = 0;
  if (mp == NULL) mp = &none;
  size_t idx;
  module *m = module_get(s, path, build_id, build_id_len, no_bid, mp, &idx);
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
  /* A fallback of a module whose mapped file was not found is not kept: the same module (a
   * file that got the inode back, at the same place) may be found at a later load. */
  if (rc == 1 && m->state != 1 && m->ino != 0) return rc;
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
  return lookup(s, path, build_id, build_id_len, NULL, vaddr, live_ip, out, &inner, &ninner);
}

/* A source file that is etr's public header etr/record.h. */
static bool is_etr_record_site(const char *file) {
  static const char suffix[] = "/etr/record.h";
  size_t n = file ? strlen(file) : 0, m = sizeof suffix - 1;
  return n >= m && memcmp(file + n - m, suffix, m) == 0;
}

static int frames(etr__symbolizer *s, const char *path, const uint8_t *build_id,
                  size_t build_id_len, const mapped *mp, uint64_t vaddr, uintptr_t live_ip,
                  etr__symbol *out, size_t max) {
  if (s == NULL || out == NULL || max == 0) return ETR_EINVAL;
  etr__symbol outer;
  const etr__symbol *inner;
  size_t ninner;
  int rc = lookup(s, path, build_id, build_id_len, mp, vaddr, live_ip, &outer, &inner, &ninner);
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

int etr__symbolize_frames(etr__symbolizer *s, const char *path, const uint8_t *build_id,
                          size_t build_id_len, uint64_t vaddr, uintptr_t live_ip, etr__symbol *out,
                          size_t max) {
  return frames(s, path, build_id, build_id_len, NULL, vaddr, live_ip, out, max);
}

int etr__symbolize_frames_mapped(etr__symbolizer *s, const etr__module *m, uint64_t vaddr,
                                 uintptr_t live_ip, etr__symbol *out, size_t max) {
  if (m == NULL) return ETR_EINVAL;
  mapped mp = {m->dev, m->ino, m->size, m->mtime_ns, m->map_lo, m->map_hi};
  /* (the mapped file is checked by identity: no build id is not asked of it) */
  return frames(s, m->path, m->build_id_len != 0 ? m->build_id : NULL, m->build_id_len, &mp, vaddr,
                live_ip, out, max);
}
