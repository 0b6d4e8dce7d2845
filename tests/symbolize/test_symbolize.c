/* Tests of symbolization (src/unwind/symbolize.c, symtab.c): a known call chain through a
 * library opened with dlopen gives its function names in order with the right files and
 * lines, also after the library was closed; build-id checks; fallbacks (dladdr,
 * module+offset); the symbol cache and its counters; C++ demangling; stripped libraries,
 * separate debug files and search directories; a library with 20k functions; inlined calls
 * (nested, and C++) expanded into frames of their own; module paths that are one file share
 * one load of it; with more files than are kept loaded, answers do not change.
 *
 * Addresses are captured with glibc's backtrace() (return addresses), and symbolized at
 * return address - 1, the call instruction, as a trace writer does for outer frames. */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <execinfo.h>
#include <limits.h>
#include <link.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "symtest_dir.h"

#include "unwind/symbolize_search.h"
#include "unwind/unwind.h"

/* ---- the module holding an address (our own, not etr's module map) ---- */

typedef struct modinfo {
  char path[PATH_MAX];
  uintptr_t bias;
  uint8_t bid[64];
  size_t bid_len;
} modinfo;

typedef struct find_arg {
  uintptr_t ip;
  modinfo *out;
  int found;
} find_arg;

static void read_build_id(const struct dl_phdr_info *info, modinfo *m) {
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_NOTE) continue;
    const char *p = (const char *)(info->dlpi_addr + ph->p_vaddr);
    const char *end = p + ph->p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const ElfW(Nhdr) *n = (const ElfW(Nhdr) *)p;
      const char *name = p + sizeof *n;
      const char *desc = name + ((n->n_namesz + 3) & ~3u);
      if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && memcmp(name, "GNU", 4) == 0 &&
          n->n_descsz <= sizeof m->bid) {
        memcpy(m->bid, desc, n->n_descsz);
        m->bid_len = n->n_descsz;
        return;
      }
      p = desc + ((n->n_descsz + 3) & ~3u);
    }
  }
}

static int find_cb(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  find_arg *a = data;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type == PT_LOAD && a->ip >= lo && a->ip < lo + ph->p_memsz) {
      snprintf(a->out->path, sizeof a->out->path, "%s", info->dlpi_name);
      a->out->bias = info->dlpi_addr;
      a->out->bid_len = 0;
      read_build_id(info, a->out);
      a->found = 1;
      return 1;
    }
  }
  return 0;
}

static int find_module(uintptr_t ip, modinfo *out) {
  find_arg a = {ip, out, 0};
  dl_iterate_phdr(find_cb, &a);
  return a.found;
}

/* ---- capture through the chain library ---- */

typedef int (*chain_fn)(int, int (*)(int));

#define MAX_FRAMES 64
typedef struct capture {
  uintptr_t ip[MAX_FRAMES];
  modinfo mod[MAX_FRAMES];
  int n;
} capture;

static capture *g_capture;
static int g_capture_line;

/* Innermost frame: records the stack (the callback symchain_c calls). */
__attribute__((noinline)) int capture_cb(int x) {
  void *buf[MAX_FRAMES];
  g_capture_line = __LINE__ + 1;
  int n = backtrace(buf, MAX_FRAMES);
  for (int i = 0; i < n; i++) g_capture->ip[i] = (uintptr_t)buf[i];
  g_capture->n = n;
  __asm__ volatile("" ::: "memory");
  return x + 1;
}

/* Run symchain_a of the open library `lib` and capture the stack from its callback; record
 * the module of each frame while the library is still loaded. */
__attribute__((noinline)) static void capture_chain(void *lib, capture *c) {
  chain_fn a = (chain_fn)dlsym(lib, "symchain_a");
  assert_non_null(a);
  g_capture = c;
  assert_int_equal(a(1, capture_cb), ((((2 * 2 + 3) + 1) * 3 + 1) + 5) - 2);
  assert_true(c->n >= 5);
  for (int i = 0; i < c->n; i++) assert_true(find_module(c->ip[i], &c->mod[i]));
}

/* The test library at path (libsymchain, libsymcxx, libsym20k: known functions and lines),
 * loaded. */
static void *load_lib(const char *path) {
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  assert_non_null(lib);
  return lib;
}

