/* test_fsio.c - durable writes and the sweep of dead writers' temporaries
 * (src/base/fsio.c). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/fsio.h"

static char g_dir[PATH_MAX];

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/zp_test_fsio.XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void path_in(char *out, size_t cap, const char *name)
{
    int n = snprintf(out, cap, "%s/%s", g_dir, name);
    assert_true(n > 0 && (size_t)n < cap);
}

static int exists(const char *name)
{
    char p[PATH_MAX];
    path_in(p, sizeof p, name);
    struct stat sb;
    return lstat(p, &sb) == 0;
}

static void touch(const char *name)
{
    char p[PATH_MAX];
    path_in(p, sizeof p, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    close(fd);
}

static size_t count_entries(void)
{
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", g_dir);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    unsigned long n = 0;
    assert_int_equal(fscanf(f, "%lu", &n), 1);
    pclose(f);
    return n;
}

/* This host's token, from a temporary the library names. */
static void my_host(char *out, size_t cap)
{
    char fin[PATH_MAX], tmp[PATH_MAX];
    int fd;
    path_in(fin, sizeof fin, "probe");
    assert_int_equal(zpi_tmp_open(fin, tmp, sizeof tmp, &fd, NULL), ZP_OK);
    close(fd);
    const char *base = strrchr(tmp, '/') + 1, *h;
    size_t fl, hl;
    long pid;
    assert_int_equal(zpi_tmp_parse(base, &fl, &h, &hl, &pid), 1);
    assert_int_equal(fl, 5);
    assert_int_equal(pid, (long)getpid());
    snprintf(out, cap, "%.*s", (int)hl, h);
    unlink(tmp);
}

/* A pid that is certainly dead: a child that exited and was reaped. */
static long dead_pid(void)
{
    pid_t c = fork();
    assert_true(c >= 0);
    if (c == 0)
        _exit(0);
    int ws;
    assert_int_equal(waitpid(c, &ws, 0), c);
    assert_int_equal(kill(c, 0), -1);
    assert_int_equal(errno, ESRCH);
    return (long)c;
}

static void test_write_durable(void **state)
{
    (void)state;
    char p[PATH_MAX];
    path_in(p, sizeof p, "doc.json");
    zpi_err err = {0};
    assert_int_equal(zpi_write_durable(p, "first", 5, &err), ZP_OK);
    assert_int_equal(zpi_write_durable(p, "second!", 7, &err), ZP_OK);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    char buf[32] = {0};
    assert_int_equal(fread(buf, 1, sizeof buf, f), 7);
    fclose(f);
    assert_string_equal(buf, "second!");
    assert_int_equal(count_entries(), 1); /* no temporary left */
    assert_int_equal(zpi_write_durable(p, NULL, 0, &err), ZP_OK);

    /* a folder that does not exist: an error naming the path, nothing made */
    char bad[PATH_MAX];
    path_in(bad, sizeof bad, "no/such/folder/doc.json");
    assert_int_equal(zpi_write_durable(bad, "x", 1, &err), ZP_ERR_IO);
    assert_non_null(strstr(zpi_err_msg(&err), "no/such/folder/doc.json"));
    /* a folder in the way of the final name: the temporary is removed */
    char sub[PATH_MAX];
    path_in(sub, sizeof sub, "sub");
    assert_int_equal(mkdir(sub, 0755), 0);
    assert_int_equal(zpi_write_durable(sub, "x", 1, &err), ZP_ERR_IO);
    assert_non_null(strstr(zpi_err_msg(&err), "rename"));
    assert_int_equal(count_entries(), 2); /* doc.json and sub */
    rmdir(sub);
}

static void test_tmp_stream(void **state)
{
    (void)state;
    char fin[PATH_MAX], tmp[PATH_MAX];
    int fd;
    path_in(fin, sizeof fin, "stream.bin");
    assert_int_equal(zpi_tmp_open(fin, tmp, sizeof tmp, &fd, NULL), ZP_OK);
    assert_non_null(strstr(tmp, "stream.bin" ZPI_TMP_MARK));
    assert_int_equal(write(fd, "abc", 3), 3);
    assert_int_equal(close(fd), 0);
    assert_false(exists("stream.bin"));
    assert_int_equal(zpi_tmp_commit(tmp, fin, NULL), ZP_OK);
    assert_true(exists("stream.bin"));
    assert_int_equal(access(tmp, F_OK), -1);

    /* a buffer too small for the name is an error, not a truncated name */
    char small[16];
    zpi_err err = {0};
    assert_int_equal(zpi_tmp_open(fin, small, sizeof small, &fd, &err), ZP_ERR_INVALID);
    assert_int_equal(fd, -1);
    unlink(fin);
}

