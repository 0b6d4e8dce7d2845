/* tests/reliability/test_hostile.c — hostile input to the record API (issue 5 item 4).
 *
 * Each test records through an open, enabled trace into a temp file, closes it with
 * etr_trace_close_stats and then checks: the file parses (jansson, which rejects invalid
 * UTF-8 and raw control bytes in strings), the tree invariants hold (tu_load), the op nodes
 * expected are there, and the counter in etr_trace_stats (equal to the footer's) or the
 * returned error code is the one the contract names. Every trace of this file also keeps:
 * op nodes == ops_recorded, nodes_dropped == 0, and utf8_replaced == the number of U+FFFD
 * characters in the file (no input here holds a valid U+FFFD).
 *
 * The matrix of cases and results is docs/RELIABILITY-hostile.md.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trace_util.h"

/* ---- helpers ---- */

static const char *const k_counters[] = {
    "ops_recorded",      "strings_cut",         "lists_cut",
    "utf8_replaced",     "nesting_cut",         "ends_without_begin",
    "ends_out_of_order", "ops_open_at_disable", "ops_open_at_thread_exit",
    "ops_open_at_close", "nodes_dropped",
};

static uint64_t stat_field(const etr_trace_stats *st, const char *name) {
  if (strcmp(name, "ops_recorded") == 0) return st->ops_recorded;
  if (strcmp(name, "strings_cut") == 0) return st->strings_cut;
  if (strcmp(name, "lists_cut") == 0) return st->lists_cut;
  if (strcmp(name, "utf8_replaced") == 0) return st->utf8_replaced;
  if (strcmp(name, "nesting_cut") == 0) return st->nesting_cut;
  if (strcmp(name, "ends_without_begin") == 0) return st->ends_without_begin;
  if (strcmp(name, "ends_out_of_order") == 0) return st->ends_out_of_order;
  if (strcmp(name, "ops_open_at_disable") == 0) return st->ops_open_at_disable;
  if (strcmp(name, "ops_open_at_thread_exit") == 0) return st->ops_open_at_thread_exit;
  if (strcmp(name, "ops_open_at_close") == 0) return st->ops_open_at_close;
  if (strcmp(name, "nodes_dropped") == 0) return st->nodes_dropped;
  fail_msg("unknown counter %s", name);
  return 0;
}

/* Occurrences of U+FFFD in a UTF-8 string of len bytes. */
static size_t fffd_in(const char *s, size_t len) {
  size_t n = 0;
  for (size_t i = 0; i + 3 <= len; i++)
    if (memcmp(s + i, "\xEF\xBF\xBD", 3) == 0) n++;
  return n;
}

/* U+FFFD characters in every string (keys too) of a JSON tree. */
static size_t fffd_in_tree(const json_t *v) {
  size_t n = 0;
  if (json_is_string(v)) return fffd_in(json_string_value(v), json_string_length(v));
  if (json_is_array(v)) {
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) { n += fffd_in_tree(x); }
  } else if (json_is_object(v)) {
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)v, k, x) { n += fffd_in(k, strlen(k)) + fffd_in_tree(x); }
  }
  return n;
}

static size_t op_node_count(const tu_trace *t) {
  return tu_node_count(t) - tu_count(t, TU_PROCESS_NAME) - tu_count(t, TU_THREAD_NAME);
}

/* Close with stats, parse, check the invariants of every trace of this file. */
static void close_checked(tu_trace *t, etr_trace_stats *st) {
  memset(st, 0, sizeof *st);
  st->struct_size = sizeof *st;
  t->close_rc = etr_trace_close_stats(t->trace, st);
  t->trace = NULL;
  tu_load(t); /* parses (valid UTF-8, no raw control bytes), tree invariants */
  if (t->close_rc != 0)
    fail_msg("etr_trace_close_stats = %d (%s)", t->close_rc, etr_strerror(t->close_rc));
  for (size_t i = 0; i < TU_ARRAY_LEN(k_counters); i++) {
    json_int_t f = tu_stat(t, k_counters[i]);
    if ((uint64_t)f != stat_field(st, k_counters[i]))
      fail_msg("footer %s = %lld, etr_trace_close_stats says %llu", k_counters[i], (long long)f,
               (unsigned long long)stat_field(st, k_counters[i]));
  }
  if (op_node_count(t) != st->ops_recorded)
    fail_msg("%zu op nodes in the file, ops_recorded %llu", op_node_count(t),
             (unsigned long long)st->ops_recorded);
  assert_int_equal(st->nodes_dropped, 0);
  assert_int_equal(st->write_error, 0);
  size_t fffd = fffd_in_tree(t->root);
  if (fffd != st->utf8_replaced)
    fail_msg("%zu U+FFFD in the file, utf8_replaced %llu", fffd,
             (unsigned long long)st->utf8_replaced);
}

/* No raw byte below 0x20 inside any string of the file text. */
static void assert_no_raw_control(const tu_trace *t) {
  int in_str = 0;
  for (size_t i = 0; i < t->len; i++) {
    unsigned char c = (unsigned char)t->text[i];
    if (in_str && c < 0x20) fail_msg("raw control byte 0x%02x inside a string at %zu", c, i);
    if (c == '"') in_str = !in_str;
    if (c == '\\' && in_str) i++;
  }
}

static json_t *in_val(const json_t *node, size_t i) { return tu_in(node, "inputs", "values", i); }
static const char *in_type(const json_t *node, size_t i) {
  return json_string_value(tu_in(node, "inputs", "types", i));
}
static size_t n_values(const json_t *node, const char *io) {
  return json_array_size(json_object_get(json_object_get(node, io), "values"));
}

/* The string value at input i, with its length; fails when it is not a string. */
static const char *in_str(const json_t *node, size_t i, size_t *len) {
  json_t *v = in_val(node, i);
  if (!json_is_string(v)) fail_msg("%s: input %zu is not a string", tu_name(node), i);
  if (len) *len = json_string_length(v);
  return json_string_value(v);
}

static uint64_t reg_stat(size_t off) {
  etr_registry_stats rs;
  memset(&rs, 0, sizeof rs);
  rs.struct_size = sizeof rs;
  assert_int_equal(etr_registry_stats_get(&rs), 0);
  uint64_t v;
  memcpy(&v, (const char *)&rs + off, sizeof v);
  return v;
}
#define REG_STAT(field) reg_stat(offsetof(etr_registry_stats, field))

/* ---- control bytes ---- */

static void test_control_bytes_round_trip_escaped(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  /* Every control byte 0x01-0x1f and 0x7f in a name, schema, kernel and collective strings,
   * a device, an object kind, a tensor's dtype and device; 0x00 too where a length is
   * given. */
  char ctl[34]; /* "\x01".."\x1f" "\x7f" "!" */
  for (int c = 1; c < 0x20; c++) ctl[c - 1] = (char)c;
  ctl[31] = 0x7f;
  ctl[32] = '!';
  ctl[33] = '\0';
  char name[40], schema[40];
  snprintf(name, sizeof name, "N%s", ctl);
  snprintf(schema, sizeof schema, "S%s", ctl);
  char all[34]; /* 0x00-0x1f, 0x7f, 'z': with an explicit length */
  for (int c = 0; c < 0x20; c++) all[c] = (char)c;
  all[32] = 0x7f;
  all[33] = 'z';
  enum { NSINGLE = 33 };
  char single[NSINGLE][4];
  etr_value in[NSINGLE + 6];
  for (int k = 0; k < NSINGLE; k++) {
    int c = k < 32 ? k : 0x7f;
    single[k][0] = '<';
    single[k][1] = (char)c;
    single[k][2] = '>';
    single[k][3] = '\0';
    in[k] = etr_value_string_n(single[k], 3); /* 0x00 needs the length */
  }
  static int impl, stor;
  const int64_t sz[1] = {2};
  etr_tensor tx = {&impl, &stor, 0, 2, 4, "fl\x01oat\x1f", "cu\x0a\x7f", 1, sz, NULL};
  in[NSINGLE + 0] = etr_value_string_n(all, sizeof all);
  in[NSINGLE + 1] = etr_value_string(ctl);
  in[NSINGLE + 2] = etr_value_device(ctl);
  in[NSINGLE + 3] = etr_value_object("K\x08\x7f");
  in[NSINGLE + 4] = etr_value_tensor(&tx);
  in[NSINGLE + 5] = etr_value_string_n("", 0); /* empty */
  etr_kernel_info k = ETR_KERNEL_INFO_INIT;
  k.backend = ctl;
  k.file = "f\x0d\x0a";
  etr_collective_info co = ETR_COLLECTIVE_INFO_INIT;
  co.name = "all\x1breduce";
  co.dtype = "F\x09";
  co.pg_name = ctl;
  co.pg_desc = "\x7f";
  etr_record r;
  etr_record_init(&r, name, ETR_SCOPE_FUNCTION);
  assert_true(etr_record_is_active(&r));
  r.schema = schema;
  r.inputs = in;
  r.n_inputs = TU_ARRAY_LEN(in);
  r.kernel = &k;
  r.collective = &co;
  etr_record_begin(&r);
  r.outputs = in;
  r.n_outputs = 1;
  etr_record_end(&r);
  /* A NUL-terminated name ends at its first NUL. */
  tu_op("cut\0here", NULL, 0, NULL, 0);
  etr_trace_stats st;
  close_checked(&t, &st);
  assert_no_raw_control(&t);

  json_t *n = tu_node(&t, name);
  assert_string_equal(tu_attr_str(n, "op_schema"), schema);
  assert_int_equal(n_values(n, "inputs"), TU_ARRAY_LEN(in));
  for (int kk = 0; kk < NSINGLE; kk++) {
    size_t len;
    const char *s = in_str(n, (size_t)kk, &len);
    assert_int_equal(len, 3);
    assert_memory_equal(s, single[kk], 3);
  }
  size_t len;
  const char *s = in_str(n, NSINGLE, &len);
  assert_int_equal(len, sizeof all);
  assert_memory_equal(s, all, sizeof all);
  assert_string_equal(in_str(n, NSINGLE + 1, NULL), ctl);
  assert_string_equal(json_string_value(in_val(n, NSINGLE + 2)), ctl);
  assert_string_equal(in_type(n, NSINGLE + 2), "Device");
  assert_string_equal(json_string_value(in_val(n, NSINGLE + 3)), "<K\x08\x7f>");
  json_t *tv = in_val(n, NSINGLE + 4);
  assert_string_equal(json_string_value(json_array_get(tv, 5)), "cu\x0a\x7f");
  assert_string_equal(in_type(n, NSINGLE + 4), "Tensor(fl\x01oat\x1f)");
  assert_string_equal(in_str(n, NSINGLE + 5, NULL), "");
  assert_string_equal(tu_attr_str(n, "kernel_backend"), ctl);
  assert_string_equal(tu_attr_str(n, "kernel_file"), "f\x0d\x0a");
  assert_string_equal(tu_attr_str(n, "collective_name"), "all\x1breduce");
  assert_string_equal(tu_attr_str(n, "pg_name"), ctl);
  assert_string_equal(tu_attr_str(n, "pg_desc"), "\x7f");
  json_t *o = tu_in(n, "outputs", "values", 0);
  assert_int_equal(json_string_length(o), 3);
  assert_memory_equal(json_string_value(o), single[0], 3);
  assert_int_equal(tu_count(&t, "cut"), 1);
  assert_int_equal(st.ops_recorded, 2);
  assert_int_equal(st.utf8_replaced, 0);
  assert_int_equal(st.strings_cut, 0);
  tu_free(&t);
}

