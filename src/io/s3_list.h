/*
 * s3_list.h - one page of an S3 ListObjectsV2 answer, parsed (private).
 *
 * The answer is XML (a ListBucketResult, or an Error document for a
 * failed request); it is read with expat. The page gives its objects
 * (key, size), whether more pages follow (IsTruncated) and the token that
 * asks for the next one (NextContinuationToken). With encoding-type=url
 * (the listing asks for it, so that any key survives XML 1.0) the server
 * says <EncodingType>url</EncodingType> and percent-encodes the keys ('+'
 * is a space): they are decoded here; a server that ignores the request
 * sends the keys as they are, which are then taken literally.
 *
 * Ownership: a page owns its strings; free with zpi_s3_page_free. Thread
 * safety: no shared state.
 */
#ifndef ZP_S3_LIST_H
#define ZP_S3_LIST_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct zpi_s3_page {
    size_t n;            /* objects on this page */
    char **keys;         /* decoded keys, n of them */
    uint64_t *sizes;     /* their sizes in bytes */
    int truncated;       /* IsTruncated: more pages follow */
    char *next_token;    /* NextContinuationToken (NULL when none) */
} zpi_s3_page;

/* Parse one ListBucketResult of len bytes into *page (zeroed first). what
 * names the listing in messages. A document that is not XML, an Error
 * document, a Size that is not a number or a key that does not decode is
 * ZP_ERR_FORMAT (an Error document's Code and Message quoted). */
zp_status zpi_s3_page_parse(const char *xml, size_t len, const char *what, zpi_s3_page *page,
                            zpi_err *err);
void zpi_s3_page_free(zpi_s3_page *page);

/* The Code and Message of an S3 Error document ("NoSuchBucket: The
 * specified bucket does not exist") into out; "" when xml is not one. */
void zpi_s3_error_text(const char *xml, size_t len, char *out, size_t cap);

#endif
