/*
 * zephon/array.h - element types and fixed-shape arrays (HDF5 fields, stored
 * tokens). Types only, shared by every layer that reads or batches them.
 */
#ifndef ZEPHON_ARRAY_H
#define ZEPHON_ARRAY_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types of arrays read from HDF5 and of stored tokens. */
typedef enum zp_dtype {
    ZP_DTYPE_NONE = 0,
    ZP_DTYPE_U8, ZP_DTYPE_I8, ZP_DTYPE_U16, ZP_DTYPE_I16,
    ZP_DTYPE_U32, ZP_DTYPE_I32, ZP_DTYPE_U64, ZP_DTYPE_I64,
    ZP_DTYPE_F32, ZP_DTYPE_F64
} zp_dtype;

/* "uint8", "int8", "uint16", ..., "float32", "float64" ("none"). */
ZP_API const char *zp_dtype_name(zp_dtype t);
/* Bytes per element (0 for ZP_DTYPE_NONE or an unknown value). */
ZP_API size_t zp_dtype_size(zp_dtype t);

#define ZP_ARRAY_MAX_DIMS 9

/* A fixed-shape field of the records (HDF5 datasets of shape [N, ...]),
 * batched: shape[0] is the batch's rows, the rest the field's shape;
 * data is contiguous and row-major; row i belongs to the batch's row i. */
typedef struct zp_array {
    const char *name;
    zp_dtype dtype;
    int ndim; /* including the rows dimension */
    uint64_t shape[ZP_ARRAY_MAX_DIMS];
    const void *data;
} zp_array;

#ifdef __cplusplus
}
#endif
#endif
