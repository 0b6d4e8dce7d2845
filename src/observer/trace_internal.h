/* Trace observer internals: the event formats between recording threads and the writer
 * thread, per-thread state, and the trace object.
 *
 * Recording threads never format JSON. At begin they encode the op (names and tensors by
 * reference to the thread's tables when seen before, other values as raw bytes, ids already
 * resolved) into a per-thread arena; at end they add the timing and outputs and copy the
 * finished *compact event* into the thread's current chunk. Full chunks go to a queue that
 * the writer thread drains: it decodes each compact event (cev.c) into a *full event*
 * (etr__ev and its payload, every reference resolved) and turns that into a JSON node, keeps
 * it in the flight recorder's ring, or, for a binary log, writes the compact events as they
 * are (`etr convert` decodes them later with the same code).
 */
#ifndef ETR_OBSERVER_TRACE_INTERNAL_H
#define ETR_OBSERVER_TRACE_INTERNAL_H

#include <errno.h>
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
#include "observer/clock.h"
#include "observer/objects.h"

/* Limits of docs/FORMAT.md and our own. */
#define ETR__STRING_MAX 8192u
#define ETR__LIST_MAX 4096u
#define ETR__DEPTH_MAX 32u
#define ETR__NODE_BUDGET (1u << 20) /* encoded bytes of values per op, beyond it lists are cut */
#define ETR__SHORT_MAX 255u         /* dtype and device names */
#define ETR__VALUE_COST 32u /* each value counts this much more against the budget (encode.c) */
/* What a reader of events (cev.c, binlog_read.c) takes as the most the recorder writes, so
 * that a damaged or forged log cannot make a node past what the readers of JSON take:
 * - an op's inputs, and its outputs, each cost at most this, counted as encode.c counts its
 *   budget (a tensor reference as the tensor it stands for, a list 24 bytes more, a cut 16,
 *   every value ETR__VALUE_COST more):
 *   the budget, plus the last value begun inside it (a tensor whole: 45 bytes, dtype and
 *   device of ETR__SHORT_MAX, ETR_MAX_NDIM sizes and strides) and the references written
 *   before the budget is looked at (at most 9 tensors: encode_hit.h);
 * - its collective block: four strings and two lists of split sizes, cut as encode.c cuts. */
#define ETR__VALUES_MAX (ETR__NODE_BUDGET + (64u << 10))
#define ETR__COLL_MAX (4u * (4u + ETR__STRING_MAX) + 2u * (4u + ETR__LIST_MAX * 8u) + 64u)

/* ---- events ---- */
enum { ETR__EV_OP = 1, ETR__EV_THREAD = 2 };
enum {
  ETR__EVF_TIMING = 1,
  ETR__EVF_INCOMPLETE = 2,
  ETR__EVF_KERNEL = 4,
  ETR__EVF_COLLECTIVE = 8,
  ETR__EVF_TRACEBACK = 16,
  ETR__EVF_FAILED = 32,
  ETR__EVF_TBINDEX = 64, /* binary log: tb_gen holds the traceback's index, tb_n is 0 */
  ETR__EVF_FW = 128      /* compact events only: fw_tid and fw_parent follow */
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
  ETR__V_CUT = 10, /* nested too deep */
  ETR__V_TREF = 11 /* compact events only: u8 slot of the thread's tensor table */
};

/* ---- compact events (chunks and binary logs; docs/FORMAT.md) ----
 * Each is: u8 type, u8 flags (ETR__EVF_*), a varint (LEB128) body length, the body. Numbers
 * in the body are varints ("uv"), zigzag varints for signed ones ("zv"); raw values (the
 * encoding above) keep their own layout. A string reference ("sref") is uv r: r >= 1 names
 * slot r - 1 of the thread's string table, r = 0 is followed by uv length and the bytes.
 *   OP      uv id, zv (id - parent), [TIMING: zv (ts - base), uv incl_ns, uv excl_us],
 *           [TRACEBACK: u64 tb_gen, u32 words, words x 8 raw | TBINDEX: uv index],
 *           sref name, sref schema, uv rf_id, zv seq, uv scope, [FW: uv fw_tid,
 *           uv fw_parent], [KERNEL: uv len + backend, uv len + file, uv grid x 3,
 *           zv stream], [COLLECTIVE: u32 length + its block], uv n_in, inputs, uv n_out,
 *           outputs (values may be V_TREF)
 *   THREAD  uv id, uv tid, uv os_tid, the name (the rest of the body)
 *   DEF_STR uv slot, the string (the rest): the thread's string table slot holds it now
 *   DEF_TEN uv slot, one V_TENSOR value: the thread's tensor table slot holds it now
 * A thread writes a definition into its stream before any event that names the slot, and
 * never redefines a slot that an op still open names (those values are written whole), so
 * a decoder that applies the definitions in stream order always resolves the references.
 * base is the trace's clock at open (CLOCK_MONOTONIC ns). */
