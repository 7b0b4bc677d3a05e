/* array.c - the public element-type helpers (zephon/array.h). */
#include <stddef.h>

#include "zephon/array.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    [ZP_DTYPE_NONE] = {"none", 0},   [ZP_DTYPE_U8] = {"uint8", 1},
    [ZP_DTYPE_I8] = {"int8", 1},     [ZP_DTYPE_U16] = {"uint16", 2},
    [ZP_DTYPE_I16] = {"int16", 2},   [ZP_DTYPE_U32] = {"uint32", 4},
    [ZP_DTYPE_I32] = {"int32", 4},   [ZP_DTYPE_U64] = {"uint64", 8},
    [ZP_DTYPE_I64] = {"int64", 8},   [ZP_DTYPE_F32] = {"float32", 4},
    [ZP_DTYPE_F64] = {"float64", 8},
};

const char *zp_dtype_name(zp_dtype t)
{
    return (unsigned)t < sizeof dtypes / sizeof dtypes[0] ? dtypes[t].name : "none";
}

size_t zp_dtype_size(zp_dtype t)
{
    return (unsigned)t < sizeof dtypes / sizeof dtypes[0] ? dtypes[t].size : 0;
}