/* A new symbolizer (asserts it was made). */
static etr__symbolizer *new_symbolizer(void) {
  etr__symbolizer *s = etr__symbolizer_new();
  assert_non_null(s);
  return s;
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Symbolize frame i of c (at its return address - 1), live or not. */
static int symbolize_frame(etr__symbolizer *s, const capture *c, int i, int live,
                           etr__symbol *out) {
  uintptr_t pc = c->ip[i] - 1;
  const modinfo *m = &c->mod[i];
  return etr__symbolize(s, m->path, m->bid, m->bid_len, pc - m->bias, live ? pc : 0, out);
}

/* The captured chain, symbolized, is capture_cb, symchain_c, symchain_b, symchain_a with
 * their files and call lines (read from the library while it is loaded: lines[3]). */
static void check_chain(const capture *c, const int lines[3], int live) {
  etr__symbolizer *s = new_symbolizer();
  etr__symbol sym;
  int i0 = -1;
  for (int i = 0; i < c->n; i++) {
    int rc = symbolize_frame(s, c, i, live, &sym);
    assert_true(rc == 0 || rc == 1);
    if (strcmp(sym.name, "capture_cb") == 0) {
      i0 = i;
      break;
    }
  }
  assert_true(i0 >= 0);
  assert_int_equal(symbolize_frame(s, c, i0, live, &sym), 0);
  assert_true(ends_with(sym.filename, "test_symbolize.c"));
  if (i0 == 0) assert_int_equal(sym.line, g_capture_line);
  static const char *const names[3] = {"symchain_c", "symchain_b", "symchain_a"};
  for (int k = 0; k < 3; k++) {
    int i = i0 + 1 + k;
    assert_true(i < c->n);
    assert_int_equal(symbolize_frame(s, c, i, live, &sym), 0);
    assert_string_equal(sym.name, names[k]);
    assert_true(ends_with(sym.filename, "/symchain.c"));
    assert_int_equal(sym.line, lines[2 - k]);
    assert_true(ends_with(c->mod[i].path, "libsymchain.so"));
  }
  /* The test itself (the main program, path "" when live) comes next. */
  assert_int_equal(symbolize_frame(s, c, i0 + 4, live, &sym), 0);
  assert_string_equal(sym.name, "capture_chain");
  assert_true(ends_with(sym.filename, "test_symbolize.c"));
  etr__symbolizer_free(s);
}

static void read_lines(void *lib, int lines[3]) {
  int *l = dlsym(lib, "symchain_lines");
  assert_non_null(l);
  memcpy(lines, l, 3 * sizeof *lines);
  assert_true(lines[2] > 0 && lines[1] > lines[2] && lines[0] > lines[1]);
}

/* A library opened with dlopen: frames resolve live (with dladdr available). */
static void test_chain_dlopen(void **state) {
  (void)state;
  void *lib = load_lib(SYMCHAIN_PATH);
  capture c;
  capture_chain(lib, &c);
  int lines[3];
  read_lines(lib, lines);
  check_chain(&c, lines, 1);
  dlclose(lib);
}

/* A library closed between two captures: the frames of the first capture still resolve
 * (from the file), and so do those of the second capture of a reopened copy. */
static void test_chain_closed(void **state) {
  (void)state;
  capture *c1 = calloc(1, sizeof *c1), *c2 = calloc(1, sizeof *c2);
  assert_non_null(c1);
  assert_non_null(c2);
  int lines[3];
  void *lib = load_lib(SYMCHAIN_PATH);
  capture_chain(lib, c1);
  read_lines(lib, lines);
  assert_int_equal(dlclose(lib), 0);
  /* Really gone (nothing else holds it). */
  assert_null(dlopen(SYMCHAIN_PATH, RTLD_NOW | RTLD_NOLOAD));
  lib = load_lib(SYMCHAIN_PATH);
  capture_chain(lib, c2);
  assert_int_equal(dlclose(lib), 0);
  /* Not live: the main program has a path only while live, so give it its real path. */
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  assert_true(n > 0);
  exe[n] = '\0';
  capture *cs[2] = {c1, c2};
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < cs[k]->n; i++)
      if (cs[k]->mod[i].path[0] == '\0') snprintf(cs[k]->mod[i].path, PATH_MAX, "%s", exe);
    check_chain(cs[k], lines, 0);
  }
  free(c1);
  free(c2);
}

/* Address of symchain_b as (module, vaddr), from a loaded copy of the library. */
static void chain_b_address(void *lib, modinfo *m, uint64_t *vaddr, uintptr_t *live) {
  void *f = dlsym(lib, "symchain_b");
  assert_non_null(f);
  assert_true(find_module((uintptr_t)f, m));
  assert_true(m->bid_len > 0);
  *live = (uintptr_t)f + 4;
  *vaddr = *live - m->bias;
}

/* A matching build-id resolves; a different one is not trusted (fallbacks). */
static void test_build_id(void **state) {
  (void)state;
  void *lib = load_lib(SYMCHAIN_PATH);
  modinfo m;
  uint64_t vaddr;
  uintptr_t live;
  chain_b_address(lib, &m, &vaddr, &live);
  etr__symbolizer *s = new_symbolizer();
  etr__symbol sym;
  assert_int_equal(etr__symbolize(s, m.path, m.bid, m.bid_len, vaddr, 0, &sym), 0);
  assert_string_equal(sym.name, "symchain_b");
  assert_true(ends_with(sym.filename, "/symchain.c"));
  assert_true(sym.line > 0);

  uint8_t wrong[64];
  memcpy(wrong, m.bid, m.bid_len);
  wrong[0] ^= 0xff;
  assert_int_equal(etr__symbolize(s, m.path, wrong, m.bid_len, vaddr, 0, &sym), 1);
  char expect[64];
  snprintf(expect, sizeof expect, "libsymchain.so+0x%llx", (unsigned long long)vaddr);
  assert_string_equal(sym.name, expect);
  assert_string_equal(sym.filename, m.path);
  assert_int_equal(sym.line, 0);
  /* Live: dladdr names the exported function. */
  assert_int_equal(etr__symbolize(s, m.path, wrong, m.bid_len, vaddr + 1, live + 1, &sym), 1);
  assert_string_equal(sym.name, "symchain_b");
  assert_int_equal(sym.line, 0);
  etr__symbolizer_free(s);
  dlclose(lib);
}