enum { ETR__CEV_OP = 1, ETR__CEV_THREAD = 2, ETR__CEV_DEF_STR = 3, ETR__CEV_DEF_TEN = 4 };
#define ETR__CSTR_SLOTS 256u
#define ETR__CTEN_SLOTS 256u
#define ETR__CTEN_NDIM 8u     /* a tensor of more dimensions is written whole */
#define ETR__CTEN_NAME 15u    /* so is one whose dtype or device name is longer */
#define ETR__FRAME_PINS 8u    /* tensor slots an open op may hold; more are written whole */
#define ETR__CEV_HEAD_MAX 12u /* type, flags, body length */

/* Event header; the payload follows: traceback frame words (tb_n x 8 bytes, first so they
 * are 8-aligned), name, schema, kernel backend, kernel file, collective block, inputs,
 * outputs (lengths below). Events start 8-byte aligned in a chunk. */
typedef struct etr__ev {
  uint32_t size; /* header + payload, rounded up to 8 */
  uint8_t type;
  uint8_t flags;
  uint16_t plain; /* ETR__EVP_*: strings known to need no JSON escaping */
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
/* etr__ev.plain: the name (schema) is printable ASCII without '"' or '\\', so that it is
 * written as it is (the decoder learns it once per string slot, not once per node). */
#define ETR__EVP_NAME 1u
#define ETR__EVP_SCHEMA 2u
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
  uint64_t tid;                  /* of that thread (a reused state gets another) */
  bool oversized;                /* made for one large event: freed after use, not pooled */
  _Alignas(8) uint8_t data[];
} etr__chunk;

/* ---- per-thread state ---- */
typedef struct etr__frame {
  const etr_record *rec;
  uint64_t id;
  int64_t start_ns;
  int64_t child_us; /* inclusive time of finished children, in µs as written */
  size_t off, len;  /* the frame's region in the arena: the compact event's begin part */
  uint64_t parent;
  uint8_t flags;                  /* ETR__EVF_* known at begin */
  int16_t name_slot, schema_slot; /* string slots it holds, -1 none */
  uint8_t n_pins;                 /* tensor slots it holds */
  uint8_t pins[ETR__FRAME_PINS];
} etr__frame;

/* A recording thread's tables (the decoder keeps copies, from the definitions). */
typedef struct etr__cstr {
  const char *ptr; /* the string last defined here, as the runtime passed it */
  char *copy;      /* its bytes, to check that ptr still holds them */
  uint32_t len, cap;
  uint32_t pins; /* open ops naming it: not redefined meanwhile */
  uint32_t used; /* the thread's table_clock at its last use */
  bool fixed;    /* ptr's bytes cannot have changed (etr__str_fixed): no compare */
} etr__cstr;
/* A tensor slot, found by the tensor's identity pointer. A hit (encode_hit.h) compares the
 * key first: the identities, offset, numel and itemsize, and instead of the ids, the id-map
 * shard numbers they were read at (an unchanged number means the identity still has the
 * slot's id, with no lookup). A slot that cannot hit points iseq_p at a number that never
 * equals iseq. */
typedef struct etr__cten {
  const void *impl, *storage; /* the key: NULL impl when unused (all zeros if never used) */
  int64_t off, numel, itemsize;
  const _Atomic uint64_t *iseq_p, *sseq_p; /* the shards' numbers (never NULL) */
  uint64_t iseq, sseq;
  const char *dtp, *dvp; /* dtype and device when fixed (known by address), else NULL */
  uint8_t nd, dn, vn, valid;
  uint32_t pins, used;
  uint32_t expand; /* bytes a reference stands for beyond its own two (the op's budget) */
  uint64_t id, sid;
  int64_t sizes[ETR__CTEN_NDIM], strides[ETR__CTEN_NDIM];
  char dtype[ETR__CTEN_NAME + 1], dev[ETR__CTEN_NAME + 1];
} etr__cten;
struct etr__cev_dec;
/* A decoder's output: one full event (8-aligned), reused from event to event. */
typedef struct etr__cev_out {
  uint8_t *buf;
  size_t cap;
} etr__cev_out;

