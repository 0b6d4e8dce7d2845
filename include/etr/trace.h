/* etr/trace.h — the execution-trace observer: records operators into a JSON execution
 * trace in the format PyTorch's execution-trace observer writes and MLCommons Chakra reads
 * (see docs/FORMAT.md).
 *
 * etr_trace_open creates the file and a writer thread; the trace starts disabled. Enable and
 * disable any number of times; etr_trace_close finalizes the file. One trace may be open at a
 * time in a process. Setting ETR_TRACE=path.json in the environment opens and enables one at
 * load time and closes it at exit, with no code change (ETR_TRACE_* options: docs/API.md).
 *
 * Cost: the recording thread encodes each op into a per-thread buffer (no global lock, no
 * allocation after warm-up, no JSON formatting); the writer thread formats and writes.
 * Memory is bounded: when the writer falls behind, recording threads wait for buffer space
 * rather than lose nodes. Write errors, and memory that runs out for a thread's buffer, stop
 * recording cleanly and are reported by close and by etr_trace_stats_get; the traced process
 * goes on. After fork() the child never writes
 * into the parent's trace. exit() without close still finalizes the file.
 */
#ifndef ETR_TRACE_H
#define ETR_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include "etr/common.h"
#include "etr/traceback.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum etr_schema {
  ETR_SCHEMA_1_1_1 = 0, /* "1.1.1-chakra.0.0.4": inputs/outputs carry "strides" (default) */
  ETR_SCHEMA_1_1_0 = 1  /* "1.1.0-chakra.0.0.4": no "strides" */
} etr_schema;

typedef struct etr_trace_options {
  size_t struct_size; /* sizeof(etr_trace_options) */
  etr_schema schema;
  bool no_timing;            /* omit ts / inclusive_dur / exclusive_dur */
  uint32_t buffer_kb;        /* per-thread buffer chunk size in KiB, 1..65536 (ETR_EINVAL
                                beyond, as ETR_TRACE_BUFFER_KB); 0 = 64 */
  uint32_t max_buffers;      /* chunks queued for the writer before recorders wait; 0 = 64 */
  double sample_probability; /* record this fraction of ops; 0 = all */
  uint32_t scopes;           /* bit (1u << scope) per recorded scope; 0 = all */
  const etr_traceback_options *traceback; /* tracebacks on recorded ops (etr/traceback.h);
                                            NULL = off; read at open only */
  /* Durability (docs/RELIABILITY.md). A node completed at time t is in the file (written
   * with write(2), so it survives kill -9) by t + flush_ms, whatever its thread does next;
   * the writer also writes whenever flush_kb of JSON is buffered. */
  uint32_t flush_ms;  /* 0 = 1000 ms; ETR_FLUSH_NEVER = only when buffers fill */
  uint32_t flush_kb;  /* 0 = 512 KiB */
  bool sync;          /* fdatasync(2) after each timed flush (power loss) */
  bool fatal_signals; /* finalize the file on SIGSEGV, SIGBUS, SIGABRT, SIGTERM, SIGINT,
                         SIGFPE, SIGILL, SIGHUP, SIGQUIT, SIGPIPE and SIGXCPU, then hand
                         the signal on: to the host's handler (installed
                         with that handler's own flags and mask) or the default action.
                         Off by default (ETR_TRACE_SIGNALS=1). docs/RELIABILITY.md */
  uint32_t stall_ms;  /* output that takes no bytes for this long (a pipe whose reader
                         stopped reading), or a writer that writes nothing for this long
                         while recorders wait for buffer space (a file on a hung NFS server):
                         the trace gives up, recording stops and what is lost is counted
                         (write_error ETIMEDOUT, nodes_dropped). 0 = 10000 ms;
                         ETR_FLUSH_NEVER = wait forever */
  bool ns_timing;     /* also write each op's start and duration in nanoseconds (attrs
                         ts_ns, dur_ns; ETR_TRACE_TIMING=ns): viewers then show sub-µs ops
                         with their length (etr chrome), at ~60 bytes a node */
  uint32_t ring_mb;   /* flight recorder: keep only the latest ring_mb MiB of events in
                         memory, written as a complete trace (replacing the file's content)
                         by etr_trace_dump / etr_trace_flush, at close and exit, and at a
                         fatal signal when fatal_signals is on; 0 = off (ETR_TRACE_RING_MB) */
} etr_trace_options;
#define ETR_FLUSH_NEVER UINT32_MAX
#define ETR_TRACE_OPTIONS_INIT                                                                     \
  {                                                                                                \
    sizeof(etr_trace_options), ETR_SCHEMA_1_1_1, false, 0, 0, 0.0, 0, NULL, 0, 0, false, false, 0, \
        false, 0                                                                                   \
  }

