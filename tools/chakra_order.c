/* tools/chakra_order.c — the order of a process group's collectives: chakra_parts.h. */
#include "chakra_parts.h"

#include <stdlib.h>
#include <string.h>

bool chakra_group_next(chakra_groups *g, const char *pg, uint32_t ix, uint32_t *prev) {
  size_t k = 0;
  while (k < g->n && strcmp(g->v[k].pg, pg) != 0) k++;
  if (k == g->n) {
    if (g->n == g->cap) {
      size_t c = g->cap ? g->cap * 2 : 8;
      chakra_grp_last *v = realloc(g->v, c * sizeof *v);
      if (v == NULL) return false;
      g->v = v;
      g->cap = c;
    }
    g->v[g->n++] = (chakra_grp_last){pg, UINT32_MAX};
  }
  *prev = g->v[k].ix;
  g->v[k].ix = ix;
  return true;
}