/* Missing files fall back to dladdr (live) or module+offset; "" without a live address. */
static void test_fallbacks(void **state) {
  (void)state;
  etr__symbolizer *s = new_symbolizer();
  etr__symbol sym;
  assert_int_equal(etr__symbolize(s, "/nonexistent/libfoo.so", NULL, 0, 0x1234, 0, &sym), 1);
  assert_string_equal(sym.name, "libfoo.so+0x1234");
  assert_string_equal(sym.filename, "/nonexistent/libfoo.so");
  assert_int_equal(sym.line, 0);
  assert_int_equal(etr__symbolize(s, "", NULL, 0, 0xabc, 0, &sym), 1);
  assert_string_equal(sym.name, "[unknown]+0xabc");
  /* Not an ELF file; not a regular file (a FIFO must not block). */
  assert_int_equal(etr__symbolize(s, "/proc/self/status", NULL, 0, 0x10, 0, &sym), 1);
  assert_string_equal(sym.name, "status+0x10");
  char fifo[] = "/tmp/etr-symtest-fifo-XXXXXX";
  int tfd = mkstemp(fifo);
  assert_true(tfd >= 0);
  close(tfd);
  unlink(fifo);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  assert_int_equal(etr__symbolize(s, fifo, NULL, 0, 0x20, 0, &sym), 1);
  unlink(fifo);
  assert_int_equal(etr__symbolize(s, "/", NULL, 0, 0x20, 0, &sym), 1);
  assert_string_equal(sym.name, "[unknown]+0x20");
  /* dladdr on a live address of a loaded library. */
  void *lib = load_lib(SYMCHAIN_PATH);
  uintptr_t a = (uintptr_t)dlsym(lib, "symchain_a");
  assert_int_equal(etr__symbolize(s, "/nonexistent/libbar.so", NULL, 0, 0x10, a + 2, &sym), 1);
  assert_string_equal(sym.name, "symchain_a");
  assert_string_equal(sym.filename, "/nonexistent/libbar.so");
  dlclose(lib);
  assert_int_equal(etr__symbolize(NULL, "x", NULL, 0, 1, 0, &sym), ETR_EINVAL);
  etr__symbolizer_free(s);
  etr__symbolizer_free(NULL);
}

static etr_traceback_stats stats_now(void) {
  etr_traceback_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  etr__symbolize_stats_add(&st);
  return st;
}

/* One resolution per unique (module, address); repeats come from the cache. */
static void test_cache(void **state) {
  (void)state;
  void *lib = load_lib(SYMCHAIN_PATH);
  modinfo m;
  uint64_t vaddr;
  uintptr_t live;
  chain_b_address(lib, &m, &vaddr, &live);
  etr__symbolizer *s = new_symbolizer();
  etr_traceback_stats st0 = stats_now();
  etr__symbol a, b, c;
  assert_int_equal(etr__symbolize(s, m.path, m.bid, m.bid_len, vaddr, 0, &a), 0);
  etr_traceback_stats st1 = stats_now();
  assert_int_equal(st1.symbol_cache_misses - st0.symbol_cache_misses, 1);
  assert_int_equal(st1.symbol_cache_hits - st0.symbol_cache_hits, 0);
  /* Same module given through another buffer with equal contents. */
  char path2[PATH_MAX];
  snprintf(path2, sizeof path2, "%s", m.path);
  assert_int_equal(etr__symbolize(s, path2, m.bid, m.bid_len, vaddr, 0, &b), 0);
  etr_traceback_stats st2 = stats_now();
  assert_int_equal(st2.symbol_cache_hits - st1.symbol_cache_hits, 1);
  assert_int_equal(st2.symbol_cache_misses - st1.symbol_cache_misses, 0);
  assert_ptr_equal(a.name, b.name);
  assert_ptr_equal(a.filename, b.filename);
  assert_int_equal(a.line, b.line);
  /* A fallback is counted once, and cached with its return code. */
  assert_int_equal(etr__symbolize(s, "/nonexistent/x.so", NULL, 0, 8, 0, &c), 1);
  assert_int_equal(etr__symbolize(s, "/nonexistent/x.so", NULL, 0, 8, 0, &c), 1);
  etr_traceback_stats st3 = stats_now();
  assert_int_equal(st3.symbolize_fallbacks - st2.symbolize_fallbacks, 1);
  assert_int_equal(st3.symbol_cache_misses - st2.symbol_cache_misses, 1);
  assert_int_equal(st3.symbol_cache_hits - st2.symbol_cache_hits, 1);
  /* Many unique addresses (the cache grows) keep their answers. */
  const char *first_name = NULL;
  for (uint64_t k = 0; k < 5000; k++) {
    assert_true(etr__symbolize(s, "/nonexistent/y.so", NULL, 0, 0x1000 + k, 0, &c) == 1);
    if (k == 0) first_name = c.name;
  }
  assert_int_equal(etr__symbolize(s, "/nonexistent/y.so", NULL, 0, 0x1000, 0, &c), 1);
  assert_ptr_equal(c.name, first_name);
  assert_string_equal(c.name, "y.so+0x1000");
  etr__symbolizer_free(s);
  dlclose(lib);
}

