/*
 * parquet_thrift.cpp - the Parquet footer and page headers (Thrift compact
 * protocol) read with Thrift's C++ library into the C structs of
 * parquet_meta.h; the field ids are those of the Parquet format
 * specification. Every exception becomes ZP_ERR_FORMAT; nothing here prints
 * or throws out.
 */
#include "formats/parquet_meta.h"

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>

#include <simdjson.h>
#include <thrift/TConfiguration.h>
#include <thrift/protocol/TCompactProtocol.h>
#include <thrift/transport/TBufferTransports.h>

using apache::thrift::TConfiguration;
using apache::thrift::protocol::T_BOOL;
using apache::thrift::protocol::T_BYTE;
using apache::thrift::protocol::T_I32;
using apache::thrift::protocol::T_I64;
using apache::thrift::protocol::T_LIST;
using apache::thrift::protocol::T_STOP;
using apache::thrift::protocol::T_STRING;
using apache::thrift::protocol::T_STRUCT;
using apache::thrift::protocol::TType;
using apache::thrift::transport::TMemoryBuffer;

namespace {

typedef apache::thrift::protocol::TCompactProtocolT<TMemoryBuffer> Prot;

const int32_t kMaxString = 1 << 20; /* bytes of one string */
const int32_t kMaxList = 1 << 24;   /* elements of one list */

struct Fail {
    zp_status code;
    const char *what;
};

/* The fields of one struct: calls f(id, type) for each; f returns true when
 * it read the field, false to skip it. */
template <class F> void each_field(Prot &p, F f) {
    std::string name;
    TType t;
    int16_t id;
    p.readStructBegin(name);
    for (;;) {
        p.readFieldBegin(name, t, id);
        if (t == T_STOP)
            break;
        if (!f(id, t))
            p.skip(t);
        p.readFieldEnd();
    }
    p.readStructEnd();
}

int32_t rd_i32(Prot &p) {
    int32_t v;
    p.readI32(v);
    return v;
}
int64_t rd_i64(Prot &p) {
    int64_t v;
    p.readI64(v);
    return v;
}

/* A list of structs: n elements, each read by f(i); the element type must be
 * a struct. Returns the count. */
template <class F> uint32_t each_struct(Prot &p, F f) {
    TType et;
    uint32_t n;
    p.readListBegin(et, n);
    if (n > 0 && et != T_STRUCT)
        throw Fail{ZP_ERR_FORMAT, "list of non-structs where structs are expected"};
    for (uint32_t i = 0; i < n; i++)
        f(i, n);
    p.readListEnd();
    return n;
}

void *xcalloc(size_t n, size_t sz) {
    void *q = calloc(n ? n : 1, sz);
    if (!q)
        throw Fail{ZP_ERR_NOMEM, "out of memory"};
    return q;
}

void read_logical(Prot &p, zpi_pq_schema_el *e) {
    each_field(p, [&](int16_t id, TType t) {
        if (t != T_STRUCT)
            return false;
        e->logical = id;
        if (id == ZPI_PQL_DECIMAL) {
            each_field(p, [&](int16_t id2, TType t2) {
                if (id2 == 1 && t2 == T_I32) {
                    e->lt_scale = rd_i32(p);
                    return true;
                }
                return false;
            });
            return true;
        }
        if (id == ZPI_PQL_INTEGER) {
            each_field(p, [&](int16_t id2, TType t2) {
                if (id2 == 1 && t2 == T_BYTE) {
                    int8_t b;
                    p.readByte(b);
                    e->lt_bit_width = b;
                    return true;
                }
                if (id2 == 2 && t2 == T_BOOL) {
                    bool b;
                    p.readBool(b);
                    e->lt_signed = b;
                    return true;
                }
                return false;
            });
            return true;
        }
        return false; /* the other members' contents are not used: skipped */
    });
}

void read_schema_el(Prot &p, zpi_pq_schema_el *e) {
    e->type = -1;
    e->repetition = -1;
    e->converted = -1;
    e->lt_signed = 1;
    each_field(p, [&](int16_t id, TType t) {
        switch (id) {
        case 1: if (t != T_I32) return false; e->type = rd_i32(p); return true;
        case 2: if (t != T_I32) return false; e->type_length = rd_i32(p); return true;
        case 3: if (t != T_I32) return false; e->repetition = rd_i32(p); return true;
        case 4: {
            if (t != T_STRING)
                return false;
            std::string s;
            p.readString(s);
            free(e->name);
            e->name = static_cast<char *>(xcalloc(s.size() + 1, 1));
            memcpy(e->name, s.data(), s.size());
            return true;
        }
        case 5: if (t != T_I32) return false; e->num_children = rd_i32(p); return true;
        case 6: if (t != T_I32) return false; e->converted = rd_i32(p); return true;
        case 7: if (t != T_I32) return false; e->scale = rd_i32(p); return true;
        case 8: if (t != T_I32) return false; e->precision = rd_i32(p); return true;
        case 10: if (t != T_STRUCT) return false; read_logical(p, e); return true;
        default: return false;
        }
    });
    if (!e->name) {
        e->name = static_cast<char *>(xcalloc(1, 1));
    }
}

void read_col_meta(Prot &p, zpi_pq_chunk_meta *c) {
    c->has_meta = 1;
    each_field(p, [&](int16_t id, TType t) {
        switch (id) {
        case 1: if (t != T_I32) return false; c->type = rd_i32(p); return true;
        case 4: if (t != T_I32) return false; c->codec = rd_i32(p); return true;
        case 5: if (t != T_I64) return false; c->num_values = rd_i64(p); return true;
        case 6: if (t != T_I64) return false; c->total_uncompressed = rd_i64(p); return true;
        case 7: if (t != T_I64) return false; c->total_compressed = rd_i64(p); return true;
        case 9: if (t != T_I64) return false; c->data_page_offset = rd_i64(p); return true;
        case 11: if (t != T_I64) return false; c->dict_page_offset = rd_i64(p); return true;
        default: return false;
        }
    });
}

void read_chunk(Prot &p, zpi_pq_chunk_meta *c) {
    c->dict_page_offset = -1;
    each_field(p, [&](int16_t id, TType t) {
        if (id == 1 && t == T_STRING) {
            std::string s;
            p.readString(s);
            c->has_file_path = 1;
            return true;
        }
        if (id == 3 && t == T_STRUCT) {
            read_col_meta(p, c);
            return true;
        }
        return false;
    });
}

void read_row_group(Prot &p, zpi_pq_row_group *g) {
    each_field(p, [&](int16_t id, TType t) {
        if (id == 1 && t == T_LIST) {
            if (g->cols)
                throw Fail{ZP_ERR_FORMAT, "row group lists its columns twice"};
            TType et;
            uint32_t n;
            p.readListBegin(et, n);
            if (n > 0 && et != T_STRUCT)
                throw Fail{ZP_ERR_FORMAT, "row group columns are not structs"};
            g->cols = static_cast<zpi_pq_chunk_meta *>(xcalloc(n, sizeof *g->cols));
            g->n_cols = n;
            for (uint32_t i = 0; i < n; i++)
                read_chunk(p, &g->cols[i]);
            p.readListEnd();
            return true;
        }
        if (id == 3 && t == T_I64) {
            g->num_rows = rd_i64(p);
            return true;
        }
        return false;
    });
}

void read_meta(Prot &p, zpi_pq_meta *m) {
    each_field(p, [&](int16_t id, TType t) {
        if (id == 2 && t == T_LIST) {
            if (m->schema)
                throw Fail{ZP_ERR_FORMAT, "the schema is given twice"};
            TType et;
            uint32_t n;
            p.readListBegin(et, n);
            if (n > 0 && et != T_STRUCT)
                throw Fail{ZP_ERR_FORMAT, "schema elements are not structs"};
            m->schema = static_cast<zpi_pq_schema_el *>(xcalloc(n, sizeof *m->schema));
            m->n_schema = n;
            for (uint32_t i = 0; i < n; i++)
                read_schema_el(p, &m->schema[i]);
            p.readListEnd();
            return true;
        }
        if (id == 3 && t == T_I64) {
            m->num_rows = rd_i64(p);
            return true;
        }
        if (id == 4 && t == T_LIST) {
            if (m->rgs)
                throw Fail{ZP_ERR_FORMAT, "the row groups are given twice"};
            TType et;
            uint32_t n;
            p.readListBegin(et, n);
            if (n > 0 && et != T_STRUCT)
                throw Fail{ZP_ERR_FORMAT, "row groups are not structs"};
            m->rgs = static_cast<zpi_pq_row_group *>(xcalloc(n, sizeof *m->rgs));
            m->n_rg = n;
            for (uint32_t i = 0; i < n; i++)
                read_row_group(p, &m->rgs[i]);
            p.readListEnd();
            return true;
        }
        if (id == 8 && t == T_STRUCT) {
            m->encrypted = 1;
            return false; /* skipped */
        }
        return false;
    });
}

void read_page_header(Prot &p, zpi_pq_page_header *h) {
    h->type = -1;
    h->is_compressed = 1;
    h->def_encoding = h->rep_encoding = 3; /* RLE */
    bool have_size = false, have_csize = false;
    each_field(p, [&](int16_t id, TType t) {
        switch (id) {
        case 1: if (t != T_I32) return false; h->type = rd_i32(p); return true;
        case 2: if (t != T_I32) return false; h->uncompressed_size = rd_i32(p); have_size = true; return true;
        case 3: if (t != T_I32) return false; h->compressed_size = rd_i32(p); have_csize = true; return true;
        case 5: /* DataPageHeader */
            if (t != T_STRUCT) return false;
            h->has_sub |= (h->type == ZPI_PQP_DATA);
            each_field(p, [&](int16_t i2, TType t2) {
                if (t2 != T_I32) return false;
                switch (i2) {
                case 1: h->num_values = rd_i32(p); return true;
                case 2: h->encoding = rd_i32(p); return true;
                case 3: h->def_encoding = rd_i32(p); return true;
                case 4: h->rep_encoding = rd_i32(p); return true;
                default: return false;
                }
            });
            return true;
        case 7: /* DictionaryPageHeader */
            if (t != T_STRUCT) return false;
            h->has_sub |= (h->type == ZPI_PQP_DICT);
            each_field(p, [&](int16_t i2, TType t2) {
                if (t2 != T_I32) return false;
                switch (i2) {
                case 1: h->num_values = rd_i32(p); return true;
                case 2: h->encoding = rd_i32(p); return true;
                default: return false;
                }
            });
            return true;
        case 8: /* DataPageHeaderV2 */
            if (t != T_STRUCT) return false;
            h->has_sub |= (h->type == ZPI_PQP_DATA_V2);
            each_field(p, [&](int16_t i2, TType t2) {
                if (i2 == 7 && t2 == T_BOOL) {
                    bool b;
                    p.readBool(b);
                    h->is_compressed = b;
                    return true;
                }
                if (t2 != T_I32) return false;
                switch (i2) {
                case 1: h->num_values = rd_i32(p); return true;
                case 2: h->num_nulls = rd_i32(p); return true;
                case 3: h->num_rows = rd_i32(p); return true;
                case 4: h->encoding = rd_i32(p); return true;
                case 5: h->def_len = rd_i32(p); return true;
                case 6: h->rep_len = rd_i32(p); return true;
                default: return false;
                }
            });
            return true;
        default: return false;
        }
    });
    if (!have_size || !have_csize)
        throw Fail{ZP_ERR_FORMAT, "page header without its sizes"};
}

/* Runs f on a protocol reading buf[0..len); *used: bytes read. */
template <class F>
zp_status with_prot(const void *buf, size_t len, const char *what, size_t *used, zpi_err *err, F f) {
    if (len > UINT32_MAX)
        return zpi_err_set(err, ZP_ERR_FORMAT, "%s of %zu bytes: too large", what, len);
    try {
        auto conf = std::make_shared<TConfiguration>(
            static_cast<int>(len < 1024 ? 1024 : (len > INT32_MAX ? INT32_MAX : len)),
            static_cast<int>(len < 1024 ? 1024 : (len > INT32_MAX ? INT32_MAX : len)), 64);
        auto mem = std::make_shared<TMemoryBuffer>(
            const_cast<uint8_t *>(static_cast<const uint8_t *>(buf)), static_cast<uint32_t>(len),
            TMemoryBuffer::OBSERVE, conf);
        Prot p(mem, kMaxString, kMaxList);
        f(p);
        if (used)
            *used = len - mem->available_read();
        return ZP_OK;
    } catch (const Fail &e) {
        return zpi_err_set(err, e.code, "%s: %s", what, e.what);
    } catch (const std::bad_alloc &) {
        return zpi_err_set(err, ZP_ERR_NOMEM, "%s: out of memory", what);
    } catch (const std::exception &e) {
        return zpi_err_set(err, ZP_ERR_FORMAT, "%s: undecodable Thrift (%s)", what, e.what());
    } catch (...) {
        return zpi_err_set(err, ZP_ERR_FORMAT, "%s: undecodable Thrift", what);
    }
}

} // namespace

