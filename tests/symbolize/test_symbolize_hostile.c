/* Symbolization of ELF files made by hand (src/unwind/symtab.c, symbolize_file.c): string
 * tables without a final NUL (a name at the edge of its section must never be read past it:
 * findings-14 item 1, where `etr symbolize` crashed or copied process memory into a name),
 * a .gnu_debuglink without its NUL, DWARF string sections without a final NUL, and ELF symbol
 * versions ("name@@VER" in a .symtab, as glibc's debug file has them) cut from names
 * (findings-14 item 5).
 *
 * The hostile part of each file is put at its very end, with the file a whole number of
 * pages long: a read past it leaves the mapping libelf made of the file (a crash, or bytes of
 * whatever is mapped next in the name). Run under ASan too. */
#include <dlfcn.h>
#include <elf.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "symtest_dir.h"

#include "unwind/unwind.h"

/* ---- writing ELF files ---- */

/* One section of a file to write; it gets section index (its position + 1). */
typedef struct sec {
  const char *name;
  uint32_t type;
  uint64_t flags, addr;
  const void *data; /* size bytes; NULL for zeros */
  size_t size;
  uint32_t link, info;
  uint64_t entsize;
} sec;

#define PAGE 4096u
#define TEXT_ADDR 0x1000u

/* A 64-bit ELF shared object at path with the sections secs (plus the section-name table).
 * The last section's bytes end the file, which is a whole number of pages long. */
static void write_elf(const char *path, const sec *secs, size_t n) {
  size_t nsh = n + 2; /* the null section, secs, .shstrtab */
  char shstr[1024];
  size_t shstr_len = 1, name_off[16];
  assert_true(n < 16);
  shstr[0] = '\0';
  for (size_t i = 0; i <= n; i++) {
    const char *nm = i < n ? secs[i].name : ".shstrtab";
    size_t k = strlen(nm) + 1;
    assert_true(shstr_len + k <= sizeof shstr);
    memcpy(shstr + shstr_len, nm, k);
    name_off[i] = shstr_len;
    shstr_len += k;
  }
  size_t off = sizeof(Elf64_Ehdr) + nsh * sizeof(Elf64_Shdr);
  size_t shstr_off = off;
  off += shstr_len;
  size_t data_off[16];
  for (size_t i = 0; i < n; i++) {
    off = (off + 7) & ~(size_t)7;
    if (i == n - 1) off = ((off + secs[i].size + PAGE - 1) / PAGE) * PAGE - secs[i].size;
    data_off[i] = off;
    off += secs[i].size;
  }
  size_t total = off;
  assert_int_equal(total % PAGE, 0);
  unsigned char *buf = calloc(1, total);
  assert_non_null(buf);

  Elf64_Ehdr eh = {0};
  memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_type = ET_DYN;
  eh.e_machine = EM_X86_64;
  eh.e_version = EV_CURRENT;
  eh.e_shoff = sizeof eh;
  eh.e_ehsize = sizeof eh;
  eh.e_phentsize = sizeof(Elf64_Phdr);
  eh.e_shentsize = sizeof(Elf64_Shdr);
  eh.e_shnum = (uint16_t)nsh;
  eh.e_shstrndx = (uint16_t)(n + 1);
  memcpy(buf, &eh, sizeof eh);

  Elf64_Shdr *sh = calloc(nsh, sizeof *sh);
  assert_non_null(sh);
  for (size_t i = 0; i < n; i++) {
    Elf64_Shdr *h = &sh[i + 1];
    h->sh_name = (uint32_t)name_off[i];
    h->sh_type = secs[i].type;
    h->sh_flags = secs[i].flags;
    h->sh_addr = secs[i].addr;
    h->sh_offset = data_off[i];
    h->sh_size = secs[i].size;
    h->sh_link = secs[i].link;
    h->sh_info = secs[i].info;
    h->sh_addralign = 1;
    h->sh_entsize = secs[i].entsize;
    if (secs[i].data != NULL) memcpy(buf + data_off[i], secs[i].data, secs[i].size);
  }
  sh[n + 1] = (Elf64_Shdr){.sh_name = (uint32_t)name_off[n],
                           .sh_type = SHT_STRTAB,
                           .sh_offset = shstr_off,
                           .sh_size = shstr_len,
                           .sh_addralign = 1};
  memcpy(buf + sizeof eh, sh, nsh * sizeof *sh);
  memcpy(buf + shstr_off, shstr, shstr_len);

  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(buf, 1, total, f), total);
  assert_int_equal(fclose(f), 0);
  free(sh);
  free(buf);
}

