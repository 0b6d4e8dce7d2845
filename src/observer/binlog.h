/* The binary event log: `ETR_TRACE=x.etr` (or etr_trace_open on a path ending in ".etr").
 *
 * The writer thread writes the recorders' events as they are, instead of turning each into a
 * JSON node; `etr convert` makes the JSON trace from them later, with the same code the live
 * writer uses (emit.c), so both give the same trace. docs/FORMAT.md describes the format:
 *
 *   file header (etr__bin_header, 80 bytes)
 *   records, each an etr__bin_record header then `len` bytes, padded to a multiple of 8:
 *     LAYOUT   once, first: the event header's fields as text, "name:offset:size;..."
 *     CEVENTS  compact events of one thread's stream, back to back, after an
 *              etr__bin_cevents header (the live writer's; trace_internal.h has the format)
 *     EVENTS   full events, back to back (etr__ev headers with their payloads; a flight
 *              recorder's dump writes these, its events already decoded)
 *     TABLES   after an EVENTS record whose events made new tracebacks: the new entries
 *              of the frames and tracebacks tables (JSON text, symbolized in the process),
 *              so that a log cut short keeps the tables of the events it holds
 *     TRAILER  once, at close or at a fatal signal: finish time, signal, the recorder's
 *              counters and the whole traceback tables
 *
 * Records go to the file whole and in order, so a file cut anywhere (kill -9, power loss, a
 * full disk) holds the header and a run of records of which only the last may be cut; every
 * complete event in it is recovered. Byte order and layout are the writer's: the header says
 * which, and a reader with another refuses the file.
 */
#ifndef ETR_OBSERVER_BINLOG_H
#define ETR_OBSERVER_BINLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define ETR__BIN_MAGIC \
  "\x89"               \
  "ETR\r\n\x1a\n"           /* 8 bytes: a text-mode copy or an ASCII guess fails */
#define ETR__BIN_VERSION 2u /* 2: compact events (CEVENTS) */
#define ETR__BIN_BYTE_ORDER 0x01020304u
#define ETR__BIN_RECORD_MAX (256u << 20) /* a longer record is corruption */

enum {
  ETR__BIN_LAYOUT = 1,
  ETR__BIN_EVENTS = 2,
  ETR__BIN_TRAILER = 3,
  ETR__BIN_TABLES = 4,
  ETR__BIN_CEVENTS = 5
};
#define ETR__BIN_STREAMS_MAX (1u << 20) /* stream numbers: a larger one is corruption */

/* The CEVENTS payload starts with this. A stream is one recording thread's state (a state
 * an exited thread left is taken by a new one, with the same number): its definitions hold
 * from record to record. */
typedef struct etr__bin_cevents {
  uint32_t stream;
  uint32_t reserved;
  uint64_t tid;    /* the registry's id of the thread that wrote the events */
  int64_t base_ns; /* the trace's clock at open: event times are relative to it */
} etr__bin_cevents;
enum { ETR__BINF_NS_TIMING = 1 };

typedef struct etr__bin_header {
  char magic[8];
  uint32_t version;     /* ETR__BIN_VERSION */
  uint32_t header_size; /* sizeof(etr__bin_header): records start here */
  uint32_t byte_order;  /* ETR__BIN_BYTE_ORDER as the writer stores it */
  uint32_t schema;      /* etr_schema */
  int64_t pid;
  int64_t start_ms; /* CLOCK_MONOTONIC at open, as the JSON header's start_ts */
  uint32_t flags;   /* ETR__BINF_* */
  uint32_t reserved;
  char time[24];     /* local wall time at open, "YYYY-mm-dd HH:MM:SS" (NUL-padded) */
  char version_s[8]; /* etr version that wrote it (informative) */
} etr__bin_header;
_Static_assert(sizeof(etr__bin_header) == 80, "the binary log header is 80 bytes");

typedef struct etr__bin_record {
  uint32_t type, len; /* ETR__BIN_*; payload bytes (the pad after it not counted) */
} etr__bin_record;

/* The TRAILER payload: this, n_stats etr__bin_stat, then tables_len bytes of JSON text
 * (`"frames": [...], "tracebacks": [...], ` or nothing). */
