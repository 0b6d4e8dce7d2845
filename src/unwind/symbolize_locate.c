/* Where a module's files are (symbolize_file.h, etr__symfile_locate): the module's ELF file
 * at its recorded path, else a copy found by build-id or basename under the search
 * directories and /usr/lib/debug, and the separate debug file that would serve it (by the
 * file's build-id, then its .gnu_debuglink with the CRC the link records). Only ELF headers
 * and notes are read here; symbolize_file.c loads what was found. A file found must be the
 * recorded build: the same build-id, or none when the module was recorded without one.
 */
#include "unwind/symbolize_file.h"

#ifdef ETR_WITH_LIBDW

#include <elfutils/libdwelf.h>
#include <fcntl.h>
#include <gelf.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "unwind/symbolize_elf.h"

static pthread_once_t g_elf_once = PTHREAD_ONCE_INIT;
static void elf_init(void) { elf_version(EV_CURRENT); }
void etr__symfile_elf_init(void) { pthread_once(&g_elf_once, elf_init); }

static etr__file_key file_key(const struct stat *st) {
  return (etr__file_key){
      (uint64_t)st->st_dev, (uint64_t)st->st_ino, (uint64_t)st->st_size,
      (uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec};
}

/* Open path as an ELF file; when want_len != 0 its build-id must equal want; when none, it
 * must have no build-id (a module recorded without one: a file that has one is another
 * build). Its identity into *key (when key is not NULL). */
Elf *etr__symfile_open_elf(const char *path, const uint8_t *want, size_t want_len, bool none,
                           int *fd_out, etr__file_key *key) {
  /* O_NONBLOCK: a path naming a FIFO must not hang us (only regular files are read). */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return NULL;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return NULL;
  }
  if (key != NULL) *key = file_key(&st);
  Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
  if (elf == NULL || elf_kind(elf) != ELF_K_ELF) goto fail;
  if (want_len != 0 || none) {
    const void *bid = NULL;
    ssize_t n = dwelf_elf_gnu_build_id(elf, &bid);
    if (want_len == 0 ? n > 0 : n <= 0 || (size_t)n != want_len || memcmp(bid, want, want_len) != 0)
      goto fail;
  }
  *fd_out = fd;
  return elf;
fail:
  if (elf != NULL) elf_end(elf);
  close(fd);
  return NULL;
}

static Elf *open_elf(const char *path, const uint8_t *want, size_t want_len, int *fd_out) {
  return etr__symfile_open_elf(path, want, want_len, false, fd_out, NULL);
}

/* "dir/.build-id/xx/rest<suffix>"; false when it does not fit in cap (a path cut short
 * would name another file). */
static bool build_id_path(char *buf, size_t cap, const char *dir, const uint8_t *bid, size_t len,
                          const char *suffix) {
  char hex[2 * 64 + 1];
  for (size_t i = 0; i < len; i++) snprintf(hex + 2 * i, 3, "%02x", bid[i]);
  int n = snprintf(buf, cap, "%s/.build-id/%.2s/%s%s", dir, hex, hex + 2, suffix);
  return n >= 0 && (size_t)n < cap;
}

/* The search directories of the symbolizer, tried in order before /usr/lib/debug. */
typedef struct search_dirs {
  const char *const *dir;
  size_t n;
} search_dirs;

/* The module's file found elsewhere: by build-id under the search dirs and /usr/lib/debug,
 * then by basename under the search dirs. */
static Elf *find_elsewhere(const search_dirs *sd, const etr__symfile_id *id, int *fd, char *buf) {
  Elf *elf;
  if (id->build_id_len != 0) {
    for (size_t i = 0; i <= sd->n; i++) {
      const char *dir = i < sd->n ? sd->dir[i] : "/usr/lib/debug";
      if (build_id_path(buf, PATH_MAX, dir, id->build_id, id->build_id_len, ".debug") &&
          (elf = open_elf(buf, id->build_id, id->build_id_len, fd)) != NULL)
        return elf;
      if (i == sd->n) break;
      if (build_id_path(buf, PATH_MAX, dir, id->build_id, id->build_id_len, "") &&
          (elf = open_elf(buf, id->build_id, id->build_id_len, fd)) != NULL)
        return elf;
    }
  }
  for (size_t i = 0; i < sd->n && id->base[0] != '\0'; i++) {
    int n = snprintf(buf, PATH_MAX, "%s/%s", sd->dir[i], id->base);
    if (n < 0 || n >= PATH_MAX) continue; /* (cut short, it would name another file) */
    elf = etr__symfile_open_elf(buf, id->build_id, id->build_id_len, id->no_build_id, fd, NULL);
    if (elf != NULL) return elf;
  }
  return NULL;
}