/* C++ names are demangled (the test program itself has no C++ runtime). */
static void test_demangle(void **state) {
  (void)state;
  void *lib = load_lib(SYMCXX_PATH);
  void *(*addr)(void) = (void *(*)(void))dlsym(lib, "symcxx_addr");
  assert_non_null(addr);
  uintptr_t f = (uintptr_t)addr();
  modinfo m;
  assert_true(find_module(f, &m));
  etr__symbolizer *s = new_symbolizer();
  etr__symbol sym, sym2;
  assert_int_equal(etr__symbolize(s, m.path, m.bid, m.bid_len, f - m.bias, 0, &sym), 0);
  assert_string_equal(sym.name, "etrtest::Box<long>::twice(long)");
  assert_true(ends_with(sym.filename, "/symcxx.cpp"));
  assert_true(sym.line > 0);
  /* Another address in the same function: the demangled name is made once. */
  assert_int_equal(etr__symbolize(s, m.path, m.bid, m.bid_len, f - m.bias + 1, 0, &sym2), 0);
  assert_ptr_equal(sym.name, sym2.name);
  etr__symbolizer_free(s);
  dlclose(lib);
}

/* vaddr of the functions symchain_b (exported) and symchain_hidden (local) in the file. */
static void chain_vaddrs(uint64_t *b, uint64_t *hidden, int *hidden_line) {
  void *lib = load_lib(SYMCHAIN_PATH);
  modinfo m;
  uintptr_t live;
  chain_b_address(lib, &m, b, &live);
  void *(*ha)(void) = (void *(*)(void))dlsym(lib, "symchain_hidden_addr");
  assert_non_null(ha);
  *hidden = (uintptr_t)ha() - m.bias;
  *hidden_line = *(int *)dlsym(lib, "symchain_hidden_line");
  dlclose(lib);
}

/* Stripped copies: names from .symtab without debug info, from .dynsym without .symtab;
 * lines come back through a .gnu_debuglink debug file. */
static void test_stripped(void **state) {
  (void)state;
  uint64_t b, hidden;
  int hidden_line;
  chain_vaddrs(&b, &hidden, &hidden_line);
  etr__symbolizer *s = new_symbolizer();
  etr__symbol sym;

  const char *nodebug = SYMCHAIN_DIR "/libsymchain-nodebug.so";
  assert_int_equal(etr__symbolize(s, nodebug, NULL, 0, hidden, 0, &sym), 0);
  assert_string_equal(sym.name, "symchain_hidden");
  assert_string_equal(sym.filename, nodebug);
  assert_int_equal(sym.line, 0);

  const char *stripped = SYMCHAIN_DIR "/libsymchain-stripped.so";
  assert_int_equal(etr__symbolize(s, stripped, NULL, 0, b, 0, &sym), 0);
  assert_string_equal(sym.name, "symchain_b");
  assert_int_equal(sym.line, 0);
  /* A local function is not in .dynsym: no name (the exported neighbour must not claim it
   * beyond its size). */
  int rc = etr__symbolize(s, stripped, NULL, 0, hidden, 0, &sym);
  if (rc == 0) {
    assert_string_not_equal(sym.name, "symchain_a");
  } else {
    assert_int_equal(rc, 1);
    assert_true(strncmp(sym.name, "libsymchain-stripped.so+0x", 26) == 0);
  }

  const char *linked = SYMCHAIN_DIR "/libsymchain-dbglink.so";
  assert_int_equal(etr__symbolize(s, linked, NULL, 0, hidden, 0, &sym), 0);
  assert_string_equal(sym.name, "symchain_hidden");
  assert_true(ends_with(sym.filename, "/symchain.c"));
  assert_int_equal(sym.line, hidden_line);
  etr__symbolizer_free(s);
}

/* A module that is not at its recorded path is found by build-id or basename under a
 * search directory (as `etr symbolize` does on another machine). */
