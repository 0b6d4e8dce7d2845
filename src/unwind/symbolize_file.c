/* The file side of symbolization (symbolize_file.h): what one module's FILE on disk says
 * about an address, read with libelf and libdw.
 *
 * Everything is read from the file, never from live memory, so an address of a library
 * unloaded since capture still resolves. Per module path, once, etr__symfile_locate (cheap,
 * in symbolize_locate.c):
 *   - the file is opened and mapped (libelf), its build-id checked against the recorded one;
 *     when it is not at its recorded path (or its build-id differs), a copy is looked for
 *     by build-id and by basename under the search directories and /usr/lib/debug;
 *   - the separate debug file that would serve it is looked for (below); both are closed
 *     again and named by path and identity (device, inode, size, mtime), the key under which
 *     the symbolizer shares one loaded file between modules.
 * Per file loaded, etr__symfile_load (cold; again if the symbolizer closed it meanwhile):
 *   - names: our own sorted symbol table (symtab.c) from .symtab, or .dynsym when stripped;
 *   - lines: libdw on the file's DWARF, or on a separate debug file found by build-id
 *     (/usr/lib/debug/.build-id/xx/rest.debug and the search dirs) or by .gnu_debuglink;
 *     our own sorted table of compile-unit address ranges picks the CU of an address, and
 *     libdw's line table of that CU (parsed on first use, then cached by libdw) gives the line.
 * Per CU, on its first address: a tree of its inlined calls (DW_TAG_inlined_subroutine, nested
 * ones under the range of the call that holds them, each level sorted by address) with their
 * call sites.
 * Per address, etr__symfile_resolve: a binary search in the symbol table, one in the CU
 * table, one in the CU's line table and one per level of inlining in the CU's tree. Names and
 * file names are pointers into the mapped file and libdw's tables (no copy); demangled names
 * and names cut from their ELF version, "name@@VER" (once per symbol, once per inlined call),
 * and the frames of inlined calls go into the symbolizer's arena.
 *
 * An inlined function is named by the call's DW_AT_abstract_origin, through
 * DW_AT_specification: DW_AT_linkage_name demangled, else DW_AT_name.
 *
 * Without libdw (ETR_WITH_LIBDW unset) no file is opened: the symbolizer's fallbacks answer.
 */
#include "unwind/symbolize_file.h"

#ifdef ETR_WITH_LIBDW

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unwind/symbolize_elf.h"
#include "unwind/symtab.h"

/* ---- what is kept per module file ---- */

typedef struct cu_range {
  uint64_t lo, hi; /* [lo, hi) */
  size_t cu;       /* index into module.cus */
} cu_range;

/* One inlined call (a DW_TAG_inlined_subroutine): its call site, in the function or the
 * inlined function that holds it, and the name of the function inlined there. */
typedef struct inl_sub {
  const char *call_file; /* owned by libdw's file table of the CU; NULL when not given */
  int64_t call_line;
  const char *name; /* demangled, made on first use; NULL until then */
  Dwarf_Off die;    /* offset of the DW_TAG_inlined_subroutine */
} inl_sub;

/* One address range of an inlined call, and the inlined calls nested in that range. */
typedef struct inl_range {
  uint64_t lo, hi;        /* [lo, hi) */
  uint32_t sub;           /* index into cu_info.subs */
  uint32_t child, nchild; /* nested calls: cu_info.inl[child, child + nchild), sorted by lo */
} inl_range;

/* Most inlined calls nested at one address that are followed (deeper ones are cut). */
#define INL_MAX_DEPTH 64

typedef struct cu_info {
  Dwarf_Die die;
  inl_range *inl; /* outermost calls first (inl[0, ntop), sorted by lo), then the nested
                   * ones grouped by the range they are in; built on the CU's first address */
  size_t ninl, ntop;
  inl_sub *subs;
  size_t nsubs;
  int inl_state; /* 0 not built, 1 built, -1 could not be built */
} cu_info;

struct etr__symfile {
  int fd, dbg_fd; /* -1 once libelf holds the whole file (mapped) */
  Elf *elf, *dbg_elf;
  Dwarf *dwarf; /* of elf or of dbg_elf; NULL without line info */
  etr__symtab symtab;
  /* per symtab entry, its name demangled or without its version, filled on first use (for
   * the names that need either); NULL until needed */
  const char **demangled;
  cu_info *cus;
  size_t ncus;
  cu_range *ranges; /* sorted by lo */
  size_t nranges;
};