static Elf64_Sym func(uint32_t name, uint64_t addr, uint64_t size) {
  return (Elf64_Sym){.st_name = name,
                     .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC),
                     .st_shndx = 1, /* .text: always the first section here */
                     .st_value = addr,
                     .st_size = size};
}

/* A file whose .text is [TEXT_ADDR, + 0x100), with the symbols syms (syms[0] the null one)
 * in a table of type symtype (SHT_SYMTAB or SHT_DYNSYM) whose string table, strtab, is the
 * last section: the end of the file. extra (may be NULL) goes between. */
static void write_symbols(const char *path, uint32_t symtype, const Elf64_Sym *syms, size_t nsyms,
                          const void *strtab, size_t strsize, const sec *extra) {
  sec s[4] = {
      {".text", SHT_PROGBITS, SHF_ALLOC | SHF_EXECINSTR, TEXT_ADDR, NULL, 0x100, 0, 0, 0},
      {symtype == SHT_SYMTAB ? ".symtab" : ".dynsym", symtype, 0, 0, syms, nsyms * sizeof *syms, 3,
       1, sizeof *syms},
      {symtype == SHT_SYMTAB ? ".strtab" : ".dynstr", SHT_STRTAB, 0, 0, strtab, strsize, 0, 0, 0},
  };
  if (extra != NULL) { /* before the string table, which stays last */
    s[3] = s[2];
    s[2] = *extra;
    s[1].link = 4;
  }
  write_elf(path, s, extra != NULL ? 4 : 3);
}

/* ---- helpers ---- */

/* The name etr__symbolize gives vaddr of the file at path, with a fresh symbolizer (no answer
 * cached from another file); *rc_out its return code. Copied into buf. */
static const char *name_at(const char *path, uint64_t vaddr, int *rc_out, char *buf, size_t cap) {
  etr__symbolizer *s = etr__symbolizer_new();
  assert_non_null(s);
  etr__symbol sym;
  int rc = etr__symbolize(s, path, NULL, 0, vaddr, 0, &sym);
  assert_true(rc == 0 || rc == 1);
  snprintf(buf, cap, "%s", sym.name);
  etr__symbolizer_free(s);
  if (rc_out != NULL) *rc_out = rc;
  return buf;
}

/* The fallback name of vaddr in a module named base: "base+0xVADDR". */
static const char *fallback(const char *base, uint64_t vaddr, char *buf, size_t cap) {
  snprintf(buf, cap, "%s+0x%llx", base, (unsigned long long)vaddr);
  return buf;
}

/* ---- string tables without a final NUL ---- */

/* A string table with no NUL at all, ending the file: its one symbol is dropped, and the
 * address falls back to module+offset (before: the name ran off the mapping). In .symtab and
 * in .dynsym/.dynstr (a stripped file). */
static void test_strtab_without_nul(void **state) {
  (void)state;
  char dir[64], path[128], got[256], base[32], want[64];
  temp_dir(dir, sizeof dir);
  const uint32_t types[] = {SHT_SYMTAB, SHT_DYNSYM};
  for (size_t t = 0; t < 2; t++) {
    snprintf(path, sizeof path, "%s/nonul%zu.so", dir, t);
    char strtab[16];
    memset(strtab, 'A', sizeof strtab);
    Elf64_Sym syms[] = {{0}, func(1, TEXT_ADDR, 0x100)};
    write_symbols(path, types[t], syms, 2, strtab, sizeof strtab, NULL);
    int rc;
    snprintf(base, sizeof base, "nonul%zu.so", t);
    assert_string_equal(name_at(path, TEXT_ADDR + 0x10, &rc, got, sizeof got),
                        fallback(base, TEXT_ADDR + 0x10, want, sizeof want));
    assert_int_equal(rc, 1);
  }
  remove_tree(dir);
}

