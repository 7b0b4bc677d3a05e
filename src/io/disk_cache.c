/*
 * disk_cache.c - the shard cache on local disk (see disk_cache.h).
 *
 * Names in the cache's folder (everything else there is ignored, never
 * deleted):
 *   .zephon-cache.lock             the folder lock (flock), never deleted
 *   <key>.zdc                      a complete object
 *   <key>.zdc.lock                 the lock of a download: one line
 *                                  "zdc1 <host> <pid> <nonce hex> <reserved bytes>";
 *                                  its mtime is the lease (renewed by the owner)
 *   <key>.zdc.part.<nonce hex16>   the temporary file of the download <nonce>
 * The suffixes keep the cache's files apart from a user's files in the same
 * folder (the default folder is a shared temporary folder). The transfers'
 * per-host windows (.zephon-throttle-<hash>, io/throttle.h) live there
 * too; like every other name, the cache ignores them.
 *
 * Every decision (hit, takeover, eviction, commit) is made holding the
 * cache's mutex and an exclusive flock() of the folder lock, so threads of
 * one process and processes on the node agree. The folder is rescanned for
 * each download that starts: the byte count lives in the file system only.
 *
 * Ownership: the cache owns its fds; a READY entry owns its pin fd until
 * release/invalidate, a DOWNLOAD entry its temporary file until
 * commit/abort. Thread safety: all functions from any thread.
 */
#include "io/disk_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"

#define DC_KEYMAX 150
#define DC_DIRLOCK ".zephon-cache.lock"
#define SFX_DONE ".zdc"
#define SFX_LOCK ".zdc.lock"
#define SFX_PART ".zdc.part."
#define DC_NONCE_HEX 16

typedef struct dc_pin {
    char key[DC_KEYMAX + 1];
    unsigned n;
} dc_pin;

struct zpi_disk_cache {
    char *dir;
    uint64_t limit;
    double lease_s;
    zpi_next_use_fn next_use;
    void *next_use_user;
    zp_log_fn log;
    void *log_user;
    char host[320];
    pid_t pid;
    uint64_t nonce_ctr;

    pthread_mutex_t mu;
    int lockfd; /* the folder lock, open for the cache's life */
    dc_pin *pins;
    size_t npins, cappins;
    zpi_disk_cache_stats st;
};

/* ------------------------------------------------------------------ names */

static int key_ok(const char *k)
{
    size_t n = 0;
    for (; k[n]; n++) {
        char ch = k[n];
        if (n >= DC_KEYMAX)
            return 0;
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == '-'))
            return 0;
    }
    return n > 0;
}

static void path_of(const zpi_disk_cache *c, char *buf, size_t cap, const char *key,
                    const char *sfx)
{
    zpi_fmt(buf, cap, "%s/%s%s", c->dir, key, sfx);
}

static void part_path(const zpi_disk_cache *c, char *buf, size_t cap, const char *key,
                      uint64_t nonce)
{
    zpi_fmt(buf, cap, "%s/%s" SFX_PART "%016" PRIx64, c->dir, key, nonce);
}

enum { N_OTHER = 0, N_DONE, N_LOCK, N_PART };

/* Classifies a folder entry; the key (validated) goes to key, the nonce of a
 * temporary file to *nonce. */
static int classify(const char *name, char key[DC_KEYMAX + 1], uint64_t *nonce)
{
    size_t n = strlen(name), kl;
    int kind = N_OTHER;
    const size_t lp = strlen(SFX_PART) + DC_NONCE_HEX;
    if (zpi_has_suffix(name, SFX_LOCK)) {
        kind = N_LOCK;
        kl = n - strlen(SFX_LOCK);
    } else if (zpi_has_suffix(name, SFX_DONE)) {
        kind = N_DONE;
        kl = n - strlen(SFX_DONE);
    } else if (n > lp && memcmp(name + n - lp, SFX_PART, strlen(SFX_PART)) == 0) {
        uint64_t v = 0;
        for (size_t i = n - DC_NONCE_HEX; i < n; i++) {
            char ch = name[i];
            int d;
            if (ch >= '0' && ch <= '9')
                d = ch - '0';
            else if (ch >= 'a' && ch <= 'f')
                d = ch - 'a' + 10;
            else
                return N_OTHER;
            v = v << 4 | (uint64_t)d;
        }
        kind = N_PART;
        kl = n - lp;
        *nonce = v;
    } else {
        return N_OTHER;
    }
    if (kl == 0 || kl > DC_KEYMAX)
        return N_OTHER;
    memcpy(key, name, kl);
    key[kl] = '\0';
    return key_ok(key) ? kind : N_OTHER;
}

