/* tests/trace/trace_util.h — shared helpers for the execution-trace output tests.
 *
 * Each test records through the public API into a file in a fresh temporary directory,
 * closes the trace, and parses the file with jansson (an independent parser). The helpers
 * here open/close a trace, record ops, load and look up nodes and attrs, scan the raw text
 * for key order (JSON objects are unordered for a parser; the format fixes the order), and
 * check the tree invariants every trace must keep whatever the runtime did.
 *
 * Helpers assert with cmocka, so they must be called from inside a cmocka test.
 */
#ifndef ETR_TESTS_TRACE_UTIL_H
#define ETR_TESTS_TRACE_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cmocka.h>
#include <etr/etr.h>
#include <jansson.h>

#define TU_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#define TU_PROCESS_NAME "[pytorch|profiler|execution_trace|process]"
#define TU_THREAD_NAME "[pytorch|profiler|execution_trace|thread]"

/* One trace under test: its temp dir, path, handle, and after loading its text and tree. */
typedef struct tu_trace {
  char dir[256];
  char path[512];
  etr_trace *trace;
  int close_rc;
  char *text; /* raw file, NUL-terminated */
  size_t len;
  json_t *root;  /* owned */
  json_t *nodes; /* borrowed from root */
} tu_trace;

/* ---- temp dirs and files ---- */

/* Create a fresh temp directory (under $TMPDIR or /tmp); asserts. */
void tu_mkdtemp(char *out, size_t n);
/* Remove a directory and the files directly in it. */
void tu_rmdir(const char *dir);
/* Read a whole file (NUL-terminated); NULL when it cannot be read. */
char *tu_read_file(const char *path, size_t *len);
/* Write n bytes at p to path (created or truncated); fails the test on any error. */
void tu_write_file(const char *path, const void *p, size_t n);
/* Read a gzip file (any file when zlib is available); NULL when unavailable or unreadable. */
char *tu_read_gz(const char *path, size_t *len);
/* The number of gzip members in the file at path, each checked whole (header, data, CRC and
 * length); 0 when it cannot be read or a member is bad (or without zlib). */
size_t tu_gz_members(const char *path);
/* Whether the file at path holds no disk block past its end (one block of slack): nothing
 * reserved ahead of the writes was left behind. */
bool tu_nothing_past_end(const char *path);
/* Monotonic clock in ms / us. */
int64_t tu_mono_ms(void);
int64_t tu_mono_us(void);
/* Sleep for us microseconds. */
void tu_sleep_us(long us);

/* Run exe with args (NULL-terminated, argv[0] added) in an environment made of ours minus
 * every ETR_TRACE* variable plus extra_env (NULL-terminated, may be NULL); waits and returns
 * the wait status; the child's pid in *pid_out when not NULL. */
int tu_run(const char *exe, const char *const *args, const char *const *extra_env, pid_t *pid_out);

/* Wait for a child up to timeout_s seconds; on timeout kill it (SIGKILL), reap it and return
 * -1; else 0 with the wait status in *status. */
int tu_wait(pid_t pid, int timeout_s, int *status);

/* ---- the etr command (tests built with ETR_TOOL pass it as tool) ---- */

/* Run the etr command at tool with args (NULL-terminated, without argv[0]); its exit status,
 * 128 when it did not exit. */
int tu_etr(const char *tool, const char *const *args);
/* Fail the test unless `etr validate --strict` accepts the trace at path. */
void tu_assert_valid(const char *tool, const char *path);

/* ---- trace life cycle ---- */

/* Options for a traceback on every op: *opt and *tb set to their defaults, tb enabled and
 * hung on opt (so tb must live until the trace is open). Change either before opening. */
void tu_traceback_options(etr_trace_options *opt, etr_traceback_options *tb);
/* Make a temp dir, open a trace at <dir>/trace.json with opt (may be NULL) and enable it. */
void tu_open(tu_trace *t, const etr_trace_options *opt);
/* tu_open with a traceback on every op: tb's settings (NULL: the defaults), enabled. */
void tu_open_traceback(tu_trace *t, const etr_traceback_options *tb);
/* Same without enabling. */
void tu_open_disabled(tu_trace *t, const etr_trace_options *opt);
/* tu_open writing a binary log (trace.etr in the temp dir). */
void tu_open_binary(tu_trace *t, const etr_trace_options *opt);
/* Close a tu_open_binary trace (asserting 0), `etr convert` it to trace.json beside it
 * (asserting that it succeeds and that `etr validate --strict` accepts the result), then
 * load that. */
void tu_close_convert(tu_trace *t, const char *tool);
/* Close (recording close_rc), then load and parse the file and check the tree invariants. */
void tu_close(tu_trace *t);
/* Close and assert close returned 0, then load (the common case). */
void tu_close_ok(tu_trace *t);
/* Load and parse t->path (asserts it parses, with embedded NULs allowed), then validate. */
void tu_load(tu_trace *t);
/* Parse a file somewhere else into t (no temp dir). */
void tu_load_path(tu_trace *t, const char *path);
/* `etr convert bin -o json` (asserts it succeeds and that `etr validate --strict` accepts
 * json), then tu_load_path(t, json). */