/* The section of elf named name (its first), or NULL. elf_strptr checks that a section
 * name ends inside the section-name table. */
Elf_Scn *etr__elf_section(Elf *elf, const char *name) {
  size_t shstrndx;
  if (elf_getshdrstrndx(elf, &shstrndx) != 0) return NULL;
  Elf_Scn *scn = NULL;
  while ((scn = elf_nextscn(elf, scn)) != NULL) {
    GElf_Shdr sh;
    const char *n = gelf_getshdr(scn, &sh) != NULL ? elf_strptr(elf, shstrndx, sh.sh_name) : NULL;
    if (n != NULL && strcmp(n, name) == 0) return scn;
  }
  return NULL;
}

/* The file name in elf's .gnu_debuglink (the name, its NUL, padding, a 4-byte CRC), or NULL;
 * the CRC into *crc. Read here, bounded, rather than with dwelf_elf_gnu_debuglink, which not
 * every libdw version checks: the name is used as a C string, and one without its NUL inside
 * the section would be read past the section and the mapping. */
static const char *gnu_debuglink(Elf *elf, uint32_t *crc) {
  Elf_Scn *scn = etr__elf_section(elf, ".gnu_debuglink");
  Elf_Data *d = scn != NULL ? elf_rawdata(scn, NULL) : NULL;
  if (d == NULL || d->d_buf == NULL || d->d_size <= 4 ||
      memchr(d->d_buf, '\0', d->d_size - 4) == NULL)
    return NULL;
  size_t at = (strlen(d->d_buf) + 1 + 3) & ~(size_t)3; /* the CRC, 4-aligned after the name */
  if (at > d->d_size - 4) return NULL;
  const unsigned char *b = (const unsigned char *)d->d_buf + at;
  GElf_Ehdr eh;
  bool msb = gelf_getehdr(elf, &eh) != NULL && eh.e_ident[EI_DATA] == ELFDATA2MSB;
  *crc = msb ? (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3]
             : (uint32_t)b[3] << 24 | (uint32_t)b[2] << 16 | (uint32_t)b[1] << 8 | b[0];
  return d->d_buf;
}

/* Whether the whole file fd has CRC-32 crc (what .gnu_debuglink records of its file). Reads
 * it through once (only for a module without a build-id); false when it cannot. */
static bool file_crc_is(int fd, uint32_t crc) {
  enum { CHUNK = 1 << 16 };
  unsigned char *buf = malloc(CHUNK); /* (not on the stack: flush may run on a small one) */
  if (buf == NULL) return false;
  uLong c = crc32(0L, Z_NULL, 0);
  off_t off = 0;
  ssize_t n;
  while ((n = pread(fd, buf, CHUNK, off)) > 0) {
    c = crc32(c, buf, (uInt)n);
    off += n;
  }
  free(buf);
  return n == 0 && (uint32_t)c == crc;
}

/* A separate debug file for elf (at file path `path`): by the file's build-id, then by its
 * .gnu_debuglink next to it, in .debug/ beside it and under /usr/lib/debug. Its path into
 * buf (PATH_MAX bytes). */
