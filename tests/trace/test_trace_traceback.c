/* Tracebacks in the trace: selection (all, pattern, 1 in N, runtime switch), the tables
 * after finish_ts (consistent, deduplicated), real function/file/line for a known call chain,
 * module mode, depth limit, counters, bad options, a plugin replaced by another at the same
 * address. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_util.h"

#define NOINLINE __attribute__((noinline))

/* Lines of the calls to etr_record_begin below (set as the call runs). */
static int line_leaf, line_mid, line_root;
static volatile int sink;

/* Each __LINE__ must be the line of the call it names: keep clang-format away. */
/* clang-format off */
static NOINLINE void tb_leaf(const char *name) {
  etr_record r;
  etr_record_init(&r, name, ETR_SCOPE_FUNCTION);
  line_leaf = __LINE__; etr_record_begin(&r);
  sink++;
  etr_record_end(&r);
}

static NOINLINE void tb_mid(const char *name) {
  line_mid = __LINE__; tb_leaf(name);
  sink++;
}

static NOINLINE void tb_root(const char *name) {
  line_root = __LINE__; tb_mid(name);
  sink++;
}
/* clang-format on */

static NOINLINE void tb_recurse(int n) {
  if (n > 0) {
    tb_recurse(n - 1);
    sink++;
    return;
  }
  tb_leaf("tb::deep");
}

static json_t *table(const tu_trace *t, const char *key) {
  json_t *a = json_object_get(t->root, key);
  assert_non_null(a);
  assert_true(json_is_array(a));
  return a;
}

/* The frames of node's traceback, innermost first (asserts the tables are consistent). */
static json_t *frames_of(const tu_trace *t, const json_t *node) {
  json_int_t idx = tu_attr_int(node, "traceback");
  json_t *tbs = table(t, "tracebacks"), *frames = table(t, "frames");
  assert_in_range(idx, 0, (json_int_t)json_array_size(tbs) - 1);
  json_t *tb = json_array_get(tbs, (size_t)idx);
  json_t *out = json_array();
  size_t i;
  json_t *fi;
  json_array_foreach(tb, i, fi) {
    assert_true(json_is_integer(fi));
    json_int_t k = json_integer_value(fi);
    assert_in_range(k, 0, (json_int_t)json_array_size(frames) - 1);
    json_array_append(out, json_array_get(frames, (size_t)k));
  }
  return out;
}

static const char *fstr(const json_t *f, const char *key) {
  json_t *v = json_object_get(f, key);
  assert_non_null(v);
  assert_true(json_is_string(v));
  return json_string_value(v);
}