/* ---- invalid UTF-8 ---- */

static const char *const k_bad_utf8[] = {
    "\x80",                     /* lone continuation byte */
    "\xBF\x80\xBF",             /* run of continuation bytes */
    "\xC0\x80",                 /* overlong NUL (2 bytes) */
    "\xC1\xBF",                 /* overlong (C1) */
    "\xE0\x80\xAF",             /* overlong '/' (3 bytes) */
    "\xE0\x9F\xBF",             /* overlong U+07FF (3 bytes) */
    "\xF0\x80\x80\xAF",         /* overlong '/' (4 bytes) */
    "\xF0\x8F\xBF\xBF",         /* overlong U+FFFF (4 bytes) */
    "\xED\xA0\x80",             /* high surrogate U+D800 */
    "\xED\xAF\xBF",             /* high surrogate U+DBFF */
    "\xED\xB0\x80",             /* low surrogate U+DC00 */
    "\xED\xBF\xBF",             /* low surrogate U+DFFF */
    "\xED\xA0\xBD\xED\xB2\xA9", /* CESU-8 surrogate pair */
    "\xF4\x90\x80\x80",         /* above U+10FFFF */
    "\xF5\x80\x80\x80",         /* lead byte F5 */
    "\xF8\x88\x80\x80\x80",     /* 5-byte form */
    "\xFC\x84\x80\x80\x80\x80", /* 6-byte form */
    "\xFF",                     /* 0xFF */
    "\xFE\xFF",                 /* BOM bytes of UTF-16 */
    "\xC3",                     /* truncated 2-byte */
    "\xE2\x82",                 /* truncated 3-byte */
    "\xF0\x9F\x98",             /* truncated 4-byte */
    "\xC3"
    "A", /* lead byte then ASCII */
    "\xE2"
    "A\x82", /* lead, ASCII, continuation */
};

static void test_invalid_utf8_replaced_and_counted(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  size_t nc = TU_ARRAY_LEN(k_bad_utf8);
  static int impl[TU_ARRAY_LEN(k_bad_utf8)];
  for (size_t i = 0; i < nc; i++) {
    /* The bad bytes in the name (between markers), the schema, a string (both kinds), a
     * device, an object kind, a tensor's dtype and device, and the kernel backend. */
    char name[32], sch[32], str[32], lenstr[32];
    snprintf(name, sizeof name, "u%02zu[%s]", i, k_bad_utf8[i]);
    snprintf(sch, sizeof sch, "s(%s)", k_bad_utf8[i]);
    snprintf(str, sizeof str, "<%s>", k_bad_utf8[i]);
    size_t bl = strlen(k_bad_utf8[i]);
    memcpy(lenstr, "\0", 1);
    memcpy(lenstr + 1, k_bad_utf8[i], bl); /* NUL, bad bytes, NUL */
    lenstr[bl + 1] = '\0';
    etr_tensor tx = {&impl[i], NULL, 0, 1, 4, k_bad_utf8[i], k_bad_utf8[i], 0, NULL, NULL};
    etr_value in[6] = {
        etr_value_string(str),           etr_value_string_n(lenstr, (uint32_t)bl + 2),
        etr_value_device(k_bad_utf8[i]), etr_value_object(k_bad_utf8[i]),
        etr_value_tensor(&tx),           etr_value_int((int64_t)i)};
    etr_kernel_info k = ETR_KERNEL_INFO_INIT;
    k.backend = k_bad_utf8[i];
    etr_record r;
    etr_record_init(&r, name, ETR_SCOPE_FUNCTION);
    r.schema = sch;
    r.inputs = in;
    r.n_inputs = 6;
    r.kernel = &k;
    etr_record_begin(&r);
    etr_record_end(&r);
  }
  /* Invalid bytes right at the 8192-byte cut: the cut keeps whole characters; what is
   * invalid before it is replaced. */
  char *edge = malloc(8300);
  memset(edge, 'a', 8191);
  memcpy(edge + 8191, "\xE2\x82\xAC\xFF", 4);
  memset(edge + 8195, 'b', 100);
  edge[8295] = '\0';
  etr_value ein[1] = {etr_value_string(edge)};
  tu_op("edge", ein, 1, NULL, 0);
  etr_trace_stats st;
  close_checked(&t, &st); /* jansson rejects invalid UTF-8: parsing proves the repair */

  size_t i;
  json_t *node;
  size_t seen = 0;
  json_array_foreach(t.nodes, i, node) {
    const char *nm = tu_name(node);
    if (nm[0] != 'u' || strlen(nm) < 4 || nm[3] != '[') continue;
    seen++;
    size_t idx = (size_t)atoi(nm + 1);
    assert_true(idx < nc);
    /* "uNN[" + k * U+FFFD + (ASCII the case holds) + "]" */
    if (fffd_in(nm, strlen(nm)) < 1) fail_msg("case %zu: name %s has no U+FFFD", idx, nm);
    assert_true(nm[strlen(nm) - 1] == ']');
    const char *s = tu_attr_str(node, "op_schema");
    assert_true(strncmp(s, "s(", 2) == 0 && fffd_in(s, strlen(s)) >= 1);
    size_t len;
    const char *v = in_str(node, 0, &len);
    assert_true(v[0] == '<' && v[len - 1] == '>' && fffd_in(v, len) >= 1);
    v = in_str(node, 1, &len);
    assert_true(len >= 5 && v[0] == '\0' && v[len - 1] == '\0' && fffd_in(v, len) >= 1);
    v = json_string_value(in_val(node, 2));
    assert_true(v != NULL && fffd_in(v, strlen(v)) >= 1);
    v = json_string_value(in_val(node, 3));
    assert_true(v != NULL && v[0] == '<' && fffd_in(v, strlen(v)) >= 1);
    json_t *tv = in_val(node, 4);
    v = json_string_value(json_array_get(tv, 5));
    assert_true(v != NULL && fffd_in(v, strlen(v)) >= 1);
    v = in_type(node, 4);
    assert_true(strncmp(v, "Tensor(", 7) == 0 && fffd_in(v, strlen(v)) >= 1);
    v = tu_attr_str(node, "kernel_backend");
    assert_true(fffd_in(v, strlen(v)) >= 1);
    assert_int_equal(json_integer_value(in_val(node, 5)), (json_int_t)idx);
  }
  assert_int_equal(seen, nc);
  json_t *e = tu_node(&t, "edge");
  size_t len;
  const char *ev = in_str(e, 0, &len);
  /* 8191 'a' + U+20AC would be 8194 bytes: the euro sign is left out whole. */
  assert_int_equal(len, 8191);
  assert_int_equal(fffd_in(ev, len), 0);
  /* Every bad place above was replaced at least once (10 places per case: name, schema, two
   * strings, device, tensor dtype and device, kernel backend; the object kind is written twice:
   * value and type). */
  assert_true(st.utf8_replaced >= nc * 10);
  assert_int_equal(st.strings_cut, 1);
  free(edge);
  tu_free(&t);
}

/* ---- 10 MB strings ---- */

static char *fill_repeat(const char *unit, size_t total) {
  size_t ul = strlen(unit);
  char *s = malloc(total + 1);
  assert_non_null(s);
  size_t n = 0;
  while (n + ul <= total) {
    memcpy(s + n, unit, ul);
    n += ul;
  }
  s[n] = '\0';
  return s;
}