static Elf *find_debug_file(const search_dirs *sd, Elf *elf, const char *path, int *fd, char *buf) {
  Elf *dbg;
  const void *bidp = NULL;
  ssize_t n = dwelf_elf_gnu_build_id(elf, &bidp);
  if (n > 0 && (size_t)n <= 64) {
    for (size_t i = 0; i <= sd->n; i++) {
      const char *dir = i < sd->n ? sd->dir[i] : "/usr/lib/debug";
      if (build_id_path(buf, PATH_MAX, dir, bidp, (size_t)n, ".debug") &&
          (dbg = open_elf(buf, bidp, (size_t)n, fd)) != NULL)
        return dbg;
    }
  }
  uint32_t crc = 0;
  const char *link = gnu_debuglink(elf, &crc);
  if (link == NULL || link[0] == '\0' || strchr(link, '/') != NULL) return NULL;
  char dir[PATH_MAX];
  if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir) return NULL;
  char *slash = strrchr(dir, '/');
  if (slash == NULL) return NULL;
  *slash = '\0';
  static const char *const fmts[] = {"%s/%s", "%s/.debug/%s", "/usr/lib/debug%s/%s"};
  for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++) {
    int len = snprintf(buf, PATH_MAX, fmts[i], dir, link);
    if (len < 0 || len >= PATH_MAX || strcmp(buf, path) == 0) continue; /* cut: another file */
    /* The debug file has the same build-id as the module when it has one; else the CRC the
     * link records (a stale debug file of another build gave that build's names and lines) */
    if ((dbg = open_elf(buf, n > 0 ? bidp : NULL, n > 0 ? (size_t)n : 0, fd)) != NULL) {
      if (n > 0 || file_crc_is(*fd, crc)) return dbg;
      elf_end(dbg);
      close(*fd);
      *fd = -1;
    }
  }
  return NULL;
}

void etr__symfile_loc_free(etr__symfile_loc *loc) {
  free(loc->path);
  free(loc->dbg_path);
  loc->path = loc->dbg_path = NULL;
}

int etr__symfile_locate(etr__symbolizer *s, const etr__symfile_id *id, uintptr_t live_ip,
                        etr__symfile_loc *loc) {
  etr__symfile_elf_init();
  memset(loc, 0, sizeof *loc);
  search_dirs sd;
  sd.n = etr__symbolizer_search_dirs(s, &sd.dir);
  char exe[PATH_MAX], found[PATH_MAX], dbg_found[PATH_MAX];
  const char *path = id->path;
  if (path[0] == '\0') {
    /* The main program of this process (only meaningful in process). */
    ssize_t n = live_ip != 0 ? readlink("/proc/self/exe", exe, sizeof exe - 1) : -1;
    exe[n > 0 ? n : 0] = '\0';
    path = exe;
  }
  int fd = -1, dbg_fd = -1;
  Elf *elf = NULL;
  if (path[0] != '\0')
    elf = etr__symfile_open_elf(path, id->build_id, id->build_id_len, id->no_build_id, &fd,
                                &loc->key);
  if (elf == NULL) {
    elf = find_elsewhere(&sd, id, &fd, found);
    path = found;
    if (elf != NULL) {
      struct stat st;
      if (fstat(fd, &st) != 0) st = (struct stat){0};
      loc->key = file_key(&st);
    }
  }
  if (elf == NULL) return 0;
  /* Looked for whether or not the file needs it (etr__symfile_load decides, as before): the
   * same file with the same candidate gives the same answers. */
  Elf *dbg = find_debug_file(&sd, elf, path, &dbg_fd, dbg_found);
  int rc = 0;
  loc->path = strdup(path);
  if (loc->path == NULL) rc = ETR_ENOMEM;
  if (dbg != NULL && rc == 0) {
    struct stat st;
    if (fstat(dbg_fd, &st) != 0) st = (struct stat){0};
    loc->dbg_key = file_key(&st);
    loc->dbg_path = strdup(dbg_found);
    if (loc->dbg_path == NULL) rc = ETR_ENOMEM;
  }
  size_t bl = id->build_id_len < sizeof loc->build_id ? id->build_id_len : sizeof loc->build_id;
  if (bl != 0) memcpy(loc->build_id, id->build_id, bl);
  loc->build_id_len = bl;
  loc->no_build_id = id->no_build_id;
  if (dbg != NULL) elf_end(dbg);
  if (dbg_fd >= 0) close(dbg_fd);
  elf_end(elf);
  close(fd);
  if (rc != 0) etr__symfile_loc_free(loc);
  return rc;
}

#else /* no libdw: no file is read, every address takes the symbolizer's fallbacks */

#include <string.h>

int etr__symfile_locate(etr__symbolizer *s, const etr__symfile_id *id, uintptr_t live_ip,
                        etr__symfile_loc *loc) {
  (void)s;
  (void)id;
  (void)live_ip;
  memset(loc, 0, sizeof *loc);
  return 0;
}

void etr__symfile_loc_free(etr__symfile_loc *loc) { (void)loc; }

#endif /* ETR_WITH_LIBDW */