/* ------------------------------------------------------------------ locks */

static void dc_log(zpi_disk_cache *c, zp_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void dc_log(zpi_disk_cache *c, zp_log_level lvl, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    zpi_vlog(c->log, c->log_user, lvl, fmt, ap);
    va_end(ap);
}

static zp_status lock_all(zpi_disk_cache *c, zpi_err *err)
{
    pthread_mutex_lock(&c->mu);
    while (flock(c->lockfd, LOCK_EX) != 0) {
        if (errno == EINTR)
            continue;
        int e = errno;
        pthread_mutex_unlock(&c->mu);
        return zpi_err_set(err, ZP_ERR_IO, "%s/" DC_DIRLOCK ": cannot lock: %s", c->dir,
                           strerror(e));
    }
    return ZP_OK;
}

static void unlock_all(zpi_disk_cache *c)
{
    flock(c->lockfd, LOCK_UN);
    pthread_mutex_unlock(&c->mu);
}

typedef struct dc_lockinfo {
    int parsed;
    char host[320];
    long pid;
    uint64_t nonce, reserved;
    int live;
} dc_lockinfo;

static double real_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Reads the lock file of key. 0: none; 1: present (li filled); -1: error (errno). */
static int read_lock(zpi_disk_cache *c, const char *key, dc_lockinfo *li)
{
    char p[4096];
    path_of(c, p, sizeof p, key, SFX_LOCK);
    memset(li, 0, sizeof *li);
    int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    struct stat st;
    char buf[512];
    long n = zpi_read_full(fd, buf, sizeof buf - 1);
    int ok = fstat(fd, &st) == 0;
    int e = errno;
    close(fd);
    if (!ok || n < 0) {
        errno = e;
        return -1;
    }
    buf[n] = '\0';
    unsigned long long nonce = 0, res = 0;
    if (sscanf(buf, "zdc1 %319s %ld %llx %llu", li->host, &li->pid, &nonce, &res) == 4) {
        li->parsed = 1;
        li->nonce = nonce;
        li->reserved = res;
    }
    double mt = (double)st.st_mtim.tv_sec + (double)st.st_mtim.tv_nsec * 1e-9;
    li->live = real_now() - mt <= c->lease_s;
    if (li->live && li->parsed && strcmp(li->host, c->host) == 0 && li->pid > 0 &&
        kill((pid_t)li->pid, 0) != 0 && errno == ESRCH)
        li->live = 0; /* its owner, a process of this host, is gone */
    return 1;
}

static uint64_t new_nonce(zpi_disk_cache *c)
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
        r = 0;
    r ^= zpi_hash2(zpi_now_ns() ^ (uint64_t)c->pid, ++c->nonce_ctr ^ (uint64_t)(uintptr_t)c);
    return r ? r : 1;
}

/* ------------------------------------------------------------------ pins */

static dc_pin *pin_find(zpi_disk_cache *c, const char *key)
{
    for (size_t i = 0; i < c->npins; i++)
        if (strcmp(c->pins[i].key, key) == 0)
            return &c->pins[i];
    return NULL;
}

static int pin_add(zpi_disk_cache *c, const char *key)
{
    dc_pin *p = pin_find(c, key);
    if (p) {
        p->n++;
        return 0;
    }
    if (zpi_grow((void **)&c->pins, &c->cappins, c->npins + 1, sizeof *c->pins) != 0)
        return -1;
    p = &c->pins[c->npins++];
    zpi_fmt(p->key, sizeof p->key, "%s", key);
    p->n = 1;
    return 0;
}

static void pin_drop(zpi_disk_cache *c, const char *key)
{
    dc_pin *p = pin_find(c, key);
    if (p && --p->n == 0)
        *p = c->pins[--c->npins];
}

/* ------------------------------------------------------------------ scan */

typedef struct dc_done {
    char key[DC_KEYMAX + 1];
    uint64_t size;
    struct timespec mtime;
    uint64_t next;
} dc_done;

