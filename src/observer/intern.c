/* Interned strings (etr_intern): copies that etr owns and never changes or frees, so that a
 * recording thread recognises one by its address alone. A string the runtime owns has to be
 * compared byte by byte on every call (its buffer may have been reused for other bytes);
 * one of ours cannot change, so an address seen before stands for the bytes seen before.
 *
 * Copies live in blocks that are only ever appended to and are kept until the process
 * ends: a runtime keeps the pointers in its own static tables, across traces. The set of
 * copies is a small open-addressing table under a mutex (interning is rare: once per
 * distinct op name or dtype); the blocks' bounds are published with release stores, so
 * etr__interned() needs no lock.
 *
 * The runtime's own literals are as good when they sit in the read-only segments of the
 * main program (etr__str_fixed): the loader never unloads it, and no code writes there, so
 * the bytes at such an address are the bytes seen before. Shared libraries are left out,
 * since one that is unloaded may give its address range to another with other bytes there
 * (their names are compared, or interned by the runtime: docs/API.md).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "etr/value.h"
#include "observer/internal.h"
#include "observer/registry.h"

#define BLOCK_BYTES (64u * 1024u)
#define MAX_BLOCKS 64u /* 4 MiB of copies in all; past that, etr_intern returns NULL */

typedef struct block {
  char *base;
  _Atomic size_t used; /* bytes handed out: interned strings, each with its NUL */
} block;

static block g_blocks[MAX_BLOCKS];
static _Atomic unsigned g_nblocks;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static const char **g_set; /* open addressing by content hash (lock held) */
static size_t g_set_cap, g_set_len;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* A fork while another thread interns would leave the child with the lock held. */
static void fork_prepare(void) { pthread_mutex_lock(&g_lock); }
static void fork_release(void) { pthread_mutex_unlock(&g_lock); }
static void intern_init(void) { pthread_atfork(fork_prepare, fork_release, fork_release); }

static uint64_t str_hash(const char *s, size_t n) {
  uint64_t h = etr__fnv1a(s, n);
  return h ^ (h >> 29); /* (the table takes the low bits) */
}

static bool set_grow_locked(void) {
  size_t cap = g_set_cap ? g_set_cap * 2 : 256;
  const char **n = calloc(cap, sizeof *n);
  if (!n) return false;
  for (size_t i = 0; i < g_set_cap; i++) {
    const char *s = g_set[i];
    if (!s) continue;
    size_t j = (size_t)str_hash(s, strlen(s)) & (cap - 1);
    while (n[j]) j = (j + 1) & (cap - 1);
    n[j] = s;
  }
  free(g_set);
  g_set = n;
  g_set_cap = cap;
  return true;
}

/* Room for n bytes in the last block (a new one when it is full); NULL past the limit. */
static char *room_locked(size_t n) {
  unsigned nb = atomic_load_explicit(&g_nblocks, memory_order_relaxed);
  if (nb) {
    block *b = &g_blocks[nb - 1];
    size_t used = atomic_load_explicit(&b->used, memory_order_relaxed);
    if (used + n <= BLOCK_BYTES) return b->base + used;
  }
  if (nb == MAX_BLOCKS) return NULL;
  char *base = malloc(BLOCK_BYTES);
  if (!base) return NULL;
  g_blocks[nb].base = base;
  atomic_store_explicit(&g_blocks[nb].used, 0, memory_order_relaxed);
  atomic_store_explicit(&g_nblocks, nb + 1, memory_order_release);
  return base;
}

const char *etr_intern(const char *s) {
  ETR__QUIET_CALL();
  if (!s) return NULL;
  size_t n = strnlen(s, ETR_INTERN_MAX + 1);
  if (n > ETR_INTERN_MAX) return NULL;
  pthread_once(&g_once, intern_init);
  pthread_mutex_lock(&g_lock);
  const char *out = NULL;
  if (g_set_len * 2 >= g_set_cap && !set_grow_locked()) goto done;
  size_t j = (size_t)str_hash(s, n) & (g_set_cap - 1);
  for (; g_set[j]; j = (j + 1) & (g_set_cap - 1)) {
    if (memcmp(g_set[j], s, n + 1) == 0) {
      out = g_set[j];
      goto done;
    }
  }
  char *copy = room_locked(n + 1);
  if (!copy) goto done;
  memcpy(copy, s, n);
  copy[n] = '\0';
  block *b = &g_blocks[atomic_load_explicit(&g_nblocks, memory_order_relaxed) - 1];
  /* the bytes before the bound that makes them ours (etr__interned) */
  atomic_store_explicit(&b->used, (size_t)(copy - b->base) + n + 1, memory_order_release);
  g_set[j] = copy;
  g_set_len++;
  out = copy;
done:
  pthread_mutex_unlock(&g_lock);
  return out;
}

bool etr__interned(const char *p) {
  if (!p) return false;
  unsigned nb = atomic_load_explicit(&g_nblocks, memory_order_acquire);
  for (unsigned i = 0; i < nb; i++) {
    const block *b = &g_blocks[i];
    size_t used = atomic_load_explicit(&b->used, memory_order_acquire);
    if ((uintptr_t)p >= (uintptr_t)b->base && (uintptr_t)p < (uintptr_t)b->base + used) return true;
  }
  return false;
}

/* ---- the main program's read-only segments ---- */

#define RO_MAX 8
static struct { uintptr_t lo, hi; } g_ro[RO_MAX];
static unsigned g_nro;
static pthread_once_t g_ro_once = PTHREAD_ONCE_INIT;

static int ro_cb(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  (void)data;
  /* The main program is the first object listed (its name is empty). */
  for (unsigned i = 0; i < info->dlpi_phnum && g_nro < RO_MAX; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || (ph->p_flags & PF_W) || ph->p_memsz == 0) continue;
    g_ro[g_nro].lo = (uintptr_t)info->dlpi_addr + ph->p_vaddr;
    g_ro[g_nro].hi = g_ro[g_nro].lo + ph->p_memsz;
    g_nro++;
  }
  return 1; /* (the first object only) */
}

static void ro_init(void) { dl_iterate_phdr(ro_cb, NULL); }

bool etr__str_fixed(const char *p) {
  if (!p) return false;
  if (etr__interned(p)) return true;
  pthread_once(&g_ro_once, ro_init);
  for (unsigned i = 0; i < g_nro; i++)
    if ((uintptr_t)p >= g_ro[i].lo && (uintptr_t)p < g_ro[i].hi) return true;
  return false;
}
