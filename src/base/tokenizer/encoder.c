/*
 * encoder.c - the zp_encoder API: an encoder per thread for any tokenizer,
 * and zp_encode's dispatch on the model kind: byte-level BPE (tok_encode.c),
 * a tokenizer.json pipeline (hf_encode.c), a SentencePiece model
 * (spm_model.c). See docs/tokenizer.md.
 *
 * Ownership and threads: a zp_encoder owns its scratch and caches (and
 * those of its model's encoder); it borrows the (immutable) zp_tokenizer.
 * One encoder is used by one thread at a time.
 */
#include "base/tokenizer/tok_encode_internal.h"

#include <stdlib.h>

#include "base/tokenizer/hf_encode.h"
#include "base/tokenizer/hf_internal.h"
#include "base/tokenizer/spm_model.h"

zp_status zp_encoder_create(const zp_tokenizer *tok, zp_encoder **out)
{
    if (!out)
        return ZP_ERR_INVALID;
    *out = NULL;
    if (!tok)
        return ZP_ERR_INVALID;
    zp_encoder *e = calloc(1, sizeof *e);
    if (!e)
        return ZP_ERR_NOMEM;
    e->tok = tok;
    if (tok->kind == ZPI_TOK_KIND_SPM) {
        e->spm = zpi_spm_enc_create(tok);
        if (!e->spm) {
            free(e);
            return ZP_ERR_NOMEM;
        }
        *out = e;
        return ZP_OK;
    }
    if (tok->hf) {
        e->hf = zpi_hf_enc_create(tok);
        if (!e->hf) {
            zp_encoder_destroy(e);
            return ZP_ERR_NOMEM;
        }
    }
    /* whole-piece lookup first: tiktoken, and tokenizer.json ignore_merges */
    int whole_first = tok->mode == ZPI_TOK_TIKTOKEN || (tok->hf && tok->hf->ignore_merges);
    if (zpi_tok_bpe_init(e, whole_first) != ZP_OK) {
        zp_encoder_destroy(e);
        return ZP_ERR_NOMEM;
    }
    *out = e;
    return ZP_OK;
}

void zp_encoder_destroy(zp_encoder *enc)
{
    if (!enc)
        return;
    zpi_tok_bpe_free(enc);
    zpi_spm_enc_destroy(enc->spm);
    zpi_hf_enc_destroy(enc->hf);
    free(enc);
}

size_t zp_encoder_memory(const zp_encoder *enc)
{
    if (!enc)
        return 0;
    return sizeof *enc + zpi_tok_bpe_memory(enc) + zpi_spm_enc_memory(enc->spm) +
           zpi_hf_enc_memory(enc->hf);
}

zp_status zp_encode(zp_encoder *enc, const char *text, size_t len, int32_t *ids, size_t *n_ids)
{
    if (n_ids)
        *n_ids = 0;
    if (!enc || !n_ids || (len && (!text || !ids)))
        return ZP_ERR_INVALID;
    if (enc->hf)
        return zpi_hf_encode(enc, enc->hf, text, len, ids, n_ids);
    if (enc->spm)
        return zpi_spm_encode(enc->spm, text, len, ids, zpi_spm_max_ids(enc->tok->spm, len),
                              n_ids);
    return zpi_tok_encode_bytes(enc, text, len, ids, n_ids);
}

size_t zp_encode_max_ids(const zp_tokenizer *tok, size_t len)
{
    if (tok && tok->hf)
        return zpi_hf_max_ids(tok->hf, len);
    if (tok && tok->spm)
        return zpi_spm_max_ids(tok->spm, len);
    return len;
}