static void test_search_dirs(void **state) {
  (void)state;
  void *lib = load_lib(SYMCHAIN_PATH);
  modinfo m;
  uint64_t vaddr;
  uintptr_t live;
  chain_b_address(lib, &m, &vaddr, &live);
  dlclose(lib);

  /* By basename, build-id checked. */
  etr__symbolizer *s = new_symbolizer();
  assert_int_equal(etr__symbolizer_add_search_dir(s, "/nonexistent-dir"), 0);
  assert_int_equal(etr__symbolizer_add_search_dir(s, SYMCHAIN_DIR), 0);
  etr__symbol sym;
  assert_int_equal(etr__symbolize(s, "/elsewhere/libsymchain.so", m.bid, m.bid_len, vaddr, 0, &sym),
                   0);
  assert_string_equal(sym.name, "symchain_b");
  assert_true(ends_with(sym.filename, "/symchain.c"));
  etr__symbolizer_free(s);

  /* By build-id: DIR/.build-id/xx/rest.debug (here a link to the whole library). */
  char dir[] = "/tmp/etr-symtest-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char hex[129], sub[PATH_MAX], file[PATH_MAX + 200];
  for (size_t i = 0; i < m.bid_len; i++) snprintf(hex + 2 * i, 3, "%02x", m.bid[i]);
  snprintf(sub, sizeof sub, "%s/.build-id", dir);
  assert_int_equal(mkdir(sub, 0700), 0);
  snprintf(sub, sizeof sub, "%s/.build-id/%.2s", dir, hex);
  assert_int_equal(mkdir(sub, 0700), 0);
  snprintf(file, sizeof file, "%s/%s.debug", sub, hex + 2);
  assert_int_equal(symlink(SYMCHAIN_PATH, file), 0);
  s = new_symbolizer();
  assert_int_equal(etr__symbolizer_add_search_dir(s, dir), 0);
  assert_int_equal(etr__symbolize(s, "/elsewhere/libother.so", m.bid, m.bid_len, vaddr, 0, &sym),
                   0);
  assert_string_equal(sym.name, "symchain_b");
  /* Without the build-id nothing ties libother.so to the file. */
  assert_int_equal(etr__symbolize(s, "/elsewhere/libother.so", NULL, 0, vaddr, 0, &sym), 1);
  etr__symbolizer_free(s);
  unlink(file);
  rmdir(sub);
  snprintf(sub, sizeof sub, "%s/.build-id", dir);
  rmdir(sub);
  rmdir(dir);
}

/* The 20k-function library: names and lines of functions across its 8 compile units. */
static void test_20k(void **state) {
  (void)state;
  void *lib = load_lib(SYM20K_PATH);
  static const int idx[] = {0, 1, 2499, 2500, 9999, 12345, 17500, 19999};
  etr__symbolizer *s = new_symbolizer();
  for (size_t k = 0; k < sizeof idx / sizeof idx[0]; k++) {
    char name[64], file[64];
    snprintf(name, sizeof name, "etr_sym20k_f%d", idx[k]);
    uintptr_t f = (uintptr_t)dlsym(lib, name);
    assert_true(f != 0);
    modinfo m;
    assert_true(find_module(f, &m));
    etr__symbol sym;
    for (int off = 0; off < 2; off++) {
      assert_int_equal(etr__symbolize(s, m.path, m.bid, m.bid_len, f - m.bias + off, 0, &sym), 0);
      assert_string_equal(sym.name, name);
      snprintf(file, sizeof file, "/sym20k_%d.c", idx[k] / 2500);
      assert_true(ends_with(sym.filename, file));
      assert_int_equal(sym.line, idx[k] % 2500 + 3);
    }
  }
  etr__symbolizer_free(s);
  dlclose(lib);
}

static int count_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  assert_non_null(d);
  int n = 0;
  while (readdir(d) != NULL) n++;
  closedir(d);
  return n;
}

/* A symbolizer keeps no file descriptor open per module (files stay mapped). */
static void test_no_fd_per_module(void **state) {
  (void)state;
  etr__symbolizer *s = new_symbolizer();
  int before = count_fds();
  static const char *const libs[] = {SYMCHAIN_PATH, SYMCXX_PATH, SYM20K_PATH,
                                     SYMCHAIN_DIR "/libsymchain-dbglink.so",
                                     SYMCHAIN_DIR "/libsymchain-nodebug.so"};
  etr__symbol sym;
  for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++)
    assert_true(etr__symbolize(s, libs[i], NULL, 0, 0x1000, 0, &sym) >= 0);
  assert_int_equal(count_fds(), before);
  /* Still answers for new addresses after the descriptors were closed. */
  uint64_t b, hidden;
  int hidden_line;
  chain_vaddrs(&b, &hidden, &hidden_line);
  assert_int_equal(
      etr__symbolize(s, SYMCHAIN_DIR "/libsymchain-dbglink.so", NULL, 0, hidden, 0, &sym), 0);
  assert_string_equal(sym.name, "symchain_hidden");
  assert_int_equal(sym.line, hidden_line);
  etr__symbolizer_free(s);
}

/* ---- inlined calls expanded into frames ---- */

/* The index of the frame of function `name` in c (symbolized), -1 when absent. */
static int find_frame(etr__symbolizer *s, const capture *c, const char *name) {
  etr__symbol sym;
  for (int i = 0; i < c->n; i++)
    if (symbolize_frame(s, c, i, 1, &sym) >= 0 && strcmp(sym.name, name) == 0) return i;
  return -1;
}

/* etr__symbolize_frames of frame i of c (at its return address - 1), live (the main
 * program's path is "" then). */
static int frames_of(etr__symbolizer *s, const capture *c, int i, etr__symbol *out, size_t max) {
  uintptr_t pc = c->ip[i] - 1;
  const modinfo *m = &c->mod[i];
  return etr__symbolize_frames(s, m->path, m->bid, m->bid_len, pc - m->bias, pc, out, max);
}

