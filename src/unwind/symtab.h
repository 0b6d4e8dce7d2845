/* A module's function symbols as one sorted array, for name lookups by address.
 *
 * Built once per module from the ELF's .symtab (or .dynsym when the file is stripped) and
 * searched by binary search: about 15 comparisons for 20k functions, no allocation. Names are
 * not copied: entries hold offsets into the ELF string table, which stays mapped while the
 * Elf handle is open. Used by symbolize_file.c only; one thread at a time.
 */
#ifndef ETR_UNWIND_SYMTAB_H
#define ETR_UNWIND_SYMTAB_H

#include <stddef.h>
#include <stdint.h>

#include <gelf.h>

typedef struct etr__symtab_entry {
  uint64_t addr; /* ELF virtual address */
  /* from the symbol table; for a symbol without one, up to the next symbol or the end of
   * its section, whichever comes first; 0 when neither is known (its address alone) */
  uint32_t size;
  uint32_t name; /* offset into the string table */
} etr__symtab_entry;

typedef struct etr__symtab {
  etr__symtab_entry *e; /* sorted by addr, one entry per address (aliases merged) */
  size_t n;
  const char *strtab; /* the string table's bytes (owned by the Elf handle) */
  size_t strtab_size; /* up to and including its last NUL: every name ends inside */
  int from_dynsym;    /* 1 when built from .dynsym (exported functions only) */
} etr__symtab;

/* Build the table from elf's SHT_SYMTAB, or from SHT_DYNSYM when there is none. Function
 * symbols (STT_FUNC, STT_GNU_IFUNC)
 * come first; untyped symbols in executable sections are kept only where no function symbol
 * starts at the same address. Among aliases the global one wins over weak over local.
 * Symbols whose name is not NUL-terminated inside the string table are left out.
 * Returns 0 (t filled, possibly with n == 0), or -1 when memory ran out. Allocates. */
int etr__symtab_build(Elf *elf, etr__symtab *t);

/* The symbol containing vaddr, or -1. No allocation; O(log n). */
ptrdiff_t etr__symtab_find(const etr__symtab *t, uint64_t vaddr);

/* The name of entry i, as the symbol table has it (with an ELF version suffix such as
 * "@@GLIBC_2.34" when it has one); its NUL is inside the string table. */
static inline const char *etr__symtab_name(const etr__symtab *t, size_t i) {
  return t->strtab + t->e[i].name;
}

void etr__symtab_free(etr__symtab *t);

#endif /* ETR_UNWIND_SYMTAB_H */
