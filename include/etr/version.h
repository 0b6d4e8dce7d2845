/* etr/version.h — library version, at compile time (macros) and at run time.
 *
 * The SONAME follows the major version. etr_version() returns the numbers the library was
 * built with, so a program can check that the header it compiled against matches.
 */
#ifndef ETR_VERSION_H
#define ETR_VERSION_H

#include "etr/common.h"

#define ETR_VERSION_MAJOR 0
#define ETR_VERSION_MINOR 1
#define ETR_VERSION_PATCH 0
#define ETR_VERSION_STRING "0.1.0"
/* One integer, comparable: major * 10000 + minor * 100 + patch. */
#define ETR_VERSION_NUMBER (ETR_VERSION_MAJOR * 10000 + ETR_VERSION_MINOR * 100 + ETR_VERSION_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

/* ETR_VERSION_NUMBER of the library actually loaded. Any thread, no cost. */
ETR_API int etr_version(void);

/* ETR_VERSION_STRING of the library actually loaded (static storage). */
ETR_API const char *etr_version_string(void);

#ifdef __cplusplus
}
#endif

#endif /* ETR_VERSION_H */
