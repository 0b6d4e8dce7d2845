/* The file side of symbolization, private to src/unwind/: one module's file on disk read
 * with libelf and libdw (symbolize_file.c) for the symbolizer, whose module table, caches,
 * fallbacks and arena are in symbolize.c (the interface is unwind.h, "symbolization").
 *
 * The symbolizer opens a module's file once, on the first address of that module, keeps
 * it for its own lifetime, and asks it each new address once (its cache answers after
 * that). Not thread safe: one symbolizer, one thread, like the symbolizer itself.
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
} etr__symfile_id;

/* Open the module's file (at its path, else by build-id or basename under the symbolizer's
 * search directories and /usr/lib/debug), build its symbol table and index its DWARF
 * compile units (line tables and trees of inlined calls wait for their first address).
 * live_ip != 0 says the module is in this process (the main program's "" path then reads
 * /proc/self/exe). *out is NULL when no usable file was found: not an error, the
 * symbolizer's fallbacks answer. 0 or ETR_ENOMEM. Allocates; reads and maps the files. */
int etr__symfile_open(etr__symbolizer *s, const etr__symfile_id *id, uintptr_t live_ip,
                      etr__symfile **out);

/* Unmap and free. NULL is a no-op. */
void etr__symfile_close(etr__symfile *mf);

/* What the file says of vaddr (an ELF virtual address): out->name from the symbol table
 * (demangled; NULL when no symbol holds vaddr), out->filename / out->line from the line
 * table (NULL / 0 without line info); when calls are inlined at vaddr, their frames,
 * innermost first, in *inner (in the symbolizer's arena; *ninner of them, else NULL and 0),
 * and then out's file and line are the call site in the real function. Strings live until
 * the symbolizer is freed. 0 or ETR_ENOMEM. Allocates on a CU's first address (its tree of
 * inlined calls) and for demangled names. */
int etr__symfile_resolve(etr__symbolizer *s, etr__symfile *mf, uint64_t vaddr, etr__symbol *out,
                         const etr__symbol **inner, size_t *ninner);

/* ---- what the file side uses of the symbolizer (symbolize.c) ---- */

/* The directories added by etr__symbolizer_add_search_dir, in order, into *dirs; the count.
 * Owned by the symbolizer. */
size_t etr__symbolizer_search_dirs(const etr__symbolizer *s, const char *const **dirs);

/* A copy of raw in the symbolizer's arena, demangled when it is a C++ name. NULL on ENOMEM. */
const char *etr__symbolizer_demangle(etr__symbolizer *s, const char *raw);

/* n bytes aligned for pointers in the symbolizer's arena (freed with the symbolizer). NULL
 * on ENOMEM. */
void *etr__symbolizer_alloc(etr__symbolizer *s, size_t n);

#endif /* ETR_UNWIND_SYMBOLIZE_FILE_H */
