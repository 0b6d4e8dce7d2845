/* Trace observer internals: the binary event format between recording threads and the
 * writer thread, per-thread state, and the trace object.
 *
 * Recording threads never format JSON: at begin they encode the op's strings and inputs
 * (raw bytes, ids already resolved) into a per-thread arena; at end they append outputs and
 * timings and copy the finished event into the thread's current chunk. Full chunks go to a
 * queue that the writer thread drains, turning each event into one JSON node.
 */
#ifndef ETR_OBSERVER_TRACE_INTERNAL_H
#define ETR_OBSERVER_TRACE_INTERNAL_H

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "etr/observer.h"
#include "etr/trace.h"
#include "json/writer.h"
#include "observer/objects.h"

/* Limits of docs/FORMAT.md and our own. */
#define ETR__STRING_MAX 8192u
#define ETR__LIST_MAX 4096u
#define ETR__DEPTH_MAX 32u
#define ETR__NODE_BUDGET (1u << 20) /* encoded bytes of values per op, beyond it lists are cut */
#define ETR__SHORT_MAX 255u         /* dtype and device names */

/* ---- events ---- */
enum { ETR__EV_OP = 1, ETR__EV_THREAD = 2 };
enum {
  ETR__EVF_TIMING = 1,
  ETR__EVF_INCOMPLETE = 2,
  ETR__EVF_KERNEL = 4,
  ETR__EVF_COLLECTIVE = 8,
  ETR__EVF_TRACEBACK = 16,
  ETR__EVF_FAILED = 32,
  ETR__EVF_TBINDEX = 64 /* binary log: tb_gen holds the traceback's index, tb_n is 0 */
};

/* Value tags in the encoding. */
enum {
  ETR__V_NONE = 0,
  ETR__V_BOOL = 1,
  ETR__V_INT = 2,
  ETR__V_DOUBLE = 3,
  ETR__V_STRING = 4,
  ETR__V_DEVICE = 5,
  ETR__V_TENSOR = 6,
  ETR__V_LIST = 7,
  ETR__V_TUPLE = 8,
  ETR__V_OBJECT = 9,
  ETR__V_CUT = 10 /* nested too deep */
};

/* Event header; the payload follows: traceback frame words (tb_n x 8 bytes, first so they
 * are 8-aligned), name, schema, kernel backend, kernel file, collective block, inputs,
 * outputs (lengths below). Events start 8-byte aligned in a chunk. */
typedef struct etr__ev {
  uint32_t size; /* header + payload, rounded up to 8 */
  uint8_t type;
  uint8_t flags;
  uint16_t pad;
  uint64_t id, parent, rf_id, fw_parent, fw_tid, tid;
  int64_t seq;
  int64_t ts_ns, incl_ns;
  int64_t excl_us; /* inclusive less the children's, in µs as written (emit.c) */
  int64_t kstream;
  uint32_t kgrid[3];
  uint32_t scope;
  uint32_t n_in, n_out;
  uint32_t name_len, schema_len, kback_len, kfile_len, coll_len, in_len, out_len;
  uint32_t tb_n;   /* traceback frame words */
  uint64_t tb_gen; /* module-map generation of the native frames */
} etr__ev;
/* Payload after the header starts 8-aligned (the traceback words are read in place). */
_Static_assert(sizeof(etr__ev) % 8 == 0, "etr__ev must keep the payload 8-aligned");

typedef struct etr__chunk {
  struct etr__chunk *next;
  /* Bytes of complete events. While a thread owns the chunk it appends and publishes len
   * with a release store; the writer may read the prefix meanwhile (a timed flush). */
  uint32_t len, cap;
  uint32_t nodes;                /* events inside, to count what is lost after a write error */
  uint32_t peeked, peeked_nodes; /* prefix the writer already wrote (writer only) */
  struct etr__tstate *owner;     /* the thread that filled it */
  bool oversized;                /* made for one large event: freed after use, not pooled */
  _Alignas(8) uint8_t data[];
} etr__chunk;

