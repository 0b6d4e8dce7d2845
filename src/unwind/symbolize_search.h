/* Extra places where a symbolizer looks for module files (for `etr symbolize`, which
 * resolves a trace written on another machine), and how many files it keeps loaded. See
 * unwind.h for the symbolizer itself.
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

/* Files (a module's file with its debug file) kept loaded at once by default: loading one
 * more closes the least recently used. Modules that resolve to the same files share one.
 * The default is for the trace writer, which symbolizes new addresses as a run meets them,
 * in any order over all the modules of the process (a PyTorch run has tens): a file closed
 * there would be loaded again at its next new address (libtorch_cpu: hundreds of ms). The
 * address-space guard still closes files when memory is short. etr symbolize, which
 * resolves one module's frames together, keeps 2. */
#define ETR__SYMBOLIZER_MAX_LOADED 64

/* Keep at most n files loaded (n 0 counts as 1); the ones beyond are closed when the next
 * file is loaded. Answers do not change, only how often a file may be loaded again. */
void etr__symbolizer_set_max_loaded(etr__symbolizer *s, size_t n);

/* How many times a file was loaded (its symbol table built and DWARF indexed) so far. */
size_t etr__symbolizer_loads(const etr__symbolizer *s);

#endif /* ETR_UNWIND_SYMBOLIZE_SEARCH_H */
