/* env.c — versions of the libraries crescent was linked with, for the environment report
 * (lua/crescent/env.lua). Each answer is a static string; "" means not built in. */
#include "core.h"

#ifdef CR_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

/* oneDNN's run-time version, "major.minor.patch" (the library actually loaded, which can
 * differ from the headers the build saw). */
const char *cr_dnnl_version(void) {
#ifdef CR_HAVE_DNNL
    static char text[48];
    if (!text[0]) {
        const dnnl_version_t *v = dnnl_version();
        if (v) snprintf(text, sizeof text, "%d.%d.%d", v->major, v->minor, v->patch);
    }
    return text;
#else
    return "";
#endif
}