typedef struct dc_scan {
    dc_done *done;
    size_t ndone, capdone;
    uint64_t total; /* complete files + live reservations */
} dc_scan;

static void scan_free(dc_scan *s)
{
    free(s->done);
    memset(s, 0, sizeof *s);
}

/* What to do when the cache's file system is full (ENOSPC, EDQUOT); "" for
 * any other errno. Appended to every message of a failed write. */
static const char *full_hint(int en)
{
    return en == ENOSPC || en == EDQUOT
               ? ": the cache's file system is full: free space there, or give a smaller cache "
                 "limit or another cache folder"
               : "";
}

/* Lists the folder (locks held): complete files, live reservations; deletes
 * the temporary files of dead or missing locks and dead lock files. */
static zp_status scan(zpi_disk_cache *c, dc_scan *s, zpi_err *err)
{
    memset(s, 0, sizeof *s);
    DIR *d = opendir(c->dir);
    if (!d)
        return zpi_err_set(err, ZP_ERR_IO, "%s: cannot list the cache folder: %s", c->dir,
                           strerror(errno));
    struct dirent *de;
    char key[DC_KEYMAX + 1], p[4096];
    uint64_t nonce = 0;
    zp_status rc = ZP_OK;
    while ((de = readdir(d)) != NULL) {
        int kind = classify(de->d_name, key, &nonce);
        if (kind == N_DONE) {
            struct stat st;
            zpi_fmt(p, sizeof p, "%s/%s", c->dir, de->d_name);
            if (lstat(p, &st) != 0 || !S_ISREG(st.st_mode))
                continue;
            if (zpi_grow((void **)&s->done, &s->capdone, s->ndone + 1, sizeof *s->done) != 0) {
                rc = zpi_err_set(err, ZP_ERR_NOMEM, "%s: out of memory listing the cache", c->dir);
                break;
            }
            dc_done *f = &s->done[s->ndone++];
            memcpy(f->key, key, sizeof key);
            f->size = (uint64_t)st.st_size;
            f->mtime = st.st_mtim;
            f->next = UINT64_MAX;
            s->total += f->size;
        } else if (kind == N_LOCK) {
            dc_lockinfo li;
            if (read_lock(c, key, &li) != 1)
                continue;
            if (li.live) {
                s->total += li.reserved;
                continue;
            }
            /* A dead download: its temporary file and its lock go. */
            if (li.parsed) {
                part_path(c, p, sizeof p, key, li.nonce);
                if (unlink(p) == 0) {
                    c->st.stale_cleaned++;
                    dc_log(c, ZP_LOG_WARN, "%s: removed the partial download of a dead owner", p);
                }
            }
            path_of(c, p, sizeof p, key, SFX_LOCK);
            unlink(p);
        } else if (kind == N_PART) {
            dc_lockinfo li;
            int r = read_lock(c, key, &li);
            if (r == 1 && li.live && (!li.parsed || li.nonce == nonce))
                continue;
            if (r < 0)
                continue;
            zpi_fmt(p, sizeof p, "%s/%s", c->dir, de->d_name);
            if (unlink(p) == 0) {
                c->st.stale_cleaned++;
                dc_log(c, ZP_LOG_WARN, "%s: removed a stale partial download", p);
            }
        }
    }
    closedir(d);
    if (rc != ZP_OK)
        scan_free(s);
    return rc;
}

/* Eviction order: unknown next use first (least recently used first among
 * them), then the farthest next use first. */
static int evict_cmp(const void *a, const void *b)
{
    const dc_done *x = a, *y = b;
    if (x->next != y->next)
        return x->next > y->next ? -1 : 1;
    if (x->mtime.tv_sec != y->mtime.tv_sec)
        return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec)
        return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
    return strcmp(x->key, y->key);
}

/* Makes room for `size` more bytes for `key` (locks held). 1: done (or, for
 * a demand, as much as possible); 0: a prefetch without room (nothing
 * evicted). */