static void test_10mb_strings_cut_at_8192_on_utf8_boundary(void **state) {
  (void)state;
  enum { TEN_MB = 10 * 1024 * 1024 };
  char *euro = fill_repeat("\xE2\x82\xAC", TEN_MB);     /* 3-byte characters */
  char *clef = fill_repeat("\xF0\x9D\x84\x9E", TEN_MB); /* 4-byte characters */
  char *eacute = fill_repeat("\xC3\xA9", TEN_MB);       /* 2-byte characters */
  char *ascii = fill_repeat("S", TEN_MB);
  char *nuls = malloc(TEN_MB); /* explicit length, NUL every 1000 bytes */
  for (size_t i = 0; i < TEN_MB; i++) nuls[i] = (char)(i % 1000 == 0 ? 0 : 'a' + i % 26);
  tu_trace t;
  tu_open(&t, NULL);
  etr_value in[5] = {etr_value_string(euro), etr_value_string(clef),
                     etr_value_string_n(nuls, TEN_MB), etr_value_device(ascii),
                     etr_value_string("short")};
  etr_record r;
  etr_record_init(&r, eacute, ETR_SCOPE_FUNCTION);
  r.schema = ascii;
  r.inputs = in;
  r.n_inputs = 5;
  etr_record_begin(&r);
  r.outputs = in;
  r.n_outputs = 1;
  etr_record_end(&r);
  etr_trace_stats st;
  close_checked(&t, &st);
  assert_int_equal(op_node_count(&t), 1);
  json_t *n = NULL;
  size_t i;
  json_t *node;
  json_array_foreach(t.nodes, i, node) {
    if (strncmp(tu_name(node), "\xC3\xA9", 2) == 0) n = node;
  }
  assert_non_null(n);
  /* name: 4096 two-byte characters */
  assert_int_equal(strlen(tu_name(n)), 8192);
  assert_memory_equal(tu_name(n), eacute, 8192);
  assert_int_equal(strlen(tu_attr_str(n, "op_schema")), 8192);
  size_t len;
  const char *s = in_str(n, 0, &len);
  assert_int_equal(len, 8190); /* 2730 euro signs: the 2731st would cross 8192 */
  assert_memory_equal(s, euro, 8190);
  s = in_str(n, 1, &len);
  assert_int_equal(len, 8192);
  assert_memory_equal(s, clef, 8192);
  s = in_str(n, 2, &len);
  assert_int_equal(len, 8192);
  assert_memory_equal(s, nuls, 8192);
  assert_int_equal(strlen(json_string_value(in_val(n, 3))), 8192);
  assert_string_equal(in_str(n, 4, NULL), "short");
  json_t *o = tu_in(n, "outputs", "values", 0);
  assert_int_equal(json_string_length(o), 8190);
  /* name, schema, 4 inputs, 1 output */
  assert_int_equal(st.strings_cut, 7);
  assert_int_equal(st.utf8_replaced, 0);
  assert_true(t.len < 200 * 1024); /* nothing near 10 MB reached the file */
  free(euro);
  free(clef);
  free(eacute);
  free(ascii);
  free(nuls);
  tu_free(&t);
}

/* ---- 1 M-element lists ---- */

static void test_1m_element_lists_cut_at_4096(void **state) {
  (void)state;
  enum { M = 1000 * 1000 };
  etr_value *ints = malloc(sizeof(etr_value) * M);
  etr_value *strs = malloc(sizeof(etr_value) * M);
  assert_true(ints != NULL && strs != NULL);
  static const char word[] =
      "a 100-byte string 0123456789012345678901234567890123456789"
      "012345678901234567890123456789012345678";
  for (size_t i = 0; i < M; i++) {
    ints[i] = etr_value_int((int64_t)i);
    strs[i] = etr_value_string(word);
  }
  tu_trace t;
  tu_open(&t, NULL);
  etr_value l[2] = {etr_value_list(ints, M), etr_value_tuple(ints, M)};
  tu_op("list_1m", l, 2, l, 1);                /* 3 lists of 1 M: 3 cuts */
  tu_op("inputs_1m", ints, M, NULL, 0);        /* 1 M inputs: cut at 4096 */
  etr_value ls[1] = {etr_value_list(strs, M)}; /* 4096 strings > 1 MiB? no: cut by count */
  tu_op("strings_1m", ls, 1, NULL, 0);
  etr_value big[1] = {etr_value_list(ints, 4096)};
  tu_op("exactly_4096", big, 1, NULL, 0); /* no cut */
  etr_trace_stats st;
  close_checked(&t, &st);
  json_t *n = tu_node(&t, "list_1m");
  assert_int_equal(n_values(n, "inputs"), 2);
  for (size_t k = 0; k < 2; k++) {
    json_t *v = in_val(n, k);
    assert_int_equal(json_array_size(v), 4096);
    assert_int_equal(json_integer_value(json_array_get(v, 4095)), 4095);
    assert_int_equal(json_array_size(tu_in(n, "inputs", "shapes", k)), 4096);
    assert_int_equal(json_array_size(tu_in(n, "inputs", "strides", k)), 4096);
  }
  assert_true(strncmp(in_type(n, 0), "GenericList[Int,", 16) == 0);
  assert_true(strncmp(in_type(n, 1), "Tuple[Int,", 10) == 0);
  assert_int_equal(json_array_size(tu_in(n, "outputs", "values", 0)), 4096);
  json_t *m = tu_node(&t, "inputs_1m");
  assert_int_equal(n_values(m, "inputs"), 4096);
  assert_int_equal(json_integer_value(in_val(m, 4095)), 4095);
  json_t *s = tu_node(&t, "strings_1m");
  assert_int_equal(json_array_size(in_val(s, 0)), 4096);
  assert_int_equal(json_array_size(in_val(tu_node(&t, "exactly_4096"), 0)), 4096);
  assert_int_equal(st.lists_cut, 5);
  free(ints);
  free(strs);
  tu_free(&t);
}

/* ---- a list that holds itself: the node's text stays under the reader's limit ---- */

/* 4096 items, each the list itself: cut at 32 levels, and at the per-op budget. The budget
 * counts the text the writer makes of each list and cut (not only the bytes of the event):
 * the node was 48 MB before, and `etr validate` (16 MiB a node) refused the trace. */
static void test_self_holding_list_stays_readable(void **state) {
  (void)state;
  enum { WIDE = 4096 };
  etr_value *items = malloc(sizeof(etr_value) * WIDE);
  assert_non_null(items);
  etr_value self = etr_value_list(items, WIDE);
  for (int i = 0; i < WIDE; i++) items[i] = self;
  tu_trace t;
  tu_open(&t, NULL);
  tu_op("self_holding", &self, 1, NULL, 0);
  etr_trace_stats st;
  close_checked(&t, &st);
  assert_int_equal(tu_count(&t, "self_holding"), 1);
  assert_true(st.nesting_cut > 0 || st.lists_cut > 0);
  if (t.len > (12u << 20))
    fail_msg("the trace is %zu bytes: its node is past what a reader takes", t.len);
#ifdef ETR_TOOL
  tu_assert_valid(ETR_TOOL, t.path);
#endif
  tu_free(&t);
  free(items);
}

/* Lists of many small values: 256 lists of 4096 Nones (or Ints) are about 1 MiB of event,
 * within the byte budget, but each value is ~25 bytes of text and four values for a reader:
 * the node was 41 MB of None (7 MB of Int that the reader still refused). The budget counts
 * each value's text too (ETR__VALUE_COST); the node stays readable. */
static void test_many_small_values_stay_readable(void **state) {
  (void)state;
  enum { WIDE = 4096, LISTS = 256 };
  etr_value *items = malloc(sizeof(etr_value) * WIDE), lists[LISTS];
  assert_non_null(items);
  for (int kind = 0; kind < 2; kind++) {
    for (int i = 0; i < WIDE; i++)
      items[i] = kind ? etr_value_int(-1234567890123456789LL) : etr_value_none();
    for (int i = 0; i < LISTS; i++) lists[i] = etr_value_list(items, WIDE);
    tu_trace t;
    tu_open(&t, NULL);
    tu_op("many_small", lists, LISTS, lists, LISTS);
    etr_trace_stats st;
    close_checked(&t, &st);
    assert_int_equal(tu_count(&t, "many_small"), 1);
    assert_true(st.lists_cut > 0);
    if (t.len > (8u << 20))
      fail_msg("the trace is %zu bytes: its node is past what a reader takes", t.len);
#ifdef ETR_TOOL
    tu_assert_valid(ETR_TOOL, t.path);
#endif
    tu_free(&t);
  }
  free(items);
}

/* ---- nesting 10 000 deep, on a 64 KiB stack ---- */

enum { DEEP = 10000, SMALL_STACK = 64 * 1024 };

struct deep_arg {
  const etr_value *in;
  const etr_value *out;
};

/* Runs on a thread with a 64 KiB stack: an encoder recursing once per level would need far
 * more than that for 10 000 levels and crash. */
static void *deep_thread(void *p) {
  const struct deep_arg *a = p;
  etr_record r;
  tu_begin(&r, "deep10000", a->in, 2);
  tu_end(&r, a->out, 1);
  return NULL;
}

static void test_nesting_10000_deep_cut_on_64k_stack(void **state) {
  (void)state;
  etr_value *chain = malloc(sizeof(etr_value) * (DEEP + 1));
  etr_value *mixed = malloc(sizeof(etr_value) * (DEEP + 1));
  assert_true(chain != NULL && mixed != NULL);
  chain[DEEP] = etr_value_int(42);
  mixed[DEEP] = etr_value_string("leaf");
  for (int i = DEEP - 1; i >= 0; i--) {
    chain[i] = etr_value_list(&chain[i + 1], 1);
    mixed[i] = (i % 2) ? etr_value_tuple(&mixed[i + 1], 1) : etr_value_list(&mixed[i + 1], 1);
  }
  tu_trace t;
  tu_open(&t, NULL);
  etr_value in[2] = {chain[0], mixed[0]};
  struct deep_arg a = {in, &chain[0]};
  pthread_attr_t attr;
  assert_int_equal(pthread_attr_init(&attr), 0);
  assert_int_equal(pthread_attr_setstacksize(&attr, SMALL_STACK), 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, &attr, deep_thread, &a), 0);
  assert_int_equal(pthread_join(th, NULL), 0);
  pthread_attr_destroy(&attr);
  etr_trace_stats st;
  close_checked(&t, &st);
  json_t *n = tu_node(&t, "deep10000");
  for (int k = 0; k < 3; k++) {
    json_t *v = k < 2 ? in_val(n, (size_t)k) : tu_in(n, "outputs", "values", 0);
    int depth = 0;
    while (json_is_array(v)) {
      assert_int_equal(json_array_size(v), 1);
      v = json_array_get(v, 0);
      depth++;
    }
    if (depth < 30 || depth > 33)
      fail_msg("value %d nested %d deep, cut near 32 expected", k, depth);
    assert_string_equal(json_string_value(v), "<...>");
  }
  assert_true(strlen(in_type(n, 1)) < 1000);
  assert_int_equal(st.nesting_cut, 3);
  free(chain);
  free(mixed);
  tu_free(&t);
}

/* ---- special numbers ---- */

