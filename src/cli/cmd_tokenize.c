/*
 * cmd_tokenize.c - `zephon tokenize`: read JSONL (one object per line), print
 * one JSON array of token ids per input record, on its own line.
 *
 *   zephon tokenize [--tokenizer gpt2|DIR|FILE.tiktoken] [--field text] [FILE|-]
 *
 * Blank lines are skipped (they are not records). The first bad line stops
 * the command with a message naming the file and line, and exit status 1
 * (2 for a usage error). This is the command, not the library: printing is
 * allowed here.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "zephon/tokenizer.h"

static void usage(FILE *f)
{
    fputs("usage: zephon tokenize [--tokenizer NAME] [--field NAME] [FILE|-]\n"
          "\n"
          "Reads JSONL (one JSON object per line) from FILE or standard input and prints,\n"
          "for each record, the token ids of its text field as a JSON array on one line.\n"
          "\n"
          "  --tokenizer NAME  \"gpt2\" (built in; the default), a folder with vocab.json +\n"
          "                    merges.txt, or a .tiktoken rank file\n"
          "  --field NAME      the string field to tokenize (default \"text\")\n"
          "\n"
          "Blank lines are skipped. Exit status: 0 ok, 1 bad input or error, 2 usage.\n",
          f);
}

/* Append the decimal form of v to p; returns the new end. */
static char *put_int(char *p, int32_t v)
{
    char tmp[12];
    int n = 0;
    uint32_t u = v < 0 ? (uint32_t)0 - (uint32_t)v : (uint32_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *p++ = '-';
    while (n)
        *p++ = tmp[--n];
    return p;
}

/* buf with room for need elements of elem bytes (the capacity *cap at
 * least doubles when it grows); NULL when out of memory (buf is kept). */
static void *reserve(void *buf, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return buf;
    size_t nc = need > 2 * *cap ? need : 2 * *cap;
    void *nb = realloc(buf, nc * elem);
    if (nb)
        *cap = nc;
    return nb;
}

static int is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return 0;
    return 1;
}

int zp_cmd_tokenize(int argc, char **argv)
{
    const char *tokname = "gpt2", *field = "text", *path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--tokenizer") == 0 || strcmp(a, "--field") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "zephon tokenize: %s needs a value\n", a);
                usage(stderr);
                return 2;
            }
            if (strcmp(a, "--tokenizer") == 0)
                tokname = argv[++i];
            else
                field = argv[++i];
        } else if (strncmp(a, "--tokenizer=", 12) == 0) {
            tokname = a + 12;
        } else if (strncmp(a, "--field=", 8) == 0) {
            field = a + 8;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "zephon tokenize: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (path) {
            fprintf(stderr, "zephon tokenize: one input file at most ('%s', '%s')\n", path, a);
            return 2;
        } else {
            path = a;
        }
    }
    const char *name = (!path || strcmp(path, "-") == 0) ? "<stdin>" : path;
    FILE *in = stdin;
    if (path && strcmp(path, "-") != 0) {
        in = fopen(path, "rb");
        if (!in) {
            fprintf(stderr, "zephon tokenize: cannot open '%s': %s\n", path, strerror(errno));
            return 1;
        }
    }

    int rc = 1;
    char err[512];
    zp_tokenizer *tok = NULL;
    zp_encoder *enc = NULL;
    char *line = NULL, *obuf = NULL;
    int32_t *ids = NULL;
    size_t linecap = 0, idcap = 0, ocap = 0, lineno = 0;
    zp_status st = zp_tokenizer_create(tokname, NULL, &tok, err, sizeof err);
    if (st != ZP_OK) {
        fprintf(stderr, "zephon tokenize: %s\n", err);
        goto out;
    }
    if (zp_encoder_create(tok, &enc) != ZP_OK) {
        fprintf(stderr, "zephon tokenize: out of memory\n");
        goto out;
    }
    for (;;) {
        errno = 0;
        ssize_t got = getline(&line, &linecap, in);
        if (got < 0) {
            if (ferror(in)) {
                fprintf(stderr, "zephon tokenize: %s: read error: %s\n", name, strerror(errno));
                goto out;
            }
            break;
        }
        lineno++;
        size_t n = (size_t)got;
        if (is_blank(line, n))
            continue;
        json_error_t jerr;
        json_t *obj = json_loadb(line, n, JSON_ALLOW_NUL, &jerr);
        if (!obj) {
            fprintf(stderr, "zephon tokenize: %s:%zu: invalid JSON (column %d): %s\n", name, lineno,
                    jerr.column, jerr.text);
            goto out;
        }
        json_t *v = json_is_object(obj) ? json_object_get(obj, field) : NULL;
        if (!json_is_string(v)) {
            if (!json_is_object(obj))
                fprintf(stderr, "zephon tokenize: %s:%zu: not a JSON object\n", name, lineno);
            else if (!v)
                fprintf(stderr, "zephon tokenize: %s:%zu: no field '%s'\n", name, lineno, field);
            else
                fprintf(stderr, "zephon tokenize: %s:%zu: field '%s' is not a string\n", name,
                        lineno, field);
            json_decref(obj);
            goto out;
        }
        const char *text = json_string_value(v);
        size_t tl = json_string_length(v);
        int32_t *ni = reserve(ids, &idcap, tl + 1, sizeof *ids);
        if (!ni) {
            json_decref(obj);
            fprintf(stderr, "zephon tokenize: %s:%zu: out of memory\n", name, lineno);
            goto out;
        }
        ids = ni;
        size_t n_ids = 0;
        st = zp_encode(enc, text, tl, ids, &n_ids);
        json_decref(obj);
        if (st != ZP_OK) {
            fprintf(stderr, "zephon tokenize: %s:%zu: %s\n", name, lineno, zp_status_str(st));
            goto out;
        }
        char *nb = reserve(obuf, &ocap, n_ids * 12 + 3, 1);
        if (!nb) {
            fprintf(stderr, "zephon tokenize: %s:%zu: out of memory\n", name, lineno);
            goto out;
        }
        obuf = nb;
        char *p = obuf;
        *p++ = '[';
        for (size_t i = 0; i < n_ids; i++) {
            if (i)
                *p++ = ',';
            p = put_int(p, ids[i]);
        }
        *p++ = ']';
        *p++ = '\n';
        if (fwrite(obuf, 1, (size_t)(p - obuf), stdout) != (size_t)(p - obuf)) {
            fprintf(stderr, "zephon tokenize: write error: %s\n", strerror(errno));
            goto out;
        }
    }
    if (fflush(stdout) != 0) {
        fprintf(stderr, "zephon tokenize: write error: %s\n", strerror(errno));
        goto out;
    }
    rc = 0;
out:
    free(line);
    free(obuf);
    free(ids);
    zp_encoder_destroy(enc);
    zp_tokenizer_destroy(tok);
    if (in != stdin)
        fclose(in);
    return rc;
}
