/*
 * spm_proto.c - a protobuf wire-format reader for SentencePiece's
 * ModelProto: pieces (piece, score, type), trainer_spec and
 * normalizer_spec fields into a raw_model (spm_internal.h); spm_model.c
 * checks and builds the model from it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/tokenizer/spm_internal.h"

/* ------------------------------------------------------------ protobuf wire format */

typedef struct pb {
    const uint8_t *p, *end;
} pb;

static int pb_varint(pb *b, uint64_t *v)
{
    uint64_t r = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (b->p >= b->end)
            return -1;
        uint8_t c = *b->p++;
        r |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80)) {
            *v = r;
            return 0;
        }
    }
    return -1;
}

/* One field: its number and wire type; for wire type 2 (length-delimited)
 * *sub gets the bytes, for 0 *v the varint, for 5 *v the 32 bits, for 1 the
 * 64 bits. Returns 1, 0 at the end, -1 when malformed. */
static int pb_next(pb *b, uint32_t *field, uint32_t *wt, uint64_t *v, pb *sub)
{
    if (b->p >= b->end)
        return 0;
    uint64_t key;
    if (pb_varint(b, &key) != 0 || (key >> 3) == 0 || (key >> 3) > 0x1FFFFFFF)
        return -1;
    *field = (uint32_t)(key >> 3);
    *wt = (uint32_t)(key & 7);
    switch (*wt) {
    case 0:
        return pb_varint(b, v) == 0 ? 1 : -1;
    case 1:
        if (b->end - b->p < 8)
            return -1;
        memcpy(v, b->p, 8);
        b->p += 8;
        return 1;
    case 2: {
        uint64_t n;
        if (pb_varint(b, &n) != 0 || n > (uint64_t)(b->end - b->p))
            return -1;
        sub->p = b->p;
        sub->end = b->p + n;
        b->p += n;
        return 1;
    }
    case 5: {
        uint32_t x;
        if (b->end - b->p < 4)
            return -1;
        memcpy(&x, b->p, 4);
        b->p += 4;
        *v = x;
        return 1;
    }
    default: /* groups (3, 4) and reserved types */
        return -1;
    }
}

#define WIRE(want)                                                                                 \
    do {                                                                                           \
        if (wt != (want))                                                                          \
            ERR(ZP_ERR_FORMAT, "%s: %s field %u has wire type %u (expected %u): not a "            \
                               "SentencePiece model", name, msg, f, wt, (want));                   \
    } while (0)

static zp_status parse_piece(raw_model *r, pb b, const char *name, zpi_err *err)
{
    const char *msg = "SentencePiece";
    raw_piece pc = {NULL, 0, 0.0f, PT_NORMAL};
    uint32_t f, wt;
    uint64_t v = 0;
    pb sub;
    int k;
    while ((k = pb_next(&b, &f, &wt, &v, &sub)) == 1) {
        if (f == 1) {
            WIRE(2);
            if ((size_t)(sub.end - sub.p) > UINT16_MAX)
                ERR(ZP_ERR_FORMAT, "%s: piece %zu is %zu bytes long (at most %u)", name, r->n,
                    (size_t)(sub.end - sub.p), UINT16_MAX);
            pc.p = sub.p;
            pc.len = (uint32_t)(sub.end - sub.p);
        } else if (f == 2) {
            WIRE(5);
            uint32_t x = (uint32_t)v;
            memcpy(&pc.score, &x, 4);
        } else if (f == 3) {
            WIRE(0);
            pc.type = (int)v;
            if (v < PT_NORMAL || v > PT_BYTE)
                ERR(ZP_ERR_FORMAT, "%s: piece %zu has type %llu (not one of SentencePiece's "
                    "NORMAL..BYTE)", name, r->n, (unsigned long long)v);
        }
    }
    if (k < 0)
        ERR(ZP_ERR_FORMAT, "%s: piece %zu: malformed protobuf", name, r->n);
    if (!pc.p || pc.len == 0)
        ERR(ZP_ERR_FORMAT, "%s: piece %zu is empty", name, r->n);
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 1024;
        raw_piece *np = realloc(r->pc, cap * sizeof *np);
        if (!np)
            ERR(ZP_ERR_NOMEM, "%s: out of memory", name);
        r->pc = np;
        r->cap = cap;
    }
    r->pc[r->n++] = pc;
    return ZP_OK;
}

