/* op_tokenize.c - the tokenize operator: the text of each live record ->
 * token ids appended to the chunk's token arena. */
#include "ops/operators.h"

/* A document read from a token shard (reader.h): not encoded again. Its
 * ids must be in the tokenizer's vocabulary, and a trailing EOT is dropped,
 * and a leading BOS when the tokenizer adds one (the packer adds them, as
 * for a text), so that corpora written with and without them around each
 * document give the same batches. */
static void pass_tokens(const zpi_op_env *env, zpi_chunk *c, size_t i)
{
    zpi_rec *r = &c->recs[i];
    const int32_t *t = c->tok + r->tok_off;
    const int32_t eot = zp_tokenizer_eot(env->tok);
    const size_t vocab = zp_tokenizer_vocab_size(env->tok);
    for (size_t k = 0; k < r->tok_len; k++)
        if (t[k] < 0 || (size_t)t[k] >= vocab) {
            char m[ZPI_ERRMAX];
            zpi_fmt(m, sizeof m,
                    "shard '%s' record %llu: token %zu is %ld, outside the tokenizer's "
                    "vocabulary of %zu ids (pre-tokenized with another tokenizer?)",
                    zp_dataset_shard_name(env->ds, c->samples[i].shard),
                    (unsigned long long)c->samples[i].record, k, (long)t[k], vocab);
            zpi_op_bad_record(env, c, i, ZP_ERR_FORMAT, m);
            return;
        }
    if (r->tok_len > 0 && t[r->tok_len - 1] == eot)
        r->tok_len--;
    const int32_t bos = zp_tokenizer_bos(env->tok);
    if (bos >= 0 && r->tok_len > 0 && t[0] == bos) {
        r->tok_off++;
        r->tok_len--;
    }
}

void zpi_op_tokenize(const zpi_op_env *env, zpi_worker *w, zpi_chunk *c)
{
    zpi_err err;
    if (!zpi_worker_json(w, c))
        return;
    if (!w->enc && zp_encoder_create(env->tok, &w->enc) != ZP_OK) {
        zpi_chunk_fail(c, ZP_ERR_NOMEM, "cannot create a tokenizer encoder");
        return;
    }
    for (size_t i = 0; i < c->n && c->err.code == ZP_OK; i++) {
        zpi_rec *r = &c->recs[i];
        if (r->flags & (ZPI_REC_SKIP | ZPI_REC_DROP))
            continue;
        if (r->flags & ZPI_REC_TOKENS) {
            pass_tokens(env, c, i);
            continue;
        }
        const char *s;
        size_t n;
        int ids;
        zp_status st = zpi_record_tokenize_text(env, w, c, i, &s, &n, &ids, &err);
        if (st != ZP_OK) {
            zpi_op_bad_record(env, c, i, st, err.msg);
            continue;
        }
        if (ids) { /* a pre-tokenized document in the JSON (docs/formats.md) */
            pass_tokens(env, c, i);
            continue;
        }
        void *t = c->tok;
        size_t need = c->tok_len + zp_encode_max_ids(env->tok, n);
        if (zpi_grow(&t, &c->tok_cap, need < 4096 ? 4096 : need, sizeof *c->tok) != 0) {
            zpi_chunk_fail(c, ZP_ERR_NOMEM, "out of memory for tokens");
            break;
        }
        c->tok = t;
        size_t got = 0;
        st = zp_encode(w->enc, s, n, c->tok + c->tok_len, &got);
        if (st != ZP_OK) {
            zpi_chunk_fail(c, st, "tokenizer out of memory");
            break;
        }
        r->tok_off = c->tok_len;
        r->tok_len = got;
        c->tok_len += got;
    }
}