/* ---- per-thread state ---- */
typedef struct etr__frame {
  const etr_record *rec;
  uint64_t id;
  int64_t start_ns;
  int64_t child_us; /* inclusive time of finished children, in µs as written */
  size_t off, len;  /* the frame's region in the arena (8-aligned start, padded length) */
  size_t payload;   /* bytes of header + payload in the region, without the pad */
} etr__frame;

typedef struct etr__tstate {
  struct etr_trace *trace;
  uint64_t tid;
  uint64_t thread_node_id;
  uint64_t id_next, id_end; /* block of node/object ids */
  etr__chunk *chunk;        /* written by the owner with atomic stores: the writer peeks at it */
  uint32_t queued;          /* its chunks queued or being written (q_mutex): no peek meanwhile */
  uint8_t *arena;
  size_t arena_len, arena_cap;
  etr__frame *frames;
  uint32_t depth, frames_cap;
  bool finished; /* open ops and thread node written (thread exit or close) */
  etr__idcache tensor_ids, storage_ids; /* recent id lookups of this thread */
  /* Traceback selection and capture buffers (allocated on the first capture). */
  uint32_t tb_countdown;   /* ops left before the next 1-in-N capture */
  uint32_t tb_cfg_version; /* configuration the name cache below belongs to */
  struct {
    const char *name;
    uint64_t hash;
    bool match;
  } tb_names[16]; /* pattern results */
  uintptr_t *tb_ips;
  _Atomic uint64_t top_id;    /* id of the innermost open op, for fw_parent lookups */
  _Atomic uint32_t depth_pub; /* depth, for counting ops open at disable */
  /* Counters, written by the owner only (plain load+store), read by stats. */
  _Atomic uint64_t ops_recorded, ends_without_begin, ends_out_of_order, strings_cut, lists_cut,
      nesting_cut, nodes_dropped, objects, tracebacks, ops_abandoned;
  struct etr__tstate *next;
  struct etr__tstate *free_next; /* on the trace's list of exited threads' states */
} etr__tstate;

#define ETR__TID_PAGE 256u
#define ETR__TID_PAGES 256u

/* Which ops get a traceback: immutable once published; replaced ones stay allocated until
 * the trace is freed, so recorders may read a configuration without any lock. */
typedef struct etr__tbcfg {
  bool enabled;
  char *pattern;  /* NULL = every op */
  uint32_t every; /* >= 1 */
  uint32_t depth; /* frames kept */
  uint32_t version;
  struct etr__tbcfg *older;
} etr__tbcfg;

#define ETR__TB_DEPTH_DEFAULT 64u
#define ETR__TB_DEPTH_MAX 256u
#define ETR__TB_OWN_FRAMES 16u /* room for etr's own frames above the runtime's call */

struct etr__tbtab;

/* io_state: who may write to the file. The writer holds IO_BUSY around each write; a fatal
 * signal handler that finds the writer unresponsive takes IO_HANDLER (for good). */
enum { ETR__IO_IDLE = 0, ETR__IO_BUSY = 1, ETR__IO_HANDLER = 2 };

struct etr_trace {
  uint64_t serial;
  bool closed; /* a tombstone: the handle was closed (see trace.c) */
  struct etr_trace *next_closed;
  etr_trace_stats final_stats; /* of a closed trace */
  pid_t pid;
  int fd;
  bool binary;                     /* a binary event log (binlog.h), not JSON */
  etr_symbolize_mode tb_symbolize; /* fixed at open (opt.traceback is not kept) */
  char when[24];                   /* local wall time at open, for the header */
  etr_trace_options opt;
  etr_observer_id obs;
  int64_t start_ms;
  _Atomic uint64_t next_id;
  etr__idmap *tensors, *storages;
  _Atomic int failed; /* a write error happened: recorders stop encoding */

