/* What symbolize_locate.c (finding a module's files) and symbolize_file.c (loading them)
 * share: libelf's set-up and the opening of an ELF file checked against the recorded build.
 * Private to src/unwind/; only with libdw. */
#ifndef ETR_UNWIND_SYMBOLIZE_ELF_H
#define ETR_UNWIND_SYMBOLIZE_ELF_H

#ifdef ETR_WITH_LIBDW

#include <gelf.h>
#include <libelf.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "unwind/symbolize_file.h"

/* libelf's version set, once per process (before any other libelf call). */
void etr__symfile_elf_init(void);

/* Open path as an ELF file; when want_len != 0 its build-id must equal want; when none, it
 * must have no build-id (a module recorded without one: a file that has one is another
 * build). Regular files only (a FIFO never blocks us). Its descriptor into *fd_out, its
 * identity into *key (when key is not NULL); NULL when it is not such a file. */
Elf *etr__symfile_open_elf(const char *path, const uint8_t *want, size_t want_len, bool none,
                           int *fd_out, etr__file_key *key);

/* The section of elf named name (its first), or NULL. */
Elf_Scn *etr__elf_section(Elf *elf, const char *name);

#endif /* ETR_WITH_LIBDW */
#endif
