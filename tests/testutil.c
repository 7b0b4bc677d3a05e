/* testutil.c - see testutil.h. */
#include "testutil.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zstd.h>

char *zpt_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    char *p = zpt_path(base, "zephon-test-XXXXXX");
    if (!p)
        return NULL;
    if (!mkdtemp(p)) {
        free(p);
        return NULL;
    }
    return p;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void zpt_rmtree(const char *dir)
{
    if (dir)
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

char *zpt_path(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

static int write_mode(const char *path, const void *data, size_t len, const char *mode)
{
    if (len == (size_t)-1)
        len = strlen(data);
    FILE *f = fopen(path, mode);
    if (!f)
        return -1;
    int ok = len == 0 || fwrite(data, 1, len, f) == len;
    if (fclose(f) != 0)
        ok = 0;
    return ok ? 0 : -1;
}

int zpt_write_file(const char *path, const void *data, size_t len)
{
    return write_mode(path, data, len, "wb");
}

int zpt_append_file(const char *path, const void *data, size_t len)
{
    return write_mode(path, data, len, "ab");
}

void *zpt_zst_compress(const void *data, size_t len, int frames, size_t *out_len)
{
    if (frames < 1)
        frames = 1;
    size_t cap = 0, per = len / (size_t)frames + 1;
    for (int i = 0; i < frames; i++)
        cap += ZSTD_compressBound(per) + 64;
    char *out = malloc(cap ? cap : 1);
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    if (!out || !cc) {
        free(out);
        ZSTD_freeCCtx(cc);
        return NULL;
    }
    ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, 3);
    ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
    size_t pos = 0, o = 0;
    for (int i = 0; i < frames; i++) {
        size_t n = i == frames - 1 ? len - pos : (per < len - pos ? per : len - pos);
        size_t r = ZSTD_compress2(cc, out + o, cap - o, (const char *)data + pos, n);
        if (ZSTD_isError(r)) {
            free(out);
            ZSTD_freeCCtx(cc);
            return NULL;
        }
        o += r;
        pos += n;
    }
    ZSTD_freeCCtx(cc);
    *out_len = o;
    return out;
}

int zpt_write_zst(const char *path, const void *data, size_t len, int frames)
{
    if (len == (size_t)-1)
        len = strlen(data);
    size_t n;
    void *z = zpt_zst_compress(data, len, frames, &n);
    if (!z)
        return -1;
    int r = zpt_write_file(path, z, n);
    free(z);
    return r;
}

char *zpt_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        if (n == cap) {
            char *b = realloc(buf, cap * 2 + 1);
            if (!b) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0)
            break;
    }
    fclose(f);
    if (!buf)
        return NULL;
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

char *zpt_netenv(const char *key)
{
    const char *file = getenv("ZT_NETENV");
    if (!file || !key)
        return NULL;
    FILE *f = fopen(file, "r");
    if (!f)
        return NULL;
    char line[4096];
    size_t kl = strlen(key);
    char *val = NULL;
    while (!val && fgets(line, sizeof line, f)) {
        if (strncmp(line, key, kl) != 0 || line[kl] != '=')
            continue;
        char *v = line + kl + 1;
        v[strcspn(v, "\r\n")] = '\0';
        size_t n = strlen(v);
        if (n >= 2 && (v[0] == '\'' || v[0] == '"') && v[n - 1] == v[0]) {
            v[n - 1] = '\0';
            v++;
        }
        val = strdup(v);
    }
    fclose(f);
    return val;
}