typedef struct etr__tstate {
  struct etr_trace *trace;
  uint64_t tid;
  uint64_t thread_node_id;
  uint64_t id_next, id_end; /* block of node/object ids */
  etr__chunk *chunk;        /* written by the owner with atomic stores: the writer peeks at it */
  uint32_t queued;          /* its chunks queued or being written (q_mutex): no peek meanwhile */
  uint32_t stream;          /* this state's number in a binary log (kept when a thread reuses it) */
  uint8_t *arena;
  size_t arena_len, arena_cap;
  etr__cstr *cstr;          /* ETR__CSTR_SLOTS, allocated on first use */
  etr__cten *cten;          /* ETR__CTEN_SLOTS, allocated on first use */
  uint32_t table_clock;     /* counts uses of the tables: the least recently used slot goes */
  struct etr__cev_dec *dec; /* the writer's decoder of this stream (writer only) */
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
  _Atomic uint64_t top_id;    /* id of the innermost open op, else the thread node's: fw_parent */
  _Atomic uint32_t depth_pub; /* depth, for counting ops open at disable */
  /* tid for other threads' fw_parent lookups when its slot is another thread's (0 while the
   * state changes hands: recorder.c fw_top_by_walk) */
  _Atomic uint64_t tid_pub;
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
  /* A tombstone: the handle was closed (see trace_calls.c). Set once the final counters are in
   * final_stats, before the trace is freed; read without a lock (etr__trace_usable). */
  _Atomic bool closed;
  /* Public calls at work on the trace (etr__trace_call_enter) and close's mark that refuses
   * new ones: close frees the trace only once calls is back to 0 (trace.c, "Calls against
   * close"). Never reset: a tombstone keeps them. */
  _Atomic uint32_t calls;
  _Atomic bool closing;
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
  /* Every op of every thread draws its id here: padded to a cache line of its own (the
   * struct is calloc'ed, so padding rather than alignment), so that the fields recorders
   * only read do not move between cores with it. */
  char pad_before_id[64];
  _Atomic uint64_t next_id;
  char pad_after_id[64 - sizeof(uint64_t)];
  int64_t base_ns;    /* CLOCK_MONOTONIC at open: compact events' times are relative to it */
  uint32_t n_streams; /* thread states made (threads_mutex) */
  etr__idmap *tensors, *storages;
  _Atomic int failed;               /* a write error happened: recorders stop encoding */
  struct etr_trace *abandoned_next; /* close left its writer behind (trace.c, g_lock) */
  bool writer_ended;                /* the writer thread is done (q_mutex) */
  bool writer_orphaned;             /* close left it behind: it frees the trace (q_mutex) */

  pthread_mutex_t threads_mutex; /* threads list and tid pages */
  etr__tstate *threads;          /* prepended with a release store; the writer walks it */
  etr__tstate *tstate_free;      /* states of exited threads, for new threads to reuse */
  /* By etr thread id: the thread's state while it lives (its address), then its thread
   * node's id once it has exited (id << 1 | 1), so that the backward ops of a forward
   * thread that is gone still name it in fw_parent (etr__tid_slot, etr__tid_word). */
  _Atomic uint64_t **tid_pages; /* ETR__TID_PAGES pages */

  /* Queue between recorders and the writer (q_mutex). */
  pthread_mutex_t q_mutex;
  sem_t wake;                /* writer waits for work (a semaphore: a signal handler posts) */
  pthread_cond_t space_cond; /* recorders wait for a free chunk */
  pthread_cond_t done_cond;  /* flushers wait for the writer */
  etr__chunk *q_head, *q_tail, *free_chunks;
  uint32_t max_chunks; /* chunks queued for the writer before recorders wait */
  uint32_t chunk_size;
  uint64_t q_pushed, q_done;      /* chunks queued and processed */
  _Atomic uint32_t space_waiters; /* recorders waiting on space_cond (the writer reads it) */
  uint64_t flush_gen, flush_done; /* etr_trace_flush requests, and the last served */
  uint64_t flush_target;          /* q_pushed at the latest request */
  bool stop;
  pthread_t writer;

  _Atomic(etr__tbcfg *) tb_cfg;
  _Atomic(etr__tbcfg *) tb_cfg_now; /* the one in effect: tb_cfg or an older one */
  _Atomic bool tb_ever;             /* tracebacks were enabled at some point: write the tables */
  pthread_mutex_t tb_mutex;         /* serializes etr_trace_set_traceback */

  /* Durability (options flush_ms, flush_kb, sync). */
  int64_t flush_ns; /* INT64_MAX: no timed flush */
  size_t flush_bytes;
  dev_t file_dev; /* the file we opened: a flush checks the fd still refers to it */
  ino_t file_ino;

  /* Fatal signals (fatal.c): a handler asks the writer to finalize the file and waits. */
  _Atomic uint32_t fatal_req, fatal_ack;
  _Atomic uint32_t fatal_hold;   /* handlers between their request and the host's return */
  _Atomic int64_t fatal_hold_ns; /* when the latest hold began (it expires: writer_thread.c) */
  _Atomic int fatal_sig;
  _Atomic int io_state;
  _Atomic pid_t writer_tid;
  char seal_node[1024]; /* the process node's text, rendered at open for the handler (about
                          690 bytes; until 2026-11-28 320 were kept, which took none) */
  size_t seal_node_len;
  uint64_t header_len;

  /* Writer-thread state. */
  etr__jw jw;
  etr__jw scratch[8];   /* emit_values.c: a node's shapes, types, strides and their key (0-3), a
                           tensor slot's texts (4-7) */
  etr__cev_out cev_out; /* the full event decoded last */
  struct etr__shape_memo *memo; /* emit.c: the text of recent shapes, types and strides */
  bool any_node;
  bool sealed;         /* the file ends with a footer written at a fatal signal */
  bool jw_err_said;    /* the writer kept and logged its write error (writer thread only) */
  bool unseal_pending; /* new output follows: cut the file back to seal_off first */
  bool seal_any_node;
  uint64_t seal_off; /* where the process node of that footer starts */
  struct etr__tbtab *tbtab;
  struct etr__ring *ring; /* the flight recorder's (ring.h), NULL when off */
  /* ops written nodes name that are not written (openrefs.h; the live JSON writer only):
   * the seal at a fatal signal gives each a placeholder */
  struct etr__openrefs *open_refs;
  bool open_refs_lost;         /* memory ran out for open_refs itself */
  uint64_t cross_ends_at_open; /* the registry's count of cross-thread ends at open (the
                                  trace's ends_cross_thread counts from there) */
  /* Process-group nodes held back until the trace's first collective (emit.c): copies of
   * their full events, oldest first. */
  etr__ev **pg_held;
  uint32_t pg_n, pg_cap;
  bool pg_released; /* the first collective was written: nodes pass as they come */
  /* A JSON trace's traceback tables as they grow, in `<path>.tables` (created with the
   * first entries, removed when the footer holds them all): a trace cut short (kill -9)
   * then keeps the frames of the nodes it holds (`etr repair` reads it). */
  char *tables_path; /* NULL: none kept (a binary log has its own, a ring is dumped whole) */
  int tables_fd;     /* -1 until created */
  bool tables_failed;
  etr__jw tables_out;
  bool restart_pending; /* a ring dump starts: cut the file to nothing at the next write */
  /* A flight recorder's dumps on a regular file (writer_thread.c): each is written to
   * dump_tmp (dump_path + ".dump-XXXXXX") and renamed over dump_path (the file's real path)
   * once whole; dump_path NULL: dumps rewrite the file in place. During a dump fd is the
   * temporary file's and dump_prev_fd the file's (-1 otherwise). */
  char *path; /* as opened (a forked child compares its ETR_TRACE path with it: env.c) */
  char *dump_path, *dump_tmp;
  int dump_prev_fd;

  /* Counters shared by many threads (rare events) or written by the writer. */
  _Atomic uint64_t nodes_written, bytes_written, utf8_replaced, buffer_waits, ids_retired,
      threads_count, ops_open_at_disable, ops_open_at_thread_exit, ops_open_at_close,
      nodes_dropped_writer, tb_unique, tb_frames, tb_cut, values_fixed, ring_dropped;
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

/* CLOCK_MONOTONIC in ns (from the time-stamp counter where it can be: clock.h); the kernel's
 * id of the calling thread (async-signal-safe both). */
static inline int64_t etr__now_ns(void) { return etr__clock_now(); }
static inline pid_t etr__gettid(void) { return (pid_t)syscall(SYS_gettid); }

/* Single-writer counter bump: a plain load and store, no locked instruction. */
static inline void etr__bump(_Atomic uint64_t *c, uint64_t n) {
  atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n, memory_order_relaxed);
}

