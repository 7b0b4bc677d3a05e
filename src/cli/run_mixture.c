/* run_mixture.c - the data of `zephon run`: its specs and the mixture's
 * parts, from --data SPEC[@WEIGHT] (the weight after the last '@') or a
 * mixture file (parts with names, specs and weights; docs/mixtures.md). A
 * part given by a URL is named by the URL without its secrets. */
#include "run_mixture.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "base/util.h"

/* A spec as it may be printed or kept (a part's name, a message): a URL
 * without credentials or query string (zp_dataset_spec_redact). Malloc'd;
 * NULL when out of memory. */
static char *redacted(const char *spec)
{
    size_t cap = strlen(spec) + 16; /* "?<redacted>" may be longer than the query */
    char *r = malloc(cap);
    if (r)
        zp_dataset_spec_redact(spec, r, cap);
    return r;
}

int cli_run_push_spec(cli_run_opts *o, char *s)
{
    if (!s || zpi_grow((void **)&o->specs, &o->cap_specs, o->n_specs + 1, sizeof *o->specs) != 0) {
        free(s);
        fprintf(stderr, "zephon run: out of memory\n");
        return -1;
    }
    o->specs[o->n_specs++] = s;
    return 0;
}

int cli_run_push_part(cli_run_opts *o, char *name, double weight, size_t n)
{
    if (!name || zpi_grow((void **)&o->parts, &o->cap_parts, o->n_parts + 1, sizeof *o->parts) != 0) {
        free(name);
        fprintf(stderr, "zephon run: out of memory\n");
        return -1;
    }
    cli_run_part *p = &o->parts[o->n_parts++];
    memset(p, 0, sizeof *p);
    p->name = name;
    p->weight = weight;
    p->first = o->n_specs - n;
    p->n = n;
    return 0;
}

/* A weight: positive and finite. 0, or -1 with the reason in why. */
static int check_weight(double w, const char **why)
{
    if (isnan(w) || isinf(w)) {
        *why = "must be a finite number";
        return -1;
    }
    if (!(w > 0)) {
        *why = "must be above 0";
        return -1;
    }
    return 0;
}

/* cli_run_parse_data() of v, shown in messages as shown (redacted). */
static int parse_data(const char *v, const char *shown, char **spec, double *weight)
{
    const char *at = strrchr(v, '@');
    size_t n = strlen(v);
    if (at && at[1]) {
        char *end = NULL;
        errno = 0;
        double w = strtod(at + 1, &end);
        if (end && *end == '\0' && end != at + 1 && !isspace((unsigned char)at[1])) {
            const char *why = NULL;
            if (check_weight(w, &why) != 0) {
                fprintf(stderr, "zephon run: --data '%s': the weight '%s' %s (a positive number; "
                                "a spec whose name ends in @NUMBER is written SPEC@NUMBER@1)\n",
                        shown, at + 1, why);
                return -1;
            }
            n = (size_t)(at - v);
            *weight = w;
        } else if (!strstr(v, "://") && !strpbrk(v, "*?[") && access(v, F_OK) != 0) {
            /* neither a weight nor a path that exists: a mistyped weight */
            fprintf(stderr, "zephon run: --data '%s': '%s' is not a weight (a positive number), "
                            "and there is no file or folder '%s'\n",
                    shown, strrchr(shown, '@') ? strrchr(shown, '@') + 1 : "", shown);
            return -1;
        }
    }
    if (n == 0) {
        fprintf(stderr, "zephon run: --data '%s': no spec before the weight\n", shown);
        return -1;
    }
    if (!(*spec = strndup(v, n))) {
        fprintf(stderr, "zephon run: out of memory\n");
        return -1;
    }
    return 0;
}

int cli_run_parse_data(const char *v_raw, char **spec, double *weight)
{
    *spec = NULL;
    *weight = 1;
    char *shown = redacted(v_raw); /* v in messages */
    if (!shown) {
        fprintf(stderr, "zephon run: out of memory\n");
        return -1;
    }
    int rc = parse_data(v_raw, shown, spec, weight);
    free(shown);
    return rc;
}
int cli_run_data_option(cli_run_opts *o, const char *v)
{
    char *spec;
    double w;
    if (cli_run_parse_data(v, &spec, &w) != 0)
        return -1;
    char *name = redacted(spec); /* kept in states and reports */
    if (cli_run_push_spec(o, spec) != 0 || cli_run_push_part(o, name, w, 1) != 0)
        return -1;
    return 0;
}

/* ------------------------------------------------------------ mixture file */

/* spec resolved against the folder of the mixture file: absolute paths and
 * URLs as written. malloc'd (NULL: out of memory). */