void tu_convert_load(tu_trace *t, const char *tool, const char *bin, const char *json);
/* Free the text and tree and remove the temp dir. */
void tu_free(tu_trace *t);
/* cmocka teardown: close and free what tu_traces of a failed test still hold (so the next
 * test can open a trace and ASan reports no leak caused by a failure). */
int tu_cleanup(void **state);
/* A test with tu_cleanup as its teardown. */
#define TU_TEST(f) cmocka_unit_test_teardown(f, tu_cleanup)

/* TU_TSAN / TU_ASAN: built with ThreadSanitizer / AddressSanitizer (gcc or clang). Their
 * runtimes do not survive a child that goes on after a multi-threaded fork (TSan refuses
 * to start its threads; gcc 12's ASan allocator may keep a lock another thread held). */
#if defined(__SANITIZE_THREAD__)
#define TU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TU_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define TU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TU_ASAN 1
#endif
#endif

/* ---- recording ---- */

/* Init and begin a record with inputs (set only when the record is active). */
void tu_begin(etr_record *r, const char *name, const etr_value *in, uint32_t n_in);
/* End with outputs. */
void tu_end(etr_record *r, const etr_value *out, uint32_t n_out);
/* begin + end. */
void tu_op(const char *name, const etr_value *in, uint32_t n_in, const etr_value *out,
           uint32_t n_out);

/* ---- lookups in a loaded trace ---- */

size_t tu_node_count(const tu_trace *t);
/* Number of nodes with this name. */
size_t tu_count(const tu_trace *t, const char *name);
/* The one node with this name (asserts exactly one). */
json_t *tu_node(const tu_trace *t, const char *name);
/* The first node with this name, or NULL. */
json_t *tu_find(const tu_trace *t, const char *name);
/* The node with this id, or NULL. */
json_t *tu_node_by_id(const tu_trace *t, json_int_t id);
/* Index of a node in the nodes array (asserts found). */
size_t tu_node_index(const tu_trace *t, const json_t *node);
json_int_t tu_id(const json_t *node);
json_int_t tu_ctrl_deps(const json_t *node);
const char *tu_name(const json_t *node);
/* The attr object {"name","type","value"} called name, or NULL. */
json_t *tu_attr(const json_t *node, const char *name);
/* The attr's integer value (asserts present, integer). */
json_int_t tu_attr_int(const json_t *node, const char *name);
/* The attr's string value (asserts present, string). */
const char *tu_attr_str(const json_t *node, const char *name);
/* The i-th input/output value, shape, type, strides (NULL when missing). */
json_t *tu_in(const json_t *node, const char *io, const char *field, size_t i);
/* The thread node whose tid attr is tid, or NULL. */
json_t *tu_thread_node(const tu_trace *t, json_int_t tid);
/* Footer stats object etr.stats (asserts present). */
json_t *tu_stats(const tu_trace *t);
/* A footer counter (asserts present and integer). */
json_int_t tu_stat(const tu_trace *t, const char *name);

/* ---- raw key order ---- */

#define TU_MAX_KEYS 32
typedef struct tu_keys {
  size_t n;
  char name[TU_MAX_KEYS][40];
  size_t val_off[TU_MAX_KEYS]; /* offset of each value in the text */
} tu_keys;

/* Skip whitespace from off; returns the offset of the next token. */
size_t tu_raw_ws(const char *text, size_t len, size_t off);
/* Offset just past the JSON value starting at off (after whitespace); asserts well-formed. */
size_t tu_raw_skip(const char *text, size_t len, size_t off);
/* Keys of the object starting at off (after whitespace), in file order. */
void tu_raw_keys(const char *text, size_t len, size_t off, tu_keys *out);
/* Offsets of the elements of the array at off; returns the count (fills at most max). */
size_t tu_raw_elems(const char *text, size_t len, size_t off, size_t *offs, size_t max);
/* Keys of a jansson object in iteration order. */
void tu_json_keys(const json_t *obj, tu_keys *out);
/* "a,b,c". */
const char *tu_keys_join(const tu_keys *k, char *buf, size_t n);
/* Raw key order of the root object and of node i. */
void tu_root_keys(const tu_trace *t, tu_keys *out);
void tu_node_keys(const tu_trace *t, size_t i, tu_keys *out);

/* ---- invariants ---- */

/* Tree invariants every trace keeps, whatever the runtime did: nodes is an array, each node
 * an object with id/name/ctrl_deps/inputs/outputs/attrs of the right JSON types, ids unique,
 * every ctrl_deps names a node of the file, inputs/outputs arrays of equal length, the
 * process node (id 1) last. Called by tu_load. */
void tu_check_tree(const tu_trace *t);
/* Every id used by a tensor/storage value in the trace; appends to ids (returns count). */
size_t tu_collect_object_ids(const tu_trace *t, json_int_t *ids, size_t max);

/* ---- strings ---- */
/* True when s (len bytes) equals a prefix + k * U+FFFD + suffix for some k in [kmin, kmax]. */
int tu_replaced_as(const char *s, size_t len, const char *prefix, const char *suffix, size_t kmin,
                   size_t kmax);

/* Number of entries in dir other than . and .., or -1 when it cannot be read. */
int tu_dir_entries(const char *dir);

#endif /* ETR_TESTS_TRACE_UTIL_H */
