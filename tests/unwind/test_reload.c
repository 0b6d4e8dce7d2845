/* Tracebacks through a library closed, replaced on disk and opened again, in a real trace.
 *
 *   test_reload mem TRACE LIB
 *       LIB opened, an op recorded through it, closed, 40 times: the module map must grow by
 *       about a pointer per module per reload (records shared), and only the current map
 *       may be left once the trace is closed.
 *   test_reload tables LIB
 *       LIB opened, a stack captured through it, closed, 40 times (every other time a map
 *       is built while LIB is closed), each stack added to a writer's traceback tables: the
 *       sites and stacks they keep must not grow with the reloads, and the stack must read
 *       as LIB's functions.
 *   test_reload names MODE TRACE PLUGIN LIB_A LIB_B
 *       LIB_A and LIB_B (other function names) installed in turn at PLUGIN (copy + rename,
 *       as a rebuild does), each opened, 3 ops recorded through it (op names say which
 *       build ran: op_A, op_B...), closed; check_reload.py reads the trace. MODE:
 *         noflush  A then B, symbolized at close only (A's file is gone by then)
 *         flush    A then B, each flushed while loaded
 *         deleted  A's file deleted while loaded, then flushed; B (flushed)
 *         stale    A (flushed); B (op_B1) closed and A installed again before the flush
 *                  that symbolizes it; B installed again (op_B2) and flushed while loaded
 *         traces   A in a first trace (closed, moved to TRACE.first), B in the next one
 *
 * Exit 0 when the run (and for mem its checks) went right; messages on stderr.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "etr/etr.h"
#include "observer/tbtable.h"
#include "unwind/cfi.h"

static etr_trace *g_tr;

static void die(const char *what) {
  fprintf(stderr, "test_reload: %s\n", what);
  exit(1);
}

__attribute__((noinline)) static void record_op(const char *op) {
  etr_record r;
  etr_record_init(&r, op, ETR_SCOPE_FUNCTION);
  etr_record_begin(&r);
  etr_record_end(&r);
  __asm__ volatile("" ::: "memory");
}

static void open_trace(const char *path) {
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  etr_traceback_options tb = ETR_TRACEBACK_OPTIONS_INIT;
  tb.enabled = true;
  tb.max_depth = 32;
  tb.symbolize = ETR_SYMBOLIZE_FULL;
  opt.traceback = &tb;
  if (etr_trace_open(path, &opt, &g_tr) != 0) die("etr_trace_open failed");
  etr_trace_enable(g_tr);
}

typedef void (*entry_fn)(void (*cb)(const char *), const char *op);

/* Open lib, record n ops named op through it, flush when asked (after deleting lib's file
 * when unlink_first), close it. */
static void through_ex(const char *lib, const char *op, int n, bool flush, bool unlink_first) {
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) die(dlerror());
  void *sym = dlsym(h, "reload_entry");
  if (!sym) sym = dlsym(h, "unwind_dl_entry");
  if (!sym) die("no entry point");
  entry_fn entry;
  memcpy(&entry, &sym, sizeof entry);
  for (int i = 0; i < n; i++) entry(record_op, op);
  if (unlink_first && unlink(lib) != 0) die("cannot delete the plugin");
  if (flush && etr_trace_flush(g_tr) != 0) die("etr_trace_flush failed");
  if (dlclose(h) != 0) die("dlclose failed");
}

static void through(const char *lib, const char *op, int n, bool flush) {
  through_ex(lib, op, n, flush, false);
}

/* Copy src to dst through a temporary file renamed over it: dst is a new file (inode). */
static void install(const char *src, const char *dst) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", dst);
  FILE *in = fopen(src, "rb"), *out = fopen(tmp, "wb");
  if (!in || !out) die("cannot copy the plugin");
  char buf[65536];
  size_t k;
  while ((k = fread(buf, 1, sizeof buf, in)) > 0)
    if (fwrite(buf, 1, k, out) != k) die("cannot write the plugin copy");
  fclose(in);
  if (fclose(out) != 0 || rename(tmp, dst) != 0) die("cannot install the plugin");
}

static int run_mem(const char *trace, const char *lib) {
  open_trace(trace);
  through(lib, "op", 1, false); /* (the first load: the libraries the trace itself opens) */
  etr__modmap_mem m0, m1, m2;
  etr__modmap_mem_get(&m0);
  for (int i = 0; i < 40; i++) through(lib, "op", 1, false);
  etr__modmap_mem_get(&m1);
  size_t gens = m1.maps - m0.maps;
  fprintf(stderr,
          "before: %zu maps, %zu records, %zu bytes; after 40 reloads: %zu maps, %zu "
          "records, %zu bytes (%zu modules)\n",
          m0.maps, m0.records, m0.bytes, m1.maps, m1.records, m1.bytes, m1.current_n);
  if (gens < 20) die("the reloads were not seen (fewer than 20 new generations)");
  /* a map header and a pointer per module; a new record for the library at most */
  size_t per_gen = (m1.bytes - m0.bytes) / gens;
  size_t bound = sizeof(etr__modmap) + m1.current_n * sizeof(void *) + sizeof(etr__modent) + 256;
  fprintf(stderr, "%zu bytes per generation (bound %zu)\n", per_gen, bound);
  if (per_gen > bound) die("a reload costs more than the modules that changed");
  if (etr_trace_close(g_tr) != 0) die("etr_trace_close failed");
  etr__modmap_mem_get(&m2);
  fprintf(stderr, "after close: %zu maps, %zu records, %zu bytes\n", m2.maps, m2.records, m2.bytes);
  if (m2.maps != 1 || m2.records != m2.current_n) die("older maps kept after the last close");
  return 0;
}

