/* Internal to src/unwind/ (capture.c, modules.c, cfi.c): the native stack walker's pieces.
 *
 * cfi.c reduces the DWARF call-frame information of one address (found through the
 * module's .eh_frame_hdr search table) to the simple x86_64 rule most compiled code has:
 * "CFA = rsp or rbp + offset, return address at CFA-8, caller's rbp unchanged or saved at a
 * fixed offset from the CFA". Anything else (CFA expressions, CFA in other registers,
 * return-address rules other than CFA-8) is reported as complex, and the walker falls back
 * to libunwind for it. Signal trampolines ('S' augmentation) and the outermost frames
 * (return address undefined) have their own kinds.
 *
 * modules.c keeps the module map: one immutable snapshot per generation of the set of
 * loaded objects (dl_iterate_phdr), published through an atomic pointer, so lock-free
 * readers can hold on to it and addresses of unloaded libraries still resolve. A snapshot is
 * an array of pointers to module records, which generations share while a module stays
 * loaded: a reload costs a header, a pointer per module and a record per module that
 * changed. Older snapshots and the records only they use are freed when no trace is open
 * (etr__modules_release_old).
 */
#ifndef ETR_UNWIND_CFI_H
#define ETR_UNWIND_CFI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "unwind/unwind.h"

/* ---- CFI (cfi.c) ---- */

typedef enum etr__cfi_kind {
  ETR__CFI_SIMPLE = 0,  /* the rule below applies */
  ETR__CFI_END = 1,     /* outermost frame: the return address is undefined */
  ETR__CFI_SIGNAL = 2,  /* a signal trampoline: the caller's registers are in a ucontext */
  ETR__CFI_COMPLEX = 3, /* no simple rule: unwind this frame some other way */
  ETR__CFI_NOFDE = 4    /* no FDE covers the address (or the tables are not understood) */
} etr__cfi_kind;

typedef struct etr__cfi_rule {
  etr__cfi_kind kind;
  bool cfa_rbp; /* CFA = rbp + cfa_off (else rsp + cfa_off) */
  int64_t cfa_off;
  int64_t rbp_off; /* caller's rbp saved at CFA + rbp_off; 0: rbp unchanged */
} etr__cfi_rule;

/* Compute the rule at pc (an address inside an instruction; for a return address pass
 * ra - 1) from the .eh_frame_hdr section at eh_frame_hdr (a loaded, readable section).
 * Pure function of the mapped tables: any thread, no allocation, no lock, signal safe. */
void etr__cfi_find(uintptr_t eh_frame_hdr, uintptr_t pc, etr__cfi_rule *out);

/* ---- module map (modules.c) ---- */

typedef struct etr__modent {
  etr__module m;          /* what etr__modules_find returns (first member) */
  uintptr_t xlo, xhi;     /* span of the executable PT_LOAD segments */
  uintptr_t eh_frame_hdr; /* PT_GNU_EH_FRAME address, 0 when absent */
  /* Never unloaded while the process lives: the main program, its dependencies (DT_NEEDED,
   * transitively: loaded at start-up, held by the program), libetr (linked -z nodelete)
   * and its dependencies, the vDSO. Another module may be closed and a different one
   * opened at its addresses: captures through it check the loader's counters (capture.c). */
  bool permanent;
  struct etr__modent *next_rec; /* modules.c's list of every record kept */
} etr__modent;

typedef struct etr__modmap {
  uint64_t gen;                  /* 1, 2, ... */
  unsigned long long adds, subs; /* dl_iterate_phdr counters this map was built at */
  size_t n;
  struct etr__modmap *older; /* previous generation (kept until etr__modules_release_old) */
  const etr__modent *mods[]; /* sorted by m.lo; records shared between generations */
} etr__modmap;

/* The current map (built on first use; NULL when memory ran out). Lock-free. */
const etr__modmap *etr__modmap_current(void);

/* The module whose executable span holds ip, NULL when none. Lock-free, signal safe. */
const etr__modent *etr__modmap_exec(const etr__modmap *map, uintptr_t ip);

/* Check dl_iterate_phdr's load/unload counters and build a new generation when they
 * changed. Returns the current map. Takes the loader's lock (about 8 ns uncontended) and,
 * only when something changed, our map lock with trylock (when another thread is building,
 * the older map is returned) and allocates. Not for signal handlers. */
const etr__modmap *etr__modmap_refresh(void);

/* The same, but the map returned is not older than the counters read: when another thread
 * is building, wait for it (trylock and sched_yield, never blocking on our lock: the caller
 * may hold the loader's lock, which the builder needs; after 2 ms the older map is
 * returned). */
const etr__modmap *etr__modmap_refresh_sync(void);

/* What the module map holds (tests): the maps of every generation kept, module records, the
 * current map's count, and their bytes (headers, arrays, records, paths). Takes our lock. */
typedef struct etr__modmap_mem {
  size_t maps, records, current_n, bytes;
} etr__modmap_mem;
void etr__modmap_mem_get(etr__modmap_mem *out);

/* ---- capture (capture.c) ---- */

/* etr__unwind_thread_init and etr__unwind_set_frame_cache: unwind/unwind.h. */

#endif /* ETR_UNWIND_CFI_H */
