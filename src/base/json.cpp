/*
 * json.cpp - the record parser: a C face over simdjson's DOM parser.
 *
 * Ownership: a zpi_json owns one simdjson::dom::parser and the last parsed
 * document; strings handed out by zpi_json_get_string() point into the
 * parser's string buffer and stay valid until the next parse or destroy.
 * Thread safety: none; use one zpi_json per worker thread.
 *
 * No C++ exception leaves this file: simdjson is used through its error-code
 * API, and allocation failures are caught at the boundary.
 */
#include "base/json.h"

#include <simdjson.h>

#include <cstdio>
#include <cstring>
#include <new>
#include <string_view>

static_assert(ZPI_JSON_PADDING >= simdjson::SIMDJSON_PADDING,
              "ZPI_JSON_PADDING must cover simdjson's read-ahead");

struct zpi_json {
    simdjson::dom::parser parser;
    simdjson::dom::element doc;
    bool have_doc = false;
};

/* A short, stable cause for the errors a malformed record can give; the
 * caller prefixes it with shard and line. */
static const char *short_cause(simdjson::error_code e)
{
    switch (e) {
    case simdjson::UTF8_ERROR: return "invalid UTF-8";
    case simdjson::UNCLOSED_STRING: return "unclosed string";
    case simdjson::UNESCAPED_CHARS: return "unescaped control character in string";
    case simdjson::STRING_ERROR: return "invalid string escape";
    case simdjson::NUMBER_ERROR: return "invalid number";
    case simdjson::NUMBER_OUT_OF_RANGE: return "number out of range";
    case simdjson::T_ATOM_ERROR:
    case simdjson::F_ATOM_ERROR:
    case simdjson::N_ATOM_ERROR: return "invalid literal";
    case simdjson::DEPTH_ERROR: return "nesting too deep";
    case simdjson::EMPTY: return "empty record";
    case simdjson::TAPE_ERROR:
    case simdjson::INCOMPLETE_ARRAY_OR_OBJECT: return "invalid JSON structure";
    case simdjson::TRAILING_CONTENT: return "trailing content after the object";
    case simdjson::CAPACITY: return "record too large for the parser";
    case simdjson::MEMALLOC: return "out of memory";
    default: return "invalid JSON";
    }
}

static zp_status set_err(zpi_err *err, zp_status code, const char *what, const char *detail)
{
    if (detail)
        return zpi_err_set(err, code, "%s (simdjson: %s)", what, detail);
    return zpi_err_set(err, code, "%s", what);
}

extern "C" zp_status zpi_json_create(zpi_json **out)
{
    if (!out)
        return ZP_ERR_INVALID;
    *out = nullptr;
    try {
        zpi_json *j = new (std::nothrow) zpi_json();
        if (!j)
            return ZP_ERR_NOMEM;
        *out = j;
        return ZP_OK;
    } catch (...) {
        return ZP_ERR_NOMEM;
    }
}

extern "C" void zpi_json_destroy(zpi_json *j)
{
    delete j;
}

extern "C" zp_status zpi_json_parse(zpi_json *j, const char *buf, size_t len, zpi_err *err)
{
    if (!j || (!buf && len))
        return ZP_ERR_INVALID;
    j->have_doc = false;
    try {
        simdjson::dom::element doc;
        /* realloc_if_needed=false: the caller guarantees ZPI_JSON_PADDING
         * readable bytes after buf[len), so simdjson parses in place. */
        simdjson::error_code e =
            j->parser.parse(reinterpret_cast<const uint8_t *>(buf ? buf : ""), len, false).get(doc);
        if (e)
            return set_err(err, e == simdjson::MEMALLOC ? ZP_ERR_NOMEM : ZP_ERR_FORMAT,
                           short_cause(e), simdjson::error_message(e));
        if (!doc.is_object()) {
            const char *what;
            switch (doc.type()) {
            case simdjson::dom::element_type::ARRAY: what = "not an object (an array)"; break;
            case simdjson::dom::element_type::STRING: what = "not an object (a string)"; break;
            case simdjson::dom::element_type::NULL_VALUE: what = "not an object (null)"; break;
            case simdjson::dom::element_type::BOOL: what = "not an object (a boolean)"; break;
            default: what = "not an object (a number)"; break;
            }
            return set_err(err, ZP_ERR_FORMAT, what, nullptr);
        }
        j->doc = doc;
        j->have_doc = true;
        return ZP_OK;
    } catch (const std::bad_alloc &) {
        return set_err(err, ZP_ERR_NOMEM, "out of memory", nullptr);
    } catch (...) {
        return set_err(err, ZP_ERR_INTERNAL, "internal error in the JSON parser", nullptr);
    }
}

/* The value of top-level key `key` of the parsed document into *v: ZP_OK,
 * ZP_END when absent, ZP_ERR_STATE without a document, ZP_ERR_FORMAT. */
static zp_status lookup(zpi_json *j, const char *key, simdjson::dom::element *v)
{
    if (!j->have_doc)
        return ZP_ERR_STATE;
    simdjson::dom::object obj;
    if (j->doc.get_object().get(obj))
        return ZP_ERR_STATE;
    /* at_key compares against the unescaped key, exactly; the first of
     * duplicate keys wins. */
    simdjson::error_code e = obj.at_key(std::string_view(key, std::strlen(key))).get(*v);
    if (e == simdjson::NO_SUCH_FIELD)
        return ZP_END;
    return e ? ZP_ERR_FORMAT : ZP_OK;
}

extern "C" zp_status zpi_json_get_string(zpi_json *j, const char *key, const char **s, size_t *n)
{
    if (!j || !key || !s || !n)
        return ZP_ERR_INVALID;
    try {
        simdjson::dom::element v;
        zp_status st = lookup(j, key, &v);
        if (st != ZP_OK)
            return st;
        std::string_view sv;
        if (v.get_string().get(sv))
            return ZP_ERR_FORMAT;
        *s = sv.data();
        *n = sv.size();
        return ZP_OK;
    } catch (...) {
        return ZP_ERR_INTERNAL;
    }
}

extern "C" zp_status zpi_json_get_ids(zpi_json *j, const char *key,
                                      int32_t *(*room)(void *ctx, size_t n), void *ctx,
                                      size_t *n, size_t *bad_at)
{
    if (!j || !key || !room || !n || !bad_at)
        return ZP_ERR_INVALID;
    *n = 0;
    *bad_at = 0;
    try {
        simdjson::dom::element v;
        zp_status st = lookup(j, key, &v);
        if (st != ZP_OK)
            return st;
        simdjson::dom::array arr;
        if (v.get_array().get(arr))
            return ZP_ERR_UNSUPPORTED;
        size_t count = arr.size();
        int32_t *dst = room(ctx, count);
        if (!dst)
            return ZP_ERR_NOMEM;
        size_t k = 0;
        for (simdjson::dom::element x : arr) {
            int64_t id;
            if (x.get_int64().get(id) || id < 0 || id > INT32_MAX) {
                *bad_at = k;
                return ZP_ERR_FORMAT;
            }
            dst[k++] = (int32_t)id;
        }
        *n = k;
        return ZP_OK;
    } catch (...) {
        return ZP_ERR_INTERNAL;
    }
}