  pthread_mutex_t threads_mutex;      /* threads list and tid pages */
  etr__tstate *threads;               /* prepended with a release store; the writer walks it */
  etr__tstate *tstate_free;           /* states of exited threads, for new threads to reuse */
  _Atomic(etr__tstate *) **tid_pages; /* ETR__TID_PAGES pages */

  /* Queue between recorders and the writer (q_mutex). */
  pthread_mutex_t q_mutex;
  sem_t wake;                /* writer waits for work (a semaphore: a signal handler posts) */
  pthread_cond_t space_cond; /* recorders wait for a free chunk */
  pthread_cond_t done_cond;  /* flushers wait for the writer */
  etr__chunk *q_head, *q_tail, *free_chunks;
  uint32_t max_chunks; /* chunks queued for the writer before recorders wait */
  uint32_t chunk_size;
  uint64_t q_pushed, q_done;      /* chunks queued and processed */
  uint64_t flush_gen, flush_done; /* etr_trace_flush requests, and the last served */
  uint64_t flush_target;          /* q_pushed at the latest request */
  bool stop;
  pthread_t writer;

  _Atomic(etr__tbcfg *) tb_cfg;
  _Atomic bool tb_ever;     /* tracebacks were enabled at some point: write the tables */
  pthread_mutex_t tb_mutex; /* serializes etr_trace_set_traceback */

  /* Durability (options flush_ms, flush_kb, sync). */
  int64_t flush_ns; /* INT64_MAX: no timed flush */
  size_t flush_bytes;
  dev_t file_dev; /* the file we opened: a flush checks the fd still refers to it */
  ino_t file_ino;

  /* Fatal signals (fatal.c): a handler asks the writer to finalize the file and waits. */
  _Atomic uint32_t fatal_req, fatal_ack;
  _Atomic uint32_t fatal_hold;   /* handlers between their request and the host's return */
  _Atomic int64_t fatal_hold_ns; /* when the latest hold began (it expires: trace.c) */
  _Atomic int fatal_sig;
  _Atomic int io_state;
  _Atomic pid_t writer_tid;
  char seal_node[320]; /* the process node's text, rendered at open for the handler */
  size_t seal_node_len;
  uint64_t header_len;

  /* Writer-thread state. */
  etr__jw jw;
  etr__jw scratch[4];           /* emit.c: a node's shapes, types and strides (and their key) */
  struct etr__shape_memo *memo; /* emit.c: the text of recent shapes, types and strides */
  bool any_node;
  bool sealed;         /* the file ends with a footer written at a fatal signal */
  bool unseal_pending; /* new output follows: cut the file back to seal_off first */
  bool seal_any_node;
  uint64_t seal_off; /* where the process node of that footer starts */
  struct etr__tbtab *tbtab;
  struct etr__ring *ring; /* the flight recorder's (ring.h), NULL when off */
  bool restart_pending;   /* a ring dump starts: cut the file to nothing at the next write */

  /* Counters shared by many threads (rare events) or written by the writer. */
  _Atomic uint64_t nodes_written, bytes_written, utf8_replaced, buffer_waits, ids_retired,
      threads_count, ops_open_at_disable, ops_open_at_thread_exit, ops_open_at_close,
      nodes_dropped_writer, tb_unique, tb_frames, values_fixed, ends_cross_thread, ring_dropped;
  _Atomic int write_error;
};

/* Unaligned native-endian reads of the encoded values (encode.c writes them, emit.c and
 * binlog.c read them). */
static inline uint32_t etr__rd32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}
static inline uint64_t etr__rd64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

/* CLOCK_MONOTONIC in ns; the kernel's id of the calling thread (async-signal-safe both). */
static inline int64_t etr__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
static inline pid_t etr__gettid(void) { return (pid_t)syscall(SYS_gettid); }

/* Single-writer counter bump: a plain load and store, no locked instruction. */
static inline void etr__bump(_Atomic uint64_t *c, uint64_t n) {
  atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n, memory_order_relaxed);
}

