/* An arena of bytes freed all at once: the symbolizer's strings and symbol arrays
 * (symbolize.c), which live as long as the symbolizer whatever happens to the files they
 * came from. Blocks of 60 000 bytes (or one request's size), linked newest first. */
#ifndef ETR_UNWIND_ARENA_H
#define ETR_UNWIND_ARENA_H

#include <stddef.h>

typedef struct etr__arena_block etr__arena_block;

/* n bytes from the arena *head (a new block when the newest has no room); NULL when memory
 * is exhausted. */
char *etr__arena_alloc(etr__arena_block **head, size_t n);
/* The same, aligned for pointers (arrays of etr__symbol). */
void *etr__arena_alloc_aligned(etr__arena_block **head, size_t n);
/* A copy of s in the arena, or NULL. */
const char *etr__arena_strdup(etr__arena_block **head, const char *s);
/* Free every block; *head becomes NULL. */
void etr__arena_free(etr__arena_block **head);

#endif