static json_int_t fline(const json_t *f) {
  json_t *v = json_object_get(f, "line");
  assert_true(json_is_integer(v));
  return json_integer_value(v);
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Every frame once, every traceback once. */
static void check_tables_unique(const tu_trace *t) {
  json_t *frames = table(t, "frames"), *tbs = table(t, "tracebacks");
  for (size_t i = 0; i < json_array_size(frames); i++)
    for (size_t j = i + 1; j < json_array_size(frames); j++)
      assert_false(json_equal(json_array_get(frames, i), json_array_get(frames, j)));
  for (size_t i = 0; i < json_array_size(tbs); i++)
    for (size_t j = i + 1; j < json_array_size(tbs); j++)
      assert_false(json_equal(json_array_get(tbs, i), json_array_get(tbs, j)));
}

static void test_known_chain(void **state) {
  (void)state;
  tu_trace t;
  tu_open_traceback(&t, NULL);
  tb_root("tb::chain");
  tu_close_ok(&t);
  json_t *node = tu_node(&t, "tb::chain");
  json_t *fr = frames_of(&t, node);
  assert_true(json_array_size(fr) >= 4);
  /* Innermost first: the runtime's call to etr_record_begin, then its callers. */
  static const char *const names[] = {"tb_leaf", "tb_mid", "tb_root", "test_known_chain"};
  const int lines[] = {line_leaf, line_mid, line_root};
  for (size_t i = 0; i < 4; i++) {
    json_t *f = json_array_get(fr, i);
    if (strcmp(fstr(f, "name"), names[i]) != 0)
      fail_msg("frame %zu is '%s' (%s:%lld), expected %s", i, fstr(f, "name"), fstr(f, "filename"),
               (long long)fline(f), names[i]);
    assert_true(ends_with(fstr(f, "filename"), "test_trace_traceback.c"));
    if (i < 3) assert_int_equal(fline(f), lines[i]);
  }
  check_tables_unique(&t);
  assert_int_equal(tu_stat(&t, "tracebacks"), 1);
  json_decref(fr);
  tu_free(&t);
}

static void test_identical_stacks_share(void **state) {
  (void)state;
  tu_trace t;
  tu_open_traceback(&t, NULL);
  for (int i = 0; i < 50; i++) tb_root("tb::same"); /* one call site: one stack */
  tb_mid("tb::other");                              /* a different stack */
  tu_close_ok(&t);
  assert_int_equal(tu_count(&t, "tb::same"), 50);
  json_int_t first = -1;
  for (size_t i = 0; i < json_array_size(t.nodes); i++) {
    json_t *n = json_array_get(t.nodes, i);
    if (strcmp(tu_name(n), "tb::same") != 0) continue;
    json_int_t idx = tu_attr_int(n, "traceback");
    if (first < 0) first = idx;
    assert_int_equal(idx, first);
  }
  assert_int_not_equal(tu_attr_int(tu_node(&t, "tb::other"), "traceback"), first);
  assert_int_equal(json_array_size(table(&t, "tracebacks")), 2);
  assert_int_equal(tu_stat(&t, "tracebacks_unique"), 2);
  assert_int_equal(tu_stat(&t, "tracebacks"), 51);
  check_tables_unique(&t);
  tu_free(&t);
}

static void test_pattern_and_every(void **state) {
  (void)state;
  tu_trace t;
  etr_traceback_options opt_tb = ETR_TRACEBACK_OPTIONS_INIT;
  opt_tb.pattern = "tb::pick*";
  opt_tb.every = 4;
  tu_open_traceback(&t, &opt_tb);
  for (int i = 0; i < 40; i++) {
    tb_leaf("tb::picked");
    tb_leaf("tb::skipped");
  }
  tu_close_ok(&t);
  size_t with = 0;
  for (size_t i = 0; i < json_array_size(t.nodes); i++) {
    json_t *n = json_array_get(t.nodes, i);
    if (tu_attr(n, "traceback")) {
      assert_string_equal(tu_name(n), "tb::picked");
      with++;
    }
  }
  assert_int_equal(with, 10); /* 1 in 4 of the 40 matching ops */
  assert_int_equal(tu_stat(&t, "tracebacks"), 10);
  tu_free(&t);
}

/* Two call sites on one line read the same once symbolized (function, file, line): one
 * entry of the tracebacks table, which holds each traceback once. */
static void test_same_line_sites_share(void **state) {
  (void)state;
  tu_trace t;
  tu_open_traceback(&t, NULL);
  (tb_leaf("tb::twin"), tb_leaf("tb::twin")); /* two return addresses, one line */
  tu_close_ok(&t);
  json_int_t first = -1;
  size_t n = 0;
  for (size_t i = 0; i < json_array_size(t.nodes); i++) {
    json_t *node = json_array_get(t.nodes, i);
    if (strcmp(tu_name(node), "tb::twin")) continue;
    json_int_t tbi = tu_attr_int(node, "traceback");
    if (first < 0) first = tbi;
    assert_int_equal(tbi, first);
    n++;
  }
  assert_int_equal(n, 2);
  assert_int_equal(json_array_size(table(&t, "tracebacks")), 1);
  assert_int_equal(tu_stat(&t, "tracebacks_unique"), 1);
  check_tables_unique(&t);
  tu_free(&t);
}

/* A program built against etr 0.1.0's header passes its options in that layout (104 bytes,
 * the traceback options held by value): read as such, never as a pointer. */
typedef struct options_0_1 {
  size_t struct_size;
  etr_schema schema;
  bool no_timing;
  uint32_t buffer_kb, max_buffers;
  double sample_probability;
  uint32_t scopes;
  etr_traceback_options traceback;
  uint32_t flush_ms, flush_kb;
  bool sync, fatal_signals;
  uint32_t stall_ms;
  bool ns_timing;
} options_0_1;

static void test_options_of_0_1(void **state) {
  (void)state;
  options_0_1 old;
  memset(&old, 0, sizeof old);
  old.struct_size = sizeof old;
  old.traceback = (etr_traceback_options)ETR_TRACEBACK_OPTIONS_INIT;
  old.traceback.enabled = true;
  old.traceback.pattern = "tb::old*";
  tu_trace t;
  tu_open(&t, (const etr_trace_options *)(const void *)&old);
  tb_leaf("tb::old_layout");
  tb_leaf("tb::other");
  tu_close_ok(&t);
  assert_non_null(tu_attr(tu_node(&t, "tb::old_layout"), "traceback"));
  assert_null(tu_attr(tu_node(&t, "tb::other"), "traceback"));
  tu_free(&t);
}

/* A pattern sees the name as recorded, cut at 8192 bytes: a 4 MB name matches on what the
 * trace shows of it (and costs no more than a name at the limit; bench: not timed here). */
static void test_pattern_on_huge_names(void **state) {
  (void)state;
  size_t big = 4u << 20;
  char *head = malloc(big + 1), *tail = malloc(big + 1);
  assert_non_null(head);
  assert_non_null(tail);
  memset(head, 'x', big);
  memcpy(head, "tb::pick", 8); /* matches within the first 8192 bytes */
  head[big] = '\0';
  memset(tail, 'x', big);
  memcpy(tail + big - 8, "tb::pick", 8); /* only past the cut */
  tail[big] = '\0';
  tu_trace t;
  etr_traceback_options opt_tb = ETR_TRACEBACK_OPTIONS_INIT;
  opt_tb.pattern = "*tb::pick*";
  tu_open_traceback(&t, &opt_tb);
  for (int i = 0; i < 3; i++) {
    tb_leaf(head);
    tb_leaf(tail);
  }
  tu_close_ok(&t);
  size_t with = 0, without = 0;
  for (size_t i = 0; i < json_array_size(t.nodes); i++) {
    json_t *n = json_array_get(t.nodes, i);
    const char *name = tu_name(n);
    if (strncmp(name, "tb::pick", 8) == 0) {
      assert_non_null(tu_attr(n, "traceback"));
      assert_int_equal(strlen(name), 8192);
      with++;
    } else if (name[0] == 'x') {
      assert_null(tu_attr(n, "traceback"));
      without++;
    }
  }
  assert_int_equal(with, 3);
  assert_int_equal(without, 3);
  tu_free(&t);
  free(head);
  free(tail);
}

static void test_runtime_switch(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL); /* no tracebacks at open */
  tb_leaf("tb::before");
  etr_traceback_options tb = ETR_TRACEBACK_OPTIONS_INIT;
  tb.enabled = true;
  assert_int_equal(etr_trace_set_traceback(t.trace, &tb), 0);
  tb_leaf("tb::during");
  tb.enabled = false;
  assert_int_equal(etr_trace_set_traceback(t.trace, &tb), 0);
  tb_leaf("tb::after");
  tb.max_depth = 257;
  assert_int_equal(etr_trace_set_traceback(t.trace, &tb), ETR_EINVAL);
  assert_int_equal(etr_trace_set_traceback(NULL, &tb), ETR_EINVAL);
  assert_int_equal(etr_trace_set_traceback(t.trace, NULL), ETR_EINVAL);
  tu_close_ok(&t);
  assert_null(tu_attr(tu_node(&t, "tb::before"), "traceback"));
  assert_non_null(tu_attr(tu_node(&t, "tb::during"), "traceback"));
  assert_null(tu_attr(tu_node(&t, "tb::after"), "traceback"));
  tu_free(&t);
}