typedef struct etr_trace etr_trace;

/* Create the trace file at path and return a disabled trace. A path ending in ".gz" (in
 * any case) is written as gzip (one gzip member per flush: a cut file decompresses up to
 * its last flush; docs/FORMAT.md), one ending in ".etr" as the binary event log; ".zst",
 * ".zstd", ".xz", ".bz2", ".lz4" and ".etr.gz" are ETR_EINVAL (never plain JSON under a
 * compressed name). A path that names a descriptor of this process (/dev/stdout,
 * /dev/stderr, /dev/fd/N, /proc/self/fd/N, /proc/<its pid>/fd/N) is written through a
 * duplicate of that descriptor: never truncated, and what the host writes there lands
 * between the trace's writes (docs/API.md). ETR_EINVAL for options out of range,
 * ETR_EBUSY if a trace is open already, ETR_EOPEN if the file cannot be created (errno then
 * says why), ETR_ETHREAD if the writer cannot start.
 * opt may be NULL (defaults). Any thread; allocates. */
ETR_API int etr_trace_open(const char *path, const etr_trace_options *opt, etr_trace **out);

/* Start or stop recording. Ops in flight at disable still complete normally (and are
 * counted in ops_open_at_disable). Any thread; takes the registry lock. */
ETR_API int etr_trace_enable(etr_trace *trace);
ETR_API int etr_trace_disable(etr_trace *trace);
ETR_API bool etr_trace_is_enabled(const etr_trace *trace);

/* Change which ops get a traceback (opt->enabled false stops capturing). Takes effect for
 * ops that begin afterwards; the symbolize mode is fixed at open and ignored here.
 * ETR_EINVAL for bad options. Any thread; allocates (a copy of the pattern) the first time a
 * setting is given: each distinct setting is kept until close, a setting given again is the
 * one kept (switching between a few costs nothing more). */
ETR_API int etr_trace_set_traceback(etr_trace *trace, const etr_traceback_options *opt);

/* Wait until every node completed before the call, by any thread, is written to the file
 * (a node in a buffer another thread is handing over at that very instant may follow a
 * moment later). Also resolves pending traceback frames. Once recording stopped: ETR_ENOMEM
 * when memory ran out, else ETR_EIO (a write error).
 * Any thread, also while another thread closes the trace: a flush that close overtakes
 * before the writer has done it returns ETR_ESTATE at once (close writes those nodes and
 * reports how that went); one called once close has begun returns ETR_ESTATE. */
ETR_API int etr_trace_flush(etr_trace *trace);

/* Flight recorder (ring_mb): write the ring's events now as a complete trace, replacing what
 * the file held (ops still open get a placeholder node, as do forward ops the ring dropped);
 * recording goes on. A regular file is replaced only once the new trace is whole (written
 * beside it, then renamed over it): a kill or a write error during a dump leaves the
 * previous one. Without a ring, the same as etr_trace_flush (the file already holds every
 * node). Returns when the file is written; ETR_EIO after a write error (the file then keeps
 * the previous dump). Any thread, not from inside an observer callback. Racing close, it
 * answers as etr_trace_flush does: ETR_ESTATE when close overtook it (close's own dump then
 * writes the ring) or had begun before it. */
ETR_API int etr_trace_dump(etr_trace *trace);

/* Stop recording, write the open ops of every thread (marked, counted), the thread nodes,
 * the process node and the footer, close the file and free the trace. Safe while other
 * threads record (their later records are simply not traced). Returns ETR_ENOMEM when
 * recording stopped because memory ran out (the file is still finalized, valid: an op
 * whose children were written and it was not gets a placeholder node), ETR_EIO after a
 * write error or a stalled output (the file is a prefix etr repair completes), else 0.
 * NULL is a no-op. In a forked child it frees the trace without writing and returns
 * ETR_EFORKED (if the parent was closing it at the fork, it frees nothing: part of it was
 * freed already).
 *
 * Other threads may go on calling the trace's functions while it closes. From the moment
 * close begins, new calls return ETR_ESTATE (etr_trace_stats_get: the live counters, then
 * the final ones). Calls already under way finish: a flush or dump waiting for the writer is
 * woken and returns ETR_ESTATE unless the writer had done it (then its usual result); the
 * others complete, or return ETR_ESTATE where close removed what they act on. Close frees
 * the trace only once all of them have returned, so none of them ever blocks for good or
 * touches freed memory.
 *
 * close, flush, dump and disable are not async-signal-safe: do not call them from a signal
 * handler (fatal_signals finalizes the file at a fatal signal). Called from a handler that
 * interrupted the thread while it waited inside etr for the writer, or inside any call on the
 * trace, they return ETR_EBUSY rather than wait on what they interrupted. */