void etr__symfile_close(etr__symfile *mf) {
  if (mf == NULL) return;
  if (mf->dwarf != NULL) dwarf_end(mf->dwarf);
  if (mf->dbg_elf != NULL) elf_end(mf->dbg_elf);
  if (mf->elf != NULL) elf_end(mf->elf);
  if (mf->dbg_fd >= 0) close(mf->dbg_fd);
  if (mf->fd >= 0) close(mf->fd);
  etr__symtab_free(&mf->symtab);
  free(mf->demangled);
  for (size_t i = 0; i < mf->ncus; i++) {
    free(mf->cus[i].inl);
    free(mf->cus[i].subs);
  }
  free(mf->cus);
  free(mf->ranges);
  free(mf);
}

/* ---- loading the file (found by symbolize_locate.c) ---- */

static bool key_equal(const etr__file_key *a, const etr__file_key *b) {
  return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime_ns == b->mtime_ns;
}

static int range_cmp(const void *a, const void *b) {
  const cu_range *x = a, *y = b;
  if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
  return x->hi < y->hi ? -1 : (x->hi > y->hi);
}

/* Our own table of compile-unit address ranges (.debug_aranges is often absent). 0, or -1
 * when memory ran out. */
static int build_cu_table(etr__symfile *mf) {
  Dwarf_CU *cu = NULL;
  Dwarf_Half version;
  uint8_t unit_type;
  Dwarf_Die cudie, subdie;
  size_t capc = 0, capr = 0;
  while (dwarf_get_units(mf->dwarf, cu, &cu, &version, &unit_type, &cudie, &subdie) == 0) {
    if (unit_type != DW_UT_compile && unit_type != DW_UT_skeleton && unit_type != DW_UT_partial)
      continue;
    size_t first = mf->nranges;
    ptrdiff_t off = 0;
    Dwarf_Addr base, lo, hi;
    while ((off = dwarf_ranges(&cudie, off, &base, &lo, &hi)) > 0) {
      if (lo == 0 || lo >= hi) continue; /* discarded code (garbage-collected sections) */
      if (mf->nranges == capr) {
        capr = capr ? capr * 2 : 64;
        cu_range *r = realloc(mf->ranges, capr * sizeof *r);
        if (r == NULL) return -1;
        mf->ranges = r;
      }
      mf->ranges[mf->nranges++] = (cu_range){lo, hi, mf->ncus};
    }
    if (mf->nranges == first) continue;
    if (mf->ncus == capc) {
      capc = capc ? capc * 2 : 16;
      cu_info *c = realloc(mf->cus, capc * sizeof *c);
      if (c == NULL) return -1;
      mf->cus = c;
    }
    mf->cus[mf->ncus++] = (cu_info){.die = cudie};
  }
  if (mf->nranges > 1) qsort(mf->ranges, mf->nranges, sizeof *mf->ranges, range_cmp);
  return 0;
}

/* True when every DWARF string section of elf ends with a NUL. libdw hands out their
 * strings (DW_FORM_strp and line_strp: names of inlined functions, source files) after
 * checking only that the offset is inside the section, so in a section without a final NUL
 * the last string would be read past its end. Called after dwarf_begin_elf, which has
 * decompressed the compressed ones in place. */
static bool dwarf_strings_end(Elf *elf) {
  static const char *const names[] = {".debug_str",
                                      ".debug_line_str",
                                      ".zdebug_str",
                                      ".zdebug_line_str",
                                      ".debug_str.dwo",
                                      ".debug_line_str.dwo",
                                      ".gnu.debuglto_.debug_str",
                                      ".gnu.debuglto_.debug_line_str"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    Elf_Scn *scn = etr__elf_section(elf, names[i]);
    Elf_Data *d = scn != NULL ? elf_getdata(scn, NULL) : NULL;
    if (d != NULL && d->d_buf != NULL && d->d_size != 0 &&
        ((const char *)d->d_buf)[d->d_size - 1] != '\0')
      return false;
  }
  return true;
}

/* Open the DWARF of elf and index its CUs; 1 when it has any, 0 when none, -1 on ENOMEM.
 * DWARF whose string sections (or those of its dwz alternate file) do not end with a NUL is
 * not used: no line info then, names still come from the symbol table. */
