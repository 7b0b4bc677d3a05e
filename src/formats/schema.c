/* schema.c - record schemas of shards read on demand (reader.h). */
#include <stdio.h>
#include <string.h>

#include "formats/reader.h"
#include "base/util.h"

int zpi_schema_equal(const zpi_schema *a, const zpi_schema *b)
{
    if (a == b)
        return 1;
    if (!a || !b || a->n != b->n)
        return 0;
    for (int i = 0; i < a->n; i++) {
        const zpi_field *x = &a->f[i], *y = &b->f[i];
        if (strcmp(x->name, y->name) != 0 || x->kind != y->kind || x->dtype != y->dtype ||
            x->ndim != y->ndim || x->item_bytes != y->item_bytes)
            return 0;
        for (int d = 0; d < x->ndim; d++)
            if (x->dims[d] != y->dims[d])
                return 0;
    }
    return 1;
}

void zpi_schema_describe(const zpi_schema *s, char *buf, size_t cap)
{
    if (!cap)
        return;
    buf[0] = '\0';
    size_t len = 0;
    for (int i = 0; s && i < s->n && len < cap; i++) {
        const zpi_field *f = &s->f[i];
        char shape[160] = "";
        if (f->kind == ZPI_FIELD_TEXT)
            snprintf(shape, sizeof shape, "str");
        else if (f->kind == ZPI_FIELD_TOKENS)
            snprintf(shape, sizeof shape, "%s[]", zp_dtype_name(f->dtype));
        else {
            size_t sl = (size_t)snprintf(shape, sizeof shape, "%s", zp_dtype_name(f->dtype));
            for (int d = 0; d < f->ndim && sl < sizeof shape; d++)
                sl += (size_t)snprintf(shape + sl, sizeof shape - sl, "%s%llu", d ? "," : "[",
                                       (unsigned long long)f->dims[d]);
            if (f->ndim && sl < sizeof shape)
                snprintf(shape + sl, sizeof shape - sl, "]");
        }
        int w = snprintf(buf + len, cap - len, "%s%s:%s", i ? ", " : "", f->name, shape);
        if (w < 0)
            break;
        len += (size_t)w;
    }
}
