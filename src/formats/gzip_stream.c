/*
 * gzip_stream.c - the gzip decoder of gzip_stream.h on ISA-L's igzip
 * (isal_inflate with its gzip wrapper: header, deflate data, CRC-32 and
 * ISIZE checked by the library), restarted at each member's end.
 *
 * Ownership: the decoder owns its state; input is borrowed.
 * Thread safety: one thread at a time per decoder.
 */
#include "formats/gzip_stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <isa-l/igzip_lib.h>

struct zpi_gz {
    struct inflate_state st;
    const unsigned char *chunk; /* the current input, for offsets */
    uint64_t chunk_at;          /* file offset of chunk[0] */
    size_t chunk_len;
    uint64_t members;  /* members begun */
    uint64_t member_at; /* file offset where the current (last) member began */
    int in_member;     /* a member begun and not finished */
    uint64_t out_total; /* bytes decoded since the file's start */
    uint64_t member_out; /* of those, in the current member */
    char ctx[160];      /* the position for messages: decoded byte, caller's where */
};

static void begin_state(zpi_gz *g)
{
    isal_inflate_reset(&g->st);
    g->st.crc_flag = ISAL_GZIP;
}

zp_status zpi_gz_create(zpi_gz **out)
{
    *out = NULL;
    zpi_gz *g = malloc(sizeof *g);
    if (!g)
        return ZP_ERR_NOMEM;
    isal_inflate_init(&g->st);
    g->st.crc_flag = ISAL_GZIP;
    g->chunk = NULL;
    g->chunk_at = 0;
    g->chunk_len = 0;
    g->members = 0;
    g->member_at = 0;
    g->in_member = 0;
    g->out_total = 0;
    g->member_out = 0;
    *out = g;
    return ZP_OK;
}

void zpi_gz_destroy(zpi_gz *g) { free(g); }

void zpi_gz_reset(zpi_gz *g)
{
    begin_state(g);
    g->st.next_in = NULL;
    g->st.avail_in = 0;
    g->chunk = NULL;
    g->chunk_at = 0;
    g->chunk_len = 0;
    g->members = 0;
    g->member_at = 0;
    g->in_member = 0;
    g->out_total = 0;
    g->member_out = 0;
}

void zpi_gz_input(zpi_gz *g, const void *in, size_t n)
{
    g->chunk_at += g->chunk_len;
    g->chunk = in;
    g->chunk_len = n;
    g->st.next_in = (uint8_t *)(uintptr_t)in;
    g->st.avail_in = (uint32_t)n;
}

size_t zpi_gz_avail_in(const zpi_gz *g) { return g->st.avail_in; }

uint64_t zpi_gz_consumed(const zpi_gz *g) { return g->chunk_at + g->chunk_len - g->st.avail_in; }

uint64_t zpi_gz_members(const zpi_gz *g) { return g->members; }

/* "decoded byte N, WHERE" (where may be NULL) into g->ctx. */
static const char *context(zpi_gz *g, const char *where)
{
    snprintf(g->ctx, sizeof g->ctx, "decoded byte %llu%s%s", (unsigned long long)g->out_total,
             where ? ", " : "", where ? where : "");
    return g->ctx;
}

/* The message of an isal_inflate error ret, at compressed offset at. */
static zp_status gz_error(zpi_gz *g, int ret, uint64_t at, const char *name, const char *where,
                          zpi_err *err)
{
    where = context(g, where);
    if (ret == ISAL_INVALID_WRAPPER || ret == ISAL_UNSUPPORTED_METHOD) {
        if (g->members == 1 && ret == ISAL_INVALID_WRAPPER &&
            !(g->chunk_len >= 2 && g->chunk_at == 0 && g->chunk[0] == 0x1f && g->chunk[1] == 0x8b))
            return zpi_err_set(err, ZP_ERR_FORMAT,
                               "shard '%s': not a gzip file (no gzip header at byte 0)", name);
        if (g->members > 1 && ret == ISAL_INVALID_WRAPPER)
            return zpi_err_set(err, ZP_ERR_FORMAT,
                               "shard '%s': garbage after gzip member %llu: the bytes at "
                               "compressed byte %llu are not a gzip header (%s)",
                               name, (unsigned long long)(g->members - 1),
                               (unsigned long long)g->member_at, where);
        return zpi_err_set(err, ZP_ERR_FORMAT,
                           "shard '%s': %s gzip header of member %llu at compressed byte %llu "
                           "(%s)", name,
                           ret == ISAL_UNSUPPORTED_METHOD ? "unsupported compression method in the"
                                                          : "invalid",
                           (unsigned long long)g->members, (unsigned long long)g->member_at,
                           where);
    }
    /* ISA-L checks a header's CRC-16 (FHCRC) too: that error comes before
     * the member's first block */
    if (ret == ISAL_INCORRECT_CHECKSUM && g->st.block_state == ISAL_BLOCK_NEW_HDR &&
        g->member_out == 0)
        return zpi_err_set(err, ZP_ERR_FORMAT,
                           "shard '%s': bad header CRC in the gzip header of member %llu at "
                           "compressed byte %llu (%s)", name, (unsigned long long)g->members,
                           (unsigned long long)g->member_at, where);
    if (ret == ISAL_INCORRECT_CHECKSUM)
        return zpi_err_set(err, ZP_ERR_FORMAT,
                           "shard '%s': bad gzip trailer of member %llu (CRC-32 or ISIZE differs "
                           "from the data) near compressed byte %llu (%s)", name,
                           (unsigned long long)g->members, (unsigned long long)at, where);
    const char *what = ret == ISAL_INVALID_BLOCK    ? "invalid block"
                       : ret == ISAL_INVALID_SYMBOL ? "invalid symbol"
                       : ret == ISAL_INVALID_LOOKBACK ? "invalid distance"
                       : ret == ISAL_NEED_DICT        ? "preset dictionary required"
                                                      : "decoder error";
    return zpi_err_set(err, ZP_ERR_FORMAT,
                       "shard '%s': corrupt deflate data in gzip member %llu near compressed "
                       "byte %llu (%s): %s (%d)", name, (unsigned long long)g->members,
                       (unsigned long long)at, where, what, ret);
}