static char *resolve_spec(const char *dir, const char *spec)
{
    if (spec[0] == '/' || strstr(spec, "://") || !*dir)
        return zpi_strdup(spec);
    size_t n = strlen(dir) + strlen(spec) + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s/%s", dir, spec);
    return s;
}

/* One part of the file: parts[k] (an object). */
static int mixture_part(cli_run_opts *o, const char *file, const char *dir, size_t k, json_t *part)
{
#define MERR(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "zephon run: --mixture %s: parts[%zu]", file, k);                          \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        return -1;                                                                                 \
    } while (0)
    if (!json_is_object(part))
        MERR(": not an object ({\"name\": ..., \"data\": ..., \"weight\": ...})");
    const char *key;
    json_t *val;
    json_object_foreach(part, key, val) {
        if (strcmp(key, "name") && strcmp(key, "data") && strcmp(key, "weight"))
            MERR(": unknown field '%s' (name, data, weight)", key);
    }
    json_t *name = json_object_get(part, "name"), *data = json_object_get(part, "data"),
           *weight = json_object_get(part, "weight");
    if (name && (!json_is_string(name) || json_string_length(name) == 0 ||
                 strlen(json_string_value(name)) != json_string_length(name)))
        MERR(".name: not a non-empty string");
    double w = 1;
    if (weight) {
        const char *why = NULL;
        if (!json_is_number(weight))
            MERR(".weight: not a number");
        w = json_number_value(weight);
        if (check_weight(w, &why) != 0)
            MERR(".weight = %g: %s", w, why);
    }
    if (!data)
        MERR(".data: missing (a spec, or a list of specs)");
    size_t n = json_is_array(data) ? json_array_size(data) : 1;
    if (!json_is_string(data) && !(json_is_array(data) && n > 0))
        MERR(".data: not a spec (string) or a non-empty list of specs");
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_array(data) ? json_array_get(data, i) : data;
        if (!json_is_string(s) || json_string_length(s) == 0 ||
            strlen(json_string_value(s)) != json_string_length(s)) {
            if (json_is_array(data))
                MERR(".data[%zu]: not a non-empty string", i);
            MERR(".data: not a non-empty string");
        }
        if (cli_run_push_spec(o, resolve_spec(dir, json_string_value(s))) != 0)
            return -1;
    }
    char *pname;
    if (name)
        pname = zpi_strdup(json_string_value(name));
    else if (n == 1)
        pname = redacted(json_string_value(data));
    else {
        char *first = redacted(json_string_value(json_array_get(data, 0)));
        size_t cap = first ? strlen(first) + 32 : 0;
        if (first && (pname = malloc(cap)))
            snprintf(pname, cap, "%s (+%zu more)", first, n - 1);
        else
            pname = NULL;
        free(first);
    }
    return cli_run_push_part(o, pname, w, n);
#undef MERR
}

/* "schedule": [{"at": DRAW, "weights": [w, ...] or {"name": w, ...},
 * "linear": EVERY}, ...] (docs/mixtures.md, "Weight schedules"), after the
 * parts (the weights name them). */