static void check_frame(const etr__symbol *f, const char *name, const char *file_suffix,
                        int64_t line) {
  assert_string_equal(f->name, name);
  if (!ends_with(f->filename, file_suffix)) fail_msg("%s: file %s", name, f->filename);
  assert_int_equal(f->line, line);
}

/* symchain_c's call of the callback sits in symchain_inl2 inlined into symchain_inl inlined
 * into symchain_c: three frames, innermost first, each at its own line; etr__symbolize
 * still gives the outermost one only; max cuts the inner ones, never the real function. */
static void test_inline_frames(void **state) {
  (void)state;
  void *lib = load_lib(SYMCHAIN_PATH);
  capture c;
  capture_chain(lib, &c);
  int lines[3], inl[2];
  read_lines(lib, lines);
  memcpy(inl, dlsym(lib, "symchain_inl_lines"), sizeof inl);
  assert_true(inl[1] > 0 && inl[0] > inl[1] && lines[2] > inl[0]);
  etr__symbolizer *s = new_symbolizer();
  int i0 = find_frame(s, &c, "capture_cb");
  assert_true(i0 >= 0 && i0 + 2 < c.n);
  etr__symbolizer_free(s);

  /* Frames first, in a new symbolizer; then the outermost frame from the cache. */
  s = new_symbolizer();
  etr_traceback_stats st0 = stats_now();
  etr__symbol fr[8], one;
  memset(fr, 0, sizeof fr);
  assert_int_equal(frames_of(s, &c, i0 + 1, fr, 8), 3);
  check_frame(&fr[0], "symchain_inl2", "/symchain.c", inl[1]);
  check_frame(&fr[1], "symchain_inl", "/symchain.c", inl[0]);
  check_frame(&fr[2], "symchain_c", "/symchain.c", lines[2]);
  assert_null(fr[3].name); /* nothing written past the count */
  assert_int_equal(symbolize_frame(s, &c, i0 + 1, 0, &one), 0);
  assert_ptr_equal(one.name, fr[2].name);
  assert_ptr_equal(one.filename, fr[2].filename);
  assert_int_equal(one.line, fr[2].line);
  etr_traceback_stats st1 = stats_now();
  assert_int_equal(st1.symbol_cache_misses - st0.symbol_cache_misses, 1);
  assert_int_equal(st1.symbol_cache_hits - st0.symbol_cache_hits, 1);

  /* Fewer slots than frames: the innermost ones, and the real function last. */
  assert_int_equal(frames_of(s, &c, i0 + 1, fr, 2), 2);
  check_frame(&fr[0], "symchain_inl2", "/symchain.c", inl[1]);
  check_frame(&fr[1], "symchain_c", "/symchain.c", lines[2]);
  assert_int_equal(frames_of(s, &c, i0 + 1, fr, 1), 1);
  check_frame(&fr[0], "symchain_c", "/symchain.c", lines[2]);
  assert_int_equal(frames_of(s, &c, i0 + 1, fr, 0), ETR_EINVAL);
  assert_int_equal(etr__symbolize_frames(NULL, "x", NULL, 0, 1, 0, fr, 4), ETR_EINVAL);

  /* Without inlined code: one frame, etr__symbolize's. */
  assert_int_equal(frames_of(s, &c, i0 + 2, fr, 8), 1);
  check_frame(&fr[0], "symchain_b", "/symchain.c", lines[1]);
  assert_int_equal(frames_of(s, &c, i0, fr, 8), 1);
  assert_string_equal(fr[0].name, "capture_cb");
  assert_int_equal(etr__symbolize_frames(s, "/nonexistent/libq.so", NULL, 0, 0x44, 0, fr, 8), 1);
  assert_string_equal(fr[0].name, "libq.so+0x44");
  assert_int_equal(fr[0].line, 0);

  /* The same address in the stripped copies: from the separate debug file, the same chain;
   * without debug info, the symbol alone. */
  uint64_t vaddr = c.ip[i0 + 1] - 1 - c.mod[i0 + 1].bias;
  assert_int_equal(
      etr__symbolize_frames(s, SYMCHAIN_DIR "/libsymchain-dbglink.so", NULL, 0, vaddr, 0, fr, 8),
      3);
  check_frame(&fr[0], "symchain_inl2", "/symchain.c", inl[1]);
  check_frame(&fr[1], "symchain_inl", "/symchain.c", inl[0]);
  check_frame(&fr[2], "symchain_c", "/symchain.c", lines[2]);
  const char *nodebug = SYMCHAIN_DIR "/libsymchain-nodebug.so";
  assert_int_equal(etr__symbolize_frames(s, nodebug, NULL, 0, vaddr, 0, fr, 8), 1);
  check_frame(&fr[0], "symchain_c", nodebug, 0);
  etr__symbolizer_free(s);

  /* etr__symbolize first, in a new symbolizer: the same outermost frame. */
  s = new_symbolizer();
  assert_int_equal(symbolize_frame(s, &c, i0 + 1, 0, &one), 0);
  check_frame(&one, "symchain_c", "/symchain.c", lines[2]);
  assert_int_equal(frames_of(s, &c, i0 + 1, fr, 8), 3);
  assert_ptr_equal(fr[2].name, one.name);
  assert_string_equal(fr[0].name, "symchain_inl2");
  etr__symbolizer_free(s);
  dlclose(lib);
}

