/* Streaming reader of execution traces (docs/FORMAT.md), for the etr command, tests and fuzzers.
 *
 * The reader walks one trace file front to back and hands over one node at a time; memory
 * stays bounded by the largest single node, however large the file. Gzip and zstd input (by
 * magic bytes, whatever the file name) is decompressed on the fly; the path "-" reads stdin.
 * It accepts our traces and real PyTorch ones (schemas 1.0.2, 1.0.3, 1.1.0, 1.1.1 with or
 * without the "-chakra.0.0.4" suffix). Deviations that do not stop reading (a strides array
 * shorter than values, an unknown top-level key, a missing attr) are reported as warnings
 * through the warning callback; only malformed JSON or a wrong top-level shape is an error.
 *
 * Not part of libetr's public API: built into the internal static library rd_reader.
 * One reader is used by one thread at a time.
 */
#ifndef ETR_JSON_READER_H
#define ETR_JSON_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- generic JSON values (an arena-backed tree for one node or one table) ---- */

typedef enum rd_jkind {
  ETR_J_NULL = 0,
  ETR_J_BOOL = 1,
  ETR_J_INT = 2,    /* integer that fits int64 */
  ETR_J_UINT = 3,   /* integer above INT64_MAX that fits uint64 */
  ETR_J_DOUBLE = 4, /* any other number */
  ETR_J_STRING = 5,
  ETR_J_ARRAY = 6,
  ETR_J_OBJECT = 7
} rd_jkind;

typedef struct rd_jval rd_jval;
typedef struct rd_jmember rd_jmember;

struct rd_jval {
  rd_jkind kind;
  union {
    bool b;
    int64_t i;
    uint64_t u;
    double d;
    struct {
      const char *s;
      size_t len;
    } str; /* unescaped UTF-8, NUL-terminated */
    struct {
      rd_jval *items;
      size_t n;
    } arr;
    struct {
      rd_jmember *items;
      size_t n;
    } obj; /* in file order */
  } v;
};

struct rd_jmember {
  const char *key;
  size_t key_len;
  rd_jval val;
};

/* Member of an object by key, or NULL. */
const rd_jval *rd_jobj_get(const rd_jval *obj, const char *key);

/* ---- one node, with the parts every tool needs already pulled out ---- */

typedef struct rd_rattr {
  const char *name;
  const char *type; /* "uint64", "int64", "string", ... as written */
  rd_jval value;
  int base;        /* 0..8: a base attr (rd_base_attr of its name), -1: another attr */
  bool exact_keys; /* its object is exactly {"name", "type", "value"}, in this order */
} rd_rattr;

typedef struct rd_rnode {
  uint64_t offset; /* byte offset of the node's '{' in the (decompressed) input */
  int64_t id;
  const char *name; /* unescaped, NUL-terminated */
  size_t name_len;
  int64_t ctrl_deps;      /* parent id; -1 when the key is missing */
  const rd_jval *inputs;  /* the "inputs" object ({values, shapes, types[, strides]}) or NULL */
  const rd_jval *outputs; /* the "outputs" object or NULL */
  /* inputs / outputs: its keys are exactly "values", "shapes", "types"[, "strides"] in this
   * order (as strcmp compares them), so its members 0..n-1 are those parts */
  bool inputs_exact_keys, outputs_exact_keys;
  /* The node's keys (as strcmp compares them): a bit per one present, in the order id=bit 0,
   * name, ctrl_deps, inputs, outputs, ts, inclusive_dur, exclusive_dur, attrs=bit 8
   * (docs/FORMAT.md); keys_in_order: every key is one of these, each after the ones before
   * it in that order (so none twice). */
  uint32_t key_bits;
  bool keys_in_order;
  bool has_timing; /* ts, inclusive_dur, exclusive_dur present */
  int64_t ts, inclusive_dur, exclusive_dur;
  /* The base attrs (zero / NULL when absent; `missing_attrs` has a bit per absent one, in
   * the docs/FORMAT.md order rf_id=bit 0 .. kernel_file=bit 8). */
  uint64_t rf_id, fw_parent, scope, tid, fw_tid;
  int64_t seq_id;
  const char *op_schema, *kernel_backend, *kernel_file;
  uint32_t missing_attrs;
  bool has_traceback;
  uint64_t traceback;    /* the "traceback" attr when has_traceback */
  const rd_rattr *attrs; /* every attr in file order, base ones included */
  size_t n_attrs;
  const rd_jval *raw; /* the whole node object, keys in file order */
  /* A string of the node (a key, a name, a value) holds a NUL byte, from a \u0000 escape:
   * its C-string length (strlen) is then shorter than its length, so compare names with
   * strcmp; otherwise length and memcmp give the same answer faster. */
  bool has_nul_strings;
  /* The reader found the node to conform to docs/FORMAT.md (rd_options.conform): its text
   * has the shape our writer (or PyTorch's) writes and every per-node rule `etr validate` checks
   * holds (keys, attrs, inputs/outputs and each value against its type; timing, the id's sign and
   * the process and thread nodes excepted), and it gave no warning. Its tree was not built:
   * raw, inputs, outputs and attrs are NULL, n_attrs 0; every other field is set. */
  bool conforms;
} rd_rnode;