/* Names at the edge of a string table whose last string has no NUL: the terminated one is
 * found; the unterminated one, one starting on the table's last byte and one starting just
 * past the table are dropped. */
static void test_strtab_edge(void **state) {
  (void)state;
  char dir[64], path[128], got[256], want[64];
  temp_dir(dir, sizeof dir);
  static const char strtab[] = "\0good\0unterminated"; /* written without the final NUL */
  size_t strsize = sizeof strtab - 1;
  const uint32_t types[] = {SHT_SYMTAB, SHT_DYNSYM};
  for (size_t t = 0; t < 2; t++) {
    snprintf(path, sizeof path, "%s/edge%zu.so", dir, t);
    Elf64_Sym syms[] = {{0},
                        func(1, TEXT_ADDR, 0x10),
                        func(6, TEXT_ADDR + 0x10, 0x10),
                        func((uint32_t)strsize - 1, TEXT_ADDR + 0x20, 0x10),
                        func((uint32_t)strsize, TEXT_ADDR + 0x30, 0x10)};
    write_symbols(path, types[t], syms, 5, strtab, strsize, NULL);
    int rc;
    assert_string_equal(name_at(path, TEXT_ADDR + 4, &rc, got, sizeof got), "good");
    assert_int_equal(rc, 0);
    char base[32];
    snprintf(base, sizeof base, "edge%zu.so", t);
    for (uint64_t a = TEXT_ADDR + 0x14; a < TEXT_ADDR + 0x40; a += 0x10) {
      assert_string_equal(name_at(path, a, &rc, got, sizeof got),
                          fallback(base, a, want, sizeof want));
      assert_int_equal(rc, 1);
    }
  }
  remove_tree(dir);
}

/* A stripped file (.dynsym only) whose .gnu_debuglink name has no NUL and ends the file:
 * no debug file is looked for under a name read past the section; the .dynsym name
 * answers. */
static void test_debuglink_without_nul(void **state) {
  (void)state;
  char dir[64], path[128], got[256];
  temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/dbglink.so", dir);
  static const char strtab[] = "\0exported";
  char link[24];
  memset(link, 'A', sizeof link); /* name (no NUL), then where the CRC would be */
  Elf64_Sym syms[] = {{0}, func(1, TEXT_ADDR, 0x100)};
  sec s[] = {
      {".text", SHT_PROGBITS, SHF_ALLOC | SHF_EXECINSTR, TEXT_ADDR, NULL, 0x100, 0, 0, 0},
      {".dynsym", SHT_DYNSYM, 0, 0, syms, sizeof syms, 3, 1, sizeof syms[0]},
      {".dynstr", SHT_STRTAB, 0, 0, strtab, sizeof strtab, 0, 0, 0},
      {".gnu_debuglink", SHT_PROGBITS, 0, 0, link, sizeof link, 0, 0, 0},
  };
  write_elf(path, s, 4);
  int rc;
  assert_string_equal(name_at(path, TEXT_ADDR + 8, &rc, got, sizeof got), "exported");
  assert_int_equal(rc, 0);
  remove_tree(dir);
}

/* libsymchain (built with -g, DWARF 5: file names in .debug_line_str) copied with the last
 * byte of each DWARF string section made non-NUL: its DWARF is not used (libdw would read
 * the last string past the section), its names still come from .symtab. The untouched copy
 * has line info (the test would prove nothing otherwise). */
