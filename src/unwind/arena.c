/* The symbolizer's arena (arena.h). */
#include "unwind/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct etr__arena_block {
  struct etr__arena_block *next;
  size_t used, cap;
  char data[];
};

char *etr__arena_alloc(etr__arena_block **head, size_t n) {
  etr__arena_block *b = *head;
  if (b == NULL || b->cap - b->used < n) {
    size_t cap = n > 60000 ? n : 60000;
    etr__arena_block *nb = malloc(sizeof *nb + cap);
    if (nb == NULL) return NULL;
    nb->next = b;
    nb->used = 0;
    nb->cap = cap;
    *head = b = nb;
  }
  char *p = b->data + b->used;
  b->used += n;
  return p;
}

void *etr__arena_alloc_aligned(etr__arena_block **head, size_t n) {
  etr__arena_block *b = *head;
  if (b != NULL) {
    size_t pad = (size_t)(-(uintptr_t)(b->data + b->used)) & (sizeof(void *) - 1);
    b->used = b->used + pad <= b->cap ? b->used + pad : b->cap;
  }
  /* A new block's data is pointer-aligned (it follows a pointer and two size_t). */
  return etr__arena_alloc(head, n);
}

const char *etr__arena_strdup(etr__arena_block **head, const char *s) {
  size_t n = strlen(s) + 1;
  char *p = etr__arena_alloc(head, n);
  if (p != NULL) memcpy(p, s, n);
  return p;
}

void etr__arena_free(etr__arena_block **head) {
  etr__arena_block *b = *head;
  while (b != NULL) {
    etr__arena_block *next = b->next;
    free(b);
    b = next;
  }
  *head = NULL;
}