/* Innermost frame for the C++ chain: records the stack. */
__attribute__((noinline)) long capture_cb_long(long x) {
  void *buf[MAX_FRAMES];
  int n = backtrace(buf, MAX_FRAMES);
  for (int i = 0; i < n; i++) g_capture->ip[i] = (uintptr_t)buf[i];
  g_capture->n = n;
  __asm__ volatile("" ::: "memory");
  return x + 1;
}

/* A C++ function inlined into a C one: its frame is named with the demangled linkage name
 * (reached through the abstract origin and the declaration in its class). */
static void test_inline_frames_cxx(void **state) {
  (void)state;
  void *lib = load_lib(SYMCXX_PATH);
  long (*run)(long, long (*)(long)) = (long (*)(long, long (*)(long)))dlsym(lib, "symcxx_run");
  const int *lines = dlsym(lib, "symcxx_lines");
  assert_non_null(run);
  assert_non_null(lines);
  capture c;
  g_capture = &c;
  assert_int_equal(run(4, capture_cb_long), (4 + 1 + 1) * 2 + 3);
  for (int i = 0; i < c.n; i++) assert_true(find_module(c.ip[i], &c.mod[i]));
  assert_true(lines[0] > lines[1] && lines[1] > 0);
  etr__symbolizer *s = new_symbolizer();
  int i0 = find_frame(s, &c, "capture_cb_long");
  assert_true(i0 >= 0 && i0 + 1 < c.n);
  etr__symbol fr[4];
  assert_int_equal(frames_of(s, &c, i0 + 1, fr, 4), 2);
  check_frame(&fr[0], "etrtest::Box<long>::apply(long, long (*)(long))", "/symcxx.cpp", lines[1]);
  check_frame(&fr[1], "symcxx_run", "/symcxx.cpp", lines[0]);
  etr__symbolizer_free(s);
  dlclose(lib);
}

/* ---- files shared between modules, and only a few kept loaded ---- */

/* A copy of the file src at dst (a file of its own: another inode). */
static void copy_file(const char *src, const char *dst) {
  FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
  assert_non_null(in);
  assert_non_null(out);
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, in)) != 0) assert_int_equal(fwrite(buf, 1, n, out), n);
  fclose(in);
  assert_int_equal(fclose(out), 0);
}

static void assert_same_symbol(const etr__symbol *a, const etr__symbol *b) {
  assert_string_equal(a->name, b->name);
  assert_string_equal(a->filename, b->filename);
  assert_int_equal(a->line, b->line);
}

/* Module paths that are one file (symlinks to it; absent paths whose build-id finds it under
 * a search directory) share one load of it, and answer as its own path does. Before, each
 * path loaded the file again (findings-12 F1: ~17 MB each for libc). */
static void test_shared_file(void **state) {
  (void)state;
  void *lib = load_lib(SYMCHAIN_PATH);
  modinfo m;
  uint64_t vaddr;
  uintptr_t live;
  chain_b_address(lib, &m, &vaddr, &live);
  dlclose(lib);
  char dir[64], hex[129], sub[PATH_MAX], file[PATH_MAX + 200];
  temp_dir(dir, sizeof dir);
  for (size_t i = 0; i < m.bid_len; i++) snprintf(hex + 2 * i, 3, "%02x", m.bid[i]);
  snprintf(sub, sizeof sub, "%s/.build-id", dir);
  assert_int_equal(mkdir(sub, 0700), 0);
  snprintf(sub, sizeof sub, "%s/.build-id/%.2s", dir, hex);
  assert_int_equal(mkdir(sub, 0700), 0);
  snprintf(file, sizeof file, "%s/%s.debug", sub, hex + 2);
  assert_int_equal(symlink(SYMCHAIN_PATH, file), 0);

  etr__symbolizer *s = new_symbolizer();
  assert_int_equal(etr__symbolizer_add_search_dir(s, dir), 0);
  etr__symbol want, got;
  assert_int_equal(etr__symbolize(s, SYMCHAIN_PATH, m.bid, m.bid_len, vaddr, 0, &want), 0);
  assert_string_equal(want.name, "symchain_b");
  assert_int_equal(etr__symbolizer_loads(s), 1);
  for (int k = 0; k < 100; k++) {
    char path[PATH_MAX];
    if (k % 2) {
      snprintf(path, sizeof path, "%s/lib%d.so", dir, k);
      assert_int_equal(symlink(SYMCHAIN_PATH, path), 0);
    } else {
      snprintf(path, sizeof path, "/nonexistent/dir/lib%d.so", k);
    }
    /* Links are the file with or without the build-id (NULL: not checked); absent paths
     * need it. */
    size_t bid_len = k % 4 == 1 ? 0 : m.bid_len;
    const uint8_t *bid = bid_len ? m.bid : NULL;
    assert_int_equal(etr__symbolize(s, path, bid, bid_len, vaddr, 0, &got), 0);
    assert_same_symbol(&got, &want);
    assert_int_equal(etr__symbolize(s, path, bid, bid_len, vaddr + 1, 0, &got), 0);
    assert_string_equal(got.name, "symchain_b");
  }
  assert_int_equal(etr__symbolizer_loads(s), 1);
  /* An absent path without a build-id has no file at all: nothing loaded. */
  assert_int_equal(etr__symbolize(s, "/nonexistent/dir/libz.so", NULL, 0, vaddr, 0, &got), 1);
  assert_int_equal(etr__symbolizer_loads(s), 1);
  etr__symbolizer_free(s);
  remove_tree(dir);
}

