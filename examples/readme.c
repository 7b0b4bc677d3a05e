/*
 * readme.c - the "Using the library" example of README.md as a complete
 * program: the lines between the README markers below are the README's
 * code block (tests/install/install_test.sh checks that they match, then
 * builds this file against an installed copy with pkg-config and with
 * find_package, and runs it).
 *
 *   readme            (run where data/manifest.json is, e.g. after
 *                      `zephon gen --out data`)
 *
 * It prints the batches and real tokens seen, or the error.
 */
#include <stdio.h>

/* README: begin */
#include <zephon.h>
/* README: end */

static uint64_t n_batches, n_tokens;

/* Stand-in for the training step: count the real tokens of the batch. */
static void train(const int32_t *tokens, const uint8_t *loss_mask, const int32_t *segment_ids)
{
    (void)tokens;
    (void)segment_ids;
    for (size_t i = 0; i < 32 * 2049; i++)
        n_tokens += loss_mask[i];
    n_batches++;
}

/* After the README's lines: errors (the README leaves them out), the
 * counts, and the handles released. */
static int finish(zp_dataset *ds, zp_worksource *ws, zp_pipeline *p)
{
    const char *err = zp_pipeline_errmsg(p);
    int rc;
    if (err && *err) {
        fprintf(stderr, "readme: %s / %s / %s\n", zp_dataset_errmsg(ds), zp_worksource_errmsg(ws),
                err);
        rc = 1;
    } else {
        printf("zephon %s: %llu batches, %llu tokens\n", zp_version(),
               (unsigned long long)n_batches, (unsigned long long)n_tokens);
        rc = n_batches > 0 && n_tokens > 0 ? 0 : 1;
    }
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    zp_dataset_destroy(ds);
    return rc;
}

/* The README's lines are kept as they are, at the left margin. */
int main(void)
{
    uint32_t rank = 0, world = 1;
/* README: begin */
zp_dataset *ds;     zp_dataset_create(NULL, &ds);   zp_dataset_add(ds, "data/manifest.json");
zp_worksource_config wc; zp_worksource_config_init(&wc);
wc.seed = 1234; wc.rank = rank; wc.world_size = world;
zp_worksource *ws;  zp_worksource_create(ds, &wc, &ws);
zp_pipeline *p;     zp_pipeline_create(ws, NULL, &p);   /* fetch, prefetch_batches: ZP_AUTO */
zp_pipeline_tokenize(p, "gpt2", "text", ZP_AUTO);     /* or a count of tasks */
zp_pipeline_pack(p, ZP_PACK_CONCAT, 2048);
zp_pipeline_batch(p, 32);
const zp_batch *b;
while (zp_pipeline_next(p, &b) == ZP_OK)
    train(b->tokens, b->loss_mask, b->segment_ids);   /* [32, 2049] int32 */
/* README: end */
return finish(ds, ws, p);
}