/* A host that switches tracebacks on and off all the time (per step, per request): until
 * 2026-11-28 every configuration set stayed allocated until close (62 bytes and a copy of
 * the pattern each: 20 000 switches with a 2 KB pattern held 40 MB). Now a configuration
 * the same as an earlier one is that one again: 20 000 switches among 12 settings allocate
 * a few KB (mallinfo2: nothing else runs meanwhile, no op is recorded), and an earlier
 * setting taken again works as it did (a pattern, then none, then the pattern again). */
static void test_switch_often(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  static char pattern[2048];
  memset(pattern, 'x', sizeof pattern - 2);
  pattern[sizeof pattern - 2] = '*';
  etr_traceback_options tb = ETR_TRACEBACK_OPTIONS_INIT;
#ifdef __GLIBC__
  size_t before = mallinfo2().uordblks;
#endif
  for (int i = 0; i < 20000; i++) {
    tb.enabled = (i & 1) != 0;
    tb.pattern = (i & 2) ? pattern : NULL;
    tb.every = 1 + (uint32_t)(i % 3);
    assert_int_equal(etr_trace_set_traceback(t.trace, &tb), 0);
  }
#ifdef __GLIBC__
  size_t after = mallinfo2().uordblks;
  fprintf(stderr, "20 000 switches: %zu bytes more allocated\n",
          after > before ? after - before : 0);
  assert_true(after < before + ((size_t)1 << 20));
#endif
  tb.every = 1;
  tb.enabled = true;
  tb.pattern = "tb::sw_y*";
  assert_int_equal(etr_trace_set_traceback(t.trace, &tb), 0);
  tb_leaf("tb::sw_yes_1");
  tb_leaf("tb::sw_no_1");
  tb.pattern = NULL;
  assert_int_equal(etr_trace_set_traceback(t.trace, &tb), 0);
  tb_leaf("tb::sw_no_2");
  tb.pattern = "tb::sw_y*";
  assert_int_equal(etr_trace_set_traceback(t.trace, &tb), 0);
  tb_leaf("tb::sw_yes_3");
  tb_leaf("tb::sw_no_3");
  tb.enabled = false;
  assert_int_equal(etr_trace_set_traceback(t.trace, &tb), 0);
  tb_leaf("tb::sw_yes_4");
  tu_close_ok(&t);
  assert_non_null(tu_attr(tu_node(&t, "tb::sw_yes_1"), "traceback"));
  assert_null(tu_attr(tu_node(&t, "tb::sw_no_1"), "traceback"));
  assert_non_null(tu_attr(tu_node(&t, "tb::sw_no_2"), "traceback")); /* (every op) */
  assert_non_null(tu_attr(tu_node(&t, "tb::sw_yes_3"), "traceback"));
  assert_null(tu_attr(tu_node(&t, "tb::sw_no_3"), "traceback"));
  assert_null(tu_attr(tu_node(&t, "tb::sw_yes_4"), "traceback"));
  tu_free(&t);
}