/* Every frame of the addresses [lo, lo + n) of module path, through s, into out[i * 8...]:
 * the frame counts into counts. */
static void frames_range(etr__symbolizer *s, const char *path, uint64_t lo, int n, etr__symbol *out,
                         int *counts) {
  for (int i = 0; i < n; i++) {
    counts[i] = etr__symbolize_frames(s, path, NULL, 0, lo + (uint64_t)i, 0, out + 8 * i, 8);
    assert_true(counts[i] >= 1);
  }
}

/* More distinct files than are kept loaded, used in turns: the least recently used is closed
 * and loaded again when needed; answers (and the strings given before, which must outlive
 * the file they came from) do not change. */
static void test_loaded_bound(void **state) {
  (void)state;
  enum { COPIES = 6, N = 96 };
  static const char *const src[2] = {SYMCHAIN_PATH, SYMCXX_PATH};
  uint64_t lo[2];
  {
    void *lib = load_lib(SYMCHAIN_PATH);
    modinfo m;
    uintptr_t live;
    chain_b_address(lib, &m, &lo[0], &live);
    lo[0] -= 32;
    dlclose(lib);
    lib = load_lib(SYMCXX_PATH);
    void *(*addr)(void) = (void *(*)(void))dlsym(lib, "symcxx_addr");
    uintptr_t f = (uintptr_t)addr();
    assert_true(find_module(f, &m));
    lo[1] = f - m.bias;
    dlclose(lib);
  }
  char dir[64], path[2 * COPIES][PATH_MAX];
  temp_dir(dir, sizeof dir);
  for (int k = 0; k < 2 * COPIES; k++) {
    snprintf(path[k], sizeof path[k], "%s/copy%d.so", dir, k);
    copy_file(src[k % 2], path[k]);
  }
  /* What each copy says with every file kept loaded, */
  static etr__symbol want[2 * COPIES][N * 8], got[2 * COPIES][N * 8];
  static int nwant[2 * COPIES][N], ngot[2 * COPIES][N];
  etr__symbolizer *ref = new_symbolizer();
  for (int k = 0; k < 2 * COPIES; k++) frames_range(ref, path[k], lo[k % 2], N, want[k], nwant[k]);
  assert_int_equal(etr__symbolizer_loads(ref), 2 * COPIES);
  /* and with two: the copies in turns, a new address of each every time. */
  etr__symbolizer *s = new_symbolizer();
  etr__symbolizer_set_max_loaded(s, 2);
  for (int i = 0; i < N; i++)
    for (int k = 0; k < 2 * COPIES; k++)
      frames_range(s, path[k], lo[k % 2] + (uint64_t)i, 1, got[k] + 8 * i, ngot[k] + i);
  assert_true(etr__symbolizer_loads(s) > 2 * COPIES * (N - 1));
  bool demangled = false;
  for (int k = 0; k < 2 * COPIES; k++) {
    for (int i = 0; i < N; i++) {
      assert_int_equal(ngot[k][i], nwant[k][i]);
      for (int j = 0; j < nwant[k][i]; j++) {
        assert_same_symbol(&got[k][8 * i + j], &want[k][8 * i + j]);
        demangled |= strstr(got[k][8 * i + j].name, "etrtest::") != NULL;
      }
    }
  }
  assert_true(demangled);
  /* Cached answers come back without a load. */
  size_t loads = etr__symbolizer_loads(s);
  etr__symbol again;
  assert_true(etr__symbolize(s, path[0], NULL, 0, lo[0], 0, &again) >= 0);
  assert_ptr_equal(again.name, got[0][8 * 0 + ngot[0][0] - 1].name);
  assert_int_equal(etr__symbolizer_loads(s), loads);
  etr__symbolizer_free(ref);
  etr__symbolizer_free(s);
  remove_tree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chain_dlopen),  cmocka_unit_test(test_chain_closed),
      cmocka_unit_test(test_build_id),      cmocka_unit_test(test_fallbacks),
      cmocka_unit_test(test_cache),         cmocka_unit_test(test_demangle),
      cmocka_unit_test(test_stripped),      cmocka_unit_test(test_search_dirs),
      cmocka_unit_test(test_20k),           cmocka_unit_test(test_no_fd_per_module),
      cmocka_unit_test(test_inline_frames), cmocka_unit_test(test_inline_frames_cxx),
      cmocka_unit_test(test_shared_file),   cmocka_unit_test(test_loaded_bound),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