/* ---- varints (compact events) ---- */

static inline size_t etr__uv_len(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}
static inline uint8_t *etr__put_uv(uint8_t *p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  *p++ = (uint8_t)v;
  return p;
}
static inline uint64_t etr__zz(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }
static inline int64_t etr__unzz(uint64_t v) { return (int64_t)(v >> 1) ^ -(int64_t)(v & 1); }

/* ---- recorder.c, for the encoder's definitions ---- */

/* etr__event_room when the thread has no chunk with room, or the trace failed. */
uint8_t *etr__event_room_slow(etr__tstate *ts, size_t size, bool node);
/* Push the thread's partly filled chunk to the writer. */
void etr__hand_over(etr__tstate *ts);
/* The output is stalled: the writer wrote nothing for ms while `who` waited on it. As on a
 * write error (write_error ETIMEDOUT), recording stops and the writer discards the rest,
 * counted as dropped; said once on the log. Any thread. */
void etr__trace_stalled(etr_trace *tr, int ms, const char *who);
/* Memory ran out for what a node needs (`what`: a thread's buffer, its state, an op's
 * encoding; recording threads and the writer): as on a write error, write_error becomes
 * ENOMEM (unless an error came first), recording stops and every node after is counted as
 * dropped; said once on the log. The file stays writable, so close still finalizes it, with
 * a placeholder for each op that written nodes name and that was lost (emit.c). Any thread,
 * no lock held. */