static int make_room(zpi_disk_cache *c, dc_scan *s, const char *key, uint64_t size, int demand)
{
    if (s->total + size <= c->limit)
        return 1;
    uint64_t own = c->next_use && !demand ? c->next_use(c->next_use_user, key) : UINT64_MAX;
    for (size_t i = 0; i < s->ndone; i++)
        s->done[i].next = c->next_use ? c->next_use(c->next_use_user, s->done[i].key) : UINT64_MAX;
    if (s->ndone > 1)
        qsort(s->done, s->ndone, sizeof *s->done, evict_cmp);
    int *fds = malloc((s->ndone ? s->ndone : 1) * sizeof *fds);
    if (!fds)
        return demand;
    size_t nfd = 0;
    uint64_t freed = 0;
    char p[4096];
    for (size_t i = 0; i < s->ndone && s->total - freed + size > c->limit; i++) {
        dc_done *f = &s->done[i];
        fds[i] = -1;
        if (!demand && !(f->next > own || (f->next == UINT64_MAX && own == UINT64_MAX)))
            continue; /* needed no later than what the prefetch fetches */
        if (pin_find(c, f->key))
            continue;
        path_of(c, p, sizeof p, f->key, SFX_DONE);
        int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
            continue;
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) { /* pinned by a reader */
            close(fd);
            continue;
        }
        fds[i] = fd;
        nfd = i + 1;
        freed += f->size;
    }
    int fits = s->total - freed + size <= c->limit;
    int doit = fits || demand;
    for (size_t i = 0; i < nfd; i++) {
        if (fds[i] < 0)
            continue;
        if (doit) {
            struct stat a, b;
            path_of(c, p, sizeof p, s->done[i].key, SFX_DONE);
            if (fstat(fds[i], &a) == 0 && lstat(p, &b) == 0 && a.st_ino == b.st_ino &&
                a.st_dev == b.st_dev && unlink(p) == 0) {
                c->st.evictions++;
                s->total -= s->done[i].size;
                char nx[32] = "unknown";
                if (s->done[i].next != UINT64_MAX)
                    zpi_fmt(nx, sizeof nx, "at %llu", (unsigned long long)s->done[i].next);
                dc_log(c, ZP_LOG_DEBUG, "evicted: %s (next use %s) for %s (%s)", s->done[i].key,
                       nx, key, demand ? "needed now" : "look-ahead");
            }
        }
        close(fds[i]);
    }
    free(fds);
    return doit;
}

/* ------------------------------------------------------------------ API */

/* The cache's folder: created when missing (0700; its parents with the
 * usual 0755, less the umask), then checked, since the cache trusts what
 * the folder holds: it must be a folder of this user (not one another user
 * made first, nor reached through another user's symbolic link) that no
 * one else can write. */
