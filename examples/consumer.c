/*
 * consumer.c - the shape of a training loop fed by Zephon.
 *
 *   consumer MANIFEST_OR_SHARDS [RANK WORLD_SIZE]
 *
 * Builds dataset -> worksource -> pipeline (fetch -> tokenize gpt2 ->
 * packed [8, 1024+1] batches), pulls batches and hands them to a stand-in
 * for the training step. Copy it and replace train_step().
 */
#include <stdio.h>
#include <stdlib.h>

#include <zephon.h>

/* Stand-in for the model: count the targets that carry loss. */
static uint64_t train_step(const zp_batch *b)
{
    uint64_t targets = 0;
    for (size_t r = 0; r < b->rows; r++)
        for (size_t c = 1; c < b->cols; c++)
            targets += b->loss_mask[r * b->cols + c];
    return targets;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s MANIFEST_OR_SHARDS [RANK WORLD_SIZE]\n", argv[0]);
        return 2;
    }
    zp_dataset *ds = NULL;
    zp_worksource *ws = NULL;
    zp_pipeline *p = NULL;
    int rc = 1;
    zp_status st;

    if ((st = zp_dataset_create(NULL, &ds)) != ZP_OK)
        goto fail;
    if ((st = zp_dataset_add(ds, argv[1])) != ZP_OK) {
        fprintf(stderr, "dataset: %s\n", zp_dataset_errmsg(ds));
        goto out;
    }

    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.seed = 1234;
    if (argc >= 4) {
        wc.rank = (uint32_t)atoi(argv[2]);
        wc.world_size = (uint32_t)atoi(argv[3]);
    }
    if ((st = zp_worksource_create(ds, &wc, &ws)) != ZP_OK) {
        fprintf(stderr, "worksource: %s\n", zp_worksource_errmsg(ws));
        goto out;
    }

    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.epochs = 1;
    if ((st = zp_pipeline_create(ws, &pc, &p)) != ZP_OK)
        goto fail;
    if ((st = zp_pipeline_tokenize(p, "gpt2", "text", 2)) != ZP_OK ||
        (st = zp_pipeline_pack(p, ZP_PACK_CONCAT, 1024)) != ZP_OK ||
        (st = zp_pipeline_batch(p, 8)) != ZP_OK || (st = zp_pipeline_options(p, 4)) != ZP_OK) {
        fprintf(stderr, "pipeline: %s\n", zp_pipeline_errmsg(p));
        goto out;
    }

    const zp_batch *b;
    uint64_t steps = 0, targets = 0;
    while ((st = zp_pipeline_next(p, &b)) == ZP_OK) {
        targets += train_step(b);
        steps++;
    }
    if (st != ZP_END) {
        fprintf(stderr, "pipeline: %s: %s\n", zp_status_str(st), zp_pipeline_errmsg(p));
        goto out;
    }
    printf("%llu steps, %llu targets with loss\n", (unsigned long long)steps,
           (unsigned long long)targets);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "error: %s\n", zp_status_str(st));
out:
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    zp_dataset_destroy(ds);
    return rc;
}