static void test_tmp_parse(void **state)
{
    (void)state;
    size_t fl, hl;
    const char *h;
    long pid;
    assert_int_equal(zpi_tmp_parse("STATE.zptmp.node-1.1234.0a1b2c3d", &fl, &h, &hl, &pid), 1);
    assert_int_equal(fl, 5);
    assert_int_equal(hl, 6);
    assert_memory_equal(h, "node-1", 6);
    assert_int_equal(pid, 1234);
    /* a final name that holds dots and the marker itself */
    assert_int_equal(zpi_tmp_parse("a.zptmp.b.json.zptmp.h.1.ffffffff", &fl, &h, &hl, &pid), 1);
    assert_int_equal(fl, strlen("a.zptmp.b.json"));
    /* not ours: the old mkstemp names, other suffixes, bad fields */
    const char *no[] = {"STATE.tmp.Ab12Cd",
                        "STATE.zptmp.h.12.0a1b2c3",   /* 7 hex */
                        "STATE.zptmp.h.12.0A1B2C3D",  /* upper case */
                        "STATE.zptmp.h.x2.0a1b2c3d",  /* pid */
                        "STATE.zptmp..12.0a1b2c3d",   /* empty host */
                        ".zptmp.h.12.0a1b2c3d",       /* empty final name */
                        "STATE.zptmp.h.12.0a1b2c3d~", /* trailing */
                        "STATE.zptmp.h!.12.0a1b2c3d", /* host character */
                        "STATE.zpTmp.h.12.0a1b2c3d"};
    for (size_t i = 0; i < sizeof no / sizeof *no; i++)
        assert_int_equal(zpi_tmp_parse(no[i], &fl, &h, &hl, &pid), 0);
}

/* The sweep removes a dead writer's temporary of this host and nothing
 * else: a live writer's, another host's, a name the project did not make,
 * another final name's when one is given. */
static void test_tmp_sweep(void **state)
{
    (void)state;
    char host[80], name[PATH_MAX];
    my_host(host, sizeof host);
    long dead = dead_pid();
    long live = (long)getppid(); /* alive and not this process */

    snprintf(name, sizeof name, "STATE" ZPI_TMP_MARK "%s.%ld.0000abcd", host, dead);
    touch(name);
    char dead_name[PATH_MAX];
    snprintf(dead_name, sizeof dead_name, "%s", name);
    snprintf(name, sizeof name, "STATE" ZPI_TMP_MARK "%s.%ld.0000abcd", host, live);
    touch(name);
    char live_name[PATH_MAX];
    snprintf(live_name, sizeof live_name, "%s", name);
    snprintf(name, sizeof name, "STATE" ZPI_TMP_MARK "%s.%ld.0000abcd", host, (long)getpid());
    touch(name);
    char own_name[PATH_MAX];
    snprintf(own_name, sizeof own_name, "%s", name);
    snprintf(name, sizeof name, "STATE" ZPI_TMP_MARK "otherhost%s.%ld.0000abcd", host, dead);
    touch(name);
    char other_host[PATH_MAX];
    snprintf(other_host, sizeof other_host, "%s", name);
    snprintf(name, sizeof name, "OTHER" ZPI_TMP_MARK "%s.%ld.0000abcd", host, dead);
    touch(name);
    char other_final[PATH_MAX];
    snprintf(other_final, sizeof other_final, "%s", name);
    touch("STATE.tmp.Xy12Ab"); /* a foreign name */
    snprintf(name, sizeof name, "STATE" ZPI_TMP_MARK "%s.%ld.0000abcd.keep", host, dead);
    touch(name);
    char suffixed[PATH_MAX];
    snprintf(suffixed, sizeof suffixed, "%s", name);

    assert_int_equal(zpi_tmp_sweep(g_dir, "STATE"), 1);
    assert_false(exists(dead_name));
    assert_true(exists(live_name));
    assert_true(exists(own_name));
    assert_true(exists(other_host));
    assert_true(exists(other_final));
    assert_true(exists("STATE.tmp.Xy12Ab"));
    assert_true(exists(suffixed));
    /* without a final name: every dead writer's temporary of this host */
    assert_int_equal(zpi_tmp_sweep(g_dir, NULL), 1);
    assert_false(exists(other_final));
    assert_true(exists(live_name));
    assert_int_equal(zpi_tmp_sweep(g_dir, NULL), 0);
    /* by the final path */
    touch(dead_name);
    char fin[PATH_MAX];
    path_in(fin, sizeof fin, "STATE");
    assert_int_equal(zpi_tmp_sweep_for(fin), 1);
    assert_false(exists(dead_name));
    /* a folder that cannot be read */
    char missing[PATH_MAX];
    path_in(missing, sizeof missing, "missing");
    assert_int_equal(zpi_tmp_sweep(missing, NULL), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_write_durable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tmp_stream, setup, teardown),
        cmocka_unit_test(test_tmp_parse),
        cmocka_unit_test_setup_teardown(test_tmp_sweep, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