static void test_special_numbers_written_exactly(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  const double dbl[] = {NAN,          INFINITY, -INFINITY, -0.0, DBL_MIN, DBL_MAX, -DBL_MAX,
                        DBL_TRUE_MIN, 0.1,      1e300,     -NAN, 3.0,     -2.0,    1e16};
  const int64_t ints[] = {INT64_MIN, INT64_MAX, 0, -1};
  etr_value in[TU_ARRAY_LEN(dbl) + TU_ARRAY_LEN(ints)];
  size_t nd = TU_ARRAY_LEN(dbl), ni = TU_ARRAY_LEN(ints);
  for (size_t i = 0; i < nd; i++) in[i] = etr_value_double(dbl[i]);
  for (size_t i = 0; i < ni; i++) in[nd + i] = etr_value_int(ints[i]);
  etr_record r;
  etr_record_init(&r, "numbers", ETR_SCOPE_FUNCTION);
  r.inputs = in;
  r.n_inputs = (uint32_t)(nd + ni);
  r.seq_nr = INT64_MIN;
  r.fw_tid = UINT64_MAX; /* no such thread: fw_parent stays 0 */
  etr_kernel_info k = ETR_KERNEL_INFO_INIT;
  k.grid[0] = k.grid[1] = k.grid[2] = UINT32_MAX;
  k.stream = INT64_MAX;
  r.kernel = &k;
  etr_collective_info co = ETR_COLLECTIVE_INFO_INIT;
  const int64_t splits[2] = {INT64_MIN, INT64_MAX};
  co.name = "allreduce";
  co.in_msg_nelems = UINT64_MAX; /* clamped to INT64_MAX (integer attrs fit in int64) */
  co.in_split_sizes = splits;
  co.n_in_splits = 2;
  co.global_rank_start = INT64_MAX;
  co.global_rank_stride = INT64_MAX;
  co.pg_size = UINT64_MAX;
  r.collective = &co;
  etr_record_begin(&r);
  etr_record_end(&r);
  /* seq_nr INT64_MAX and an out-of-range scope. */
  etr_record r2;
  etr_record_init(&r2, "numbers2", (etr_scope)0x7fffffff);
  r2.seq_nr = INT64_MAX;
  etr_record_begin(&r2);
  etr_record_end(&r2);
  /* Tensors with extreme fields: negative ndim, sizes that overflow contiguous strides,
   * ndim beyond ETR_MAX_NDIM with NULL strides. */
  static int i1, i2, i3, s1;
  const int64_t huge[3] = {INT64_MAX, INT64_MAX, 3};
  int64_t many[200];
  for (size_t i = 0; i < 200; i++) many[i] = 2;
  etr_tensor ta = {&i1, &s1, INT64_MIN, INT64_MAX, -1, "float", "cpu", -5, huge, NULL};
  etr_tensor tb = {&i2, &s1, 0, 0, 4, "float", "cpu", 3, huge, NULL};
  etr_tensor tc = {&i3, &s1, 0, 0, 4, "float", "cpu", 200, many, NULL};
  etr_value tin[3] = {etr_value_tensor(&ta), etr_value_tensor(&tb), etr_value_tensor(&tc)};
  tu_op("extreme_tensors", tin, 3, NULL, 0);
  etr_trace_stats st;
  close_checked(&t, &st);

  json_t *n = tu_node(&t, "numbers");
  assert_string_equal(json_string_value(in_val(n, 0)), "nan");
  assert_string_equal(json_string_value(in_val(n, 1)), "inf");
  assert_string_equal(json_string_value(in_val(n, 2)), "-inf");
  assert_true(json_is_number(in_val(n, 3)) && json_number_value(in_val(n, 3)) == 0.0);
  assert_non_null(strstr(t.text, "\"-inf\",-0.0,")); /* the sign is kept */
  /* whole numbers stay floating-point ones: a reader takes "3" for an int (and a replay
   * then runs the op on ints) */
  assert_non_null(strstr(t.text, "\"nan\",3.0,-2.0,1e+16,"));
  for (size_t i = 3; i < nd; i++)
    if (i != 10 && !json_is_real(in_val(n, i))) fail_msg("double %zu is not a JSON real", i);
  for (size_t i = 4; i < nd; i++) {
    if (i == 10) continue;
    json_t *v = in_val(n, i);
    if (!json_is_number(v) || json_number_value(v) != dbl[i])
      fail_msg("double %zu (%.17g) written as %s", i, dbl[i], json_dumps(v, JSON_ENCODE_ANY));
  }
  assert_string_equal(json_string_value(in_val(n, 10)), "nan");
  for (size_t i = 0; i < nd; i++) assert_string_equal(in_type(n, i), "Double");
  for (size_t i = 0; i < ni; i++) {
    json_t *v = in_val(n, nd + i);
    assert_true(json_is_integer(v));
    assert_true(json_integer_value(v) == ints[i]);
    assert_string_equal(in_type(n, nd + i), "Int");
  }
  assert_true(tu_attr_int(n, "seq_id") == INT64_MIN);
  assert_int_equal(tu_attr_int(n, "fw_tid"), INT64_MAX); /* uint64 attrs fit in int64 */
  assert_int_equal(tu_attr_int(n, "fw_parent"), 0);
  assert_int_equal(tu_attr_int(n, "kernel_stream"), INT64_MAX);
  assert_string_equal(tu_attr_str(n, "kernel_grid"), "[4294967295, 4294967295, 4294967295]");
  assert_int_equal(tu_attr_int(n, "in_msg_nelems"), INT64_MAX);
  assert_int_equal(tu_attr_int(n, "pg_size"), INT64_MAX);
  assert_int_equal(tu_attr_int(n, "global_rank_start"), INT64_MAX);
  assert_string_equal(tu_attr_str(n, "in_split_size"),
                      "[-9223372036854775808, 9223372036854775807]");
  json_t *n2 = tu_node(&t, "numbers2");
  assert_true(tu_attr_int(n2, "seq_id") == INT64_MAX);
  assert_int_equal(tu_attr_int(n2, "scope"), 0x7fffffff);
  json_t *x = tu_node(&t, "extreme_tensors");
  json_t *va = in_val(x, 0);
  /* offset, numel and itemsize are never negative in the format: written 0, counted. */
  assert_int_equal(json_integer_value(json_array_get(va, 2)), 0);
  assert_true(json_integer_value(json_array_get(va, 3)) == INT64_MAX);
  assert_int_equal(json_integer_value(json_array_get(va, 4)), 0);
  assert_true(st.values_fixed >= 1);
  assert_int_equal(json_array_size(tu_in(x, "inputs", "shapes", 0)), 0); /* ndim < 0 */
  json_t *stb = tu_in(x, "inputs", "strides", 1);
  assert_int_equal(json_array_size(stb), 3);
  assert_int_equal(json_integer_value(json_array_get(stb, 2)), 1);
  assert_int_equal(json_integer_value(json_array_get(stb, 1)), 3);
  assert_true(json_integer_value(json_array_get(stb, 0)) == INT64_MAX); /* saturated */
  json_t *stc = tu_in(x, "inputs", "strides", 2);
  assert_true(json_integer_value(json_array_get(stc, 0)) == INT64_MAX); /* 2^63 saturated */
  assert_true(json_integer_value(json_array_get(stc, 1)) == (json_int_t)1 << 62);
  assert_int_equal(json_array_size(tu_in(x, "inputs", "shapes", 2)), ETR_MAX_NDIM);
  assert_int_equal(json_array_size(tu_in(x, "inputs", "strides", 2)), ETR_MAX_NDIM);
  assert_int_equal(st.lists_cut, 1); /* ndim 200 */
  tu_free(&t);
}

/* ---- NULL pointers in records and values ---- */

