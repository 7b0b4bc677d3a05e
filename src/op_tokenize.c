/* op_tokenize.c - the tokenize operator: the text of each live record ->
 * token ids appended to the chunk's token arena. */
#include "operators.h"

void zpi_op_tokenize(const zpi_op_env *env, zpi_worker *w, zpi_chunk *c)
{
    char err[ZPI_ERRMAX];
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
        const char *s;
        size_t n;
        zp_status st = zpi_record_tokenize_text(env, w, c, i, &s, &n, err, sizeof err);
        if (st != ZP_OK) {
            zpi_op_bad_record(env, c, i, st, err);
            continue;
        }
        void *t = c->tok;
        size_t need = c->tok_len + n;
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