static int break_string_sections(const char *path) {
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  Elf64_Ehdr eh;
  assert_int_equal(fread(&eh, sizeof eh, 1, f), 1);
  assert_int_equal(eh.e_ident[EI_CLASS], ELFCLASS64);
  Elf64_Shdr *sh = calloc(eh.e_shnum, sizeof *sh);
  assert_non_null(sh);
  assert_int_equal(fseek(f, (long)eh.e_shoff, SEEK_SET), 0);
  assert_int_equal(fread(sh, sizeof *sh, eh.e_shnum, f), eh.e_shnum);
  const Elf64_Shdr *ss = &sh[eh.e_shstrndx];
  char *names = malloc(ss->sh_size + 1);
  assert_non_null(names);
  assert_int_equal(fseek(f, (long)ss->sh_offset, SEEK_SET), 0);
  assert_int_equal(fread(names, 1, ss->sh_size, f), ss->sh_size);
  names[ss->sh_size] = '\0';
  int broken = 0;
  for (size_t i = 0; i < eh.e_shnum; i++) {
    const char *nm = sh[i].sh_name < ss->sh_size ? names + sh[i].sh_name : "";
    if ((strcmp(nm, ".debug_str") != 0 && strcmp(nm, ".debug_line_str") != 0) ||
        sh[i].sh_size == 0 || (sh[i].sh_flags & SHF_COMPRESSED))
      continue;
    assert_int_equal(fseek(f, (long)(sh[i].sh_offset + sh[i].sh_size - 1), SEEK_SET), 0);
    assert_int_equal(fputc('A', f), 'A');
    broken++;
  }
  free(names);
  free(sh);
  assert_int_equal(fclose(f), 0);
  return broken;
}

static void copy_file(const char *src, const char *dst) {
  FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
  assert_non_null(in);
  assert_non_null(out);
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, in)) != 0) assert_int_equal(fwrite(buf, 1, n, out), n);
  fclose(in);
  assert_int_equal(fclose(out), 0);
}

static void test_dwarf_strings_without_nul(void **state) {
  (void)state;
  char dir[64], good[128], bad[128];
  temp_dir(dir, sizeof dir);
  snprintf(good, sizeof good, "%s/libgood.so", dir);
  snprintf(bad, sizeof bad, "%s/libbad.so", dir);
  copy_file(SYMCHAIN_PATH, good);
  copy_file(SYMCHAIN_PATH, bad);
  assert_true(break_string_sections(bad) > 0);
  /* symchain_a's ELF address (the library's lowest address is 0: its load base) */
  void *lib = dlopen(SYMCHAIN_PATH, RTLD_NOW | RTLD_LOCAL);
  assert_non_null(lib);
  void *fn = dlsym(lib, "symchain_a");
  Dl_info info;
  assert_true(fn != NULL && dladdr(fn, &info) != 0);
  uint64_t vaddr = (uint64_t)((uintptr_t)fn - (uintptr_t)info.dli_fbase) + 1;
  dlclose(lib);
  etr__symbolizer *s = etr__symbolizer_new();
  assert_non_null(s);
  etr__symbol sym;
  assert_int_equal(etr__symbolize(s, good, NULL, 0, vaddr, 0, &sym), 0);
  assert_string_equal(sym.name, "symchain_a");
  assert_true(sym.line > 0);
  assert_string_not_equal(sym.filename, good);
  assert_int_equal(etr__symbolize(s, bad, NULL, 0, vaddr, 0, &sym), 0);
  assert_string_equal(sym.name, "symchain_a");
  assert_string_equal(sym.filename, bad); /* no line info: the module's path */
  assert_int_equal(sym.line, 0);
  etr__symbolizer_free(s);
  remove_tree(dir);
}

/* ---- ELF symbol versions ---- */

/* "name@VER" and "name@@VER" in a .symtab come out as "name" (a C++ one demangled after the
 * cut); a leading '@' is part of the name. */
static void test_version_suffix(void **state) {
  (void)state;
  char dir[64], path[128];
  temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/versioned.so", dir);
  static const char strtab[] =
      "\0foo@@VER_1\0bar@VER_2\0@lead\0_ZN2ns4funcEv@@V_3\0plain\0@x@V_4\0mid@dle@@V_5";
  static const struct {
    const char *raw, *want;
  } cases[] = {{"foo@@VER_1", "foo"},  {"bar@VER_2", "bar"},
               {"@lead", "@lead"},     {"_ZN2ns4funcEv@@V_3", "ns::func()"},
               {"plain", "plain"},     {"@x@V_4", "@x"},
               {"mid@dle@@V_5", "mid"}};
  size_t n = sizeof cases / sizeof cases[0];
  Elf64_Sym syms[8] = {{0}};
  for (size_t i = 0; i < n; i++) {
    const char *p = strtab + 1;
    while (strcmp(p, cases[i].raw) != 0) p += strlen(p) + 1;
    syms[i + 1] = func((uint32_t)(p - strtab), TEXT_ADDR + 0x10 * i, 0x10);
  }
  write_symbols(path, SHT_SYMTAB, syms, n + 1, strtab, sizeof strtab, NULL);
  etr__symbolizer *s = etr__symbolizer_new();
  assert_non_null(s);
  for (size_t i = 0; i < n; i++) {
    etr__symbol sym, again;
    assert_int_equal(etr__symbolize(s, path, NULL, 0, TEXT_ADDR + 0x10 * i + 2, 0, &sym), 0);
    assert_string_equal(sym.name, cases[i].want);
    /* another address of the function: the same string (made once per symbol) */
    assert_int_equal(etr__symbolize(s, path, NULL, 0, TEXT_ADDR + 0x10 * i + 3, 0, &again), 0);
    assert_ptr_equal(sym.name, again.name);
  }
  etr__symbolizer_free(s);
  remove_tree(dir);
}