/* ---- the file ---- */

typedef struct rd_rheader {
  const char *schema; /* as written, e.g. "1.1.1-chakra.0.0.4" */
  int schema_major, schema_minor, schema_patch;
  int64_t pid;      /* -1 when absent */
  const char *time; /* NULL when absent */
  int64_t start_ts; /* -1 when absent */
} rd_rheader;

typedef struct rd_reader rd_reader;

/* Called for each warning; `offset` is a byte offset in the (decompressed) input. */
typedef void (*rd_warn_fn)(uint64_t offset, int64_t node_id, const char *msg, void *user);

/* How many times a node's limit the trailer (everything after "nodes") may take: the
 * recorder's traceback tables grow with the distinct stacks a run makes (observer/tbtable.c
 * bounds them by this). */
#define ETR_READER_TABLES_FACTOR 8u

typedef struct rd_options {
  size_t struct_size;
  rd_warn_fn warn; /* NULL: warnings are counted only */
  void *user;
  /* The most memory one node may take to read (its text, and the values built from it),
   * and all header values together; the values after "nodes" (the traceback tables, the
   * footer) may take ETR_READER_TABLES_FACTOR times as much together. A node over it is an
   * error, a top-level value over it is skipped with a warning (rd_skipped). 0 = the
   * environment's ETR_READER_LIMIT_MB, else 16 MiB. */
  size_t max_node_bytes;
  /* For `etr validate`: a node whose text has the shape our writer (or PyTorch's) writes and
   * which conforms to docs/FORMAT.md is handed over without its tree (rd_rnode.conforms),
   * checked while it is scanned; any other node is read as usual. The hand backend only. */
  bool conform;
  /* The values after "nodes" the caller wants (rd_trailer), a NULL-terminated list of keys;
   * NULL: all of them. The built-in parser passes over the others without holding them
   * (their brackets and strings followed, as for a skipped value, but no warning and not
   * rd_skipped): a command that needs no table reads a trace whose tables are large in a
   * few MiB. finish_ts and the header's keys are read wherever they stand. yajl builds
   * every value. */
  const char *const *trailer_keys;
} rd_options;
#define ETR_READER_OPTIONS_INIT \
  { sizeof(rd_options), NULL, NULL, 0, false, NULL }

/* Open path ("-" = stdin) and read up to the start of "nodes". 0, or a negative ETR_E*
 * code with the message in rd_error (of the reader returned in *out, which must
 * still be closed; *out is NULL only when memory ran out). */
int rd_open(const char *path, const rd_options *opt, rd_reader **out);

const rd_rheader *rd_header(const rd_reader *r);

/* The next node: 1 and *node (valid until the next call), 0 at the end of "nodes", or a
 * negative ETR_E* code (ETR_EFORMAT for bad input) with the message in rd_error. */
int rd_next(rd_reader *r, const rd_rnode **node);

/* After rd_next returned 0: read the rest of the file (finish_ts and the keys after
 * it). 0 or a negative code. Then the accessors below are valid. */
int rd_finish(rd_reader *r);
int64_t rd_finish_ts(const rd_reader *r); /* -1 when absent */
/* A top-level key after "nodes" ("frames", "tracebacks", "etr", ...) or NULL; valid until
 * close. Each is held in memory (they are tables, not per-node data). */
const rd_jval *rd_trailer(const rd_reader *r, const char *key);

/* True when the value of top-level key `key` was over the limit and skipped (rd_trailer
 * gives NULL for it; only its strings and brackets were followed). */
bool rd_skipped(const rd_reader *r, const char *key);
/* rd_skipped, and the value was passed over to its end: it is whole in the input (a value the
 * input stops inside, cut short, is skipped but not whole). */
bool rd_skipped_whole(const rd_reader *r, const char *key);

/* Bytes parsed more than once, for tests: the hand backend redoes a step cut by the end of
 * its window after the window has doubled; yajl lexes a token that spans its feeds (a long
 * string) again from its start at each feed, and the feeds double while one does. Either
 * way this stays below about twice the input. */
uint64_t rd_redone(const rd_reader *r);

/* "FILE: byte N: reason" for the last error, or "" if none. */
const char *rd_error(const rd_reader *r);
/* Whether that error is one of the reader's limits (a node or key over the size limit,
 * nesting past 1024 levels): the input may well go on, valid, past it. */