static int mixture_schedule(cli_run_opts *o, const char *file, json_t *sched)
{
#define SERR(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "zephon run: --mixture %s: schedule", file);                               \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        return -1;                                                                                 \
    } while (0)
    if (!json_is_array(sched))
        SERR(": not a list of phases ([{\"at\": SAMPLES, \"weights\": ...}, ...])");
    const size_t m = json_array_size(sched), np = o->n_parts;
    if (m == 0)
        return 0;
    if (np < 2)
        SERR(": a weight schedule needs 2 parts or more (%zu given)", np);
    o->phases = calloc(m, sizeof *o->phases);
    o->phase_w = calloc(m * np, sizeof *o->phase_w);
    if (!o->phases || !o->phase_w) {
        fprintf(stderr, "zephon run: out of memory\n");
        return -1;
    }
    o->n_phases = m;
    for (size_t k = 0; k < m; k++) {
        json_t *ph = json_array_get(sched, k);
        zp_mix_phase *p = &o->phases[k];
        double *w = o->phase_w + k * np;
        if (!json_is_object(ph))
            SERR("[%zu]: not an object ({\"at\": ..., \"weights\": ..., \"linear\": ...})", k);
        const char *key;
        json_t *val;
        json_object_foreach(ph, key, val) {
            if (strcmp(key, "at") && strcmp(key, "weights") && strcmp(key, "linear"))
                SERR("[%zu]: unknown field '%s' (at, weights, linear)", k, key);
        }
        json_t *at = json_object_get(ph, "at"), *ws = json_object_get(ph, "weights"),
               *lin = json_object_get(ph, "linear");
        if (!at || !json_is_integer(at) || json_integer_value(at) < 1)
            SERR("[%zu].at: %s", k, at ? "not a whole number above 0 (a draw count: samples)"
                                        : "missing (the draw, counted in samples, at which the "
                                          "phase starts)");
        p->start = (uint64_t)json_integer_value(at);
        if (k > 0 && p->start <= o->phases[k - 1].start)
            SERR("[%zu].at = %llu: must be above schedule[%zu].at = %llu", k,
                 (unsigned long long)p->start, k - 1,
                 (unsigned long long)o->phases[k - 1].start);
        if (lin && (!json_is_integer(lin) || json_integer_value(lin) < 1))
            SERR("[%zu].linear: not a whole number above 0 (draws per step of the ramp)", k);
        p->linear_every = lin ? (uint64_t)json_integer_value(lin) : 0;
        if (!ws)
            SERR("[%zu].weights: missing (a list in the parts' order, or an object naming "
                 "every part)",
                 k);
        if (json_is_array(ws)) {
            if (json_array_size(ws) != np)
                SERR("[%zu].weights: %zu weights for %zu parts", k, json_array_size(ws), np);
            for (size_t i = 0; i < np; i++)
                w[i] = json_is_number(json_array_get(ws, i))
                           ? json_number_value(json_array_get(ws, i))
                           : NAN;
        } else if (json_is_object(ws)) {
            for (size_t i = 0; i < np; i++) {
                json_t *x = json_object_get(ws, o->parts[i].name);
                if (!x)
                    SERR("[%zu].weights: no weight for part '%s' (an object names every part)",
                         k, o->parts[i].name);
                w[i] = json_is_number(x) ? json_number_value(x) : NAN;
            }
            json_object_foreach(ws, key, val) {
                size_t i = 0;
                while (i < np && strcmp(o->parts[i].name, key))
                    i++;
                if (i == np)
                    SERR("[%zu].weights: '%s' is not a part's name", k, key);
            }
        } else {
            SERR("[%zu].weights: not a list or an object", k);
        }
        for (size_t i = 0; i < np; i++) {
            const char *why = NULL;
            if (check_weight(w[i], &why) != 0)
                SERR("[%zu].weights: part '%s' = %g: %s", k, o->parts[i].name, w[i],
                     isnan(w[i]) ? "not a number" : why);
        }
        p->weights = w;
    }
    return 0;
#undef SERR
}

int cli_run_read_mixture(cli_run_opts *o, const char *path)
{
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        if (je.line <= 0)
            fprintf(stderr, "zephon run: --mixture %s: %s\n", path, je.text);
        else
            fprintf(stderr, "zephon run: --mixture %s: line %d, column %d: %s\n", path, je.line,
                    je.column, je.text);
        return -1;
    }
    int rc = -1;
    char *dir = NULL;
    const char *key;
    json_t *val;
    if (!json_is_object(root)) {
        fprintf(stderr, "zephon run: --mixture %s: not a JSON object ({\"parts\": [...]})\n", path);
        goto out;
    }
    json_object_foreach(root, key, val) {
        if (strcmp(key, "parts") && strcmp(key, "epoch_samples") && strcmp(key, "schedule")) {
            fprintf(stderr,
                    "zephon run: --mixture %s: unknown field '%s' (parts, epoch_samples, "
                    "schedule)\n",
                    path, key);
            goto out;
        }
    }
    json_t *parts = json_object_get(root, "parts"), *es = json_object_get(root, "epoch_samples");
    if (!json_is_array(parts) || json_array_size(parts) == 0) {
        fprintf(stderr, "zephon run: --mixture %s: parts: %s\n", path,
                parts ? "not a non-empty list" : "missing");
        goto out;
    }
    if (es) {
        if (!json_is_integer(es) || json_integer_value(es) < 1) {
            fprintf(stderr, "zephon run: --mixture %s: epoch_samples: not a whole number above 0\n",
                    path);
            goto out;
        }
        if (!o->epoch_samples_set)
            o->ws.epoch_samples = (uint64_t)json_integer_value(es);
    }
    const char *slash = strrchr(path, '/');
    dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : zpi_strdup("");
    if (!dir) {
        fprintf(stderr, "zephon run: out of memory\n");
        goto out;
    }
    for (size_t k = 0; k < json_array_size(parts); k++)
        if (mixture_part(o, path, dir, k, json_array_get(parts, k)) != 0)
            goto out;
    if (json_object_get(root, "schedule") &&
        mixture_schedule(o, path, json_object_get(root, "schedule")) != 0)
        goto out;
    rc = 0;
out:
    free(dir);
    json_decref(root);
    return rc;
}