extern "C" void zpi_pq_meta_free(zpi_pq_meta *m) {
    if (!m)
        return;
    for (size_t i = 0; i < m->n_schema; i++)
        free(m->schema[i].name);
    free(m->schema);
    for (size_t i = 0; i < m->n_rg; i++)
        free(m->rgs[i].cols);
    free(m->rgs);
    memset(m, 0, sizeof *m);
}

extern "C" zp_status zpi_pq_meta_parse(const void *buf, size_t len, zpi_pq_meta *m, zpi_err *err) {
    memset(m, 0, sizeof *m);
    zp_status s = with_prot(buf, len, "footer", nullptr, err, [&](Prot &p) { read_meta(p, m); });
    if (s != ZP_OK)
        zpi_pq_meta_free(m);
    return s;
}

extern "C" zp_status zpi_pq_page_header_parse(const void *buf, size_t len, zpi_pq_page_header *h,
                                              size_t *used, zpi_err *err) {
    memset(h, 0, sizeof *h);
    return with_prot(buf, len, "page header", used, err, [&](Prot &p) { read_page_header(p, h); });
}

extern "C" size_t zpi_pq_fmt_double(double v, char *out) {
    auto r = std::to_chars(out, out + 32, v);
    return static_cast<size_t>(r.ptr - out);
}

extern "C" size_t zpi_pq_fmt_float(float v, char *out) {
    auto r = std::to_chars(out, out + 32, v);
    return static_cast<size_t>(r.ptr - out);
}

extern "C" int zpi_pq_utf8_valid(const char *s, size_t n) {
    return simdjson::validate_utf8(s, n) ? 1 : 0;
}