static int load_dwarf(etr__symfile *mf, Elf *elf) {
  mf->dwarf = dwarf_begin_elf(elf, DWARF_C_READ, NULL);
  if (mf->dwarf == NULL) return 0;
  Dwarf *alt = dwarf_getalt(mf->dwarf); /* opened now rather than on its first string */
  if (!dwarf_strings_end(elf) || (alt != NULL && !dwarf_strings_end(dwarf_getelf(alt)))) {
    dwarf_end(mf->dwarf);
    mf->dwarf = NULL;
    return 0;
  }
  if (build_cu_table(mf) != 0) return -1;
  if (mf->nranges != 0) return 1;
  dwarf_end(mf->dwarf);
  mf->dwarf = NULL;
  free(mf->cus);
  free(mf->ranges);
  mf->cus = NULL;
  mf->ranges = NULL;
  mf->ncus = mf->nranges = 0;
  return 0;
}

/* Close fd once libelf holds all of elf's data (mapped, or read in now). */
static void release_fd(Elf *elf, int *fd) {
  if (elf != NULL && *fd >= 0 && elf_cntl(elf, ELF_C_FDREAD) == 0) {
    close(*fd);
    *fd = -1;
  }
}

int etr__symfile_load(const etr__symfile_loc *loc, etr__symfile **out) {
  etr__symfile_elf_init();
  *out = NULL;
  if (loc->path == NULL) return 0;
  etr__symfile *mf = calloc(1, sizeof *mf);
  if (mf == NULL) return ETR_ENOMEM;
  mf->fd = mf->dbg_fd = -1;
  etr__file_key key;
  mf->elf = etr__symfile_open_elf(loc->path, loc->build_id, loc->build_id_len, loc->no_build_id,
                                  &mf->fd, &key);
  if (mf->elf == NULL || !key_equal(&key, &loc->key)) { /* gone or changed since located */
    etr__symfile_close(mf);
    return 0;
  }

  if (etr__symtab_build(mf->elf, &mf->symtab) != 0) goto enomem;
  int rc = load_dwarf(mf, mf->elf);
  if (rc < 0) goto enomem;
  if ((rc == 0 || mf->symtab.n == 0 || mf->symtab.from_dynsym) && loc->dbg_path != NULL) {
    /* Stripped: line info (and the full symbol table) from a separate debug file. It has the
     * file's build-id when the file has one (as find_debug_file checked). */
    const void *bidp = NULL;
    ssize_t n = dwelf_elf_gnu_build_id(mf->elf, &bidp);
    mf->dbg_elf = etr__symfile_open_elf(loc->dbg_path, n > 0 ? bidp : NULL, n > 0 ? (size_t)n : 0,
                                        false, &mf->dbg_fd, &key);
    if (mf->dbg_elf != NULL && !key_equal(&key, &loc->dbg_key)) {
      elf_end(mf->dbg_elf);
      close(mf->dbg_fd);
      mf->dbg_elf = NULL;
      mf->dbg_fd = -1;
    }
    if (mf->dbg_elf != NULL) {
      if (rc == 0 && load_dwarf(mf, mf->dbg_elf) < 0) goto enomem;
      etr__symtab dt;
      if (etr__symtab_build(mf->dbg_elf, &dt) != 0) goto enomem;
      if (!dt.from_dynsym && dt.n != 0) {
        etr__symtab_free(&mf->symtab);
        mf->symtab = dt;
      } else {
        etr__symtab_free(&dt);
      }
    }
  }
  /* The files stay mapped; their descriptors are not needed any more (a process may have
   * hundreds of modules). */
  release_fd(mf->elf, &mf->fd);
  release_fd(mf->dbg_elf, &mf->dbg_fd);
  *out = mf;
  return 0;
enomem:
  etr__symfile_close(mf);
  return ETR_ENOMEM;
}

/* ---- inlined calls ---- */

typedef struct inl_tmp {
  uint64_t lo, hi;
  uint32_t sub;
  int64_t parent; /* index of the enclosing call's range in the walk's order, -1 outermost */
  size_t order;   /* position in the walk (ties keep it) */
} inl_tmp;

static int inl_tmp_cmp(const void *a, const void *b) {
  const inl_tmp *x = a, *y = b;
  if (x->parent != y->parent) return x->parent < y->parent ? -1 : 1;
  if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
  return (x->order > y->order) - (x->order < y->order);
}

typedef struct inl_build {
  cu_info *cu;
  inl_tmp *r; /* ranges in walk order */
  size_t n, cap, capsub;
  Dwarf_Files *files;
  size_t nfiles;
} inl_build;

