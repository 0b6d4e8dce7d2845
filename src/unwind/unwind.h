/* Internal interfaces of src/unwind/: native capture, the module map, symbolization and
 * script frames. The trace observer (src/observer/) is the only user inside libetr; tests
 * and benchmarks reach these through the static library.
 *
 * Ownership: capture.c + modules.c (native capture, unwind-rule cache, module map),
 * symbolize.c + symbolize_file.c (+ symtab.c) (addresses to function/file/line), script.c
 * (script unwinder).
 */
#ifndef ETR_UNWIND_H
#define ETR_UNWIND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "etr/traceback.h"

/* ---- native capture (capture.c) ---- */

/* Store the calling thread's return addresses, innermost first, skipping the `skip`
 * innermost frames (etr's own, beyond the caller of this function), at most max. Returns the
 * count. *modgen receives the module-map generation the addresses belong to (pass it to
 * etr__modules_find), also right after a library was closed and another one opened at its
 * addresses (the stack then holds a library opened with dlopen, and the capture reads the
 * loader's counters: dl_iterate_phdr, the loader's lock). Any thread; no allocation after
 * the thread's first call unless libraries were loaded or unloaded; never crashes on a
 * corrupt stack (the walk stops early and capture_failures is counted). */
size_t etr__unwind_capture(uintptr_t *ips, size_t max, size_t skip, uint64_t *modgen);

/* Prepare the calling thread for captures: its counters, the bounds of its stack and the
 * module map. Optional (the first capture does it), but a thread whose first capture may
 * run in a signal handler must call it first: it allocates and takes locks. */
void etr__unwind_thread_init(void);

/* Use the per-thread frame cache for the calling thread's captures (default on); off
 * shows what it saves (etr-bench-capture). */
void etr__unwind_set_frame_cache(bool on);

/* Add this module's counters into *out (the unwind_* and frame_* fields, captures...). */
void etr__unwind_stats_add(etr_traceback_stats *out);

/* ---- module map (modules.c) ---- */

typedef struct etr__module {
  uintptr_t lo, hi; /* address range of the module's loaded segments */
  uintptr_t bias;   /* load bias: ELF virtual address = address - bias */
  const char *path; /* absolute path as loaded ("" or the exe path for the main program) */
  uint8_t build_id[64];
  uint8_t build_id_len; /* 0 when the module has no build-id note */
  /* The file mapped there, as the module map found it in /proc/self/maps when the module
   * entered the map: its inode (0 when unknown: the vDSO, or maps unreadable) and device
   * as maps shows it (map_dev), and the mapping [map_lo, map_hi) that begins the module
   * (its name under /proc/self/map_files reaches the file while it is mapped, also once
   * replaced or deleted on disk); its device as stat(2) gives it (dev; 0 when unknown: on
   * btrfs, maps shows another number), size and modification time (0 when unknown), which
   * tell a file from a later one that got the inode number back. */
  uint64_t dev, ino, size, mtime_ns, map_dev;
  uintptr_t map_lo, map_hi;
} etr__module;

/* The module containing ip in the map of generation gen (maps of earlier generations are
 * kept until etr__modules_release_old, as a capture may still read one; they grow only when
 * libraries are loaded or unloaded, so addresses of a library unloaded since capture still
 * resolve). The record stays valid until etr__modules_release_old. NULL when no module contains it.
 * Any thread; takes a lock only when the generation is not the current one. */
const etr__module *etr__modules_find(uint64_t gen, uintptr_t ip);

/* The map of generation gen, for many lookups in one generation (etr__modules_in); NULL
 * when gen is unknown or was freed. Valid until etr__modules_release_old. Any thread; takes
 * a lock only when the generation is not the current one. */
typedef struct etr__modmap etr__modmap;
const etr__modmap *etr__modules_map(uint64_t gen);

/* The module containing ip in map (NULL for a NULL map). Lock-free. A module that stays the
 * same (addresses, file, build-id) keeps its record in every generation, also when it was
 * closed and opened again meanwhile: the record's address identifies "this file loaded
 * there" for as long as the records live (until etr__modules_release_old). */
const etr__module *etr__modules_in(const etr__modmap *map, uintptr_t ip);

/* The current generation (bumped when libraries are loaded or unloaded). */
uint64_t etr__modules_generation(void);

/* Free the maps of earlier generations and the module records only they use, for when
 * nothing can hold one or look a generation up any more: no trace is open (so no capture
 * runs through the recorder and no writer resolves). Generations stay numbered on (the
 * current map is kept); etr__modules_find of a freed generation gives NULL. Returns without
 * waiting when a map is being built (a later call frees them). Any thread. */
void etr__modules_release_old(void);

/* The readable mapping that holds addr ([*lo, *hi)), from /proc/self/maps read with plain
 * system calls (async-signal safe, no allocation): the bounds of a thread's stack. */
bool etr__maps_find(uintptr_t addr, uintptr_t *lo, uintptr_t *hi);

/* The mapping that holds addr, whatever its permissions, likewise; *exec tells whether it is
 * executable (code made at run time, outside every module: a JIT). */