void etr__trace_out_of_memory(etr_trace *tr, const char *what);
/* What a call that reports the trace's failure returns: 0, ETR_ENOMEM when memory ran out,
 * else ETR_EIO (a write error, a stalled output). */
static inline int etr__trace_error(const etr_trace *tr) {
  int e = atomic_load(&tr->write_error);
  return e == 0 ? 0 : e == ENOMEM ? ETR_ENOMEM : ETR_EIO;
}

/* Room for a compact event of size bytes in the thread's chunk; NULL when it cannot be
 * written (a write error, memory exhausted), counted as a dropped node when node is true.
 * (Inline: the common case, room in the current chunk, is a few instructions.) */
static inline uint8_t *etr__event_room(etr__tstate *ts, size_t size, bool node) {
  etr__chunk *c = ts->chunk;
  if (ETR__LIKELY(c && c->len + size <= c->cap &&
                  !atomic_load_explicit(&ts->trace->failed, memory_order_relaxed)))
    return c->data + c->len;
  return etr__event_room_slow(ts, size, node);
}

/* The event written at etr__event_room's pointer is complete. A chunk made for one large
 * event is shipped at once. */
static inline void etr__event_commit(etr__tstate *ts, size_t size, bool node) {
  etr__chunk *c = ts->chunk;
  if (node) c->nodes++;
  __atomic_store_n(&c->len, c->len + (uint32_t)size, __ATOMIC_RELEASE); /* for the writer */
  if (ETR__UNLIKELY(c->oversized)) etr__hand_over(ts);
}

/* ---- encode.c (recording threads) ---- */

/* Room in the thread's arena for n more bytes (grown when needed: etr__arena_grow); false
 * when memory is exhausted. */
bool etr__arena_grow(etr__tstate *ts, size_t n);
static inline bool etr__arena_reserve(etr__tstate *ts, size_t n) {
  return ts->arena_len + n <= ts->arena_cap || etr__arena_grow(ts, n);
}

/* Append to the arena (values: encode_hit.h): raw bytes; a varint; a string as uv length
 * and bytes, cut at max. False when memory is exhausted. */
bool etr__encode_raw(etr__tstate *ts, const void *p, size_t n);
bool etr__encode_uv(etr__tstate *ts, uint64_t v);
bool etr__encode_inline_str(etr__tstate *ts, const char *s, size_t max);

/* Append a string reference (sref) to s (NULL or "" for none): by slot when the thread's
 * table has it or it can take one (defining it first), the slot then held in *held until
 * etr__unpin; else inline. False when memory is exhausted. */
bool etr__encode_sref_any(etr__tstate *ts, const char *s, int16_t *held);
/* The two candidate slots of an identity pointer in the thread's string and tensor tables
 * (a pointer hashed to one slot would collide more). */