static void test_depth_limit(void **state) {
  (void)state;
  tu_trace t;
  etr_traceback_options opt_tb = ETR_TRACEBACK_OPTIONS_INIT;
  opt_tb.max_depth = 8;
  tu_open_traceback(&t, &opt_tb);
  tb_recurse(100);
  tu_close_ok(&t);
  json_t *fr = frames_of(&t, tu_node(&t, "tb::deep"));
  assert_int_equal(json_array_size(fr), 8);
  assert_string_equal(fstr(json_array_get(fr, 0), "name"), "tb_leaf");
  for (size_t i = 1; i < 8; i++)
    assert_string_equal(fstr(json_array_get(fr, i), "name"), "tb_recurse");
  json_decref(fr);
  tu_free(&t);
}

static void test_module_mode(void **state) {
  (void)state;
  tu_trace t;
  etr_traceback_options opt_tb = ETR_TRACEBACK_OPTIONS_INIT;
  opt_tb.symbolize = ETR_SYMBOLIZE_MODULE;
  tu_open_traceback(&t, &opt_tb);
  tb_root("tb::module");
  tu_close_ok(&t);
  json_t *fr = frames_of(&t, tu_node(&t, "tb::module"));
  json_t *f = json_array_get(fr, 0);
  const char *module = fstr(f, "module");
  assert_true(ends_with(module, "trace_test_traceback"));
  assert_string_equal(fstr(f, "filename"), module);
  const char *bid = fstr(f, "build_id");
  assert_true(strlen(bid) >= 16 && strspn(bid, "0123456789abcdef") == strlen(bid));
  json_t *off = json_object_get(f, "offset");
  assert_true(json_is_integer(off) && json_integer_value(off) > 0);
  char expect[64];
  snprintf(expect, sizeof expect, "trace_test_traceback+0x%llx",
           (unsigned long long)json_integer_value(off));
  assert_string_equal(fstr(f, "name"), expect);
  assert_int_equal(fline(f), 0);
  json_decref(fr);
  tu_free(&t);
}