/* The inlined calls under die (a function, a lexical block or an inlined call) whose ranges
 * fall in the enclosing call's ranges r[pfirst, pfirst + pn) (pn 0: die is a function). 0 or
 * -1 on ENOMEM. */
static int collect_inlined(inl_build *b, Dwarf_Die *die, int depth, size_t pfirst, size_t pn) {
  Dwarf_Die child;
  if (depth > 2 * INL_MAX_DEPTH || dwarf_child(die, &child) != 0) return 0;
  do {
    int tag = dwarf_tag(&child);
    if (tag == DW_TAG_lexical_block) {
      if (collect_inlined(b, &child, depth + 1, pfirst, pn) != 0) return -1;
      continue;
    }
    if (tag != DW_TAG_inlined_subroutine) continue;
    cu_info *cu = b->cu;
    Dwarf_Attribute a;
    Dwarf_Word fidx, ln;
    const char *f = NULL;
    if (dwarf_formudata(dwarf_attr(&child, DW_AT_call_file, &a), &fidx) == 0 &&
        dwarf_formudata(dwarf_attr(&child, DW_AT_call_line, &a), &ln) == 0 && fidx < b->nfiles)
      f = dwarf_filesrc(b->files, fidx, NULL, NULL);
    if (f == NULL) ln = 0;
    if (cu->nsubs == b->capsub) {
      b->capsub = b->capsub ? b->capsub * 2 : 64;
      inl_sub *ns = realloc(cu->subs, b->capsub * sizeof *ns);
      if (ns == NULL) return -1;
      cu->subs = ns;
    }
    uint32_t sub = (uint32_t)cu->nsubs;
    cu->subs[cu->nsubs++] = (inl_sub){f, (int64_t)ln, NULL, dwarf_dieoffset(&child)};
    size_t first = b->n;
    ptrdiff_t off = 0;
    Dwarf_Addr base, lo, hi;
    while ((off = dwarf_ranges(&child, off, &base, &lo, &hi)) > 0) {
      if (lo == 0 || lo >= hi) continue;
      int64_t parent = -1;
      if (pn != 0) { /* the enclosing call's range holding this one, else unreachable */
        for (size_t k = pfirst; k < pfirst + pn && parent < 0; k++)
          if (lo >= b->r[k].lo && lo < b->r[k].hi) parent = (int64_t)k;
        if (parent < 0) continue;
      }
      if (b->n == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 64;
        inl_tmp *nr = realloc(b->r, b->cap * sizeof *nr);
        if (nr == NULL) return -1;
        b->r = nr;
      }
      b->r[b->n] = (inl_tmp){lo, hi, sub, parent, b->n};
      b->n++;
    }
    if (b->n > first && collect_inlined(b, &child, depth + 1, first, b->n - first) != 0) return -1;
  } while (dwarf_siblingof(&child, &child) == 0);
  return 0;
}

/* Every function under parent (namespaces and classes are looked into). 0 or -1. */
static int collect_functions(inl_build *b, Dwarf_Die *parent, int depth) {
  Dwarf_Die child;
  if (depth > 32 || dwarf_child(parent, &child) != 0) return 0;
  do {
    int tag = dwarf_tag(&child);
    if (tag == DW_TAG_subprogram) {
      if (dwarf_hasattr(&child, DW_AT_low_pc) || dwarf_hasattr(&child, DW_AT_ranges))
        if (collect_inlined(b, &child, 0, 0, 0) != 0) return -1;
    } else if (tag == DW_TAG_namespace || tag == DW_TAG_class_type ||
               tag == DW_TAG_structure_type || tag == DW_TAG_union_type || tag == DW_TAG_module) {
      if (collect_functions(b, &child, depth + 1) != 0) return -1;
    }
  } while (dwarf_siblingof(&child, &child) == 0);
  return 0;
}

/* Lay the walk's ranges out as a tree in cu->inl: the outermost calls first, then each
 * range's nested calls together, each group sorted by lo. 0 or -1 on ENOMEM. */
