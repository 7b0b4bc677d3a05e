/* planted_call.c - a call that runs up against the layer order, for the
 * check's own test (tests/layers.cmake): read as if it were a file of
 * src/base/, it calls the api layer. Never linked into anything. */
#include "zephon/pipeline.h"

void zp_layers_planted(void);
void zp_layers_planted(void)
{
    zp_pipeline_destroy(NULL);
}
