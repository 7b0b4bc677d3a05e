/* fuzz_common.c - see fuzz_common.h. */
#include "fuzz_common.h"

#include <string.h>

char *fuzz_tmpdir(void)
{
    static char dir[256];
    if (!dir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/zephon-fuzz-XXXXXX", base && *base ? base : "/tmp");
        FUZZ_CHECK(mkdtemp(dir) != NULL, "mkdtemp %s", dir);
    }
    return dir;
}