static void test_null_pointers_in_records_and_values(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  uint64_t reg_ewb = REG_STAT(ends_without_begin), reg_rep = REG_STAT(begins_repeated);
  /* NULL name, NULL schema. */
  etr_record r;
  etr_record_init(&r, NULL, ETR_SCOPE_FUNCTION);
  assert_true(etr_record_is_active(&r));
  r.schema = NULL;
  etr_record_begin(&r);
  etr_record_end(&r);
  /* NULL inputs / outputs with counts. */
  etr_record_init(&r, "null_io", ETR_SCOPE_FUNCTION);
  r.inputs = NULL;
  r.n_inputs = 5;
  etr_record_begin(&r);
  r.outputs = NULL;
  r.n_outputs = 3;
  etr_record_end(&r);
  /* NULL inside values. */
  static int impl, stor;
  const int64_t sz[2] = {2, 3};
  etr_tensor no_dev = {&impl, &stor, 0, 6, 4, "float", NULL, 2, sz, NULL};
  etr_tensor no_impl = {NULL, NULL, 0, 6, 4, "float", "cpu", 2, sz, NULL};
  etr_tensor no_sizes = {&impl, &stor, 0, 6, 4, "float", "cpu", 3, NULL, NULL};
  etr_tensor no_dtype = {&impl, &stor, 0, 6, 4, NULL, "cpu", 2, sz, NULL};
  etr_value in[] = {
      etr_value_string(NULL),     etr_value_string_n(NULL, 10), etr_value_device(NULL),
      etr_value_object(NULL),     etr_value_tensor(NULL),       etr_value_tensor(&no_dev),
      etr_value_tensor(&no_impl), etr_value_tensor(&no_sizes),  etr_value_tensor(&no_dtype),
      etr_value_list(NULL, 3),    etr_value_tuple(NULL, 0),
  };
  etr_kernel_info k = ETR_KERNEL_INFO_INIT;          /* NULL backend and file */
  etr_collective_info co = ETR_COLLECTIVE_INFO_INIT; /* NULL strings */
  co.n_in_splits = 4;                                /* with a NULL array */
  co.n_out_splits = 2;
  etr_record_init(&r, "null_values", ETR_SCOPE_FUNCTION);
  r.inputs = in;
  r.n_inputs = TU_ARRAY_LEN(in);
  r.kernel = &k;
  r.collective = &co;
  etr_record_begin(&r);
  etr_record_end(&r);
  /* NULL records to the inline record API and to the library's entry points: ignored. */
  etr_record *nrec = NULL;
  etr_record_init(nrec, "null_record", ETR_SCOPE_FUNCTION);
  assert_false(etr_record_is_active(nrec));
  assert_false(etr_record_needs_inputs(nrec));
  assert_false(etr_record_needs_outputs(nrec));
  assert_int_equal(etr_record_handle(nrec), 0);
  etr_record_begin(nrec);
  etr_record_end(nrec);
  etr__record_begin(NULL);
  etr__record_end(NULL);
  tu_op("after_nulls", NULL, 0, NULL, 0);
  etr_trace_stats st;
  close_checked(&t, &st);
  assert_int_equal(REG_STAT(ends_without_begin), reg_ewb);
  assert_int_equal(REG_STAT(begins_repeated), reg_rep);

  json_t *n = tu_node(&t, "");
  assert_string_equal(tu_attr_str(n, "op_schema"), "");
  json_t *io = tu_node(&t, "null_io");
  assert_int_equal(n_values(io, "inputs"), 0);
  assert_int_equal(n_values(io, "outputs"), 0);
  json_t *v = tu_node(&t, "null_values");
  assert_int_equal(n_values(v, "inputs"), TU_ARRAY_LEN(in));
  assert_string_equal(in_str(v, 0, NULL), "");
  assert_string_equal(in_str(v, 1, NULL), "");
  assert_string_equal(json_string_value(in_val(v, 2)), "");
  /* A NULL (empty) object kind is written as PyTorch's generic "Object" (counted). */
  assert_string_equal(json_string_value(in_val(v, 3)), "<Object>");
  assert_string_equal(in_type(v, 3), "Object");
  /* NULL tensor pointer: an undefined tensor with id 0. */
  json_t *tv = in_val(v, 4);
  assert_int_equal(json_array_size(tv), 6);
  assert_int_equal(json_integer_value(json_array_get(tv, 0)), 0);
  assert_string_equal(json_string_value(json_array_get(tv, 5)), "");
  assert_string_equal(in_type(v, 4), "Tensor(nullptr (uninitialized))");
  assert_string_equal(json_string_value(json_array_get(in_val(v, 5), 5)), "");
  assert_string_equal(in_type(v, 5), "Tensor(float)");
  assert_int_equal(json_integer_value(json_array_get(in_val(v, 6), 0)), 0); /* no identity */
  assert_int_equal(json_array_size(tu_in(v, "inputs", "shapes", 7)), 0);    /* no sizes */
  assert_string_equal(in_type(v, 8), "Tensor(nullptr (uninitialized))");
  assert_int_equal(json_array_size(in_val(v, 9)), 0);
  assert_string_equal(in_type(v, 9), "GenericList[]");
  assert_int_equal(json_array_size(in_val(v, 10)), 0);
  assert_string_equal(in_type(v, 10), "Tuple[]");
  assert_string_equal(tu_attr_str(v, "kernel_backend"), "");
  assert_string_equal(tu_attr_str(v, "kernel_file"), "");
  assert_string_equal(tu_attr_str(v, "collective_name"), "");
  assert_string_equal(tu_attr_str(v, "in_split_size"), "[]");
  assert_int_equal(tu_count(&t, "after_nulls"), 1);
  assert_int_equal(tu_count(&t, "null_record"), 0);
  assert_int_equal(st.ops_recorded, 4);
  /* A list that claims 3 items behind a NULL pointer, split sizes that claim 4 and 2, and
   * the NULL inputs (5) and outputs (3) arrays are written empty and counted as cut. */
  assert_int_equal(st.lists_cut, 4);
  tu_free(&t);
}

/* NULL inputs / outputs arrays with nonzero counts are written empty and counted as cut. */
static void test_null_inputs_with_count_is_counted(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  etr_record r;
  etr_record_init(&r, "null_io", ETR_SCOPE_FUNCTION);
  r.inputs = NULL;
  r.n_inputs = 5;
  etr_record_begin(&r);
  r.outputs = NULL;
  r.n_outputs = 3;
  etr_record_end(&r);
  etr_trace_stats st;
  close_checked(&t, &st);
  assert_int_equal(st.lists_cut, 2);
  tu_free(&t);
}

/* ---- NULL and bad arguments to the control plane ---- */

static void test_null_trace_and_bad_args_return_errors(void **state) {
  (void)state;
  etr_trace_stats st;
  memset(&st, 0xAB, sizeof st);
  etr_trace_stats untouched;
  memcpy(&untouched, &st, sizeof st);
  assert_int_equal(etr_trace_enable(NULL), ETR_EINVAL);
  assert_int_equal(etr_trace_disable(NULL), ETR_EINVAL);
  assert_false(etr_trace_is_enabled(NULL));
  assert_int_equal(etr_trace_flush(NULL), ETR_EINVAL);
  assert_int_equal(etr_trace_stats_get(NULL, &st), ETR_EINVAL);
  etr_traceback_options tbo = ETR_TRACEBACK_OPTIONS_INIT;
  assert_int_equal(etr_trace_set_traceback(NULL, &tbo), ETR_EINVAL);
  assert_int_equal(etr_trace_close(NULL), 0);            /* documented no-op */
  assert_int_equal(etr_trace_close_stats(NULL, &st), 0); /* no-op, out untouched */
  assert_memory_equal(&st, &untouched, sizeof st);
  assert_int_equal(etr_registry_stats_get(NULL), ETR_EINVAL);

  char dir[256], path[300];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/x.json", dir);
  etr_trace *tr = (etr_trace *)0x1;
  assert_int_equal(etr_trace_open(NULL, NULL, &tr), ETR_EINVAL);
  assert_null(tr);
  assert_int_equal(etr_trace_open("", NULL, &tr), ETR_EINVAL);
  assert_int_equal(etr_trace_open(path, NULL, NULL), ETR_EINVAL);
  etr_trace_options o = ETR_TRACE_OPTIONS_INIT;
  o.struct_size = 1;
  assert_int_equal(etr_trace_open(path, &o, &tr), ETR_EINVAL);
  o = (etr_trace_options)ETR_TRACE_OPTIONS_INIT;
  o.schema = (etr_schema)77;
  assert_int_equal(etr_trace_open(path, &o, &tr), ETR_EINVAL);
  const double bad_p[] = {NAN, -0.5, 1.5, INFINITY};
  for (size_t i = 0; i < TU_ARRAY_LEN(bad_p); i++) {
    o = (etr_trace_options)ETR_TRACE_OPTIONS_INIT;
    o.sample_probability = bad_p[i];
    assert_int_equal(etr_trace_open(path, &o, &tr), ETR_EINVAL);
  }
  o = (etr_trace_options)ETR_TRACE_OPTIONS_INIT;
  etr_traceback_options o_tb = ETR_TRACEBACK_OPTIONS_INIT;
  o.traceback = &o_tb;
  o_tb.struct_size = sizeof o_tb;
  o_tb.enabled = true;
  o_tb.max_depth = 100000; /* beyond the maximum (256) */
  assert_int_equal(etr_trace_open(path, &o, &tr), ETR_EINVAL);
  assert_int_equal(access(path, F_OK), -1); /* no failed open left a file */
  char nodir[400];
  snprintf(nodir, sizeof nodir, "%s/missing/x.json", dir);
  errno = 0;
  assert_int_equal(etr_trace_open(nodir, NULL, &tr), ETR_EOPEN);
  assert_int_equal(errno, ENOENT);
  assert_int_equal(etr_trace_open(dir, NULL, &tr), ETR_EOPEN); /* a directory */
  assert_null(tr);

  /* After all that, a trace opens and works; bad arguments against a live trace. */
  tu_trace t;
  tu_open(&t, NULL);
  assert_int_equal(etr_trace_stats_get(t.trace, NULL), ETR_EINVAL);
  assert_int_equal(etr_trace_set_traceback(t.trace, NULL), ETR_EINVAL);
  tu_op("works", NULL, 0, NULL, 0);
  t.close_rc = etr_trace_close_stats(t.trace, NULL); /* NULL stats out: just closes */
  t.trace = NULL;
  assert_int_equal(t.close_rc, 0);
  tu_load(&t);
  assert_int_equal(tu_count(&t, "works"), 1);
  tu_free(&t);

  /* The observer API. */
  etr_observer_id id = 0;
  etr_observer_options oo = ETR_OBSERVER_OPTIONS_INIT;
  assert_int_equal(etr_observer_add(NULL, &id), ETR_EINVAL);
  assert_int_equal(etr_observer_add(&oo, NULL), ETR_EINVAL);
  oo.struct_size = 0;
  assert_int_equal(etr_observer_add(&oo, &id), ETR_EINVAL);
  oo = (etr_observer_options)ETR_OBSERVER_OPTIONS_INIT;
  oo.sample_probability = NAN;
  assert_int_equal(etr_observer_add(&oo, &id), ETR_EINVAL);
  const etr_observer_id bad_ids[] = {0, 1, 65, UINT64_MAX, (uint64_t)77 << 32 | 3};
  for (size_t i = 0; i < TU_ARRAY_LEN(bad_ids); i++) {
    assert_int_equal(etr_observer_enable(bad_ids[i]), ETR_ENOENT);
    assert_int_equal(etr_observer_disable(bad_ids[i]), ETR_ENOENT);
    assert_int_equal(etr_observer_is_enabled(bad_ids[i]), ETR_ENOENT);
    assert_int_equal(etr_observer_remove(bad_ids[i]), ETR_ENOENT);
  }
  tu_rmdir(dir);
}

/* ---- ends ---- */

static void test_end_without_begin_counted(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  uint64_t ewb0 = REG_STAT(ends_without_begin), rep0 = REG_STAT(begins_repeated);
  etr_record outer;
  tu_begin(&outer, "ewb_outer", NULL, 0);
  /* Prepared, never begun, ended (twice). */
  etr_record a;
  etr_record_init(&a, "never_begun", ETR_SCOPE_FUNCTION);
  etr_record_end(&a);
  etr_record_end(&a);
  /* Begun twice, ended twice. */
  etr_record b;
  tu_begin(&b, "twice", NULL, 0);
  etr_record_begin(&b);
  tu_end(&b, NULL, 0);
  tu_end(&b, NULL, 0);
  /* A record moved (copied) between begin and end: the trace finds no op of its own for
   * the copy's end (counted), and the original stays open until close (marked). */
  etr_record c;
  tu_begin(&c, "moved", NULL, 0);
  etr_record c2;
  memcpy(&c2, &c, sizeof c);
  tu_end(&c2, NULL, 0);
  tu_op("after_misuse", NULL, 0, NULL, 0);
  etr_trace_stats st;
  close_checked(&t, &st);
  /* never_begun x2 (the first end marks it ended), twice's second end */
  assert_int_equal(REG_STAT(ends_without_begin) - ewb0, 3);
  assert_int_equal(REG_STAT(begins_repeated) - rep0, 1);
  assert_int_equal(st.ends_without_begin, 1); /* the copy */
  assert_int_equal(tu_count(&t, "never_begun"), 0);
  assert_int_equal(tu_count(&t, "twice"), 1);
  json_t *mv = tu_node(&t, "moved");
  assert_int_equal(tu_attr_int(mv, "etr_incomplete"), 1);
  /* The stack stayed sane: after_misuse sits under the still-open "moved". */
  assert_int_equal(tu_ctrl_deps(tu_node(&t, "after_misuse")), tu_id(mv));
  assert_int_equal(tu_ctrl_deps(mv), tu_id(tu_node(&t, "ewb_outer")));
  assert_int_equal(st.ops_open_at_close, 2); /* moved, ewb_outer */
  tu_end(&outer, NULL, 0);                   /* after close: harmless */
  tu_end(&c, NULL, 0);
  tu_free(&t);
}

