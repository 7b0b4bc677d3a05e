/*
 * test_util.c - the small shared helpers (src/base/util.c) and the error
 * mechanism (src/base/error.c): number parsing with ranges and suffixes, mkdir -p,
 * atomic file writes, the growable buffer, zpi_grow, the intrusive FIFO and
 * zpi_err.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "base/error.h"
#include "testutil.h"
#include "base/util.h"

/* ------------------------------------------------------------ zpi_parse_u64 */

/* Parses s and expects the value v. */
static void u64_ok(const char *s, uint64_t min, uint64_t max, int sizes, uint64_t v)
{
    uint64_t out = 12345;
    errno = 0;
    if (zpi_parse_u64(s, min, max, sizes, &out) != 0)
        fail_msg("zpi_parse_u64(\"%s\") failed: %s", s, strerror(errno));
    if (out != v)
        fail_msg("zpi_parse_u64(\"%s\") = %llu, expected %llu", s, (unsigned long long)out,
                 (unsigned long long)v);
}

/* Expects a failure with errno err, *out untouched. */
static void u64_bad(const char *s, uint64_t min, uint64_t max, int sizes, int err)
{
    uint64_t out = 12345;
    errno = 0;
    if (zpi_parse_u64(s, min, max, sizes, &out) != -1)
        fail_msg("zpi_parse_u64(\"%s\") accepted (%llu)", s ? s : "(null)",
                 (unsigned long long)out);
    if (errno != err)
        fail_msg("zpi_parse_u64(\"%s\"): errno %d (%s), expected %d (%s)", s ? s : "(null)",
                 errno, strerror(errno), err, strerror(err));
    assert_int_equal(out, 12345);
}

static void test_parse_u64_limits(void **state)
{
    (void)state;
    u64_ok("0", 0, UINT64_MAX, 0, 0);
    u64_ok("42", 0, UINT64_MAX, 0, 42);
    u64_ok("007", 0, UINT64_MAX, 0, 7);
    u64_ok("18446744073709551615", 0, UINT64_MAX, 0, UINT64_MAX);
    u64_bad("18446744073709551616", 0, UINT64_MAX, 0, ERANGE); /* 2^64: no wrap to 0 */
    u64_bad("18446744073709551625", 0, UINT64_MAX, 0, ERANGE);
    u64_bad("99999999999999999999", 0, UINT64_MAX, 0, ERANGE);
    u64_bad("184467440737095516150", 0, UINT64_MAX, 0, ERANGE);
    u64_bad("100000000000000000000000000000000000000", 0, UINT64_MAX, 0, ERANGE);
    u64_ok("4294967295", 0, UINT32_MAX, 0, UINT32_MAX);
    u64_bad("4294967296", 0, UINT32_MAX, 0, ERANGE);
}

static void test_parse_u64_range(void **state)
{
    (void)state;
    u64_ok("1", 1, 10, 0, 1);
    u64_ok("10", 1, 10, 0, 10);
    u64_bad("0", 1, 10, 0, ERANGE);
    u64_bad("11", 1, 10, 0, ERANGE);
    u64_bad("5", 6, 6, 0, ERANGE);
    u64_ok("6", 6, 6, 0, 6);
}

static void test_parse_u64_suffixes(void **state)
{
    (void)state;
    u64_ok("1k", 0, UINT64_MAX, 1, 1024);
    u64_ok("1K", 0, UINT64_MAX, 1, 1024);
    u64_ok("2KB", 0, UINT64_MAX, 1, 2048);
    u64_ok("2KiB", 0, UINT64_MAX, 1, 2048);
    u64_ok("3m", 0, UINT64_MAX, 1, 3ull << 20);
    u64_ok("64MiB", 0, UINT64_MAX, 1, 64ull << 20);
    u64_ok("5G", 0, UINT64_MAX, 1, 5ull << 30);
    u64_ok("7t", 0, UINT64_MAX, 1, 7ull << 40);
    u64_ok("100B", 0, UINT64_MAX, 1, 100);
    u64_ok("0k", 0, UINT64_MAX, 1, 0);
    u64_ok("16777215T", 0, UINT64_MAX, 1, 16777215ull << 40);
    u64_bad("16777216T", 0, UINT64_MAX, 1, ERANGE); /* 2^64 bytes */
    u64_bad("18014398509481984k", 0, UINT64_MAX, 1, ERANGE);
    u64_bad("2k", 0, 2047, 1, ERANGE);               /* the range applies after the suffix */
    u64_bad("1k", 0, UINT64_MAX, 0, EINVAL);         /* suffixes only when asked for */
    u64_bad("1B", 0, UINT64_MAX, 0, EINVAL);
    u64_bad("1ki", 0, UINT64_MAX, 1, EINVAL);
    u64_bad("1kb", 0, UINT64_MAX, 1, EINVAL);
    u64_bad("1KBB", 0, UINT64_MAX, 1, EINVAL);
    u64_bad("1P", 0, UINT64_MAX, 1, EINVAL);
    u64_bad("1 k", 0, UINT64_MAX, 1, EINVAL);
    u64_bad("k", 0, UINT64_MAX, 1, EINVAL);
}