/* ---- a plugin replaced by another at the same address ---- */

typedef size_t (*reload_entry_fn)(size_t (*cb)(void *), void *arg);

static NOINLINE size_t reload_cb(void *arg) {
  etr_record r;
  etr_record_init(&r, (const char *)arg, ETR_SCOPE_FUNCTION);
  etr_record_begin(&r);
  sink++;
  etr_record_end(&r);
  return 1;
}

/* Rounds A, B, A, B: each opens its plugin, records 3 ops through it and closes it (with
 * etr_trace_flush before the close when flush is set). False when a plugin was not loaded
 * at the first one's address (nothing to test then). */
static NOINLINE bool record_reloads(bool flush, tu_trace *t) {
  uintptr_t base0 = 0;
  bool same = true;
  for (int k = 0; k < 4; k++) {
    void *h = dlopen(k % 2 ? RELOAD_B_PATH : RELOAD_A_PATH, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(h);
    void *sym = dlsym(h, "reload_entry");
    assert_non_null(sym);
    reload_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry);
    Dl_info di;
    assert_true(dladdr(sym, &di));
    if (k == 0) base0 = (uintptr_t)di.dli_fbase;
    same = same && (uintptr_t)di.dli_fbase == base0;
    for (int i = 0; i < 3; i++) entry(reload_cb, (void *)(k % 2 ? "reload::B" : "reload::A"));
    if (flush) assert_int_equal(etr_trace_flush(t->trace), 0);
    assert_int_equal(dlclose(h), 0);
  }
  return same;
}

/* A plugin closed and another opened at the same address: the ops recorded through each
 * have its own frames, the first op after each reload included (names in full mode; the
 * module path and build id in module mode). Before, the captures of up to 63 ops after a
 * reload were tagged with the old module-map generation: B's ops named A's function, with
 * A's module and build id. */
static void test_reloaded_plugin(void **state) {
  (void)state;
  for (int mode = 0; mode < 3; mode++) { /* full, full with flushes, module */
    etr_traceback_options opt_tb = ETR_TRACEBACK_OPTIONS_INIT;
    if (mode == 2) opt_tb.symbolize = ETR_SYMBOLIZE_MODULE;
    tu_trace t;
    tu_open_traceback(&t, &opt_tb);
    bool same = record_reloads(mode == 1, &t);
    tu_close_ok(&t);
    if (!same) {
      tu_free(&t);
      skip(); /* (the kernel put a plugin elsewhere: nothing to test) */
    }
    const char *build_id[2] = {NULL, NULL};
    size_t i, seen[2] = {0, 0};
    json_t *n;
    json_array_foreach(t.nodes, i, n) {
      const char *name = tu_name(n);
      int b = !strcmp(name, "reload::B") ? 1 : !strcmp(name, "reload::A") ? 0 : -1;
      if (b < 0) continue;
      seen[b]++;
      json_t *fr = frames_of(&t, n);
      assert_true(json_array_size(fr) >= 4);
      const json_t *f0 = json_array_get(fr, 0), *f1 = json_array_get(fr, 1),
                   *f2 = json_array_get(fr, 2), *f3 = json_array_get(fr, 3);
      const char *lib = b ? "libtrace_reload_b.so" : "libtrace_reload_a.so";
      if (mode < 2) {
        const char *want = b ? "reload_inner_b_different" : "reload_inner_a_original";
        if (strcmp(fstr(f1, "name"), want) != 0)
          fail_msg("mode %d: op %zu of %s: frame 1 is '%s' (%s), not %s", mode, seen[b], name,
                   fstr(f1, "name"), fstr(f1, "filename"), want);
        assert_string_equal(fstr(f0, "name"), "reload_cb");
        assert_string_equal(fstr(f2, "name"), "reload_entry");
        assert_string_equal(fstr(f3, "name"), "record_reloads");
      } else {
        for (int j = 1; j <= 2; j++) {
          const char *module = fstr(json_array_get(fr, (size_t)j), "module");
          if (!ends_with(module, lib))
            fail_msg("module mode: op %zu of %s: frame %d in %s, not %s", seen[b], name, j, module,
                     lib);
        }
        const char *bid = fstr(f1, "build_id");
        if (!build_id[b]) build_id[b] = bid;
        assert_string_equal(bid, build_id[b]);
      }
      json_decref(fr);
    }
    assert_int_equal(seen[0], 6);
    assert_int_equal(seen[1], 6);
    if (mode == 2) assert_string_not_equal(build_id[0], build_id[1]);
    tu_free(&t);
  }
}