ETR_API int etr_trace_close(etr_trace *trace);
/* A trace handle stays recognisable after close: a second close, or any other call on it,
 * returns ETR_ESTATE (etr_trace_stats_get still returns the final counters). */

/* The trace opened through ETR_TRACE, or NULL. */
ETR_API etr_trace *etr_trace_current(void);

typedef struct etr_trace_stats {
  size_t struct_size;
  uint64_t nodes_written;           /* op, thread and process nodes handed to the file */
  uint64_t ops_recorded;            /* op nodes encoded by recording threads */
  uint64_t bytes_written;           /* bytes written to the file so far */
  uint64_t threads;                 /* thread nodes */
  uint64_t objects;                 /* object ids assigned (tensors and storages) */
  uint64_t ids_retired;             /* ids retired because the runtime said the object died */
  uint64_t strings_cut;             /* strings cut at 8192 bytes */
  uint64_t lists_cut;               /* lists cut at 4096 elements (or the per-node budget) */
  uint64_t utf8_replaced;           /* invalid UTF-8 sequences replaced */
  uint64_t nesting_cut;             /* values nested deeper than 32 levels, written as "<...>" */
  uint64_t ends_without_begin;      /* exits whose op was not on the thread's stack */
  uint64_t ends_out_of_order;       /* an op ended while ops it enclosed were still open */
  uint64_t ops_open_at_disable;     /* ops in flight when the trace was disabled */
  uint64_t ops_open_at_thread_exit; /* ops still open when their thread exited */
  uint64_t ops_open_at_close;       /* ops still open at close (written, marked incomplete) */
  uint64_t nodes_dropped;           /* nodes lost: only once recording stopped, at the first
                                       write error, stalled output or allocation that failed
                                       (write_error says which; docs/RELIABILITY.md) */
  uint64_t buffer_waits;            /* times a recorder waited for the writer */
  int write_error;                  /* why recording stopped, 0 if it did not: errno of the
                                       first write error, ETIMEDOUT (stalled output), ENOMEM
                                       (memory ran out) */
  uint64_t tracebacks;              /* ops that carry a traceback */
  uint64_t tracebacks_unique;       /* entries of the "tracebacks" table */
  uint64_t frames_unique;           /* entries of the "frames" table (updated at flush/close) */
  uint64_t values_fixed;            /* values written changed to stay valid: a negative tensor
                                       offset, numel or itemsize as 0; type-name characters
                                       ()[],<> in a dtype or object kind as '_'; an empty or
                                       built-in object kind as "Object" */
  uint64_t ends_cross_thread;       /* ends called on another thread than their begin (misuse:
                                       ignored: the op stays open until its end on its own
                                       thread) */
  uint64_t ops_abandoned;           /* ops closed (written, marked incomplete) because an op
                                       enclosing them ended first: their end never came
                                       (longjmp, exception) or comes later (then counted in
                                       ends_without_begin) */
  uint64_t ring_dropped;            /* flight recorder: op nodes dropped, oldest first, to keep
                                       the ring within ring_mb */
  uint64_t tracebacks_cut;          /* distinct stacks left out of the traceback tables, which
                                       were full (docs/FORMAT.md): their ops carry no traceback
                                       attr (updated at flush/close) */
} etr_trace_stats;

/* Fill *out (struct_size 0 means sizeof(etr_trace_stats)). Any thread; counters are read without
 * stopping recorders, so they are a snapshot. */
ETR_API int etr_trace_stats_get(const etr_trace *trace, etr_trace_stats *out);

/* Same as etr_trace_close, and fills *out (when not NULL) with the final counters, taken
 * after everything was written. */
ETR_API int etr_trace_close_stats(etr_trace *trace, etr_trace_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* ETR_TRACE_H */