static void test_end_out_of_order_counted(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  etr_record a, b, c;
  tu_begin(&a, "ooo_a", NULL, 0);
  tu_begin(&b, "ooo_b", NULL, 0);
  tu_begin(&c, "ooo_c", NULL, 0);
  tu_end(&a, NULL, 0); /* b and c still open inside it */
  tu_end(&c, NULL, 0);
  tu_end(&b, NULL, 0);
  tu_op("ooo_after", NULL, 0, NULL, 0);
  etr_trace_stats st;
  close_checked(&t, &st);
  assert_int_equal(st.ends_out_of_order, 1);
  assert_int_equal(st.ops_abandoned, 2);
  assert_int_equal(st.ends_without_begin, 2); /* c's and b's ends came after a's */
  json_t *na = tu_node(&t, "ooo_a"), *nb = tu_node(&t, "ooo_b"), *nc = tu_node(&t, "ooo_c");
  assert_int_equal(tu_ctrl_deps(nb), tu_id(na));
  assert_int_equal(tu_ctrl_deps(nc), tu_id(nb));
  assert_non_null(tu_attr(nb, "etr_incomplete"));
  assert_non_null(tu_attr(nc, "etr_incomplete"));
  assert_null(tu_attr(na, "etr_incomplete"));
  json_t *tn = tu_thread_node(&t, (json_int_t)etr_thread_id());
  assert_int_equal(tu_ctrl_deps(tu_node(&t, "ooo_after")), tu_id(tn));
  tu_free(&t);
}

/* An op left by longjmp (as a C error path, or a C++ exception, leaves it): its records are
 * gone with the stack frame; the enclosing op's end closes them, and later ops are not their
 * descendants. Before, every later op of the thread sat under lj_c. */
static jmp_buf lj_env;

static void __attribute__((noinline)) lj_deep(void) {
  etr_record b, c;
  tu_begin(&b, "lj_b", NULL, 0);
  tu_begin(&c, "lj_c", NULL, 0);
  longjmp(lj_env, 1);
}

static void test_longjmp_abandons_inner_ops(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  etr_record a;
  tu_begin(&a, "lj_a", NULL, 0);
  if (setjmp(lj_env) == 0) lj_deep();
  tu_end(&a, NULL, 0);
  tu_op("lj_d", NULL, 0, NULL, 0);
  etr_trace_stats st;
  close_checked(&t, &st);
  assert_int_equal(st.ops_abandoned, 2);
  assert_int_equal(st.ends_without_begin, 0);
  json_t *na = tu_node(&t, "lj_a"), *nb = tu_node(&t, "lj_b"), *nc = tu_node(&t, "lj_c");
  json_t *tn = tu_thread_node(&t, (json_int_t)etr_thread_id());
  assert_int_equal(tu_ctrl_deps(nb), tu_id(na));
  assert_int_equal(tu_ctrl_deps(nc), tu_id(nb));
  assert_non_null(tu_attr(nb, "etr_incomplete"));
  assert_non_null(tu_attr(nc, "etr_incomplete"));
  assert_null(tu_attr(na, "etr_incomplete"));
  assert_int_equal(tu_ctrl_deps(tu_node(&t, "lj_d")), tu_id(tn));
  assert_int_equal(tu_stat(&t, "ops_abandoned"), 2);
  tu_free(&t);
}

/* ---- thread churn ---- */

/* A process that starts and ends threads all the time: each exited thread's recording state
 * is taken by the next new thread, so memory stays that of the threads alive at once.
 * Before, every thread ever seen kept ~3.6 KB until close (100k threads: 363 MB). Heap in
 * use, main arena and mmapped blocks (mallinfo2): what the library allocates. */
static void *churn_one(void *arg) {
  (void)arg;
  tu_op("churn_op", NULL, 0, NULL, 0);
  return NULL;
}

static size_t heap_in_use(void) {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

static void run_churn(int n) {
  for (int i = 0; i < n; i++) {
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, churn_one, NULL), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
  }
}

static void test_thread_churn_memory_bounded(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  run_churn(500); /* warm: chunk pool, id pages, the writer's buffers */
  etr_trace_flush(t.trace);
  size_t before = heap_in_use();
  run_churn(4000);
  etr_trace_flush(t.trace);
  size_t after = heap_in_use();
  etr_trace_stats st;
  close_checked(&t, &st);
  assert_int_equal(st.threads, 4500);
  assert_int_equal(tu_count(&t, "churn_op"), 4500);
  /* 4000 threads at 3.6 KB each would be 14.4 MB; what may still grow is not per thread
   * (the writer's JSON buffer reaching its flush size, about 1 MB, id pages: 8 B a thread) */
  printf("thread churn: heap %+lld bytes over 4000 threads\n",
         (long long)after - (long long)before);
  if (after > before + (4u << 20))
    fail_msg("heap grew by %zu bytes over 4000 short-lived threads",
             after > before ? after - before : 0);
  tu_free(&t);
}

/* ---- double close ---- */

static void test_double_close_returns_estate(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  tu_op("before_close", NULL, 0, NULL, 0);
  etr_trace *h = t.trace;
  etr_trace_stats st;
  close_checked(&t, &st);
  /* Closed handles are kept as tombstones: the calls on one return ETR_ESTATE (ASan would
   * report a read of freed memory otherwise). */
  assert_int_equal(etr_trace_close(h), ETR_ESTATE);
  assert_int_equal(etr_trace_close_stats(h, &st), ETR_ESTATE);
  assert_int_equal(etr_trace_enable(h), ETR_ESTATE);
  assert_int_equal(etr_trace_disable(h), ETR_ESTATE);
  assert_int_equal(etr_trace_flush(h), ETR_ESTATE);
  assert_false(etr_trace_is_enabled(h));
  etr_trace_stats st2;
  memset(&st2, 0, sizeof st2);
  /* ... except the stats: a closed handle keeps its final counters. */
  assert_int_equal(etr_trace_stats_get(h, &st2), 0);
  assert_int_equal(st2.ops_recorded, st.ops_recorded);
  assert_int_equal(st2.nodes_written, st.nodes_written);
  etr_traceback_options tbo = ETR_TRACEBACK_OPTIONS_INIT;
  assert_int_equal(etr_trace_set_traceback(h, &tbo), ETR_ESTATE);
  /* Also after another trace took its place. */
  tu_trace t2;
  tu_open(&t2, NULL);
  assert_int_equal(etr_trace_close(h), ETR_ESTATE);
  tu_op("second", NULL, 0, NULL, 0);
  close_checked(&t2, &st);
  assert_int_equal(tu_count(&t2, "second"), 1);
  assert_int_equal(tu_count(&t, "before_close"), 1);
  tu_free(&t2);
  tu_free(&t);
}

/* ---- enable before open, disabled trace ---- */

static void test_enable_before_open_and_null_enable(void **state) {
  (void)state;
  assert_int_equal(etr_trace_enable(NULL), ETR_EINVAL);
  etr_record early;
  etr_record_init(&early, "before_open", ETR_SCOPE_FUNCTION);
  assert_false(etr_record_is_active(&early)); /* nobody observes */
  etr_record_begin(&early);
  tu_trace t;
  tu_open_disabled(&t, NULL);
  tu_op("opened_not_enabled", NULL, 0, NULL, 0);
  etr_record_end(&early); /* began before the trace existed: not recorded, not counted */
  assert_int_equal(etr_trace_enable(t.trace), 0);
  tu_op("enabled", NULL, 0, NULL, 0);
  etr_trace_stats st;
  close_checked(&t, &st);
  assert_int_equal(tu_count(&t, "before_open"), 0);
  assert_int_equal(tu_count(&t, "opened_not_enabled"), 0);
  assert_int_equal(tu_count(&t, "enabled"), 1);
  assert_int_equal(st.ends_without_begin, 0);
  tu_free(&t);
}

static void test_ops_while_trace_disabled(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  etr_record a, b;
  tu_begin(&a, "spans_disable", NULL, 0);
  assert_int_equal(etr_trace_disable(t.trace), 0);
  for (int i = 0; i < 100; i++) tu_op("while_disabled", NULL, 0, NULL, 0);
  tu_begin(&b, "began_disabled", NULL, 0);
  tu_end(&a, NULL, 0);
  assert_int_equal(etr_trace_enable(t.trace), 0);
  tu_end(&b, NULL, 0); /* never entered the trace: no exit, nothing counted */
  tu_op("re_enabled", NULL, 0, NULL, 0);
  etr_trace_stats st;
  close_checked(&t, &st);
  assert_int_equal(tu_count(&t, "spans_disable"), 1);
  assert_int_equal(tu_count(&t, "while_disabled"), 0);
  assert_int_equal(tu_count(&t, "began_disabled"), 0);
  assert_int_equal(tu_count(&t, "re_enabled"), 1);
  assert_int_equal(st.ops_open_at_disable, 1);
  assert_int_equal(st.ends_without_begin, 0);
  tu_free(&t);
}

/* A second disable of a disabled trace changes nothing, so it must not count the ops in
 * flight again. */