static void test_counters(void **state) {
  (void)state;
  tu_trace t;
  etr_traceback_stats before, after;
  memset(&before, 0, sizeof before);
  memset(&after, 0, sizeof after);
  assert_int_equal(etr_traceback_stats_get(&before), 0);
  tu_open_traceback(&t, NULL);
  for (int i = 0; i < 20; i++) tb_root("tb::count");
  etr_trace_stats ts;
  memset(&ts, 0, sizeof ts);
  assert_int_equal(etr_trace_flush(t.trace), 0);
  assert_int_equal(etr_trace_stats_get(t.trace, &ts), 0);
  assert_int_equal(ts.tracebacks, 20);
  assert_int_equal(ts.tracebacks_unique, 1);
  tu_close_ok(&t);
  assert_int_equal(etr_traceback_stats_get(&after), 0);
  assert_true(after.captures >= before.captures + 20);
  assert_true(after.frames_captured > before.frames_captured);
  assert_true(after.unwind_cache_hits > before.unwind_cache_hits); /* the same stack 20 times */
  assert_true(after.symbol_cache_misses > before.symbol_cache_misses);
  assert_int_equal(etr_traceback_stats_get(NULL), ETR_EINVAL);
  tu_free(&t);
}

/* The symbolizer a trace's writer used serves the next trace (symbolize.c, "kept from one
 * trace to the next"): a host that opens and closes traces with tracebacks over and over
 * paid the loading of its modules' files at every close (tens of ms for a small program).
 * The second trace's stack is answered from the kept answers (no new symbol
 * cache miss), with the same names and lines as the first's. */
static void test_symbolizer_kept_across_traces(void **state) {
  (void)state;
  etr_traceback_stats s1 = {0}, s2 = {0}; /* (struct_size 0: this header's size) */
  json_t *names[2];
  for (int round = 0; round < 2; round++) {
    if (round == 1) assert_int_equal(etr_traceback_stats_get(&s1), 0);
    tu_trace t;
    tu_open_traceback(&t, NULL);
    tb_root("tb::kept");
    tu_close_ok(&t);
    json_t *fr = frames_of(&t, tu_node(&t, "tb::kept"));
    assert_true(json_array_size(fr) >= 4);
    assert_string_equal(fstr(json_array_get(fr, 2), "name"), "tb_root");
    assert_int_equal(fline(json_array_get(fr, 2)), line_root);
    names[round] = fr;
    tu_free(&t);
  }
  assert_int_equal(etr_traceback_stats_get(&s2), 0);
  assert_true(json_equal(names[0], names[1]));
  if (s2.symbol_cache_misses != s1.symbol_cache_misses)
    fail_msg("the second trace symbolized %llu addresses again",
             (unsigned long long)(s2.symbol_cache_misses - s1.symbol_cache_misses));
  assert_true(s2.symbol_cache_hits > s1.symbol_cache_hits);
  json_decref(names[0]);
  json_decref(names[1]);
}