static int inl_layout(inl_build *b) {
  cu_info *cu = b->cu;
  size_t n = b->n;
  if (n == 0) return 0;
  if (n > UINT32_MAX) return -1;
  size_t *pos = malloc(n * sizeof *pos);
  cu->inl = calloc(n, sizeof *cu->inl);
  if (pos == NULL || cu->inl == NULL) {
    free(pos);
    return -1;
  }
  inl_tmp *r = b->r;
  qsort(r, n, sizeof *r, inl_tmp_cmp);
  for (size_t i = 0; i < n; i++) pos[r[i].order] = i;
  size_t ntop = 0;
  for (size_t i = 0; i < n; i++) {
    inl_range *e = &cu->inl[i];
    e->lo = r[i].lo;
    e->hi = r[i].hi;
    e->sub = r[i].sub;
    if (r[i].parent < 0) {
      ntop++;
      continue;
    }
    inl_range *p = &cu->inl[pos[r[i].parent]]; /* a parent comes before its ranges */
    if (p->nchild++ == 0) p->child = (uint32_t)i;
  }
  cu->ninl = n;
  cu->ntop = ntop;
  free(pos);
  return 0;
}

/* Build the CU's tree of inlined calls (once: a walk over its functions' DIEs, like the
 * line table's parse). */
static void inl_build_tree(cu_info *cu) {
  inl_build b = {.cu = cu};
  cu->inl_state = -1;
  if (dwarf_getsrcfiles(&cu->die, &b.files, &b.nfiles) != 0) return;
  if (collect_functions(&b, &cu->die, 0) == 0 && inl_layout(&b) == 0) cu->inl_state = 1;
  free(b.r);
  if (cu->inl_state < 0) {
    free(cu->inl);
    free(cu->subs);
    cu->inl = NULL;
    cu->subs = NULL;
    cu->ninl = cu->ntop = cu->nsubs = 0;
  }
}

/* The inlined calls holding vaddr in cu, outermost first, into chain (at most
 * INL_MAX_DEPTH); the count. One binary search per level. */
static size_t inline_chain(cu_info *cu, uint64_t vaddr, inl_sub **chain) {
  if (cu->inl_state == 0) inl_build_tree(cu);
  if (cu->inl_state < 0) return 0;
  size_t first = 0, count = cu->ntop, depth = 0;
  while (count != 0 && depth < INL_MAX_DEPTH) {
    const inl_range *g = cu->inl + first;
    size_t lo = 0, hi = count;
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (g[mid].lo <= vaddr)
        lo = mid + 1;
      else
        hi = mid;
    }
    /* Calls at one level do not overlap; look back one in case of odd ranges. */
    const inl_range *r = NULL;
    for (size_t k = 0; k < 2 && k < lo && r == NULL; k++)
      if (vaddr < g[lo - 1 - k].hi) r = &g[lo - 1 - k];
    if (r == NULL) break;
    chain[depth++] = &cu->subs[r->sub];
    first = r->child;
    count = r->nchild;
  }
  return depth;
}

/* File and line of vaddr from the module's DWARF (the line table's: in inlined code, the
 * inlined code's own line), and the CU it is in; 1 when found. */
static int lookup_line(etr__symfile *mf, uint64_t vaddr, const char **file, int64_t *line,
                       cu_info **cu_out) {
  const cu_range *r = mf->ranges;
  size_t lo = 0, hi = mf->nranges;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (r[mid].lo <= vaddr)
      lo = mid + 1;
    else
      hi = mid;
  }
  /* Overlapping CU ranges are rare; look back a little. */
  for (size_t k = 0; k < 4 && k < lo; k++) {
    const cu_range *c = &r[lo - 1 - k];
    if (vaddr >= c->hi) continue;
    cu_info *cu = &mf->cus[c->cu];
    Dwarf_Line *l = dwarf_getsrc_die(&cu->die, vaddr);
    if (l == NULL) continue;
    int ln = 0;
    const char *f = dwarf_linesrc(l, NULL, NULL);
    if (f == NULL) continue;
    dwarf_lineno(l, &ln);
    *file = f;
    *line = ln;
    *cu_out = cu;
    return 1;
  }
  return 0;
}

/* The name of the function inlined by call sub (its abstract origin's, through
 * DW_AT_specification: the linkage name demangled, else DW_AT_name); "" when it has none.
 * Made once per call. NULL on ENOMEM. */
static const char *inl_name(etr__symbolizer *s, etr__symfile *mf, inl_sub *sub) {
  if (sub->name != NULL) return sub->name;
  Dwarf_Die die;
  Dwarf_Attribute a;
  const char *raw = NULL;
  if (dwarf_offdie(mf->dwarf, sub->die, &die) != NULL) {
    raw = dwarf_formstring(dwarf_attr_integrate(&die, DW_AT_linkage_name, &a));
    if (raw == NULL)
      raw = dwarf_formstring(dwarf_attr_integrate(&die, DW_AT_MIPS_linkage_name, &a));
    if (raw == NULL) raw = dwarf_formstring(dwarf_attr_integrate(&die, DW_AT_name, &a));
  }
  if (raw == NULL) raw = "";
  sub->name = (raw[0] == '_' && raw[1] == 'Z') ? etr__symbolizer_demangle(s, raw) : raw;
  return sub->name;
}