typedef struct etr__bin_trailer {
  int64_t finish_ms;
  int32_t signal; /* the fatal signal the file was finalized at, 0 at close */
  uint32_t n_stats;
  uint32_t tables_len;
  uint32_t crc; /* CRC-32 (zlib's) of what follows: the tables are copied into the JSON as
                   they are, so a damaged trailer must be told from a good one */
} etr__bin_trailer;

/* The TABLES payload: this, frames_len bytes of frames-table elements, tbs_len bytes of
 * tracebacks-table elements (JSON, comma-separated, no brackets). */
typedef struct etr__bin_tables {
  uint32_t n_frames, frames_len;
  uint32_t n_tbs, tbs_len;
  uint32_t crc; /* CRC-32 of the two texts */
  uint32_t reserved;
} etr__bin_tables;

typedef struct etr__bin_stat {
  uint64_t value;
  char name[32]; /* NUL-padded */
} etr__bin_stat;

/* ---- the reading side (`etr convert`) ---- */

typedef struct etr__bin_result {
  uint64_t events;           /* events turned into nodes */
  uint64_t bytes_read;       /* of the input, up to the end of the last complete event or record */
  uint64_t bytes_dropped;    /* input after that (a cut record, a corrupt tail) */
  uint64_t records_skipped;  /* of types this version does not know */
  bool complete;             /* the trailer was read: the JSON trace is whole */
  uint64_t tables_recovered; /* tracebacks of a cut log whose frames were in it */
  uint64_t tables_lost;      /* tracebacks its events name that it lacks (written empty),
                                and the damaged ones below */
  uint64_t tracebacks_damaged; /* events naming a traceback index no log could give them
                                  (past the next new one): written without a traceback */
  int signal;                  /* the trailer's: finalized at this fatal signal (ops were open) */
  uint64_t nodes_lost;         /* the trailer's nodes_dropped: nodes the recorder lost (memory
                                  ran out, a write error), whose children may name them */
  const char *stop_reason;     /* why the input ended early (NULL when complete) */
  char error[256];             /* why the conversion failed (return -1) */
} etr__bin_result;

/* Whether the first bytes of a file (n of them) are a binary log's. Inline: the etr
 * command's helpers (tools/cli.c) sniff files with it without linking libetr. */
static inline bool etr__bin_is_log(const void *head, size_t n) {
  return n >= 8 && memcmp(head, ETR__BIN_MAGIC, 8) == 0;
}

/* Read the binary log on in_fd and write its JSON trace to out_fd. When the
 * log was cut short, the JSON holds the nodes of its complete events and a footer with the
 * traceback tables its TABLES records gave (a traceback named but not there is empty) and
 * the counter "log_cut" = 1; ops that were still open are missing: `etr repair` adds
 * placeholders for them. 0, or -1 with res->error set (not a binary log, a
 * layout or version this etr does not read, an I/O error). Memory: one record at a time. */
int etr__bin_convert(int in_fd, int out_fd, etr__bin_result *res);

/* Where etr__bin_convert_from reads the log: read() gives up to n bytes at buf (their count,
 * 0 at the end, -1 with errno set); size() the input's length when it is known cheaply, else
 * -1 (then the bytes after where the conversion stopped are read to be counted; size may be
 * NULL). `etr convert` reads a gzip or zstd log through the trace reader's byte source. */
typedef struct etr__bin_source {
  long (*read)(void *user, void *buf, size_t n);
  long long (*size)(void *user);
  void *user;
} etr__bin_source;

/* etr__bin_convert from src, the JSON gzip-compressed (one member per MiB written) when
 * gzip_level is 1..9, plain when 0. */
int etr__bin_convert_from(const etr__bin_source *src, int out_fd, int gzip_level,
                          etr__bin_result *res);

/* The traceback tables a JSON trace's writer kept beside it (`<trace>.tables`: a binary log
 * header, then TABLES records; trace.c), for `etr repair` of a trace cut short: the
 * elements of the frames and tracebacks tables appended to *frames and *tbs (comma-
 * separated, in index order), the count of tracebacks in *n_tbs. pid and start_ms (< 0: not
 * checked) must be the trace's header's. 0, with *stop saying why the file ended early when
 * it did (what precedes is kept); -1 when the file is not such tables or not this trace's. */
struct etr__jw;
int etr__bin_read_tables(int fd, int64_t pid, int64_t start_ms, struct etr__jw *frames,
                         struct etr__jw *tbs, uint64_t *n_tbs, const char **stop);

#endif