static void test_parse_u64_garbage(void **state)
{
    (void)state;
    static const char *bad[] = {"", " ", "abc", "12x", "1 ", " 1", "0x10", "1.5", "1e3",
                                "+1", "-1", "-0", "--5", "1,000", "１"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        u64_bad(bad[i], 0, UINT64_MAX, 0, EINVAL);
        u64_bad(bad[i], 0, UINT64_MAX, 1, EINVAL);
    }
    u64_bad("-18446744073709551616", 0, UINT64_MAX, 0, EINVAL);
    u64_bad(NULL, 0, UINT64_MAX, 0, EINVAL);
}

/* --------------------------------------------------------- zpi_parse_double */

static void test_parse_double(void **state)
{
    (void)state;
    double v = -1;
    assert_int_equal(zpi_parse_double("1.5", 0, 2, &v), 0);
    assert_true(v == 1.5);
    assert_int_equal(zpi_parse_double("-2e-1", -1, 1, &v), 0);
    assert_true(v == -0.2);
    assert_int_equal(zpi_parse_double("3", 3, 3, &v), 0);
    assert_true(v == 3.0);
    /* An underflow is a (tiny) value, not a range error. */
    assert_int_equal(zpi_parse_double("1e-310", 0, 1, &v), 0);
    assert_true(v > 0 && v < 1e-300);
    assert_int_equal(zpi_parse_double("1e-400", 0, 1, &v), 0);
    assert_true(v == 0.0);

    static const struct {
        const char *s;
        double min, max;
        int err;
    } bad[] = {
        {"2.5", 0, 2, ERANGE},   {"-0.5", 0, 1, ERANGE}, {"1e309", 0, 1e308, ERANGE},
        {"-1e309", -1e308, 0, ERANGE}, {"inf", 0, 1e308, ERANGE}, {"-infinity", -1e308, 0, ERANGE},
        {"nan", -1e308, 1e308, EINVAL}, {"NaN(1)", -1e308, 1e308, EINVAL},
        {"", 0, 1, EINVAL},      {" 1", 0, 1, EINVAL},   {"1 ", 0, 1, EINVAL},
        {"0.5x", 0, 1, EINVAL},  {"x", 0, 1, EINVAL},    {"1,5", 0, 2, EINVAL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        v = 12345;
        errno = 0;
        if (zpi_parse_double(bad[i].s, bad[i].min, bad[i].max, &v) != -1)
            fail_msg("zpi_parse_double(\"%s\") accepted (%g)", bad[i].s, v);
        if (errno != bad[i].err)
            fail_msg("zpi_parse_double(\"%s\"): errno %d, expected %d", bad[i].s, errno, bad[i].err);
        assert_true(v == 12345);
    }
    errno = 0;
    assert_int_equal(zpi_parse_double(NULL, 0, 1, &v), -1);
    assert_int_equal(errno, EINVAL);
}

/* --------------------------------------------------------------- zpi_mkdir_p */

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static void test_mkdir_p(void **state)
{
    (void)state;
    char *root = zpt_tmpdir();
    assert_non_null(root);
    char *deep = zpt_path(root, "a/b/c/d");
    assert_int_equal(zpi_mkdir_p(deep, 0755), 0);
    assert_true(is_dir(deep));
    assert_int_equal(zpi_mkdir_p(deep, 0755), 0); /* exists: fine */
    char *slash = zpt_path(root, "a/b//e/");       /* doubled and trailing slashes */
    assert_int_equal(zpi_mkdir_p(slash, 0755), 0);
    char *e = zpt_path(root, "a/b/e");
    assert_true(is_dir(e));

    /* A file where a folder should be: ENOTDIR, for the last component and
     * for one on the way. */
    char *file = zpt_path(root, "a/file");
    assert_int_equal(zpt_write_file(file, "x", 1), 0);
    errno = 0;
    assert_int_equal(zpi_mkdir_p(file, 0755), -1);
    assert_int_equal(errno, ENOTDIR);
    char *under = zpt_path(root, "a/file/sub/dir");
    errno = 0;
    assert_int_equal(zpi_mkdir_p(under, 0755), -1);
    assert_int_equal(errno, ENOTDIR);

    errno = 0;
    assert_int_equal(zpi_mkdir_p("", 0755), -1);
    assert_int_equal(errno, ENOENT);

    zpt_rmtree(root);
    free(deep);
    free(slash);
    free(e);
    free(file);
    free(under);
    free(root);
}

/* ------------------------------------------------------ zpi_write_file_atomic */

/* Entries of dir whose name contains ".tmp.". */
static int count_temps(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += strstr(de->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

static void test_write_file_atomic(void **state)
{
    (void)state;
    char *root = zpt_tmpdir();
    assert_non_null(root);
    char *p = zpt_path(root, "out.json");
    size_t len = 0;

    assert_int_equal(zpi_write_file_atomic(p, "first", 5), 0);
    char *got = zpt_read_file(p, &len);
    assert_non_null(got);
    assert_int_equal(len, 5);
    assert_memory_equal(got, "first", 5);
    free(got);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);

    assert_int_equal(zpi_write_file_atomic(p, "second!", 7), 0); /* replaces */
    got = zpt_read_file(p, &len);
    assert_int_equal(len, 7);
    assert_memory_equal(got, "second!", 7);
    free(got);
    assert_int_equal(zpi_write_file_atomic(p, NULL, 0), 0); /* empty */
    got = zpt_read_file(p, &len);
    assert_int_equal(len, 0);
    free(got);
    assert_int_equal(count_temps(root), 0);

    /* A missing folder: ENOENT, nothing created. */
    char *missing = zpt_path(root, "no/such/dir/out.json");
    errno = 0;
    assert_int_equal(zpi_write_file_atomic(missing, "x", 1), -1);
    assert_int_equal(errno, ENOENT);
    char *nodir = zpt_path(root, "no");
    assert_false(is_dir(nodir));

    /* The rename fails (the path is a non-empty folder): the temporary file
     * written next to it is removed. */
    char *dirpath = zpt_path(root, "taken");
    char *inside = zpt_path(root, "taken/keep");
    assert_int_equal(zpi_mkdir_p(dirpath, 0755), 0);
    assert_int_equal(zpt_write_file(inside, "k", 1), 0);
    errno = 0;
    assert_int_equal(zpi_write_file_atomic(dirpath, "data", 4), -1);
    assert_true(errno == EISDIR || errno == ENOTEMPTY || errno == EEXIST);
    assert_int_equal(count_temps(root), 0);
    assert_true(is_dir(dirpath));

    zpt_rmtree(root);
    free(p);
    free(missing);
    free(nodir);
    free(dirpath);
    free(inside);
    free(root);
}

/* Several threads writing one path: every write succeeds (each has a
 * temporary file of its own) and the file holds one whole version. */
enum { WRITERS = 4, WRITES = 300, WLEN = 4096 };
struct writer {
    const char *path;
    char fill;
    int failures;
};

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    char *buf = malloc(WLEN);
    if (!buf) {
        w->failures = WRITES;
        return NULL;
    }
    memset(buf, w->fill, WLEN);
    for (int i = 0; i < WRITES; i++)
        w->failures += zpi_write_file_atomic(w->path, buf, WLEN) != 0;
    free(buf);
    return NULL;
}

static void test_write_file_atomic_concurrent(void **state)
{
    (void)state;
    char *root = zpt_tmpdir();
    assert_non_null(root);
    char *p = zpt_path(root, "shared.json");
    pthread_t t[WRITERS];
    struct writer w[WRITERS];
    for (int i = 0; i < WRITERS; i++) {
        w[i] = (struct writer){p, (char)('a' + i), 0};
        assert_int_equal(pthread_create(&t[i], NULL, writer_main, &w[i]), 0);
    }
    int failures = 0;
    for (int i = 0; i < WRITERS; i++) {
        pthread_join(t[i], NULL);
        failures += w[i].failures;
    }
    assert_int_equal(failures, 0);
    size_t len = 0;
    char *got = zpt_read_file(p, &len);
    assert_non_null(got);
    assert_int_equal(len, WLEN);
    for (size_t i = 1; i < len; i++)
        assert_int_equal(got[i], got[0]);
    assert_int_equal(count_temps(root), 0);
    free(got);
    zpt_rmtree(root);
    free(p);
    free(root);
}

/* ------------------------------------------------------------------ zpi_buf */

static void test_buf(void **state)
{
    (void)state;
    zpi_buf b = {0};
    assert_int_equal(zpi_buf_append(&b, NULL, 0), 0);
    assert_non_null(b.p);
    assert_string_equal(b.p, "");
    assert_int_equal(zpi_buf_puts(&b, "abc"), 0);
    assert_int_equal(zpi_buf_append(&b, "de\0f", 4), 0); /* binary */
    assert_int_equal(b.len, 7);
    assert_memory_equal(b.p, "abcde\0f", 8);
    assert_int_equal(zpi_buf_printf(&b, "[%d:%s]", 42, "x"), 0);
    assert_int_equal(b.len, 13);
    assert_memory_equal(b.p + 7, "[42:x]", 7);
    assert_int_equal(zpi_buf_printf(&b, "%s", ""), 0);
    assert_int_equal(b.len, 13);

    /* Growth across many appends keeps every byte. */
    zpi_buf c = {0};
    for (int i = 0; i < 10000; i++)
        assert_int_equal(zpi_buf_printf(&c, "%05d,", i), 0);
    assert_int_equal(c.len, 60000);
    assert_true(c.cap > c.len);
    assert_int_equal(c.p[c.len], '\0');
    assert_memory_equal(c.p + 6 * 9876, "09876,", 6);
    /* One long printf. */
    char big[5000];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(zpi_buf_printf(&c, "<%s>", big), 0);
    assert_int_equal(c.len, 60000 + 5001);
    assert_int_equal(c.p[c.len - 1], '>');
    assert_int_equal(c.p[c.len], '\0');

    /* A reservation that would overflow size_t fails and keeps the buffer. */
    size_t len = b.len;
    char *p = b.p;
    assert_int_equal(zpi_buf_reserve(&b, SIZE_MAX - 3), -1);
    assert_int_equal(zpi_buf_reserve(&b, SIZE_MAX), -1);
    assert_ptr_equal(b.p, p);
    assert_int_equal(b.len, len);

    zpi_buf_free(&b);
    assert_null(b.p);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
    zpi_buf_free(&b); /* twice: fine */
    zpi_buf_free(&c);
}

/* ----------------------------------------------------------------- zpi_grow */

static void test_grow(void **state)
{
    (void)state;
    int *a = NULL;
    size_t cap = 0;
    void *v = a;
    assert_int_equal(zpi_grow(&v, &cap, 1, sizeof *a), 0);
    a = v;
    assert_true(cap >= 16);
    for (size_t i = 0; i < cap; i++)
        a[i] = (int)i;
    size_t old = cap;
    assert_int_equal(zpi_grow(&v, &cap, old, sizeof *a), 0); /* enough: unchanged */
    assert_int_equal(cap, old);
    assert_int_equal(zpi_grow(&v, &cap, old + 1, sizeof *a), 0);
    a = v;
    assert_true(cap >= 2 * old);
    for (size_t i = 0; i < old; i++)
        assert_int_equal(a[i], (int)i);

    /* Sizes that overflow size_t fail with ENOMEM and keep the array. */
    void *keep = v;
    size_t kcap = cap;
    errno = 0;
    assert_int_equal(zpi_grow(&v, &cap, SIZE_MAX, 1), -1);
    assert_int_equal(errno, ENOMEM);
    errno = 0;
    assert_int_equal(zpi_grow(&v, &cap, SIZE_MAX / 8 + 1, 16), -1); /* count fits, bytes do not */
    assert_int_equal(errno, ENOMEM);
    assert_int_equal(zpi_grow(&v, &cap, (SIZE_MAX >> 1) + 2, 2), -1);
    assert_ptr_equal(v, keep);
    assert_int_equal(cap, kcap);

    /* elem 0 is refused without freeing the array (realloc(p, 0) frees). */
    errno = 0;
    assert_int_equal(zpi_grow(&v, &cap, cap + 1, 0), -1);
    assert_int_equal(errno, EINVAL);
    assert_ptr_equal(v, keep);
    a = v;
    a[0] = 7; /* still ours */
    assert_int_equal(a[0], 7);
    free(v);
}

/* ----------------------------------------------------------------- zpi_fifo */

struct item {
    int value;
    zpi_fifo_node node;
};

static void test_fifo(void **state)
{
    (void)state;
    zpi_fifo q = {0};
    assert_null(zpi_fifo_pop(&q));
    struct item it[5];
    for (int i = 0; i < 5; i++) {
        it[i].value = i;
        zpi_fifo_push(&q, &it[i].node);
    }
    assert_int_equal(q.n, 5);
    for (int i = 0; i < 3; i++) {
        zpi_fifo_node *x = zpi_fifo_pop(&q);
        assert_non_null(x);
        assert_null(x->next);
        assert_int_equal(ZPI_CONTAINER_OF(x, struct item, node)->value, i);
    }
    /* Push after partial drain, then empty it: order kept, tail reset. */
    zpi_fifo_push(&q, &it[0].node);
    assert_int_equal(q.n, 3);
    int want[] = {3, 4, 0};
    for (int i = 0; i < 3; i++)
        assert_int_equal(ZPI_CONTAINER_OF(zpi_fifo_pop(&q), struct item, node)->value, want[i]);
    assert_null(zpi_fifo_pop(&q));
    assert_int_equal(q.n, 0);
    assert_null(q.head);
    assert_null(q.tail);
    zpi_fifo_push(&q, &it[2].node); /* usable again */
    assert_ptr_equal(q.head, &it[2].node);
    assert_ptr_equal(q.tail, &it[2].node);
    assert_ptr_equal(zpi_fifo_pop(&q), &it[2].node);
}

/* ---------------------------------------------------------- small helpers */

static void test_has_suffix_strdup(void **state)
{
    (void)state;
    assert_true(zpi_has_suffix("a.jsonl.zst", ".zst"));
    assert_true(zpi_has_suffix("a.jsonl.zst", ""));
    assert_true(zpi_has_suffix(".zst", ".zst"));
    assert_false(zpi_has_suffix("zst", ".zst"));
    assert_false(zpi_has_suffix("a.jsonl", ".zst"));
    assert_false(zpi_has_suffix("", "x"));
    char *d = zpi_strdup("copy");
    assert_string_equal(d, "copy");
    free(d);
    assert_null(zpi_strdup(NULL));
}

/* ------------------------------------------------------------------ zpi_err */

static void test_err_set_msg(void **state)
{
    (void)state;
    zpi_err e;
    zpi_err_clear(&e);
    assert_int_equal(e.code, ZP_OK);
    assert_string_equal(zpi_err_msg(&e), "");
    assert_string_equal(zpi_err_msg(NULL), "");

    assert_int_equal(zpi_err_set(&e, ZP_ERR_INVALID, "world_size = %u: must be at least 1", 0u),
                     ZP_ERR_INVALID);
    assert_int_equal(e.code, ZP_ERR_INVALID);
    assert_string_equal(zpi_err_msg(&e), "world_size = 0: must be at least 1");

    /* A code without a message reads as the status name. */
    assert_int_equal(zpi_err_set(&e, ZP_ERR_IO, NULL), ZP_ERR_IO);
    assert_string_equal(zpi_err_msg(&e), zp_status_str(ZP_ERR_IO));

    /* NULL handle: the code comes back, nothing is written. */
    assert_int_equal(zpi_err_set(NULL, ZP_ERR_LIMIT, "x"), ZP_ERR_LIMIT);

    /* Long messages are truncated and terminated. */
    char big[3 * ZPI_ERRMAX];
    memset(big, 'q', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    zpi_err_set(&e, ZP_ERR_FORMAT, "%s", big);
    assert_int_equal(strlen(zpi_err_msg(&e)), ZPI_ERRMAX - 1);
}

/* A new message may quote the old one: e->msg is both an argument and the
 * destination. */
static void test_err_set_quotes_old_message(void **state)
{
    (void)state;
    zpi_err e;
    zpi_err_set(&e, ZP_ERR_IO, "data/a.jsonl: cannot open: No such file or directory");
    zpi_err_set(&e, ZP_ERR_IO, "shard 3 (%s) failed", e.msg);
    assert_string_equal(zpi_err_msg(&e),
                        "shard 3 (data/a.jsonl: cannot open: No such file or directory) failed");
    zpi_err_set(&e, ZP_ERR_FORMAT, "%s; again: %s", e.msg, e.msg);
    assert_string_equal(zpi_err_msg(&e),
                        "shard 3 (data/a.jsonl: cannot open: No such file or directory) failed; "
                        "again: shard 3 (data/a.jsonl: cannot open: No such file or directory) "
                        "failed");
    assert_int_equal(e.code, ZP_ERR_FORMAT);
}

static void test_err_prefix_copy(void **state)
{
    (void)state;
    zpi_err e, f;
    zpi_err_set(&e, ZP_ERR_FORMAT, "line 3: expected a string");
    assert_int_equal(zpi_err_prefix(&e, "%s", "data/b.jsonl"), ZP_ERR_FORMAT);
    assert_string_equal(zpi_err_msg(&e), "data/b.jsonl: line 3: expected a string");
    assert_int_equal(zpi_err_prefix(&e, "shard %d", 7), ZP_ERR_FORMAT);
    assert_string_equal(zpi_err_msg(&e), "shard 7: data/b.jsonl: line 3: expected a string");
    /* An empty "what" adds no empty colon. */
    assert_int_equal(zpi_err_prefix(&e, "%s", ""), ZP_ERR_FORMAT);
    assert_string_equal(zpi_err_msg(&e), "shard 7: data/b.jsonl: line 3: expected a string");
    /* Prefixing a code without a message names the status. */
    zpi_err_set(&f, ZP_ERR_NOMEM, NULL);
    zpi_err_prefix(&f, "index of %s", "x.jsonl");
    assert_string_equal(zpi_err_msg(&f), "index of x.jsonl: out of memory");
    assert_int_equal(zpi_err_prefix(NULL, "x"), ZP_OK);

    /* Copy: dst gets code and message; NULL dst returns the code. */
    assert_int_equal(zpi_err_copy(&f, &e), ZP_ERR_FORMAT);
    assert_int_equal(f.code, ZP_ERR_FORMAT);
    assert_string_equal(zpi_err_msg(&f), zpi_err_msg(&e));
    assert_int_equal(zpi_err_copy(NULL, &e), ZP_ERR_FORMAT);
    assert_int_equal(zpi_err_copy(&f, &f), ZP_ERR_FORMAT);
    assert_int_equal(zpi_err_copy(&f, NULL), ZP_OK);

    zpi_err_clear(&f);
    assert_int_equal(f.code, ZP_OK);
    assert_string_equal(zpi_err_msg(&f), "");
}

static zp_status forward_helper(zpi_err *e, int fail)
{
    ZPI_RETURN_ERR_IF(fail == 1, e, ZP_ERR_LIMIT, "limit %d", fail);
    ZPI_FORWARD_IF_ERR(fail == 2 ? zpi_err_set(e, ZP_ERR_IO, "io") : ZP_OK);
    return ZP_OK;
}

static void test_err_macros(void **state)
{
    (void)state;
    zpi_err e;
    zpi_err_clear(&e);
    assert_int_equal(forward_helper(&e, 0), ZP_OK);
    assert_string_equal(zpi_err_msg(&e), "");
    assert_int_equal(forward_helper(&e, 1), ZP_ERR_LIMIT);
    assert_string_equal(zpi_err_msg(&e), "limit 1");
    assert_int_equal(forward_helper(&e, 2), ZP_ERR_IO);
    assert_string_equal(zpi_err_msg(&e), "io");
    /* A success keeps the last message (as errno). */
    assert_int_equal(forward_helper(&e, 0), ZP_OK);
    assert_string_equal(zpi_err_msg(&e), "io");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_u64_limits),
        cmocka_unit_test(test_parse_u64_range),
        cmocka_unit_test(test_parse_u64_suffixes),
        cmocka_unit_test(test_parse_u64_garbage),
        cmocka_unit_test(test_parse_double),
        cmocka_unit_test(test_mkdir_p),
        cmocka_unit_test(test_write_file_atomic),
        cmocka_unit_test(test_write_file_atomic_concurrent),
        cmocka_unit_test(test_buf),
        cmocka_unit_test(test_grow),
        cmocka_unit_test(test_fifo),
        cmocka_unit_test(test_has_suffix_strdup),
        cmocka_unit_test(test_err_set_msg),
        cmocka_unit_test(test_err_set_quotes_old_message),
        cmocka_unit_test(test_err_prefix_copy),
        cmocka_unit_test(test_err_macros),
    };
    return cmocka_run_group_tests_name("util", tests, NULL, NULL);
}