/* The name of symbol i as frames show it (cached per symbol): without its ELF version,
 * then demangled. NULL on ENOMEM.
 *
 * A .symtab keeps versioned symbols as "name@VERSION" or "name@@VERSION" (glibc's, in its
 * debug file: "__libc_start_main@@GLIBC_2.34"), where dladdr and .dynsym give "name": the
 * suffix is cut, as addr2line and perf do, so one function has one name whichever way it
 * was resolved. It goes before demangling, which fails on the suffix. A leading '@' is part
 * of the name. */
static const char *symbol_name(etr__symbolizer *s, etr__symfile *mf, size_t i) {
  const char *raw = etr__symtab_name(&mf->symtab, i);
  const char *at = raw[0] != '\0' ? strchr(raw + 1, '@') : NULL;
  if (at == NULL && (raw[0] != '_' || raw[1] != 'Z')) return raw;
  if (mf->demangled == NULL) {
    mf->demangled = calloc(mf->symtab.n, sizeof *mf->demangled);
    if (mf->demangled == NULL) return NULL;
  }
  if (mf->demangled[i] != NULL) return mf->demangled[i];
  char *cut = at != NULL ? strndup(raw, (size_t)(at - raw)) : NULL;
  if (at != NULL && cut == NULL) return NULL;
  /* (the symbolizer keeps its own copy, demangled or not: cut can go) */
  const char *name = etr__symbolizer_demangle(s, cut != NULL ? cut : raw);
  free(cut);
  if (name == NULL) return NULL;
  mf->demangled[i] = name;
  return name;
}

int etr__symfile_resolve(etr__symbolizer *s, etr__symfile *mf, uint64_t vaddr, etr__symbol *out,
                         etr__symbol **inner, size_t *ninner) {
  const char *name = NULL, *file = NULL;
  int64_t line = 0;
  *inner = NULL;
  *ninner = 0;
  ptrdiff_t i = mf->symtab.n != 0 ? etr__symtab_find(&mf->symtab, vaddr) : -1;
  if (i >= 0 && (name = symbol_name(s, mf, (size_t)i)) == NULL) return ETR_ENOMEM;
  cu_info *cu = NULL;
  if (mf->nranges != 0 && lookup_line(mf, vaddr, &file, &line, &cu)) {
    inl_sub *chain[INL_MAX_DEPTH];
    size_t depth = inline_chain(cu, vaddr, chain);
    if (depth != 0) {
      /* chain[0] is the outermost call. The innermost frame is the inlined code itself
       * (the line table's line); each frame further out is at the call site of the call
       * it holds; the real function last (returned in *out). */
      etr__symbol *fr = etr__symbolizer_alloc(s, depth * sizeof *fr);
      if (fr == NULL) return ETR_ENOMEM;
      for (size_t k = 0; k < depth; k++) {
        inl_sub *c = chain[depth - 1 - k];
        const char *n = inl_name(s, mf, c);
        if (n == NULL) return ETR_ENOMEM;
        fr[k] = (etr__symbol){n, file, line};
        if (c->call_file != NULL) { /* else the caller keeps the line inside (unknown) */
          file = c->call_file;
          line = c->call_line;
        }
      }
      *inner = fr;
      *ninner = depth;
    }
  }
  out->name = name;
  out->filename = file;
  out->line = line;
  return 0;
}

#else /* no libdw: no file is read, every address takes the symbolizer's fallbacks */

#include <string.h>

int etr__symfile_load(const etr__symfile_loc *loc, etr__symfile **out) {
  (void)loc;
  *out = NULL;
  return 0;
}

void etr__symfile_close(etr__symfile *mf) { (void)mf; }

int etr__symfile_resolve(etr__symbolizer *s, etr__symfile *mf, uint64_t vaddr, etr__symbol *out,
                         etr__symbol **inner, size_t *ninner) {
  (void)s;
  (void)mf;
  (void)vaddr;
  *out = (etr__symbol){NULL, NULL, 0};
  *inner = NULL;
  *ninner = 0;
  return 0;
}

#endif /* ETR_WITH_LIBDW */