static void test_repeated_disable_counts_open_ops_once(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  etr_record a;
  tu_begin(&a, "spans_disables", NULL, 0);
  for (int i = 0; i < 3; i++) assert_int_equal(etr_trace_disable(t.trace), 0);
  tu_end(&a, NULL, 0);
  etr_trace_stats st;
  close_checked(&t, &st);
  assert_int_equal(tu_count(&t, "spans_disables"), 1);
  assert_int_equal(st.ops_open_at_disable, 1);
  tu_free(&t);
}

/* ---- observers removed and re-added around recording ---- */

typedef struct counting {
  atomic_uint enters, exits;
  atomic_int removed; /* set once remove returned: a callback after it is a bug */
  atomic_uint late;
} counting;

static void c_enter(const etr_record *rec, void *user) {
  (void)rec;
  counting *c = user;
  if (atomic_load(&c->removed)) atomic_fetch_add(&c->late, 1);
  atomic_fetch_add(&c->enters, 1);
}
static void c_exit(const etr_record *rec, void *user) {
  (void)rec;
  counting *c = user;
  if (atomic_load(&c->removed)) atomic_fetch_add(&c->late, 1);
  atomic_fetch_add(&c->exits, 1);
}

static etr_observer_id add_counting(counting *c) {
  memset(c, 0, sizeof *c);
  etr_observer_options o = ETR_OBSERVER_OPTIONS_INIT;
  o.enter = c_enter;
  o.exit = c_exit;
  o.user = c;
  o.needs = ETR_NEEDS_INPUTS;
  etr_observer_id id = 0;
  assert_int_equal(etr_observer_add(&o, &id), 0);
  return id;
}

static void test_ops_while_observers_removed_and_readded(void **state) {
  (void)state;
  /* All slots taken: opening a trace fails cleanly and leaves no file. */
  static counting fill[ETR_MAX_OBSERVERS];
  etr_observer_id ids[ETR_MAX_OBSERVERS];
  size_t nfill = 0;
  for (;;) {
    etr_observer_options o = ETR_OBSERVER_OPTIONS_INIT;
    o.start_disabled = true;
    o.user = &fill[nfill];
    int rc = etr_observer_add(&o, &ids[nfill]);
    if (rc == ETR_ENOSPC) break;
    assert_int_equal(rc, 0);
    nfill++;
    assert_true(nfill < ETR_MAX_OBSERVERS + 1);
  }
  char dir[256], path[300];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/full.json", dir);
  etr_trace *tr = NULL;
  assert_int_equal(etr_trace_open(path, NULL, &tr), ETR_ENOSPC);
  assert_null(tr);
  assert_int_equal(access(path, F_OK), -1);
  for (size_t i = 0; i < nfill; i++) assert_int_equal(etr_observer_remove(ids[i]), 0);
  tu_rmdir(dir);

  tu_trace t;
  tu_open(&t, NULL);
  counting c1, c2;
  etr_observer_id o1 = add_counting(&c1);
  etr_record a;
  tu_begin(&a, "spans_remove", NULL, 0); /* c1 entered */
  assert_int_equal(etr_observer_remove(o1), 0);
  atomic_store(&c1.removed, 1);
  /* A stale handle is refused everywhere. */
  assert_int_equal(etr_observer_remove(o1), ETR_ENOENT);
  assert_int_equal(etr_observer_enable(o1), ETR_ENOENT);
  assert_int_equal(etr_observer_disable(o1), ETR_ENOENT);
  assert_int_equal(etr_observer_is_enabled(o1), ETR_ENOENT);
  etr_observer_id o2 = add_counting(&c2); /* likely the same slot, a new generation */
  assert_true(o2 != o1);
  assert_int_equal(etr_observer_remove(o1), ETR_ENOENT);
  tu_op("while_readded", NULL, 0, NULL, 0);
  tu_end(&a, NULL, 0); /* neither c1 (removed) nor c2 (never entered) gets this exit */
  assert_int_equal(atomic_load(&c1.enters), 1);
  assert_int_equal(atomic_load(&c1.exits), 0);
  assert_int_equal(atomic_load(&c1.late), 0);
  assert_int_equal(atomic_load(&c2.enters), 1);
  assert_int_equal(atomic_load(&c2.exits), 1);
  /* Toggling a user observer does not touch the trace. */
  for (int i = 0; i < 10; i++) {
    assert_int_equal(etr_observer_disable(o2), 0);
    tu_op("toggle", NULL, 0, NULL, 0);
    assert_int_equal(etr_observer_enable(o2), 0);
  }
  /* Ops begun under this trace and ended after its close (its observer removed), and under
   * the next trace. */
  etr_record x;
  tu_begin(&x, "spans_close", NULL, 0);
  etr_trace_stats st;
  close_checked(&t, &st);
  assert_int_equal(tu_count(&t, "spans_remove"), 1);
  assert_int_equal(tu_count(&t, "while_readded"), 1);
  assert_int_equal(tu_count(&t, "toggle"), 10);
  assert_int_equal(tu_attr_int(tu_node(&t, "spans_close"), "etr_incomplete"), 1);
  assert_int_equal(st.ends_without_begin, 0);
  tu_trace t2;
  tu_open(&t2, NULL);
  tu_end(&x, NULL, 0); /* its trace is gone; the new trace never saw it begin */
  tu_op("next_trace", NULL, 0, NULL, 0);
  etr_trace_stats st2;
  close_checked(&t2, &st2);
  assert_int_equal(tu_count(&t2, "spans_close"), 0);
  assert_int_equal(tu_count(&t2, "next_trace"), 1);
  assert_int_equal(st2.ends_without_begin, 0);
  assert_int_equal(etr_observer_remove(o2), 0);
  atomic_store(&c2.removed, 1);
  tu_op("no_trace_no_observer", NULL, 0, NULL, 0);
  assert_int_equal(atomic_load(&c2.late), 0);
  assert_true(atomic_load(&c2.exits) <= atomic_load(&c2.enters));
  tu_free(&t);
  tu_free(&t2);
}

/* ---- flush with ops open ---- */

static etr_trace *g_flush_trace;
static atomic_int g_flush_rc = 1;

static void flushing_enter(const etr_record *rec, void *user) {
  (void)user;
  if (rec->name && strcmp(rec->name, "flush_in_callback") == 0)
    atomic_store(&g_flush_rc, etr_trace_flush(g_flush_trace));
}

static void test_flush_with_ops_open(void **state) {
  (void)state;
  tu_trace t;
  tu_open(&t, NULL);
  etr_record a, b;
  tu_begin(&a, "flush_open_a", NULL, 0);
  tu_begin(&b, "flush_open_b", NULL, 0);
  tu_op("flush_done_c", NULL, 0, NULL, 0);
  assert_int_equal(etr_trace_flush(t.trace), 0);
  assert_int_equal(etr_trace_flush(t.trace), 0);
  /* On disk now: the completed op, not the open ones. */
  size_t len = 0;
  char *mid = tu_read_file(t.path, &len);
  assert_non_null(mid);
  assert_non_null(memmem(mid, len, "flush_done_c", 12));
  assert_null(memmem(mid, len, "flush_open_a", 12));
  assert_null(memmem(mid, len, "flush_open_b", 12));
  free(mid);
  /* A flush from inside an observer callback returns (no deadlock). */
  g_flush_trace = t.trace;
  etr_observer_options o = ETR_OBSERVER_OPTIONS_INIT;
  o.enter = flushing_enter;
  etr_observer_id id;
  assert_int_equal(etr_observer_add(&o, &id), 0);
  tu_op("flush_in_callback", NULL, 0, NULL, 0);
  assert_int_equal(atomic_load(&g_flush_rc), 0);
  assert_int_equal(etr_observer_remove(id), 0);
  tu_end(&b, NULL, 0);
  tu_end(&a, NULL, 0);
  etr_trace_stats st;
  close_checked(&t, &st);
  json_t *na = tu_node(&t, "flush_open_a"), *nb = tu_node(&t, "flush_open_b");
  assert_int_equal(tu_ctrl_deps(nb), tu_id(na));
  assert_int_equal(tu_ctrl_deps(tu_node(&t, "flush_done_c")), tu_id(nb));
  assert_null(tu_attr(na, "etr_incomplete"));
  assert_null(tu_attr(nb, "etr_incomplete"));
  assert_int_equal(tu_count(&t, "flush_in_callback"), 1);
  assert_int_equal(st.ops_open_at_close, 0);
  tu_free(&t);
}

/* ---- close while another thread records hostile values ---- */

static atomic_int g_stop;
static atomic_uint g_done_ops;

static void *hostile_worker(void *p) {
  (void)p;
  char *big = malloc(20000);
  memset(big, 'x', 19999);
  big[19999] = '\0';
  memcpy(big + 8190, "\xE2\x82\xAC\xFF", 4);
  etr_value chain[64];
  chain[63] = etr_value_int(1);
  for (int i = 62; i >= 0; i--) chain[i] = etr_value_list(&chain[i + 1], 1);
  etr_value items[4100];
  for (int i = 0; i < 4100; i++) items[i] = etr_value_int(i);
  int impl, stor;
  const int64_t sz[1] = {3};
  etr_tensor tx = {&impl, &stor, 0, 3, 4, "float", "cpu\xC0", 1, sz, NULL};
  etr_value in[6] = {etr_value_string(big), chain[0],
                     etr_value_tensor(&tx), etr_value_tensor(NULL),
                     etr_value_double(NAN), etr_value_list(items, 4100)};
  while (!atomic_load(&g_stop)) {
    etr_record o;
    tu_begin(&o, "hw_outer\x01\xFF", in, 6); /* the long list only here */
    tu_op("hw_inner", in, 5, in + 2, 1);
    tu_end(&o, in, 2);
    etr_tensor_died(&impl);
    atomic_fetch_add(&g_done_ops, 1);
  }
  free(big);
  return NULL;
}