_Static_assert(ETR__CSTR_SLOTS == 256u && ETR__CTEN_SLOTS == 256u, "slots are a hash's top byte");
static inline void etr__slot_pair(const void *p, uint32_t *k0, uint32_t *k1) {
  uint64_t h = (uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ull;
  *k0 = (uint32_t)(h >> 56);
  *k1 = (uint32_t)(h >> 48) & 255u;
  if (*k1 == *k0) *k1 ^= 1;
}

/* The reference to string slot k, which the op being encoded then holds. */
static inline bool etr__put_sref_slot(etr__tstate *ts, uint32_t k, int16_t *held) {
  etr__cstr *c = &ts->cstr[k];
  c->used = ++ts->table_clock;
  if (!etr__arena_reserve(ts, 2)) return false;
  ts->arena_len = (size_t)(etr__put_uv(ts->arena + ts->arena_len, k + 1) - ts->arena);
  c->pins++;
  *held = (int16_t)k;
  return true;
}

/* etr__encode_sref_any, with its most common case inline: a string whose bytes cannot
 * change (etr__str_fixed: interned, or a literal of the main program) in its first slot. */
static inline bool etr__encode_sref(etr__tstate *ts, const char *s, int16_t *held) {
  if (ETR__LIKELY(s && ts->cstr)) {
    uint32_t k, k1;
    etr__slot_pair(s, &k, &k1);
    if (ts->cstr[k].ptr == s && ts->cstr[k].fixed) return etr__put_sref_slot(ts, k, held);
  }
  return etr__encode_sref_any(ts, s, held);
}

/* Let go of the slots the op of f holds. */
void etr__unpin(etr__tstate *ts, etr__frame *f);

/* Encode a collective block; returns bytes. */
size_t etr__encode_collective(etr__tstate *ts, const etr_collective_info *c);

/* A fresh id from the thread's block of the trace counter. */
uint64_t etr__next_id(etr__tstate *ts);

/* ---- emit.c (writer thread) ---- */

/* Write one event as a JSON node (with the separator before it). dec: the decoder whose
 * tensor slots the event's V_TREF values name (NULL when it has none: a full event kept by
 * the flight recorder). Returns the nodes written: a `## process_group:init ##` node is
 * held back until the trace's first collective (0), and that collective comes after the
 * nodes held (1 + their number); see docs/FORMAT.md, "Ranks and process groups". */
struct etr__cev_dec;
uint32_t etr__emit_event(struct etr_trace *tr, const etr__ev *ev, struct etr__cev_dec *dec);
/* Whether ev is dist.c's `## process_group:init ##` node (the writer holds it back; the
 * flight recorder keeps it apart from its ring). */
bool etr__ev_is_pg_init(const etr__ev *ev);
/* Write the process-group nodes still held (before a footer; the trace had no collective
 * yet), newest first; returns how many. */
uint32_t etr__emit_held(struct etr_trace *tr);
/* Forget the nodes held and start holding again (a flight recorder's dump starts a file). */
void etr__emit_hold_reset(struct etr_trace *tr);
/* Free the emitter's own buffers (not jw). */
void etr__emit_free(struct etr_trace *tr);
/* The inputs or outputs object of a node: n values encoded in p[0..len) (emit_values.c). */
void etr__emit_values(struct etr_trace *tr, const uint8_t *p, uint32_t n, size_t len,
                      struct etr__cev_dec *dec);
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

/* A placeholder node named name (openrefs.h) for each op that the nodes written name and
 * that is not written: ops open at a fatal signal (the seal), ops lost after recording
 * stopped for lack of memory (close). Returns how many were written; UINT64_MAX when memory
 * ran out for them, now or while the writer noted what it wrote (none written then). */
uint64_t etr__emit_open_placeholders(struct etr_trace *tr, const char *name);

/* ---- binlog.c (writer thread, binary log) ---- */

/* The file header and the layout record. */
void etr__bin_emit_header(struct etr_trace *tr);
/* Append the events of data from *off (advanced) up to `to` as one EVENTS record, ending it
 * once it holds max_bytes; returns the events appended. */
uint32_t etr__bin_emit_events(struct etr_trace *tr, const uint8_t *data, uint32_t *off, uint32_t to,
                              size_t max_bytes);
/* The full event header's layout as text (the LAYOUT record); its length. */
size_t etr__bin_layout_text(char *buf, size_t cap);
/* The binary log's file header of this trace. */
struct etr__bin_header;
void etr__bin_header_of(const struct etr_trace *tr, struct etr__bin_header *h);
/* Append a TABLES record with the traceback-table entries made since the last call to out;
 * false when there are none. */
bool etr__bin_new_tables(struct etr_trace *tr, etr__jw *out);
/* Append the compact events of one stream in data from *off (advanced) up to `to` as one
 * CEVENTS record, ending it once it holds max_bytes; returns the nodes among them. */
uint32_t etr__bin_emit_cevents(struct etr_trace *tr, const uint8_t *data, uint32_t stream,
                               uint64_t tid, uint32_t *off, uint32_t to, size_t max_bytes);
/* The TRAILER record (at close, or at a fatal signal with its number). */
void etr__bin_emit_trailer(struct etr_trace *tr, int fatal_sig);
/* The process node alone (no separator) into buf; its length, 0 if it does not fit. */
size_t etr__emit_process_text(struct etr_trace *tr, char *buf, size_t cap);

/* ---- cev.c (writer thread, etr convert): compact events to full events ---- */

typedef struct etr__cev_dec etr__cev_dec;
etr__cev_dec *etr__cev_dec_new(void);
void etr__cev_dec_free(etr__cev_dec *d); /* NULL is a no-op */
/* The bytes a decoder's tables take (allocated at its stream's first definitions). */
size_t etr__cev_dec_bytes(const etr__cev_dec *d);
/* The reason etr__cev_decode gives when memory ran out (compared by address). */
extern const char etr__cev_oom[];
/* The node id of the thread whose events the decoder reads now (0: none yet, or NULL). */
uint64_t etr__cev_dec_thread_node(const etr__cev_dec *d);

/* Decode the compact event at p (avail bytes from it) of the stream d decodes, written by
 * thread tid (the registry's) of a trace whose clock started at base_ns. Returns its size,
 * or 0 when it is cut or malformed (*why then says how, when why is not NULL). *ev is the
 * full event of a node (in out, valid until the next call), NULL after a definition.
 * refs: a tensor reference (V_TREF) stays one in the full event, to be written right away
 * with d (etr__emit_event), else it is replaced by the tensor (an event kept for later). */
size_t etr__cev_decode(etr__cev_dec *d, etr__cev_out *out, const uint8_t *p, size_t avail,
                       uint64_t tid, int64_t base_ns, bool refs, const etr__ev **ev,
                       const char **why);

/* The JSON texts of a tensor slot as emit_values.c writes a V_TENSOR value: its values,
 * shapes, types (no quotes) and strides renderings one after another in buf, with what
 * writing each counted (values_fixed, utf8_replaced). The decoder keeps them beside the
 * slot and drops them when the slot is defined again. */
typedef struct etr__tfrag {
  char *buf;
  uint32_t cap;
  bool ok;      /* buf holds the texts of the slot's current tensor */
  bool counted; /* some fixed or replaced count is not 0 */
  uint32_t len[4];
  uint32_t fixed[4], replaced[4];
} etr__tfrag;

/* Slot k of the tensor table of the stream d decodes: its V_TENSOR value (NULL when never
 * defined), of *len bytes (len may be NULL), and its texts (*frag). */
const uint8_t *etr__cev_slot(etr__cev_dec *d, uint32_t k, size_t *len, etr__tfrag **frag);

/* The size of the compact event at p, 0 when cut or malformed; its type, flags and where
 * its body starts. */
size_t etr__cev_size(const uint8_t *p, size_t avail, uint8_t *type, uint8_t *flags,
                     size_t *body_at);

/* ---- recorder.c (recording threads) ---- */

/* The trace observer's begin and end callbacks (user: the trace). */
void etr__trace_enter(const etr_record *rec, void *user);
void etr__trace_exit(const etr_record *rec, void *user);
/* Write the thread's open ops (innermost first, marked incomplete) and hand its chunk over;
 * its memory is freed. The owner thread must not be inside our callbacks. */
void etr__finish_thread(etr__tstate *ts, _Atomic uint64_t *open_counter);
/* The slot of thread tid in the trace's pages (made when create), or NULL (tid 0). Thread
 * ids count the threads the process ever had, so the pages (ETR__TID_PAGE * ETR__TID_PAGES
 * slots) are indexed by tid modulo their size, and a slot's word says whose it is (the rest
 * of the tid, etr__tid_word): threads whose ids are that far apart share a slot, which a live
 * thread keeps and an exited one gives up to a newer thread. Until 2026-11-28 a tid past the
 * pages had no slot, so in a process that had had 65 536 threads, even before the trace
 * opened, no backward op named its forward op (fw_parent 0). */
_Atomic uint64_t *etr__tid_slot(struct etr_trace *tr, uint64_t tid, bool create);
/* A slot's value for an exited thread whose thread node is node_id. */
static inline uint64_t etr__tid_exited(uint64_t node_id) { return node_id << 1 | 1; }
#define ETR__TID_VALUE_BITS 48
/* The tag of thread tid in its slot's word: the bits of tid above the slot's index. */
static inline uint64_t etr__tid_tag(uint64_t tid) {
  return (tid / ((uint64_t)ETR__TID_PAGE * ETR__TID_PAGES)) &
         (((uint64_t)1 << (64 - ETR__TID_VALUE_BITS)) - 1);
}
/* The word a slot holds for thread tid with value v (a state's address, or
 * etr__tid_exited): 0 (no slot) when v does not fit under the tag. */
static inline uint64_t etr__tid_word(uint64_t tid, uint64_t v) {
  return v >> ETR__TID_VALUE_BITS ? 0 : etr__tid_tag(tid) << ETR__TID_VALUE_BITS | v;
}
/* The value slot word w holds for thread tid; 0 when it holds another thread's, or none. */
static inline uint64_t etr__tid_value(uint64_t w, uint64_t tid) {
  return w && w >> ETR__TID_VALUE_BITS == etr__tid_tag(tid)
             ? w & (((uint64_t)1 << ETR__TID_VALUE_BITS) - 1)
             : 0;
}

/* ---- lastthread.c: a host whose main thread left by pthread_exit ---- */

/* Marks the calling thread, when it is the main one, so that its pthread_exit is seen. */
void etr__main_watch(void);
/* Whether the main thread has left by pthread_exit. */
bool etr__main_gone(void);
/* Whether the calling thread is the only one left, the main thread's remains aside (reads
 * /proc; false when unsure). */
bool etr__only_thread(void);
/* exit(0), as the last thread of a process whose main thread left does (never returns). */
void etr__end_as_last_thread(void);
/* (trace.c) Wakes the open trace's writer. */
void etr__trace_wake_writer(void);

/* ---- writer_thread.c ---- */

/* The writer thread's body. True when close left it behind (trace.c join_writer): the
 * thread then frees the trace when this returns. */
bool etr__writer_main(struct etr_trace *tr);
/* Write out the JSON/record buffer; `buffered` nodes are counted written (or dropped after
 * a write error, which also stops recording). Writer thread, or the closing thread once the
 * writer has ended. */
void etr__writer_flush(struct etr_trace *tr, uint64_t *buffered);
/* The same on a host's thread: SIGPIPE blocked meanwhile, one the write raised taken back. */
void etr__writer_flush_host(struct etr_trace *tr, uint64_t *buffered);
/* Whether the descriptor still refers to the file the trace created. */
bool etr__fd_is_ours(const struct etr_trace *tr);
/* An empty or written chunk goes back to the pool, or is freed if it was made for one large
 * event (q_mutex held). */
void etr__chunk_recycle_locked(struct etr_trace *tr, etr__chunk *c);

/* ---- fatal.c ---- */

/* Install (or remove) the fatal-signal handlers for tr; the previous ones are kept and
 * chained to. */
int etr__fatal_install(struct etr_trace *tr);
void etr__fatal_remove(struct etr_trace *tr);
/* A forked child lets its copy of the parent's trace go: the handlers stay installed (they
 * hand signals on to the host's) and no longer name it. */
void etr__fatal_forget(struct etr_trace *tr);
/* Gives the calling thread an alternate signal stack of etr's unless it has one (a stack
 * overflow can then be finalized); etr__fatal_thread_exit, at the thread's exit (trace.c's
 * hook), gives it back. */
void etr__fatal_thread_stack(void);
void etr__fatal_thread_exit(void);
/* From a signal handler (async-signal-safe): finalize tr's file as well as possible. */
void etr__trace_fatal(struct etr_trace *tr, int sig);
/* After the signal was handed on: survived, the writer goes on (cutting the footer off
 * before new nodes); else the file stays as it is until the process ends (or closes it). */
void etr__trace_fatal_end(struct etr_trace *tr, bool survived);

/* Whether the handle can be used (open, and this process's), and the error it gets when not
 * (NULL: ETR_EINVAL, closed: ETR_ESTATE, a forked child's copy: ETR_EFORKED). */
static inline bool etr__trace_usable(const struct etr_trace *tr) {
  return tr && !tr->closed && tr->pid == getpid();
}
static inline int etr__trace_unusable(const struct etr_trace *tr) {
  return !tr ? ETR_EINVAL : tr->closed ? ETR_ESTATE : ETR_EFORKED;
}
/* Around every public call that uses an open trace's locks or memory: 0 when the call may go
 * on (then etr__trace_call_leave once it is done with the trace), else the error to return
 * (ETR_ESTATE once close has begun). Lock-free; trace_calls.c, "calls against close". */
int etr__trace_call_enter(const struct etr_trace *tr);
void etr__trace_call_leave(const struct etr_trace *tr);
/* Whether this thread is inside such a call (a signal handler that interrupted it must not
 * wait on the trace). */
bool etr__trace_in_call(void);
/* Until no call uses tr (close, after it set tr->closing and tr->closed). */
void etr__trace_wait_calls(struct etr_trace *tr);

/* ---- trace_config.c ---- */

/* Read the caller's options (NULL: the defaults) into *o, in this library's layout or in
 * etr 0.1.0's (104 bytes, its traceback options by value: those go to *tb, which
 * o->traceback then points at). */
void etr__trace_options_read(etr_trace_options *o, const etr_trace_options *in,
                             etr_traceback_options *tb);
/* Whether a struct_size is one a header had (or 0: this libetr's own size). */
bool etr__trace_options_size_ok(size_t n);
bool etr__traceback_options_size_ok(size_t n);
/* Publish a new traceback configuration (replacing, not freeing, the current one):
 * ETR_EINVAL for bad options, ETR_ENOMEM. */
int etr__trace_tb_configure(struct etr_trace *tr, const etr_traceback_options *in);

/* The descriptor of this process that path names (/dev/stdout, /dev/fd/N,
 * /proc/self/fd/N, ...), else -1; and a duplicate of it to write through (shared offset),
 * -1 with errno when it is not open for writing. */
int etr__own_descriptor(const char *path);
int etr__dup_for_writing(int fd);
/* What path's ending asks for, in any case: a binary log (.etr) or gzip (.gz). ETR_EINVAL,
 * said on the log, for a binary log compressed (.etr.gz) or a compression etr does not
 * write (.zst, .zstd, .xz, .bz2, .lz4): never plain JSON under a compressed name. */
int etr__trace_path_format(const char *path, bool *binary, bool *gzip);

/* Mark tr closed and keep its handle allocated (only everything else is freed) as one of the
 * last 1 024 closed handles, freeing the oldest (trace_calls.c). Under trace.c's lock. */
void etr__trace_entomb(struct etr_trace *tr);
/* Free everything of tr but the handle (trace_calls.c); in_child: a forked child's copy,
 * of which only the chunk lists go (the comment there says why). */
void etr__trace_free(struct etr_trace *tr, bool in_child);
/* Fill a stats snapshot (trace_calls.c). */
void etr__trace_collect_stats(const struct etr_trace *tr, etr_trace_stats *s);
/* How many closed traces still wait for their writer, which close left behind (trace.c;
 * for tests). */
size_t etr__trace_left_behind(void);

#endif