/* The first 4 bytes of a member's header, as they arrive (a header may
 * span two inputs): the magic number 1f 8b, method 8 (deflate), no reserved
 * flag bit (RFC 1952 asks a reader to refuse them; ISA-L does not look).
 * Checked before ISA-L, which waits for a whole header: a short tail of
 * garbage after a member would read as a truncated member. */
static zp_status check_header(zpi_gz *g, const char *name, const char *where, zpi_err *err)
{
    const uint64_t pos = zpi_gz_consumed(g) - g->member_at;
    const unsigned char *p = g->st.next_in;
    for (uint64_t k = 0; pos + k < 4 && k < g->st.avail_in; k++) {
        const unsigned char c = p[k];
        switch (pos + k) {
        case 0:
            if (c != 0x1f)
                return gz_error(g, ISAL_INVALID_WRAPPER, g->member_at, name, where, err);
            break;
        case 1:
            if (c != 0x8b)
                return gz_error(g, ISAL_INVALID_WRAPPER, g->member_at, name, where, err);
            break;
        case 2:
            if (c != 8)
                return gz_error(g, ISAL_UNSUPPORTED_METHOD, g->member_at, name, where, err);
            break;
        default:
            if (c & 0xe0)
                return zpi_err_set(err, ZP_ERR_FORMAT,
                                   "shard '%s': reserved flag bits set (0x%02x) in the gzip "
                                   "header of member %llu at compressed byte %llu (%s)", name, c,
                                   (unsigned long long)g->members,
                                   (unsigned long long)g->member_at, context(g, where));
        }
    }
    return ZP_OK;
}

zp_status zpi_gz_decode(zpi_gz *g, char *out, size_t cap, size_t *got, const char *name,
                        const char *where, zpi_err *err)
{
    *got = 0;
    size_t done = 0;
    while (done < cap) {
        if (!g->in_member) {
            if (g->st.avail_in == 0)
                break;
            if (g->members > 0)
                begin_state(g);
            g->members++;
            g->member_at = zpi_gz_consumed(g);
            g->member_out = 0;
            g->in_member = 1;
        }
        zp_status hs = check_header(g, name, where, err);
        if (hs != ZP_OK)
            return hs;
        size_t want = cap - done;
        if (want > UINT32_MAX)
            want = UINT32_MAX;
        const uint32_t in0 = g->st.avail_in;
        g->st.next_out = (uint8_t *)out + done;
        g->st.avail_out = (uint32_t)want;
        int ret = isal_inflate(&g->st);
        const size_t produced = want - g->st.avail_out;
        done += produced;
        g->out_total += produced;
        g->member_out += produced;
        if (ret < 0 || ret == ISAL_NEED_DICT)
            return gz_error(g, ret, zpi_gz_consumed(g), name, where, err);
        if (g->st.block_state == ISAL_BLOCK_FINISH) {
            /* back to the caller at each member's end, so that the
             * position it gives for the next member's messages is current */
            g->in_member = 0;
            break;
        }
        if (produced == 0 && g->st.avail_in == in0) {
            if (in0 == 0)
                break; /* needs input */
            /* input and room left, and no progress: never seen, but a
             * caller looping on it would never end */
            return zpi_err_set(err, ZP_ERR_FORMAT,
                               "shard '%s': the gzip decoder stopped at compressed byte %llu "
                               "in member %llu (%s)", name,
                               (unsigned long long)zpi_gz_consumed(g),
                               (unsigned long long)g->members, context(g, where));
        }
    }
    *got = done;
    return ZP_OK;
}

zp_status zpi_gz_end(zpi_gz *g, const char *name, const char *where, zpi_err *err)
{
    if (!g->in_member)
        return ZP_OK;
    where = context(g, where);
    return zpi_err_set(err, ZP_ERR_FORMAT,
                       "shard '%s': truncated gzip file: it ends at compressed byte %llu inside "
                       "member %llu (begun at compressed byte %llu) (%s)", name,
                       (unsigned long long)zpi_gz_consumed(g), (unsigned long long)g->members,
                       (unsigned long long)g->member_at, where);
}