static void test_close_while_threads_record_hostile_values(void **state) {
  (void)state;
  tu_trace t;
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.buffer_kb = 16;
  opt.max_buffers = 4;
  tu_open(&t, &opt);
  atomic_store(&g_stop, 0);
  atomic_store(&g_done_ops, 0);
  pthread_t th[2];
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&th[i], NULL, hostile_worker, NULL), 0);
  while (atomic_load(&g_done_ops) < 100) tu_sleep_us(1000);
  etr_trace_stats st;
  close_checked(&t, &st);
  unsigned at_close = atomic_load(&g_done_ops);
  while (atomic_load(&g_done_ops) < at_close + 20) tu_sleep_us(1000); /* still fine */
  atomic_store(&g_stop, 1);
  for (int i = 0; i < 2; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
  size_t outer = tu_count(&t, "hw_outer\x01\xEF\xBF\xBD"), inner = tu_count(&t, "hw_inner");
  if (outer < 100 || inner + 2 < outer) fail_msg("hw_outer %zu, hw_inner %zu", outer, inner);
  assert_true(st.ops_open_at_close <= 4);
  assert_true(st.lists_cut >= outer);
  assert_true(st.nesting_cut >= outer);
  assert_true(st.strings_cut >= outer);
  assert_true(st.utf8_replaced >= outer);
  tu_free(&t);
}

/* ---- a slow file: node order under back-pressure ---- */

/* The trace goes to a FIFO that a thread drains slowly, so that the writer thread is often
 * blocked in write(2) while recorders fill and queue chunks, and the timed flush (1 ms) comes
 * due with chunks still queued. Children must still come before their parent op. */
typedef struct fifo_reader {
  char path[600];
  int fd; /* opened before the trace: etr never blocks on a FIFO without a reader */
  char *buf;
  size_t len, cap;
} fifo_reader;

static void *slow_reader(void *p) {
  fifo_reader *r = p;
  int fd = r->fd;
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK); /* the writer is there now */
  for (unsigned n = 0;; n++) {
    if (r->cap - r->len < 4096) {
      r->cap = r->cap ? r->cap * 2 : 1 << 20;
      r->buf = realloc(r->buf, r->cap);
      if (!r->buf) abort();
    }
    ssize_t k = read(fd, r->buf + r->len, 4096);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    r->len += (size_t)k;
    if (n % 4 == 0) tu_sleep_us(200);
  }
  close(fd);
  return NULL;
}

/* Steps per thread: the order check below is quadratic in the nodes (about 7 000 here). */
#define SLOW_STEPS 20

static void *step_worker(void *p) {
  (void)p;
  int impl[4], stor;
  const int64_t sz[2] = {16, 16};
  for (int s = 0; s < SLOW_STEPS; s++) {
    etr_record step;
    tu_begin(&step, "slow_step", NULL, 0);
    for (int i = 0; i < 60; i++) {
      etr_tensor a = {&impl[i % 4], &stor, 0, 256, 4, "float", "cpu", 2, sz, NULL};
      etr_value in[2] = {etr_value_tensor(&a), etr_value_int(i)};
      etr_record mid;
      tu_begin(&mid, "slow_mid", in, 2);
      tu_op("slow_leaf", in, 1, in, 1);
      tu_end(&mid, in, 1);
    }
    tu_end(&step, NULL, 0);
  }
  return NULL;
}

static void test_slow_file_keeps_children_before_parents(void **state) {
  (void)state;
  tu_trace t;
  memset(&t, 0, sizeof t);
  tu_mkdtemp(t.dir, sizeof t.dir);
  fifo_reader rd;
  memset(&rd, 0, sizeof rd);
  snprintf(rd.path, sizeof rd.path, "%s/fifo", t.dir);
  assert_int_equal(mkfifo(rd.path, 0600), 0);
  rd.fd = open(rd.path, O_RDONLY | O_NONBLOCK);
  assert_true(rd.fd >= 0);
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.flush_ms = 1;
  opt.buffer_kb = 4;
  opt.max_buffers = 8;
  assert_int_equal(etr_trace_open(rd.path, &opt, &t.trace), 0);
  pthread_t rth;
  assert_int_equal(pthread_create(&rth, NULL, slow_reader, &rd), 0);
  assert_int_equal(etr_trace_enable(t.trace), 0);
  pthread_t th[3];
  for (int i = 0; i < 3; i++) assert_int_equal(pthread_create(&th[i], NULL, step_worker, NULL), 0);
  for (int i = 0; i < 3; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
  etr_trace_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  assert_int_equal(etr_trace_close_stats(t.trace, &st), 0);
  t.trace = NULL;
  assert_int_equal(pthread_join(rth, NULL), 0);
  /* What came through the FIFO, as a file for the usual checks. */
  snprintf(t.path, sizeof t.path, "%s/trace.json", t.dir);
  FILE *f = fopen(t.path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(rd.buf, 1, rd.len, f), rd.len);
  fclose(f);
  free(rd.buf);
  unlink(rd.path);
  tu_load(&t);
  assert_int_equal(op_node_count(&t), st.ops_recorded);
  assert_int_equal(st.ops_recorded, 3 * SLOW_STEPS * 121);
  assert_int_equal(st.nodes_dropped, 0);
  /* Children complete first: an op node comes before its parent op. Index by id (the
   * lookups of trace_util.h are linear: quadratic over 36 000 nodes). */
  size_t i, bad = 0;
  json_t *node;
  json_int_t max_id = 0;
  json_array_foreach(t.nodes, i, node) {
    if (tu_id(node) > max_id) max_id = tu_id(node);
  }
  size_t *pos = calloc((size_t)max_id + 1, sizeof *pos); /* index + 1; 0 = none */
  bool *is_op = calloc((size_t)max_id + 1, sizeof *is_op);
  assert_true(pos != NULL && is_op != NULL);
  json_array_foreach(t.nodes, i, node) {
    json_int_t id = tu_id(node);
    pos[id] = i + 1;
    is_op[id] = strcmp(tu_name(node), TU_THREAD_NAME) != 0 && id != 1;
  }
  json_array_foreach(t.nodes, i, node) {
    json_int_t p = tu_ctrl_deps(node);
    if (p < 0 || p > max_id || p == tu_id(node) || !is_op[p]) continue;
    if (pos[p] - 1 < i && bad++ == 0)
      print_message("first: node %lld (%s) at %zu after its parent %lld at %zu\n",
                    (long long)tu_id(node), tu_name(node), i, (long long)p, pos[p] - 1);
  }
  free(pos);
  free(is_op);
  if (bad) fail_msg("%zu op nodes written after their parent op", bad);
  tu_free(&t);
}

/* pthread_cancel of a recording thread while it waits for room (the output stalled: a FIFO
 * whose reader never reads). That wait is a cancellation point: cancelled there, the thread
 * left etr holding the chunk queue's lock, and its own exit (which writes its open ops)
 * waited for that lock forever, as did every other recorder and the writer (2026-11-27:
 * the join below hung). Now cancellation is off inside etr's waits: the thread is cancelled
 * at its own next cancellation point, once the writer has given up on the stalled output. */
static atomic_long cancel_ops;

static void *cancel_worker(void *p) {
  (void)p;
  char s[200];
  memset(s, 'x', sizeof s - 1);
  s[sizeof s - 1] = '\0';
  for (;;) {
    etr_value in[1] = {etr_value_string(s)};
    tu_op("cancel_op", in, 1, NULL, 0);
    atomic_fetch_add(&cancel_ops, 1);
    pthread_testcancel();
  }
  return NULL;
}

static void test_thread_cancelled_while_waiting_for_room(void **state) {
  (void)state;
  char dir[256], path[300];
  tu_mkdtemp(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/fifo", dir);
  assert_int_equal(mkfifo(path, 0600), 0);
  int rfd = open(path, O_RDONLY | O_NONBLOCK); /* a reader that never reads */
  assert_true(rfd >= 0);
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  opt.buffer_kb = 4;
  opt.max_buffers = 2;
  opt.stall_ms = 1000;
  etr_trace *tr = NULL;
  assert_int_equal(etr_trace_open(path, &opt, &tr), 0);
  assert_int_equal(etr_trace_enable(tr), 0);
  atomic_store(&cancel_ops, 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, cancel_worker, NULL), 0);
  /* until it stops making progress: waiting for room (the pipe holds 64 KiB) */
  long last = -1;
  for (int i = 0; i < 200; i++) {
    tu_sleep_us(50000);
    long now = atomic_load(&cancel_ops);
    if (now == last && now > 0) break;
    last = now;
  }
  assert_int_equal(pthread_cancel(th), 0);
  alarm(30); /* (a hang is a failure) */
  assert_int_equal(pthread_join(th, NULL), 0);
  etr_trace_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  assert_int_equal(etr_trace_close_stats(tr, &st), ETR_EIO); /* (the stall) */
  alarm(0);
  assert_int_equal(st.write_error, ETIMEDOUT);
  assert_true(st.nodes_dropped > 0);
  close(rfd);
  unlink(path);
  tu_rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_TEST(test_control_bytes_round_trip_escaped),
      TU_TEST(test_invalid_utf8_replaced_and_counted),
      TU_TEST(test_10mb_strings_cut_at_8192_on_utf8_boundary),
      TU_TEST(test_1m_element_lists_cut_at_4096),
      TU_TEST(test_nesting_10000_deep_cut_on_64k_stack),
      TU_TEST(test_self_holding_list_stays_readable),
      TU_TEST(test_many_small_values_stay_readable),
      TU_TEST(test_special_numbers_written_exactly),
      TU_TEST(test_null_pointers_in_records_and_values),
      TU_TEST(test_null_inputs_with_count_is_counted),
      TU_TEST(test_null_trace_and_bad_args_return_errors),
      TU_TEST(test_end_without_begin_counted),
      TU_TEST(test_end_out_of_order_counted),
      TU_TEST(test_longjmp_abandons_inner_ops),
      TU_TEST(test_thread_churn_memory_bounded),
      TU_TEST(test_double_close_returns_estate),
      TU_TEST(test_enable_before_open_and_null_enable),
      TU_TEST(test_ops_while_trace_disabled),
      TU_TEST(test_repeated_disable_counts_open_ops_once),
      TU_TEST(test_ops_while_observers_removed_and_readded),
      TU_TEST(test_flush_with_ops_open),
      TU_TEST(test_close_while_threads_record_hostile_values),
      TU_TEST(test_slow_file_keeps_children_before_parents),
      TU_TEST(test_thread_cancelled_while_waiting_for_room),
  };
  return cmocka_run_group_tests_name("reliability_hostile", tests, NULL, NULL);
}
