/* Sorted function-symbol table of one ELF module (see symtab.h). */
#ifdef ETR_WITH_LIBDW

#include "unwind/symtab.h"

#include <stdlib.h>
#include <string.h>

/* Candidate symbol before merging: rank orders aliases at one address (higher wins). */
typedef struct cand {
  uint64_t addr;
  uint64_t size;
  uint32_t name;
  uint32_t rank;
  size_t shndx; /* its section (>= the section count when unknown) */
} cand;

static int cand_cmp(const void *a, const void *b) {
  const cand *x = a, *y = b;
  if (x->addr != y->addr) return x->addr < y->addr ? -1 : 1;
  if (x->rank != y->rank) return x->rank > y->rank ? -1 : 1; /* best first */
  if (x->size != y->size) return x->size > y->size ? -1 : 1;
  return x->name < y->name ? -1 : (x->name > y->name);
}

static uint32_t bind_rank(int bind) {
  switch (bind) {
    case STB_GLOBAL:
      return 3;
    case STB_WEAK:
      return 2;
    case STB_LOCAL:
      return 1;
    default:
      return 0;
  }
}

static Elf_Scn *find_table(Elf *elf, GElf_Word type, GElf_Shdr *shdr) {
  Elf_Scn *scn = NULL;
  while ((scn = elf_nextscn(elf, scn)) != NULL) {
    if (gelf_getshdr(scn, shdr) != NULL && shdr->sh_type == type && shdr->sh_entsize != 0)
      return scn;
  }
  return NULL;
}

/* True when section index shndx holds code. */
static int is_exec_section(Elf *elf, size_t shndx) {
  Elf_Scn *scn = elf_getscn(elf, shndx);
  GElf_Shdr sh;
  return scn != NULL && gelf_getshdr(scn, &sh) != NULL && (sh.sh_flags & SHF_EXECINSTR) &&
         sh.sh_type != SHT_NOBITS;
}

/* How far a symbol without a size reaches: up to `next` (the next symbol's address,
 * UINT64_MAX when none), and never past the end of its own section (the last symbol of a
 * module, often _fini, would otherwise take in every higher address). 0 when neither bound
 * is known. */
static uint64_t sizeless_extent(Elf *elf, size_t nsec, const cand *s, uint64_t next) {
  uint64_t end = next;
  Elf_Scn *scn = s->shndx < nsec ? elf_getscn(elf, s->shndx) : NULL;
  GElf_Shdr sh;
  if (scn != NULL && gelf_getshdr(scn, &sh) != NULL && sh.sh_addr <= s->addr &&
      s->addr - sh.sh_addr < sh.sh_size && sh.sh_size < end - sh.sh_addr)
    end = sh.sh_addr + sh.sh_size;
  return end == UINT64_MAX ? 0 : end - s->addr;
}