/* ---- encode.c (recording threads) ---- */

/* Grow the thread's arena to hold n more bytes; false when memory is exhausted. */
bool etr__arena_reserve(etr__tstate *ts, size_t n);

/* Encode n values at the end of the arena (ids resolved); returns the bytes written and
 * the number of top-level values kept in *kept. */
size_t etr__encode_values(etr__tstate *ts, const etr_value *vals, uint32_t n, uint32_t *kept);

/* Append s (NUL-terminated, or len bytes when len != 0) cut at max; returns bytes. */
size_t etr__encode_str(etr__tstate *ts, const char *s, size_t len, size_t max);

/* Encode a collective block; returns bytes. */
size_t etr__encode_collective(etr__tstate *ts, const etr_collective_info *c);

/* A fresh id from the thread's block of the trace counter. */
uint64_t etr__next_id(etr__tstate *ts);

/* ---- emit.c (writer thread) ---- */

/* Write one event as a JSON node (with the separator before it). */
void etr__emit_event(struct etr_trace *tr, const etr__ev *ev);
/* Free the emitter's own buffers (not jw). */
void etr__emit_free(struct etr_trace *tr);
/* Write the file's header, and the process node plus the footer. */
void etr__emit_header(struct etr_trace *tr);
void etr__emit_footer(struct etr_trace *tr, int fatal_sig);

/* The footer in parts, for the binary log, which keeps them until `etr convert`: */
typedef struct etr__stat_pair {
  const char *name;
  uint64_t value;
} etr__stat_pair;
#define ETR__STATS_MAX 32
/* The counters the footer shows, in its order; how many. */
size_t etr__footer_stats(struct etr_trace *tr, etr__stat_pair *out);
/* CLOCK_MONOTONIC in ms (the footer's finish_ts). */
int64_t etr__footer_time_ms(void);
/* Write the traceback tables into out (symbolizing what is left); false when there are none. */
bool etr__footer_tables(struct etr_trace *tr, etr__jw *out);
/* The process node (unless process_node is false) and the footer after it, from its parts. */
void etr__emit_footer_with(struct etr_trace *tr, bool process_node, int64_t finish_ms,
                           int fatal_sig, const char *tables, size_t tables_len,
                           const etr__stat_pair *st, size_t n);

/* ---- binlog.c (writer thread, binary log) ---- */

/* The file header and the layout record. */
void etr__bin_emit_header(struct etr_trace *tr);
/* Append the events of data from *off (advanced) up to `to` as one EVENTS record, ending it
 * once it holds max_bytes; returns the events appended. */
uint32_t etr__bin_emit_events(struct etr_trace *tr, const uint8_t *data, uint32_t *off, uint32_t to,
                              size_t max_bytes);
/* The TRAILER record (at close, or at a fatal signal with its number). */
void etr__bin_emit_trailer(struct etr_trace *tr, int fatal_sig);
/* The process node alone (no separator) into buf; its length, 0 if it does not fit. */
size_t etr__emit_process_text(struct etr_trace *tr, char *buf, size_t cap);

/* ---- fatal.c ---- */

/* Install (or remove) the fatal-signal handlers for tr; the previous ones are kept and
 * chained to. */
int etr__fatal_install(struct etr_trace *tr);
void etr__fatal_remove(struct etr_trace *tr);
/* From a signal handler (async-signal-safe): finalize tr's file as well as possible. */
void etr__trace_fatal(struct etr_trace *tr, int sig);
/* After the signal was handed on: survived, the writer goes on (cutting the footer off
 * before new nodes); else the file stays as it is until the process ends (or closes it). */
void etr__trace_fatal_end(struct etr_trace *tr, bool survived);

/* Fill a stats snapshot (trace.c). */
void etr__trace_collect_stats(const struct etr_trace *tr, etr_trace_stats *s);

#endif
