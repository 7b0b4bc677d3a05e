/*
 * parquet_meta.h - the Parquet footer (FileMetaData) and page headers as C
 * structs (private to the Parquet reader, parquet.h). Both are Thrift
 * compact-protocol structs; parquet_thrift.cpp reads them with Thrift's C++
 * library and fills these structs (field ids from the Parquet format
 * specification). Only the fields the reader uses are kept.
 *
 * Also in parquet_thrift.cpp, because they need C++17: the shortest
 * round-trip text of a double or float (std::to_chars) and the UTF-8 check
 * of a binary value (simdjson).
 */
#ifndef ZP_PARQUET_META_H
#define ZP_PARQUET_META_H

#include <stddef.h>
#include <stdint.h>

#include "zephon/common.h"
#include "base/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Physical types. */
enum { ZPI_PQT_BOOLEAN = 0, ZPI_PQT_INT32 = 1, ZPI_PQT_INT64 = 2, ZPI_PQT_INT96 = 3,
       ZPI_PQT_FLOAT = 4, ZPI_PQT_DOUBLE = 5, ZPI_PQT_BYTE_ARRAY = 6, ZPI_PQT_FIXED = 7 };
/* Repetition. */
enum { ZPI_PQR_REQUIRED = 0, ZPI_PQR_OPTIONAL = 1, ZPI_PQR_REPEATED = 2 };
/* Logical types (the union's field ids; 0: none). */
enum { ZPI_PQL_NONE = 0, ZPI_PQL_STRING = 1, ZPI_PQL_MAP = 2, ZPI_PQL_LIST = 3, ZPI_PQL_ENUM = 4,
       ZPI_PQL_DECIMAL = 5, ZPI_PQL_DATE = 6, ZPI_PQL_TIME = 7, ZPI_PQL_TIMESTAMP = 8,
       ZPI_PQL_INTEGER = 10, ZPI_PQL_UNKNOWN = 11, ZPI_PQL_JSON = 12, ZPI_PQL_BSON = 13,
       ZPI_PQL_UUID = 14, ZPI_PQL_FLOAT16 = 15 };
/* Page types. */
enum { ZPI_PQP_DATA = 0, ZPI_PQP_INDEX = 1, ZPI_PQP_DICT = 2, ZPI_PQP_DATA_V2 = 3 };

typedef struct zpi_pq_schema_el {
    char *name;        /* malloc'd, NUL-terminated ("" when absent) */
    int32_t type;      /* -1: none (a group) */
    int32_t type_length;
    int32_t repetition; /* -1: none (the root) */
    int32_t num_children;
    int32_t converted;  /* -1: none */
    int32_t scale, precision;
    int32_t logical;    /* ZPI_PQL_*; 0: none */
    int32_t lt_bit_width; /* INTEGER */
    int32_t lt_signed;    /* INTEGER: 1 signed */
    int32_t lt_scale;     /* DECIMAL */
} zpi_pq_schema_el;

typedef struct zpi_pq_chunk_meta {
    int has_meta;          /* ColumnMetaData present (absent: encrypted column) */
    int has_file_path;     /* the chunk lives in another file */
    int32_t type;
    int32_t codec;
    int64_t num_values;
    int64_t total_uncompressed;
    int64_t total_compressed;
    int64_t data_page_offset;
    int64_t dict_page_offset; /* -1 when absent */
} zpi_pq_chunk_meta;

typedef struct zpi_pq_row_group {
    int64_t num_rows;
    size_t n_cols;
    zpi_pq_chunk_meta *cols;
} zpi_pq_row_group;

typedef struct zpi_pq_meta {
    int64_t num_rows;
    size_t n_schema;
    zpi_pq_schema_el *schema;
    size_t n_rg;
    zpi_pq_row_group *rgs;
    int encrypted; /* an encryption_algorithm is set (plaintext footer of an encrypted file) */
} zpi_pq_meta;

typedef struct zpi_pq_page_header {
    int32_t type;
    int32_t uncompressed_size;
    int32_t compressed_size;
    int32_t num_values;
    int32_t encoding;
    int32_t def_encoding, rep_encoding; /* v1 */
    int32_t num_nulls, num_rows;        /* v2 */
    int32_t def_len, rep_len;           /* v2: bytes of levels */
    int is_compressed;                  /* v2 (default 1) */
    int has_sub;                        /* the header for the page's type was present */
} zpi_pq_page_header;

/* Parses the footer buf[0..len). On error: ZP_ERR_FORMAT (or ZP_ERR_NOMEM)
 * with the cause in err (no shard name: the caller prefixes it); *m is then
 * left empty. Strings and lists are bounded (a list of more than 1 << 24
 * elements, a string over 1 MiB are errors). */
zp_status zpi_pq_meta_parse(const void *buf, size_t len, zpi_pq_meta *m, zpi_err *err);
void zpi_pq_meta_free(zpi_pq_meta *m);

/* Parses a page header at buf[0..len); *used: its bytes. */
zp_status zpi_pq_page_header_parse(const void *buf, size_t len, zpi_pq_page_header *h,
                                   size_t *used, zpi_err *err);

/* Shortest text that reads back as the same double / float (no NUL
 * written); out has at least 32 bytes. NaN and infinities are the caller's
 * (not handled here). Returns the length. */
size_t zpi_pq_fmt_double(double v, char *out);
size_t zpi_pq_fmt_float(float v, char *out);
/* 1 when s[0..n) is valid UTF-8. */
int zpi_pq_utf8_valid(const char *s, size_t n);

#ifdef __cplusplus
}
#endif
#endif