static zp_status dir_prepare(const char *dir, zpi_err *err)
{
    char parent[4096];
    zpi_fmt(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    while (slash && slash > parent && slash[1] == '\0') { /* "a/b/" */
        *slash = '\0';
        slash = strrchr(parent, '/');
    }
    if (slash && slash > parent) {
        *slash = '\0';
        if (zpi_mkdir_p(parent, 0755) != 0)
            return zpi_err_set(err, ZP_ERR_IO, "shard cache folder %s: cannot create %s: %s",
                               dir, parent, strerror(errno));
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return zpi_err_set(err, ZP_ERR_IO, "shard cache folder %s: cannot create it: %s", dir,
                           strerror(errno));
    uid_t me = geteuid();
    struct stat ls, st;
    if (lstat(dir, &ls) == 0 && S_ISLNK(ls.st_mode) && ls.st_uid != me && ls.st_uid != 0)
        return zpi_err_set(err, ZP_ERR_INVALID,
                           "shard cache folder %s: a symbolic link of another user (uid %u): "
                           "not used (it decides where this user's shards go); remove it, or "
                           "give a folder of your own as the cache folder",
                           dir, (unsigned)ls.st_uid);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return zpi_err_set(err, ZP_ERR_IO, "shard cache folder %s: cannot open it: %s", dir,
                           strerror(e));
    }
    close(fd);
    if (st.st_uid != me)
        return zpi_err_set(err, ZP_ERR_INVALID,
                           "shard cache folder %s: belongs to uid %u, not to this user (uid %u): "
                           "not used (whoever made it could read this user's shards or replace "
                           "them); remove it, or give a folder of your own as the cache folder",
                           dir, (unsigned)st.st_uid, (unsigned)me);
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        return zpi_err_set(err, ZP_ERR_INVALID,
                           "shard cache folder %s: writable by %s (mode %04o): not used (they "
                           "could replace the shards read from it); make it private "
                           "(chmod 700 %s) or give another cache folder",
                           dir, (st.st_mode & S_IWOTH) ? "every user" : "its group",
                           (unsigned)(st.st_mode & 07777), dir);
    return ZP_OK;
}

zp_status zpi_disk_cache_create(const zpi_disk_cache_config *cfg, zpi_disk_cache **out,
                                zpi_err *err)
{
    *out = NULL;
    ZPI_RETURN_ERR_IF(!cfg || !cfg->dir || !cfg->dir[0], err, ZP_ERR_INVALID,
                      "shard cache: no folder given");
    ZPI_RETURN_ERR_IF(!(cfg->lease_s > 0), err, ZP_ERR_INVALID,
                      "shard cache %s: lease %g s: must be above 0", cfg->dir, cfg->lease_s);
    ZPI_RETURN_ERR_IF(cfg->limit_bytes == 0, err, ZP_ERR_INVALID,
                      "shard cache %s: the byte limit must be above 0", cfg->dir);
    ZPI_RETURN_ERR_IF(strlen(cfg->dir) > 3800, err, ZP_ERR_INVALID,
                      "shard cache %.64s...: folder name too long", cfg->dir);
    ZPI_FORWARD_IF_ERR(dir_prepare(cfg->dir, err));
    zpi_disk_cache *c = calloc(1, sizeof *c);
    if (!c || !(c->dir = zpi_strdup(cfg->dir))) {
        free(c);
        return zpi_err_set(err, ZP_ERR_NOMEM, "shard cache %s: out of memory", cfg->dir);
    }
    size_t dl = strlen(c->dir);
    while (dl > 1 && c->dir[dl - 1] == '/')
        c->dir[--dl] = '\0';
    c->limit = cfg->limit_bytes;
    c->lease_s = cfg->lease_s;
    c->next_use = cfg->next_use;
    c->next_use_user = cfg->next_use_user;
    c->log = cfg->log;
    c->log_user = cfg->log_user;
    c->pid = getpid();
    char hn[256] = "";
    if (gethostname(hn, sizeof hn - 1) != 0 || !hn[0])
        zpi_fmt(hn, sizeof hn, "localhost");
    for (char *q = hn; *q; q++)
        if (*q == ' ' || *q == '\t' || *q == '\n')
            *q = '_';
    /* The pid namespace too: pids are compared only within one. */
    struct stat ns;
    if (stat("/proc/self/ns/pid", &ns) == 0)
        zpi_fmt(c->host, sizeof c->host, "%s/%llu", hn, (unsigned long long)ns.st_ino);
    else
        zpi_fmt(c->host, sizeof c->host, "%s", hn);
    pthread_mutex_init(&c->mu, NULL);
    char p[4096];
    zpi_fmt(p, sizeof p, "%s/" DC_DIRLOCK, c->dir);
    c->lockfd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (c->lockfd < 0) {
        zp_status s = zpi_err_set(err, ZP_ERR_IO, "shard cache: cannot open %s: %s", p,
                                  strerror(errno));
        zpi_disk_cache_destroy(c);
        return s;
    }
    zp_status s = lock_all(c, err);
    if (s == ZP_OK) {
        dc_scan sc;
        s = scan(c, &sc, err);
        /* A folder filled under a larger limit (an earlier run's) is brought
         * within this one now: unpinned files go, in eviction order. */
        if (s == ZP_OK && sc.total > c->limit)
            (void)make_room(c, &sc, "", 0, 1);
        if (s == ZP_OK)
            c->st.bytes_in_cache = sc.total;
        scan_free(&sc);
        unlock_all(c);
    }
    if (s != ZP_OK) {
        zpi_disk_cache_destroy(c);
        return s;
    }
    *out = c;
    return ZP_OK;
}

void zpi_disk_cache_destroy(zpi_disk_cache *c)
{
    if (!c)
        return;
    if (c->lockfd >= 0)
        close(c->lockfd);
    pthread_mutex_destroy(&c->mu);
    free(c->pins);
    free(c->dir);
    free(c);
}

const char *zpi_disk_cache_dir(const zpi_disk_cache *c) { return c->dir; }

/* Opens and pins the complete file of e->key (locks held). */
static zp_status pin_open(zpi_disk_cache *c, zpi_dc_entry *e, zpi_err *err)
{
    path_of(c, e->path, sizeof e->path, e->key, SFX_DONE);
    int fd = open(e->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return zpi_err_set(err, ZP_ERR_IO, "%s: cannot open: %s", e->path, strerror(errno));
    if (flock(fd, LOCK_SH) != 0 || pin_add(c, e->key) != 0) {
        int en = errno;
        close(fd);
        return zpi_err_set(err, ZP_ERR_IO, "%s: cannot pin: %s", e->path, strerror(en));
    }
    futimens(fd, NULL); /* last use, for LRU among files of unknown next use */
    e->fd = fd;
    e->state = ZPI_DC_READY;
    return ZP_OK;
}

static zp_status acquire_locked(zpi_disk_cache *c, const char *key, uint64_t size, int demand,
                                zpi_dc_entry *e, zpi_dc_state *state, zpi_err *err)
{
    char p[4096];
    struct stat st;
    path_of(c, p, sizeof p, key, SFX_DONE);
    if (lstat(p, &st) == 0) {
        int ours = S_ISREG(st.st_mode) && st.st_uid == geteuid();
        if ((uint64_t)st.st_size == size && ours) {
            ZPI_FORWARD_IF_ERR(pin_open(c, e, err));
            c->st.hits++;
            *state = ZPI_DC_READY;
            return ZP_OK;
        }
        if (S_ISDIR(st.st_mode))
            return zpi_err_set(err, ZP_ERR_IO, "%s: not a regular file", p);
        if (unlink(p) != 0)
            return zpi_err_set(err, ZP_ERR_IO, "%s: cannot delete the stale copy: %s", p,
                               strerror(errno));
        if (ours)
            dc_log(c, ZP_LOG_WARN, "%s: %llu bytes instead of %llu: stale, deleted", p,
                   (unsigned long long)st.st_size, (unsigned long long)size);
        else
            dc_log(c, ZP_LOG_WARN, "%s: %s: not a file this cache wrote, deleted", p,
                   S_ISLNK(st.st_mode) ? "a symbolic link" : "another user's or not a file");
    } else if (errno != ENOENT) {
        return zpi_err_set(err, ZP_ERR_IO, "%s: %s", p, strerror(errno));
    }
    dc_lockinfo li;
    int r = read_lock(c, key, &li);
    path_of(c, p, sizeof p, key, SFX_LOCK);
    if (r < 0)
        return zpi_err_set(err, ZP_ERR_IO, "%s: cannot read: %s", p, strerror(errno));
    if (r == 1 && li.live) {
        c->st.misses++;
        *state = ZPI_DC_BUSY;
        return ZP_OK;
    }
    if (r == 1) { /* take the dead lock over */
        if (li.parsed) {
            char q[4096];
            part_path(c, q, sizeof q, key, li.nonce);
            if (unlink(q) == 0)
                c->st.stale_cleaned++;
        }
        if (unlink(p) != 0 && errno != ENOENT)
            return zpi_err_set(err, ZP_ERR_IO, "%s: cannot take the expired lock over: %s", p,
                               strerror(errno));
        c->st.takeovers++;
        dc_log(c, ZP_LOG_WARN, "%s: lock of %s pid %ld taken over (%s)", p,
               li.parsed ? li.host : "?", li.parsed ? li.pid : -1L,
               li.parsed ? "lease expired or owner gone" : "unreadable and expired");
    }
    dc_scan sc;
    ZPI_FORWARD_IF_ERR(scan(c, &sc, err));
    int room = make_room(c, &sc, key, size, demand);
    uint64_t total = sc.total;
    scan_free(&sc);
    c->st.bytes_in_cache = total;
    if (!room) {
        *state = ZPI_DC_NOROOM;
        return ZP_OK;
    }
    if (total + size > c->limit) {
        uint64_t over = total + size - c->limit;
        if (over > c->st.over_limit_bytes)
            c->st.over_limit_bytes = over;
        dc_log(c, ZP_LOG_WARN,
               "shard cache %s: %s needs %llu bytes now: over the limit of %llu bytes by %llu "
               "(files in use cannot be evicted)",
               c->dir, key, (unsigned long long)size, (unsigned long long)c->limit,
               (unsigned long long)over);
    }
    uint64_t nonce = new_nonce(c);
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        int ce = errno;
        return zpi_err_set(err, ZP_ERR_IO, "%s: cannot create: %s%s", p, strerror(ce), full_hint(ce));
    }
    char line[512];
    zpi_fmt(line, sizeof line, "zdc1 %s %ld %016" PRIx64 " %" PRIu64 "\n", c->host, (long)c->pid,
            nonce, size);
    size_t ll = strlen(line);
    ssize_t w = write(fd, line, ll);
    int en = errno;
    close(fd);
    if (w != (ssize_t)ll) {
        unlink(p);
        return zpi_err_set(err, ZP_ERR_IO, "%s: cannot write: %s%s", p,
                           w < 0 ? strerror(en) : "short write", w < 0 ? full_hint(en) : "");
    }
    part_path(c, e->path, sizeof e->path, key, nonce);
    fd = open(e->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        en = errno;
        unlink(p);
        return zpi_err_set(err, ZP_ERR_IO, "%s: cannot create: %s%s", e->path, strerror(en),
                           full_hint(en));
    }
    c->st.bytes_in_cache = total + size;
    c->st.misses++;
    e->fd = fd;
    e->nonce = nonce;
    e->state = ZPI_DC_DOWNLOAD;
    *state = ZPI_DC_DOWNLOAD;
    return ZP_OK;
}

zp_status zpi_dc_acquire(zpi_disk_cache *c, const char *key, uint64_t size, int demand,
                         zpi_dc_entry *e, zpi_dc_state *state, zpi_err *err)
{
    ZPI_RETURN_ERR_IF(!key || !key_ok(key), err, ZP_ERR_INVALID,
                      "shard cache key '%.160s': must be 1 to 150 of [A-Za-z0-9._-]",
                      key ? key : "(null)");
    memset(e, 0, sizeof *e);
    e->fd = -1;
    zpi_fmt(e->key, sizeof e->key, "%s", key);
    e->size = size;
    e->state = -1;
    ZPI_FORWARD_IF_ERR(lock_all(c, err));
    zp_status s = acquire_locked(c, key, size, demand, e, state, err);
    unlock_all(c);
    if (s != ZP_OK || (*state != ZPI_DC_READY && *state != ZPI_DC_DOWNLOAD)) {
        e->fd = -1;
        e->path[0] = '\0';
    }
    return s;
}

/* 1 when the lock file of e names e's download (locks held). */
static int still_owner(zpi_disk_cache *c, const zpi_dc_entry *e)
{
    dc_lockinfo li;
    return read_lock(c, e->key, &li) == 1 && li.parsed && li.nonce == e->nonce &&
           strcmp(li.host, c->host) == 0 && li.pid == (long)c->pid;
}

zp_status zpi_dc_renew(zpi_disk_cache *c, zpi_dc_entry *e, zpi_err *err)
{
    ZPI_RETURN_ERR_IF(e->state != ZPI_DC_DOWNLOAD, err, ZP_ERR_STATE,
                      "%s: renew of a download that is not in progress", e->key);
    ZPI_FORWARD_IF_ERR(lock_all(c, err));
    zp_status s = ZP_OK;
    char p[4096];
    path_of(c, p, sizeof p, e->key, SFX_LOCK);
    if (!still_owner(c, e))
        s = zpi_err_set(err, ZP_ERR_STATE, "%s: the download's lease was lost (taken over)", p);
    else if (utimensat(AT_FDCWD, p, NULL, 0) != 0)
        s = zpi_err_set(err, ZP_ERR_IO, "%s: cannot renew the lease: %s", p, strerror(errno));
    unlock_all(c);
    return s;
}

zp_status zpi_dc_commit(zpi_disk_cache *c, zpi_dc_entry *e, zpi_err *err)
{
    ZPI_RETURN_ERR_IF(e->state != ZPI_DC_DOWNLOAD, err, ZP_ERR_STATE,
                      "%s: commit of a download that is not in progress", e->key);
    struct stat st = {0};
    if (fstat(e->fd, &st) != 0 || (uint64_t)st.st_size != e->size) {
        zp_status s = zpi_err_set(err, ZP_ERR_IO, "%s: %lld bytes written, %llu expected",
                                  e->path, (long long)st.st_size, (unsigned long long)e->size);
        zpi_dc_abort(c, e);
        return s;
    }
    if (fdatasync(e->fd) != 0 && errno != EINVAL && errno != EROFS) {
        int fe = errno;
        zp_status s = zpi_err_set(err, ZP_ERR_IO, "%s: cannot flush: %s%s", e->path,
                                  strerror(fe), full_hint(fe));
        zpi_dc_abort(c, e);
        return s;
    }
    zp_status ls = lock_all(c, err);
    if (ls != ZP_OK) { /* the lock lapses with its lease */
        close(e->fd);
        unlink(e->path);
        e->fd = -1;
        e->state = -1;
        e->path[0] = '\0';
        return ls;
    }
    char lk[4096], done[4096];
    path_of(c, lk, sizeof lk, e->key, SFX_LOCK);
    path_of(c, done, sizeof done, e->key, SFX_DONE);
    zp_status s = ZP_OK;
    close(e->fd);
    e->fd = -1;
    if (!still_owner(c, e)) {
        s = zpi_err_set(err, ZP_ERR_STATE, "%s: the download's lease was lost (taken over)", lk);
        unlink(e->path);
    } else if (rename(e->path, done) != 0) {
        s = zpi_err_set(err, ZP_ERR_IO, "%s: cannot rename to %s: %s", e->path, done,
                        strerror(errno));
        unlink(e->path);
        unlink(lk);
    } else {
        unlink(lk);
        s = pin_open(c, e, err);
    }
    unlock_all(c);
    if (s != ZP_OK) {
        e->state = -1;
        e->path[0] = '\0';
    }
    return s;
}

void zpi_dc_abort(zpi_disk_cache *c, zpi_dc_entry *e)
{
    if (e->state != ZPI_DC_DOWNLOAD)
        return;
    int locked = lock_all(c, NULL) == ZP_OK;
    if (e->fd >= 0)
        close(e->fd);
    e->fd = -1;
    unlink(e->path);
    if (locked && still_owner(c, e)) {
        char lk[4096];
        path_of(c, lk, sizeof lk, e->key, SFX_LOCK);
        unlink(lk);
    }
    if (locked)
        unlock_all(c);
    e->state = -1;
    e->path[0] = '\0';
}

void zpi_dc_release(zpi_disk_cache *c, zpi_dc_entry *e)
{
    if (e->state != ZPI_DC_READY)
        return;
    pthread_mutex_lock(&c->mu);
    if (e->fd >= 0)
        close(e->fd);
    pin_drop(c, e->key);
    pthread_mutex_unlock(&c->mu);
    e->fd = -1;
    e->state = -1;
}

void zpi_dc_invalidate(zpi_disk_cache *c, zpi_dc_entry *e)
{
    if (e->state != ZPI_DC_READY)
        return;
    int locked = lock_all(c, NULL) == ZP_OK;
    if (!locked)
        pthread_mutex_lock(&c->mu);
    struct stat a, b;
    /* Only the copy this entry read: a fresh download of the key stays. */
    if (fstat(e->fd, &a) == 0 && lstat(e->path, &b) == 0 && a.st_ino == b.st_ino &&
        a.st_dev == b.st_dev) {
        if (unlink(e->path) == 0)
            dc_log(c, ZP_LOG_WARN, "%s: found corrupt by its reader: deleted", e->path);
    }
    close(e->fd);
    pin_drop(c, e->key);
    if (locked)
        unlock_all(c);
    else
        pthread_mutex_unlock(&c->mu);
    e->fd = -1;
    e->state = -1;
}

void zpi_dc_wait(zpi_disk_cache *c, const char *key, double timeout_s)
{
    if (!key || !key_ok(key))
        return;
    double end = zpi_now() + timeout_s;
    for (;;) {
        dc_lockinfo li;
        if (read_lock(c, key, &li) != 1 || !li.live)
            return;
        double left = end - zpi_now();
        if (left <= 0)
            return;
        double d = left < 0.01 ? left : 0.01;
        struct timespec ts = {0, (long)(d * 1e9)};
        nanosleep(&ts, NULL);
    }
}

void zpi_disk_cache_stats_get(zpi_disk_cache *c, zpi_disk_cache_stats *out)
{
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    pthread_mutex_unlock(&c->mu);
}
