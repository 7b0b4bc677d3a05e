/*
 * state_public.c - the two pure public state functions of
 * zephon/state_json.h: zp_state_merge() (parse each rank's state, merge,
 * check the job state, render) and zp_state_describe() (parse, describe,
 * and say why a resume would refuse it). They sit above state.c (the
 * model, JSON, merge, re-split, words) and state_check.c (a state checked
 * against itself) and join them.
 *
 * Ownership: returned texts are malloc'd and the caller frees them.
 * Thread safety: no shared state; every call works on its arguments.
 */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "plan/state.h"
#include "zephon/state_json.h"

static void *alloc_n(size_t n, size_t sz)
{
    if (n && sz > SIZE_MAX / n)
        return NULL;
    return calloc(n ? n : 1, sz);
}

static void copy_err(char *dst, size_t cap, const zpi_err *e)
{
    if (dst && cap)
        zpi_fmt(dst, cap, "%s", zpi_err_msg(e));
}

zp_status zp_state_merge(const char *const *states, const size_t *lens, size_t n, char **out,
                         size_t *out_len, char *errbuf, size_t errcap)
{
    zpi_err err = {0};
    if (out)
        *out = NULL;
    if (out_len)
        *out_len = 0;
    if (!out || (n && (!states || !lens))) {
        zpi_err_set(&err, ZP_ERR_INVALID, "merge: NULL argument");
        copy_err(errbuf, errcap, &err);
        return ZP_ERR_INVALID;
    }
    zpi_state *in = alloc_n(n, sizeof *in);
    const zpi_state **ptr = alloc_n(n, sizeof *ptr);
    unsigned char *fast = alloc_n(n, 1); /* 1: in[i] parsed by its ranks alone */
    zp_status st = in && ptr && fast ? ZP_OK
                                     : zpi_err_set(&err, ZP_ERR_NOMEM, "merge: out of memory");
    size_t parsed = 0;
    /* the ranks' settings are one text: canonicalised once (the memo) */
    zpi_settings_memo memo = {0};
    /* k0: the length of state 0's text before its "ranks" member (0: not
     * found); a state whose text starts with the same k0 bytes has the
     * same job-wide fields, and only its ranks are parsed: those parses
     * are independent and run on the OpenMP threads (at 1,024 ranks they
     * are most of a merge's time); any other state is parsed whole after
     * them, in rank order, so that the first bad one is the one named */
    size_t k0 = 0;
    if (st == ZP_OK && n && !states[0])
        st = zpi_err_set(&err, ZP_ERR_INVALID, "state %zu: NULL", (size_t)0);
    else if (st == ZP_OK && n) {
        if ((st = zpi_state_parse_memo(states[0], lens[0], &memo, &in[0], &err)) != ZP_OK)
            zpi_err_prefix(&err, "state %zu", (size_t)0);
        else {
            static const char sep[] = "\n  \"ranks\": [";
            const char *r = memmem(states[0], lens[0], sep, sizeof sep - 1);
            k0 = r ? (size_t)(r - states[0]) + 3 : 0; /* up to the quote of "ranks" */
            fast[0] = 1;
        }
    }
    if (st == ZP_OK && k0) {
        const zpi_state *job0 = &in[0];
        long nn = (long)n;
#pragma omp parallel for schedule(dynamic, 8) if (n > 64)
        for (long i = 1; i < nn; i++) {
            zpi_err quiet = {0};
            if (states[i] && lens[i] > k0 && memcmp(states[i], states[0], k0) == 0 &&
                zpi_state_parse_ranks_of(job0, states[i] + k0, lens[i] - k0, &in[i], &quiet) ==
                    ZP_OK)
                fast[i] = 1;
        }
    }
    for (size_t i = 0; i < n && st == ZP_OK; i++) {
        if (fast[i])
            ptr[parsed++] = &in[i];
        else if (!states[i])
            st = zpi_err_set(&err, ZP_ERR_INVALID, "state %zu: NULL", i);
        else if ((st = zpi_state_parse_memo(states[i], lens[i], &memo, &in[i], &err)) != ZP_OK)
            zpi_err_prefix(&err, "state %zu", i);
        else
            ptr[parsed++] = &in[i];
    }
    zpi_settings_memo_clear(&memo);
    zpi_state job = {0};
    if (st == ZP_OK)
        st = zpi_state_merge(ptr, n, &job, &err);
    if (st == ZP_OK)
        st = zpi_state_check(&job, &err);
    if (st == ZP_OK)
        st = zpi_state_render(&job, out, out_len, &err);
    zpi_state_clear(&job);
    /* every parsed state: the fast ones past a failed state too */
    for (size_t i = 0; i < n && in && fast; i++)
        if (fast[i] || (i < parsed && ptr[i] == &in[i]))
            zpi_state_clear(&in[i]);
    free(in);
    free(ptr);
    free(fast);
    if (st != ZP_OK)
        copy_err(errbuf, errcap, &err);
    return st;
}

zp_status zp_state_describe(const char *json, size_t len, char **text, char *errbuf,
                            size_t errcap)
{
    zpi_err err = {0};
    if (text)
        *text = NULL;
    if (!json || !text) {
        zpi_err_set(&err, ZP_ERR_INVALID, "describe: NULL argument");
        copy_err(errbuf, errcap, &err);
        return ZP_ERR_INVALID;
    }
    zpi_state s;
    zp_status st = zpi_state_parse(json, len, &s, &err);
    if (st == ZP_OK) {
        st = zpi_state_describe(&s, text, &err);
        zpi_err bad = {0};
        if (st == ZP_OK && zpi_state_check(&s, &bad) != ZP_OK) {
            /* shown as it is, and said why a resume would refuse it */
            zpi_buf b = {.p = *text, .len = strlen(*text), .cap = strlen(*text) + 1};
            (void)zpi_buf_printf(&b, "a resume refuses this state: %s\n", zpi_err_msg(&bad));
            *text = b.p; /* grown, or as it was */
        }
        zpi_state_clear(&s);
    }
    if (st != ZP_OK)
        copy_err(errbuf, errcap, &err);
    return st;
}
