/* tools/chakra_parts.h — the parts of etr chakra (cmd_chakra.c) in files of their own:
 * chakra_order.c, the order of a process group's collectives (each COMM node waits for the
 * previous one of its group), and chakra_help.c, the --help text.
 */
#ifndef ETR_TOOLS_CHAKRA_PARTS_H
#define ETR_TOOLS_CHAKRA_PARTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A process group's collectives run in the order its ranks call them, so each COMM node waits
 * for the previous one of its group (start order), wherever it was recorded: a backend record
 * counted on a gloo worker thread (gloo:all_to_all) has no program order with its caller's
 * collectives, and ASTRA-sim, which pairs the ranks' collectives by the order they are issued,
 * hangs when two ranks issue them in different orders. */
typedef struct chakra_grp_last {
  const char *pg; /* the group's name, borrowed */
  uint32_t ix;    /* op index of its last COMM node so far */
} chakra_grp_last;

typedef struct chakra_groups {
  chakra_grp_last *v;
  size_t n, cap;
} chakra_groups;

/* The COMM node of op index IX, in group PG, comes next: *prev gets the group's previous one
 * (UINT32_MAX before the first). False when memory runs out. Linear in the number of groups
 * (a trace has few). */
bool chakra_group_next(chakra_groups *g, const char *pg, uint32_t ix, uint32_t *prev);

/* Prints etr chakra's usage and description to stdout. */
void chakra_help(void);

#endif