bool etr__maps_find_any(uintptr_t addr, uintptr_t *lo, uintptr_t *hi, bool *exec);

/* ---- symbolization (symbolize.c: caches and fallbacks; symbolize_file.c: ELF, DWARF) ---- */

typedef struct etr__symbol {
  const char *name;     /* demangled function name, "" when unknown */
  const char *filename; /* source file, or the module path when no line info */
  int64_t line;         /* 0 when unknown */
} etr__symbol;

typedef struct etr__symbolizer etr__symbolizer;

/* One symbolizer per user thread (the trace writer, the etr command); not thread safe.
 * NULL when memory runs out. */
etr__symbolizer *etr__symbolizer_new(void);
void etr__symbolizer_free(etr__symbolizer *s);
/* A trace's writer: the symbolizer the last trace gave back (its answers kept, its files
 * closed), else a new one; and at the trace's end, give it back for the next (or free it
 * when it grew too large). symbolize.c, "kept from one trace to the next". */
etr__symbolizer *etr__symbolizer_take(void);
void etr__symbolizer_give_back(etr__symbolizer *s);

/* Resolve the ELF virtual address vaddr of the module file at path (its build-id, when
 * given, must match, else the lookup fails; build_id non-NULL with build_id_len 0 says the
 * module was recorded without one, and a file that has one is then not used; NULL checks
 * nothing). Falls back to dladdr for live addresses
 * (live_ip != 0) and then to name "module+0xoffset". Strings stay valid until the
 * symbolizer is freed. Each (module, vaddr) is resolved once (symbol cache). Returns 0 when
 * a name was found, 1 for a fallback, negative ETR_E* on error. */
int etr__symbolize(etr__symbolizer *s, const char *path, const uint8_t *build_id,
                   size_t build_id_len, uint64_t vaddr, uintptr_t live_ip, etr__symbol *out);

/* Like etr__symbolize, with the calls inlined at vaddr expanded (what `addr2line -i`
 * gives): out[0] is the innermost function (for inlined code: the inlined function's name,
 * demangled, and the file and line of the code itself), then each caller out to the real
 * function, whose file and line are those of the call site (DW_AT_call_file/line of the
 * inlined call it holds); the last frame is etr__symbolize's. Without inlining, or without
 * debug info, one frame equal to etr__symbolize's. Frames of etr's own record-site
 * functions (etr/record.h, inlined into the runtime) are left out of the innermost end of
 * the chain. When the chain is longer than max, the innermost max - 1 frames are kept and
 * the real function is last. Returns the number of frames written (1..max) or a negative
 * ETR_E* code (ETR_EINVAL for max 0). Strings live until the symbolizer is freed; results
 * are cached per (module, vaddr) together with etr__symbolize's (one resolution serves
 * both). */
int etr__symbolize_frames(etr__symbolizer *s, const char *path, const uint8_t *build_id,
                          size_t build_id_len, uint64_t vaddr, uintptr_t live_ip, etr__symbol *out,
                          size_t max);

/* etr__symbolize_frames for an address of module m of this process's module map: the
 * module's file is the one that was mapped (m's device and inode): the file at m->path when
 * it still is that file (or carries m's build-id), else the mapped file itself through
 * /proc/self/map_files while it is still mapped; another file is never read for it (the
 * fallbacks answer). m's modules are keyed by path, build-id and inode, so two builds at one
 * path never share answers, and a module whose file was not found while it is still mapped
 * is looked for again at its next new address. */
int etr__symbolize_frames_mapped(etr__symbolizer *s, const etr__module *m, uint64_t vaddr,
                                 uintptr_t live_ip, etr__symbol *out, size_t max);

void etr__symbolize_stats_add(etr_traceback_stats *out);

/* A C++ symbol demangled (malloc'd: the caller frees it), or NULL when mangled is not a C++
 * name or no demangler is found (demangle.c: __cxa_demangle, loaded without linking C++). */
char *etr__demangle(const char *mangled);

/* ---- script frames (script.c) ---- */

/* Script frames are tagged in a frame word so native and script frames share one array. */
#define ETR__SCRIPT_TAG ((uint64_t)1 << 63)

/* On the recording thread, after a native capture: gather the script frames (if an
 * unwinder is registered), map them to script-frame ids (symbolizing new ones), and write
 * the interleaved sequence to out (native ips as they are, script frames as
 * ETR__SCRIPT_TAG | id), innermost first. Returns the count (<= max). Without an unwinder it
 * copies ips. May run deferred releases when the unwinder allows release in records. */
size_t etr__script_interleave(const uintptr_t *ips, size_t n_ips, uint64_t *out, size_t max);

/* The description of a script frame id (strings owned by etr until process exit). Any
 * thread. 0 or ETR_ENOENT. */
int etr__script_frame_get(uint64_t id, etr_script_frame *out);

/* True when a script unwinder is registered (cheap). */
bool etr__script_active(void);

void etr__script_stats_add(etr_traceback_stats *out);

#endif /* ETR_UNWIND_H */