bool rd_error_is_limit(const rd_reader *r);
uint64_t rd_warnings(const rd_reader *r);
uint64_t rd_offset(const rd_reader *r);         /* bytes consumed so far */
uint64_t rd_input_size(const rd_reader *r);     /* file size (compressed); 0 if unknown */
uint64_t rd_input_consumed(const rd_reader *r); /* file bytes consumed (compressed) */

void rd_close(rd_reader *r); /* NULL is a no-op */

/* ---- additions (H1) ---- */

/* Prefix of the warning given for each of the seven base attrs (rf_id .. op_schema) that a
 * node lacks: ETR_READER_WARN_MISSING_ATTR " \"rf_id\"". */
#define ETR_READER_WARN_MISSING_ATTR "missing base attr"

/* The top-level keys seen so far, in file order (valid until close). */
const char *const *rd_top_keys(const rd_reader *r, size_t *n);

/* Index 0..8 of a base attr name in docs/FORMAT.md order (rf_id=0 .. kernel_file=8), or -1.
 * A few character compares, no loop over the names. */
int rd_base_attr(const char *name);
/* rd_base_attr of a name of len bytes (with no NUL among them): by its length, then one
 * fixed-size compare. */
int rd_base_attr_n(const char *name, size_t len);

/* A run of bytes (not NUL-terminated). */
typedef struct rd_span {
  const char *s;
  size_t n;
} rd_span;

/* The element types of a list type, split from the part inside its brackets ("A,B" of
 * "GenericList[A,B]" or "Tuple[A,B]") at its top-level commas: at most max stored in out;
 * returns how many there are (may exceed max). validate's rule, used by its checks and by
 * the reader's scan of conforming nodes alike. */
size_t rd_split_types(rd_span inner, rd_span *out, size_t max);

/* Bytes of memory the reader holds now (buffers, arenas, stacks, queue): for tests and
 * benchmarks checking that memory stays bounded. */
uint64_t rd_memory(const rd_reader *r);

/* The parser behind the reader: "hand" (the default: a pull parser specialised for traces,
 * in reader_hand.c) or "yajl" (yajl's push parser, reader_yajl.c), chosen at open by the
 * environment variable ETR_READER_BACKEND=hand|yajl. Both accept the same inputs and give
 * the same nodes; the benchmark bench/cli_throughput.sh measures both. */
const char *rd_backend(const rd_reader *r);

/* The input's name as messages give it ("<stdin>" for "-"). */
const char *rd_path(const rd_reader *r);

/* ---- the byte source (reader_input.c) ----
 * An input's bytes, gzip and zstd decompressed by magic bytes (concatenated members and frames
 * as one stream), as the reader reads them; `etr repair` reads its raw copy through it too.
 * It holds `block` input bytes and, for compressed input, 64 KiB of output. */

typedef struct rd_source rd_source;

/* How the input ended (rd_source_ended): not yet, at its end, or early. */
typedef enum rd_source_end {
  RD_SRC_OPEN = 0,    /* not ended yet */
  RD_SRC_DONE = 1,    /* the end of the file (and of the last gzip member or zstd frame) */
  RD_SRC_CUT = 2,     /* the file ends inside a gzip member or a zstd frame */
  RD_SRC_CORRUPT = 3, /* the compressed data is corrupt (the decompressor's words in detail) */
  RD_SRC_NO_RESET = 4 /* zlib cannot start the gzip member that follows another */
} rd_source_end;

/* A source reading fd, which it does not close: with pread from file offset base on when
 * positional (another reader of the same open file is then undisturbed), else with read
 * from the current offset (pipes). block: input bytes read at once (0: 256 KiB). 0, or
 * ETR_ENOMEM (then *out is NULL). */
int rd_source_open(int fd, uint64_t base, bool positional, size_t block, rd_source **out);
/* The next bytes of the (decompressed) input, at most 64 KiB, in *p until the next call:
 * their count, 0 once the input has ended (rd_source_ended says how), -1 on a read error or
 * when memory ran out (rd_source_errno). A stream ending early hands over the bytes it had
 * decompressed first: the call giving the last ones already reports the end. */
ssize_t rd_source_read(rd_source *s, const unsigned char **p);
/* rd_source_read into dst (up to n bytes; plain input is read straight into it). What a
 * block holds past n is kept for the next call: do not mix with rd_source_read then. */
ssize_t rd_source_read_into(rd_source *s, unsigned char *dst, size_t n);
rd_source_end rd_source_ended(const rd_source *s, const char **detail);
int rd_source_errno(const rd_source *s);          /* errno of the failure of a -1 */
bool rd_source_is_compressed(const rd_source *s); /* gzip or zstd (known after the 1st read) */
bool rd_source_is_gzip(const rd_source *s);
uint64_t rd_source_input_read(const rd_source *s); /* file bytes read (compressed) */
uint64_t rd_source_memory(const rd_source *s);     /* bytes it holds */
void rd_source_close(rd_source *s);                /* NULL is a no-op; fd stays open */

#endif /* ETR_JSON_READER_H */
