/* The file side of symbolization, private to src/unwind/: one module's file on disk read
 * with libelf and libdw (symbolize_file.c) for the symbolizer, whose module table, caches,
 * fallbacks and arena are in symbolize.c (the interface is unwind.h, "symbolization").
 *
 * The symbolizer locates a module's files once, on the first address of that module; modules
 * whose files are the same (links, or absent paths found by one build-id) share one loaded
 * etr__symfile; a few are kept loaded (least recently used closed first) and loaded again
 * when a new address needs them. Each new address is asked once (the symbolizer's cache
 * answers after that). Not thread safe: one symbolizer, one thread, like the symbolizer
 * itself.
 */
#ifndef ETR_UNWIND_SYMBOLIZE_FILE_H
#define ETR_UNWIND_SYMBOLIZE_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "unwind/unwind.h"

/* A module's file opened for symbolization: its symbol table, its DWARF (from the file or
 * a separate debug file) and the tables built over it. */
typedef struct etr__symfile etr__symfile;

/* The module as the trace recorded it. Strings are borrowed for the call. */
typedef struct etr__symfile_id {
  const char *path;        /* "" for the main program of this process */
  const char *base;        /* basename of path, for the search by name */
  const uint8_t *build_id; /* the file found must carry it (when build_id_len != 0) */
  size_t build_id_len;
  bool no_build_id; /* recorded without a build id: the file found must have none either */
} etr__symfile_id;

/* Which file on disk: device, inode, size and modification time (equal for the same file
 * reached through other paths or links). All zero for "none". */
typedef struct etr__file_key {
  uint64_t dev, ino, size, mtime_ns;
} etr__file_key;

/* Where a module's files are, as etr__symfile_locate found them: the ELF file (at the
 * recorded path or found elsewhere) and the separate debug file that would be read for it
 * when the file itself lacks a full symbol table or DWARF. Two modules whose locations have
 * equal keys read the same bytes and get the same answers, so they share one etr__symfile.
 * The strings are owned (etr__symfile_loc_free). */
typedef struct etr__symfile_loc {
  char *path;     /* the ELF file; NULL when no usable file was found */
  char *dbg_path; /* its debug file candidate; NULL when none */
  etr__file_key key, dbg_key;
  uint8_t build_id[64]; /* the module's recorded build id: the file must carry it */
  size_t build_id_len;
  bool no_build_id; /* the file must have no build id (etr__symfile_id) */
} etr__symfile_loc;

/* Find the module's file (at its path, else by build-id or basename under the symbolizer's
 * search directories and /usr/lib/debug) and its debug file candidate (by the file's
 * build-id, then its .gnu_debuglink), without reading symbols or DWARF: a few opens, maps of
 * the ELF headers and notes, all closed again. live_ip != 0 says the module is in this
 * process (the main program's "" path then reads /proc/self/exe). loc->path is NULL when no
 * usable file was found: not an error, the symbolizer's fallbacks answer. 0 or ETR_ENOMEM
 * (then *loc holds nothing to free). */
int etr__symfile_locate(etr__symbolizer *s, const etr__symfile_id *id, uintptr_t live_ip,
                        etr__symfile_loc *loc);

/* Free loc's strings (not loc itself). */
void etr__symfile_loc_free(etr__symfile_loc *loc);

/* Open the files loc names (they must still have loc's keys and build-ids), build the symbol
 * table and index the DWARF compile units (line tables and trees of inlined calls wait for
 * their first address); exactly what the module's file and its debug file give. *out is NULL
 * when the files are gone or changed since etr__symfile_locate: not an error. 0 or
 * ETR_ENOMEM. Allocates (for a libc with its debug file about 17 MB of libdw's and ours);
 * maps the files, keeps no descriptor open. */
int etr__symfile_load(const etr__symfile_loc *loc, etr__symfile **out);

/* Unmap and free. NULL is a no-op. */
void etr__symfile_close(etr__symfile *mf);

/* What the file says of vaddr (an ELF virtual address): out->name from the symbol table
 * (without an ELF version suffix such as "@@GLIBC_2.34", demangled; NULL when no symbol
 * holds vaddr), out->filename / out->line from the line table (NULL / 0 without line info);
 * when calls are inlined at vaddr, their frames, innermost first, in *inner (in the
 * symbolizer's arena; *ninner of them, else NULL and 0), and then out's file and line are
 * the call site in the real function. The strings may point into the file's mapping and
 * libdw's tables, valid until etr__symfile_close: the symbolizer copies what it keeps. 0 or
 * ETR_ENOMEM. Allocates on a CU's first address (its tree of inlined calls) and for
 * demangled or version-cut names. */
int etr__symfile_resolve(etr__symbolizer *s, etr__symfile *mf, uint64_t vaddr, etr__symbol *out,
                         etr__symbol **inner, size_t *ninner);

/* ---- what the file side uses of the symbolizer (symbolize.c) ---- */

/* The directories added by etr__symbolizer_add_search_dir, in order, into *dirs; the count.
 * Owned by the symbolizer. */
size_t etr__symbolizer_search_dirs(const etr__symbolizer *s, const char *const **dirs);

/* raw demangled when it is a C++ name, as a string in the symbolizer's arena (one copy per
 * distinct string, kept until the symbolizer is freed). NULL on ENOMEM. */
const char *etr__symbolizer_demangle(etr__symbolizer *s, const char *raw);

/* n bytes aligned for pointers in the symbolizer's arena (freed with the symbolizer). NULL
 * on ENOMEM. */
void *etr__symbolizer_alloc(etr__symbolizer *s, size_t n);

#endif /* ETR_UNWIND_SYMBOLIZE_FILE_H */
