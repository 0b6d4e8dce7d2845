/* Whether text copied verbatim into a JSON output is well-formed (check.c). */
#ifndef ETR_JSON_CHECK_H
#define ETR_JSON_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ETR__JSON_CHECK_DEPTH 16u /* deeper nesting is refused (tables nest 3 deep) */

/* Whether s[0..n) is zero or more JSON values separated by commas (the elements of an
 * array without its brackets), whitespace allowed around them. */
bool etr__json_elements_ok(const char *s, size_t n);
/* The same, and how many values there are. */
bool etr__json_elements_count(const char *s, size_t n, uint64_t *count);

/* Whether s[0..n) is zero or more object members ("key": value) separated by commas, a last
 * comma allowed (the text goes between other members). */
bool etr__json_members_ok(const char *s, size_t n);

#endif
