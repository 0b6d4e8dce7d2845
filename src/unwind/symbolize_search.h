/* Extra places where a symbolizer looks for module files (for `etr symbolize`, which
 * resolves a trace written on another machine). See unwind.h for the symbolizer itself.
 */
#ifndef ETR_UNWIND_SYMBOLIZE_SEARCH_H
#define ETR_UNWIND_SYMBOLIZE_SEARCH_H

#include "unwind/unwind.h"

/* Add a directory searched when a module is not at its recorded path or its build-id does
 * not match: DIR/.build-id/xx/rest.debug, DIR/.build-id/xx/rest (by build-id), then
 * DIR/<basename of the module path> (build-id checked when known). Directories are tried in
 * the order added, before /usr/lib/debug. Copies dir. 0 or ETR_ENOMEM. Call before the
 * first etr__symbolize of a module for it to apply to that module. */
int etr__symbolizer_add_search_dir(etr__symbolizer *s, const char *dir);

#endif /* ETR_UNWIND_SYMBOLIZE_SEARCH_H */