int etr__symtab_build(Elf *elf, etr__symtab *t) {
  memset(t, 0, sizeof *t);
  GElf_Shdr shdr;
  Elf_Scn *scn = find_table(elf, SHT_SYMTAB, &shdr);
  if (scn == NULL) {
    scn = find_table(elf, SHT_DYNSYM, &shdr);
    t->from_dynsym = 1;
  }
  if (scn == NULL) return 0;
  Elf_Data *data = elf_getdata(scn, NULL);
  Elf_Scn *str_scn = elf_getscn(elf, shdr.sh_link);
  Elf_Data *str = str_scn != NULL ? elf_getdata(str_scn, NULL) : NULL;
  if (data == NULL || str == NULL || str->d_buf == NULL || str->d_size == 0) return 0;
  const char *strtab = str->d_buf;
  /* Names are read up to their NUL straight from the mapping: a table that does not end with
   * one (a damaged or hostile file) would let the last name run past the section and the
   * mapping. Only the part up to its last NUL is used; names starting after it are dropped. */
  const char *last_nul = memrchr(strtab, '\0', str->d_size);
  if (last_nul == NULL) return 0;
  size_t strsize = (size_t)(last_nul - strtab) + 1;
  size_t count = shdr.sh_size / shdr.sh_entsize;

  /* Section "holds code" answers, computed once per section index. */
  size_t nsec = 0;
  if (elf_getshdrnum(elf, &nsec) != 0) nsec = 0;
  signed char *exec = nsec != 0 ? calloc(nsec, 1) : NULL; /* 0 unknown, 1 yes, -1 no */
  if (nsec != 0 && exec == NULL) return -1;

  cand *c = count != 0 ? malloc(count * sizeof *c) : NULL;
  if (count != 0 && c == NULL) {
    free(exec);
    return -1;
  }
  size_t nc = 0;
  for (size_t i = 1; i < count; i++) {
    GElf_Sym sym;
    if (gelf_getsym(data, (int)i, &sym) == NULL) continue;
    size_t shndx = sym.st_shndx; /* SHN_XINDEX (>= nsec here) leaves untyped ones out */
    if (sym.st_shndx == SHN_UNDEF || sym.st_shndx == SHN_ABS || sym.st_value == 0) continue;
    if (sym.st_name == 0 || sym.st_name >= strsize) continue;
    int type = GELF_ST_TYPE(sym.st_info);
    const char *name = strtab + sym.st_name;
    uint32_t rank;
    if (type == STT_FUNC || type == STT_GNU_IFUNC) {
      rank = 8;
    } else if (type == STT_NOTYPE) {
      /* Hand-written assembly often leaves functions untyped; local labels and ARM mapping
       * symbols are not functions. */
      if (name[0] == '$' || (name[0] == '.' && name[1] == 'L')) continue;
      if (shndx >= nsec) continue;
      if (exec[shndx] == 0) exec[shndx] = is_exec_section(elf, shndx) ? 1 : -1;
      if (exec[shndx] < 0) continue;
      rank = 4;
    } else {
      continue;
    }
    rank += bind_rank(GELF_ST_BIND(sym.st_info));
    c[nc].addr = sym.st_value;
    c[nc].size = sym.st_size;
    c[nc].name = sym.st_name;
    c[nc].rank = rank;
    c[nc].shndx = shndx;
    nc++;
  }
  free(exec);
  if (nc == 0) {
    free(c);
    return 0;
  }
  qsort(c, nc, sizeof *c, cand_cmp);

  etr__symtab_entry *e = malloc(nc * sizeof *e);
  if (e == NULL) {
    free(c);
    return -1;
  }
  size_t n = 0;
  for (size_t i = 0; i < nc;) {
    size_t j = i;
    uint64_t size = c[i].size;
    /* Aliases: keep the best-ranked name, and a size if any alias has one. */
    while (j < nc && c[j].addr == c[i].addr) {
      if (size == 0) size = c[j].size;
      j++;
    }
    if (size == 0) /* up to the next symbol or the end of its section, whichever is first */
      size = sizeless_extent(elf, nsec, &c[i], j < nc ? c[j].addr : UINT64_MAX);
    e[n].addr = c[i].addr;
    e[n].size = size > UINT32_MAX ? UINT32_MAX : (uint32_t)size;
    e[n].name = c[i].name;
    n++;
    i = j;
  }
  free(c);
  t->e = e;
  t->n = n;
  t->strtab = strtab;
  t->strtab_size = strsize;
  return 0;
}

ptrdiff_t etr__symtab_find(const etr__symtab *t, uint64_t vaddr) {
  const etr__symtab_entry *e = t->e;
  size_t lo = 0, hi = t->n; /* first entry with addr > vaddr */
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (e[mid].addr <= vaddr)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0) return -1;
  size_t i = lo - 1;
  if (vaddr - e[i].addr < e[i].size || vaddr == e[i].addr) return (ptrdiff_t)i;
  /* Past the end of the nearest symbol: an enclosing symbol may start earlier (a function
   * with a nested local symbol). Look back a few entries only. */
  for (size_t k = 1; k <= 8 && k <= i; k++) {
    const etr__symtab_entry *p = &e[i - k];
    if (p->size != 0 && vaddr - p->addr < p->size) return (ptrdiff_t)(i - k);
  }
  return -1;
}

void etr__symtab_free(etr__symtab *t) {
  free(t->e);
  memset(t, 0, sizeof *t);
}

#else
typedef int etr__symtab_unused; /* ISO C forbids an empty translation unit */
#endif /* ETR_WITH_LIBDW */