/* The CRC-32 of a whole file (what .gnu_debuglink records). */
static uint32_t file_crc(const char *path) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  unsigned char buf[4096];
  uLong c = crc32(0L, Z_NULL, 0);
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) != 0) c = crc32(c, buf, (uInt)n);
  fclose(f);
  return (uint32_t)c;
}

/* A stripped file (.dynsym "__libc_start_main") whose .gnu_debuglink names a debug file next
 * to it with the full .symtab, where the name is versioned as in glibc's debug file: the
 * frame is named as dladdr and .dynsym name it. */
static void test_version_suffix_debug_file(void **state) {
  (void)state;
  char dir[64], path[128], dbg[128], got[256];
  temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/libv.so", dir);
  snprintf(dbg, sizeof dbg, "%s/libv.so.debug", dir);
  static const char dynstr[] = "\0__libc_start_main";
  static const char strtab[] = "\0__libc_start_main@@GLIBC_2.34\0__libc_start_call_main";
  Elf64_Sym dsyms[] = {{0}, func(1, TEXT_ADDR, 0x40)};
  uint32_t local = (uint32_t)strlen(strtab + 1) + 2;
  Elf64_Sym syms[] = {{0}, func(1, TEXT_ADDR, 0x40), func(local, TEXT_ADDR + 0x40, 0x40)};
  write_symbols(dbg, SHT_SYMTAB, syms, 3, strtab, sizeof strtab, NULL);
  char link[20] = "libv.so.debug"; /* name, NUL, padding; the debug file's CRC-32 (LE) */
  uint32_t crc = file_crc(dbg);
  for (int i = 0; i < 4; i++) link[16 + i] = (char)(crc >> (8 * i));
  sec extra = {".gnu_debuglink", SHT_PROGBITS, 0, 0, link, sizeof link, 0, 0, 0};
  write_symbols(path, SHT_DYNSYM, dsyms, 2, dynstr, sizeof dynstr, &extra);
  int rc;
  assert_string_equal(name_at(path, TEXT_ADDR + 8, &rc, got, sizeof got), "__libc_start_main");
  assert_int_equal(rc, 0);
  /* the local function only the debug file has: proof that it was read */
  assert_string_equal(name_at(path, TEXT_ADDR + 0x48, &rc, got, sizeof got),
                      "__libc_start_call_main");
  /* A debug file whose CRC is not the link's (a stale one, of another build) is not read
   * (findings-21: its names were used). */
  link[16] ^= 1;
  write_symbols(path, SHT_DYNSYM, dsyms, 2, dynstr, sizeof dynstr, &extra);
  char want[64];
  assert_string_equal(name_at(path, TEXT_ADDR + 0x48, &rc, got, sizeof got),
                      fallback("libv.so", TEXT_ADDR + 0x48, want, sizeof want));
  assert_string_equal(name_at(path, TEXT_ADDR + 8, &rc, got, sizeof got), "__libc_start_main");
  remove_tree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_strtab_without_nul),
      cmocka_unit_test(test_strtab_edge),
      cmocka_unit_test(test_debuglink_without_nul),
      cmocka_unit_test(test_dwarf_strings_without_nul),
      cmocka_unit_test(test_version_suffix),
      cmocka_unit_test(test_version_suffix_debug_file),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