static uint64_t g_words[64];
static uint32_t g_n;
static uint64_t g_gen;

__attribute__((noinline)) static size_t capture_cb(void *arg) {
  (void)arg;
  uintptr_t ips[64];
  size_t n = etr__unwind_capture(ips, 64, 0, &g_gen);
  for (size_t i = 0; i < n; i++) g_words[i] = ips[i];
  g_n = (uint32_t)n;
  __asm__ volatile("" ::: "memory");
  return n;
}

typedef size_t (*dl_entry_fn)(size_t (*cb)(void *), void *arg);

/* Open lib, capture a stack through it, close it, add the stack to t; its generation. */
static uint64_t capture_through(etr__tbtab *t, const char *lib, bool map_while_closed) {
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) die(dlerror());
  void *sym = dlsym(h, "unwind_dl_entry");
  if (!sym) die("no entry point");
  dl_entry_fn entry;
  memcpy(&entry, &sym, sizeof entry);
  g_n = 0;
  entry(capture_cb, NULL);
  if (g_n < 3) die("the capture did not reach the library");
  if (dlclose(h) != 0) die("dlclose failed");
  /* A map built now lacks lib: its next load then cannot take the record of the map before */
  if (map_while_closed) etr__modmap_refresh();
  if (etr__tbtab_intern(t, g_gen, g_words, g_n) == UINT64_MAX) die("the stack was not added");
  etr__tbtab_symbolize(t);
  return g_gen;
}

static int run_tables(const char *lib) {
  etr__tbtab *t = etr__tbtab_new(ETR_SYMBOLIZE_FULL);
  if (!t) die("out of memory");
  uint64_t gen0 = 0, gen1 = 0, sites0 = 0, stacks0 = 0, sites1, stacks1;
  for (int i = 0; i < 42; i++) { /* (one call site: the stacks differ in the library only) */
    gen1 = capture_through(t, lib, i % 2 == 1);
    if (i == 1) {
      gen0 = gen1;
      etr__tbtab_kept(t, &sites0, &stacks0);
    }
  }
  etr__tbtab_kept(t, &sites1, &stacks1);
  fprintf(stderr,
          "generations %llu..%llu; after 2 loads: %llu sites, %llu stacks; after 42: %llu "
          "sites, %llu stacks\n",
          (unsigned long long)gen0, (unsigned long long)gen1, (unsigned long long)sites0,
          (unsigned long long)stacks0, (unsigned long long)sites1, (unsigned long long)stacks1);
  if (gen1 - gen0 < 20) die("the reloads were not seen (fewer than 20 new generations)");
  if (sites1 != sites0 || stacks1 != stacks0) die("the tables grew with unchanged reloads");
  if (etr__tbtab_tracebacks(t) != 1) die("one stack read as several tracebacks");
  /* The library's own names, not addresses: the stack was resolved through its file. */
  etr__jw w; /* (no file: the tables are small and stay in the buffer) */
  if (etr__jw_init(&w, -1, 1u << 20) != 0) die("out of memory");
  etr__tbtab_emit(t, &w);
  etr__jw_char(&w, '\0');
  bool named = w.buf && strstr(w.buf, "unwind_dl_inner") && strstr(w.buf, "unwind_dl_entry");
  if (!named) fprintf(stderr, "%s\n", w.buf ? w.buf : "(no output)");
  etr__jw_free(&w);
  etr__tbtab_free(t);
  if (!named) die("the library's functions were not named");
  return 0;
}

static int run_names(const char *mode, const char *trace, const char *plugin, const char *a,
                     const char *b) {
  open_trace(trace);
  if (!strcmp(mode, "noflush") || !strcmp(mode, "flush")) {
    bool flush = !strcmp(mode, "flush");
    install(a, plugin);
    through(plugin, "op_A", 3, flush);
    install(b, plugin);
    through(plugin, "op_B", 3, flush);
  } else if (!strcmp(mode, "deleted")) {
    install(a, plugin);
    through_ex(plugin, "op_A", 3, true, true);
    install(b, plugin);
    through(plugin, "op_B", 3, true);
  } else if (!strcmp(mode, "traces")) {
    /* A recorded and symbolized in a trace of its own, closed; B installed at the same path
     * and recorded in the next trace, whose writer takes the first one's symbolizer (its
     * answers for A's addresses, maybe B's too: the same path, likely the same address) */
    install(a, plugin);
    through(plugin, "op_A", 3, false);
    if (etr_trace_close(g_tr) != 0) die("etr_trace_close failed");
    char first[4096];
    snprintf(first, sizeof first, "%s.first", trace);
    if (rename(trace, first) != 0) die("cannot move the first trace aside");
    open_trace(trace);
    install(b, plugin);
    through(plugin, "op_B", 3, false);
  } else if (!strcmp(mode, "stale")) {
    install(a, plugin);
    through(plugin, "op_A", 3, true);
    install(b, plugin);
    through(plugin, "op_B1", 3, false);
    install(a, plugin);
    if (etr_trace_flush(g_tr) != 0) die("etr_trace_flush failed");
    install(b, plugin);
    through(plugin, "op_B2", 3, true);
  } else {
    die("unknown mode");
  }
  if (etr_trace_close(g_tr) != 0) die("etr_trace_close failed");
  unlink(plugin);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "mem")) return run_mem(argv[2], argv[3]);
  if (argc == 3 && !strcmp(argv[1], "tables")) return run_tables(argv[2]);
  if (argc == 7 && !strcmp(argv[1], "names"))
    return run_names(argv[2], argv[3], argv[4], argv[5], argv[6]);
  fprintf(stderr, "usage: test_reload mem TRACE LIB | names MODE TRACE PLUGIN LIB_A LIB_B\n");
  return 2;
}