static zp_status parse_trainer(raw_model *r, pb b, const char *name, zpi_err *err)
{
    const char *msg = "trainer_spec";
    uint32_t f, wt;
    uint64_t v = 0;
    pb sub;
    int k;
    while ((k = pb_next(&b, &f, &wt, &v, &sub)) == 1) {
        switch (f) {
        case 3: WIRE(0); r->model_type = (int)v; break;
        case 35: WIRE(0); r->byte_fallback = v != 0; break;
        case 24: WIRE(0); r->ws_suffix = v != 0; break;
        case 25: WIRE(0); r->split_digits = v != 0; break;
        case 26: WIRE(0); r->allow_ws_only = v != 0; break;
        case 40: WIRE(0); r->unk_id = (int32_t)v; break;
        case 41: WIRE(0); r->bos_id = (int32_t)v; break;
        case 42: WIRE(0); r->eos_id = (int32_t)v; break;
        case 43: WIRE(0); r->pad_id = (int32_t)v; break;
        default: break; /* training-only settings */
        }
    }
    if (k < 0)
        ERR(ZP_ERR_FORMAT, "%s: trainer_spec: malformed protobuf", name);
    return ZP_OK;
}

static zp_status parse_normalizer(raw_model *r, pb b, const char *name, zpi_err *err)
{
    const char *msg = "normalizer_spec";
    uint32_t f, wt;
    uint64_t v = 0;
    pb sub;
    int k;
    r->has_normalizer = 1;
    while ((k = pb_next(&b, &f, &wt, &v, &sub)) == 1) {
        switch (f) {
        case 1:
            WIRE(2);
            r->nm_name = sub.p;
            r->nm_name_len = (size_t)(sub.end - sub.p);
            break;
        case 2:
            WIRE(2);
            r->charsmap = sub.p;
            r->charsmap_len = (size_t)(sub.end - sub.p);
            break;
        case 3: WIRE(0); r->add_dummy_prefix = v != 0; break;
        case 4: WIRE(0); r->remove_extra_ws = v != 0; break;
        case 5: WIRE(0); r->escape_ws = v != 0; break;
        default: break; /* normalization_rule_tsv: training only */
        }
    }
    if (k < 0)
        ERR(ZP_ERR_FORMAT, "%s: normalizer_spec: malformed protobuf", name);
    return ZP_OK;
}

zp_status zpi_spm_parse_model(raw_model *r, const uint8_t *buf, size_t len, const char *name,
                              zpi_err *err)
{
    const char *msg = "ModelProto";
    pb b = {buf, buf + len};
    uint32_t f, wt;
    uint64_t v = 0;
    pb sub;
    int k;
    while ((k = pb_next(&b, &f, &wt, &v, &sub)) == 1) {
        zp_status st = ZP_OK;
        if (f == 1) {
            WIRE(2);
            st = parse_piece(r, sub, name, err);
        } else if (f == 2) {
            WIRE(2);
            st = parse_trainer(r, sub, name, err);
        } else if (f == 3) {
            WIRE(2);
            st = parse_normalizer(r, sub, name, err);
        } /* 4 self_test_data, 5 denormalizer_spec: not used to encode */
        if (st != ZP_OK)
            return st;
    }
    if (k < 0)
        ERR(ZP_ERR_FORMAT, "%s: malformed protobuf (not a SentencePiece model)", name);
    return ZP_OK;
}