static void test_bad_options(void **state) {
  (void)state;
  etr_trace_options opt;
  etr_traceback_options opt_tb;
  tu_traceback_options(&opt, &opt_tb);
  opt_tb.max_depth = 1000;
  etr_trace *tr = NULL;
  assert_int_equal(etr_trace_open("/tmp/etr-never-created.json", &opt, &tr), ETR_EINVAL);
  assert_null(tr);
  opt_tb.max_depth = 0;
  opt_tb.symbolize = (etr_symbolize_mode)7;
  assert_int_equal(etr_trace_open("/tmp/etr-never-created.json", &opt, &tr), ETR_EINVAL);
  opt_tb.symbolize = ETR_SYMBOLIZE_FULL;
  /* A struct_size no header had (between 0 and the first release's size): refused, by open
   * and by set_traceback, never read short (1 or 8 once copied that much: tracebacks asked
   * for and silently off, with ETR_OK). */
  const size_t short_tb[] = {1, 8, 9, 16, offsetof(etr_traceback_options, symbolize)};
  for (size_t i = 0; i < TU_ARRAY_LEN(short_tb); i++) {
    opt_tb.struct_size = short_tb[i];
    assert_int_equal(etr_trace_open("/tmp/etr-never-created.json", &opt, &tr), ETR_EINVAL);
  }
  opt_tb.struct_size = sizeof opt_tb;
  const size_t short_opt[] = {12, 16, 24, 40, offsetof(etr_trace_options, ring_mb)};
  for (size_t i = 0; i < TU_ARRAY_LEN(short_opt); i++) {
    opt.struct_size = short_opt[i];
    assert_int_equal(etr_trace_open("/tmp/etr-never-created.json", &opt, &tr), ETR_EINVAL);
  }
  opt.struct_size = sizeof opt;
  tu_trace t;
  tu_open(&t, NULL);
  opt_tb.struct_size = 8;
  assert_int_equal(etr_trace_set_traceback(t.trace, &opt_tb), ETR_EINVAL);
  opt_tb.struct_size = 0; /* (this libetr's own size) */
  assert_int_equal(etr_trace_set_traceback(t.trace, &opt_tb), 0);
  tu_close_ok(&t);
  tu_free(&t);
}

/* An op a host's thread-key destructor records as its thread exits (its key made after
 * etr's keys, so its destructor runs after theirs in each round) is in the trace with its
 * traceback: etr keeps the thread's recording and capture states for the later rounds
 * (before, the op was lost and only counted). */
static pthread_key_t host_key;

static void host_key_gone(void *value) {
  (void)value;
  tb_root("tb::in_key_destructor");
}

static void *thread_with_host_key(void *arg) {
  (void)arg;
  tb_root("tb::thread_body"); /* (the thread's states exist before the host's key is set) */
  pthread_setspecific(host_key, &host_key);
  return NULL;
}

static void test_host_key_destructor(void **state) {
  (void)state;
  tu_trace t;
  tu_open_traceback(&t, NULL);
  tb_root("tb::main"); /* (the capture's key exists before the host's) */
  assert_int_equal(pthread_key_create(&host_key, host_key_gone), 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, thread_with_host_key, NULL), 0);
  assert_int_equal(pthread_join(th, NULL), 0);
  pthread_key_delete(host_key);
  tu_close_ok(&t);
  json_t *body = tu_node(&t, "tb::thread_body"), *late = tu_node(&t, "tb::in_key_destructor");
  assert_int_equal(tu_attr_int(late, "tid"), tu_attr_int(body, "tid"));
  json_t *fr = frames_of(&t, late);
  assert_true(json_array_size(fr) >= 3);
  assert_string_equal(fstr(json_array_get(fr, 2), "name"), "tb_root");
  assert_string_equal(fstr(json_array_get(fr, 3), "name"), "host_key_gone");
  json_decref(fr);
  tu_free(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_TEST(test_known_chain),
      TU_TEST(test_identical_stacks_share),
      TU_TEST(test_pattern_and_every),
      TU_TEST(test_pattern_on_huge_names),
      TU_TEST(test_same_line_sites_share),
      TU_TEST(test_options_of_0_1),
      TU_TEST(test_runtime_switch),
      TU_TEST(test_depth_limit),
      TU_TEST(test_module_mode),
      TU_TEST(test_counters),
      TU_TEST(test_symbolizer_kept_across_traces),
      TU_TEST(test_bad_options),
      TU_TEST(test_reloaded_plugin),
      TU_TEST(test_host_key_destructor),
      TU_TEST(test_switch_often),
  };
  return cmocka_run_group_tests_name("trace_traceback", tests, NULL, NULL);
}
