/* Python frames in etr's tracebacks: a script unwinder for CPython (etr/traceback.h), shared
 * by the etr package (_etr.c) and the example extension (examples/python/etrdemo.c).
 *
 * It reads CPython 3.11's internal frame structs, so it works with the interpreter it was
 * built for; built for another version, registering reports "unsupported" and tracebacks
 * hold native frames only. Call with the GIL held.
 */
#ifndef ETR_PY_CPYTHON_FRAMES_H
#define ETR_PY_CPYTHON_FRAMES_H

#include <stdbool.h>

/* Register the unwinder: 1 registered now, 0 registered already (by this file), or an
 * ETR_PY_FRAMES_* failure with *why (when why is not NULL) saying it in words. */
enum { ETR_PY_FRAMES_BUSY = -1, ETR_PY_FRAMES_UNSUPPORTED = -2, ETR_PY_FRAMES_ERROR = -3 };
int etr_py_frames_register(const char **why);
/* Unregister it if this file registered it (releases what etr holds, here). */
void etr_py_frames_unregister(void);
/* Whether this build reads the running interpreter's frames. */
bool etr_py_frames_supported(void);

#endif
