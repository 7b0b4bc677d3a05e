/*
 * throttle.c - the per-host window of transfers, shared by the node's
 * processes through a file in the shard cache folder (throttle.h has the
 * model).
 *
 * The file holds one fixed-size record (below), read and written whole
 * under an exclusive flock. A record that is not one (another version, a
 * short file) is started afresh. Times are CLOCK_MONOTONIC nanoseconds
 * (zpi_now_ns), the same clock for every process of the node.
 *
 * Thread safety: one thread per zpi_throttle; processes are serialised by
 * the flock.
 */
#include "io/throttle.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "base/util.h"

#define MAGIC 0x3230524854505a5aULL /* "ZZPTHR02" */
#define SLOTS 128
#define WINDOW_MAX 1024.0
#define DECREASE 0.9
/* A host not asked for this long starts afresh (not limited): what it
 * said then says little now (and a window left by an earlier job would
 * slow the next one down). */
#define STALE_NS 60000000000ULL

typedef struct slot {
    int32_t pid;
    uint32_t active;
} slot;

typedef struct shared {
    uint64_t magic;
    double window;
    uint64_t last_cut_ns;   /* the last decrease (0: none yet) */
    double srtt_ns;         /* smoothed time of a good answer (0: none yet) */
    uint64_t paced_ns;      /* when the first good answer gave srtt_ns */
    uint64_t next_start_ns; /* paced: no request starts before it */
    double begun;           /* requests started within about the last srtt_ns */
    uint64_t begun_ns;      /* when begun was last brought up to date */
    uint64_t refused_ns;    /* the last start refused (by the window or the pacing) */
    uint64_t touched_ns;    /* the last begin or end */
    uint32_t avoid;         /* 0: slow start (+1 a good answer), 1: +1/window */
    uint32_t pad;
    slot slots[SLOTS];
} shared;

typedef struct host {
    char key[256];
    int fd;          /* the shared file, -1: process-local */
    shared local;    /* the state when fd < 0, and the copy read under the lock */
} host;

struct zpi_throttle {
    char *dir;
    int32_t pid;
    host *hosts;
    size_t n, alloc;
};

zpi_throttle *zpi_throttle_create(const char *dir)
{
    zpi_throttle *th = calloc(1, sizeof *th);
    if (!th)
        return NULL;
    th->pid = (int32_t)getpid();
    if (dir && *dir && !(th->dir = zpi_strdup(dir))) {
        free(th);
        return NULL;
    }
    return th;
}

void zpi_throttle_destroy(zpi_throttle *th)
{
    if (!th)
        return;
    for (size_t i = 0; i < th->n; i++)
        if (th->hosts[i].fd >= 0)
            close(th->hosts[i].fd);
    free(th->hosts);
    free(th->dir);
    free(th);
}

void zpi_throttle_host(const char *spec, const char *s3_endpoint, char *buf, size_t cap)
{
    const char *url = spec;
    if (!strncasecmp(spec, "s3://", 5) && s3_endpoint)
        url = s3_endpoint;
    const char *p = strstr(url, "://");
    size_t sl = p ? (size_t)(p - url) : 0;
    const char *auth = p ? p + 3 : url;
    size_t al = strcspn(auth, "/?#");
    const char *at = memchr(auth, '@', al); /* credentials are not part of the key */
    if (at) {
        al -= (size_t)(at + 1 - auth);
        auth = at + 1;
    }
    if (sl + 3 + al + 1 > cap) {
        zpi_fmt(buf, cap, "%.*s", (int)(cap - 1), url);
        return;
    }
    size_t w = 0;
    for (size_t i = 0; i < sl; i++)
        buf[w++] = (char)tolower((unsigned char)url[i]);
    memcpy(buf + w, "://", 3);
    w += 3;
    for (size_t i = 0; i < al; i++)
        buf[w++] = (char)tolower((unsigned char)auth[i]);
    buf[w] = '\0';
}

static void fresh(shared *s)
{
    memset(s, 0, sizeof *s);
    s->magic = MAGIC;
    s->window = WINDOW_MAX;
}

static host *find_host(zpi_throttle *th, const char *key)
{
    for (size_t i = 0; i < th->n; i++)
        if (!strcmp(th->hosts[i].key, key))
            return &th->hosts[i];
    if (zpi_grow((void **)&th->hosts, &th->alloc, th->n + 1, sizeof *th->hosts) != 0)
        return NULL;
    host *h = &th->hosts[th->n++];
    memset(h, 0, sizeof *h);
    zpi_fmt(h->key, sizeof h->key, "%s", key);
    fresh(&h->local);
    h->fd = -1;
    if (th->dir) {
        char path[4400];
        zpi_fmt(path, sizeof path, "%s/.zephon-throttle-%016llx", th->dir,
                (unsigned long long)XXH64(key, strlen(key), 0));
        int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        struct stat sb;
        /* only a regular file of this user's (the folder is one user's) */
        if (fd >= 0 && (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_uid != geteuid())) {
            close(fd);
            fd = -1;
        }
        h->fd = fd; /* when it cannot be opened: this process's own state */
    }
    return h;
}

/* The state of h, locked (shared file: flock + read). */
static shared *lock_state(host *h)
{
    shared *s = &h->local;
    if (h->fd >= 0) {
        while (flock(h->fd, LOCK_EX) != 0 && errno == EINTR) {
        }
        ssize_t r = pread(h->fd, s, sizeof *s, 0);
        if (r != (ssize_t)sizeof *s || s->magic != MAGIC || !(s->window >= 1.0) ||
            !(s->window <= WINDOW_MAX))
            fresh(s);
    }
    uint64_t now = zpi_now_ns();
    if (s->touched_ns > now || now - s->touched_ns > STALE_NS) {
        /* not asked for a while (or times of before a reboot): the window
         * afresh, the processes' requests in flight kept */
        slot keep[SLOTS];
        memcpy(keep, s->slots, sizeof keep);
        fresh(s);
        memcpy(s->slots, keep, sizeof keep);
    }
    s->touched_ns = now;
    return s;
}

static void unlock_state(host *h)
{
    if (h->fd < 0)
        return;
    ssize_t w = pwrite(h->fd, &h->local, sizeof h->local, 0);
    (void)w; /* a failed write loses one update of a shared estimate: harmless */
    flock(h->fd, LOCK_UN);
}

/* This process's slot (taken when it has none: a free one or a dead
 * process's); the requests in flight on the node into *total. NULL when
 * every slot is taken by a live process. */
static slot *my_slot(zpi_throttle *th, shared *s, uint64_t *total)
{
    slot *mine = NULL, *free_slot = NULL;
    *total = 0;
    for (int i = 0; i < SLOTS; i++) {
        slot *sl = &s->slots[i];
        if (sl->pid == th->pid) {
            mine = sl;
        } else if (sl->pid != 0 && kill(sl->pid, 0) != 0 && errno == ESRCH) {
            sl->pid = 0; /* a process that died with requests in flight */
            sl->active = 0;
        }
        if (sl->pid == 0 && !free_slot)
            free_slot = sl;
        *total += sl->active;
    }
    if (!mine && free_slot) {
        mine = free_slot;
        mine->pid = th->pid;
        mine->active = 0;
    }
    return mine;
}

/* s->begun decayed to now: exponentially over srtt_ns, so that at a
 * steady rate it is the requests started within one answer time. */
static double begun_now(shared *s, uint64_t now)
{
    if (s->srtt_ns <= 0 || now <= s->begun_ns)
        return s->begun;
    return s->begun * exp(-(double)(now - s->begun_ns) / s->srtt_ns);
}

int zpi_throttle_begin(zpi_throttle *th, const char *key, uint64_t *start_ns)
{
    host *h = find_host(th, key);
    uint64_t now = zpi_now_ns();
    *start_ns = now;
    if (!h)
        return 1; /* out of memory: not throttled */
    shared *s = lock_state(h);
    uint64_t total;
    slot *mine = my_slot(th, s, &total);
    /* the window counts whole requests: floor(window) of them, at least 1 */
    uint64_t limit = (uint64_t)(s->window + 1e-9);
    int ok = !mine || total < (limit ? limit : 1);
    /* once slowed down, starts are spread evenly: one per answer time /
     * window, so that the node's requests reach the host as a steady rate
     * and not in bursts of a window at a time */
    int paced = s->window < WINDOW_MAX && s->srtt_ns > 0;
    if (ok && paced && now < s->next_start_ns)
        ok = 0;
    if (!ok)
        s->refused_ns = now;
    if (ok && mine) {
        mine->active++;
        s->begun = begun_now(s, now) + 1.0;
        s->begun_ns = now;
        if (paced) {
            uint64_t from = s->next_start_ns > now ? s->next_start_ns : now;
            s->next_start_ns = from + (uint64_t)(s->srtt_ns / s->window);
        }
    }
    unlock_state(h);
    return ok;
}

void zpi_throttle_end(zpi_throttle *th, const char *key, uint64_t start_ns,
                      zpi_thr_outcome outcome)
{
    host *h = find_host(th, key);
    if (!h)
        return;
    shared *s = lock_state(h);
    uint64_t total;
    slot *mine = my_slot(th, s, &total);
    if (mine && mine->active > 0)
        mine->active--; /* total still counts this request */
    uint64_t now = zpi_now_ns();
    /* one decrease per congestion event: for a request started after the
     * last one, and at most once per answer time (before a good answer has
     * given one: once), since the answers to the requests started within
     * an answer time after a decrease still show the load before it */
    int new_event = start_ns >= s->last_cut_ns &&
                    (s->last_cut_ns == 0 ||
                     (s->srtt_ns > 0 && (double)(now - s->last_cut_ns) >= s->srtt_ns));
    if (outcome == ZPI_THR_SLOWDOWN && new_event) {
        /* from what the host was really sent: the requests started within
         * the last answer time (the rate it refused, times the answer
         * time); before an answer time is known, those in flight. Never
         * from a window far above them. */
        double base = s->srtt_ns > 0 ? begun_now(s, now) : (double)total;
        if (base > s->window)
            base = s->window;
        s->window = base * DECREASE < 1.0 ? 1.0 : base * DECREASE;
        s->last_cut_ns = now;
        /* a decrease of paced requests ends the slow start; one of the
         * first burst (sent before any answer time was known, unpaced)
         * says little about the rate the host takes: the slow start goes
         * on from the lowered window and finds it */
        if (s->srtt_ns > 0 && start_ns > s->paced_ns)
            s->avoid = 1;
    } else if (outcome == ZPI_THR_OK) {
        double rtt = (double)(now > start_ns ? now - start_ns : 0);
        if (s->srtt_ns <= 0)
            s->paced_ns = now;
        s->srtt_ns = s->srtt_ns > 0 ? s->srtt_ns * 0.875 + rtt * 0.125 : rtt;
        /* grows only while the window is what limits the requests: a start
         * was refused within the last answer time */
        if (s->window < WINDOW_MAX && s->refused_ns &&
            (double)(now - s->refused_ns) <= s->srtt_ns) {
            s->window += s->avoid ? 1.0 / s->window : 1.0;
            if (s->window > WINDOW_MAX)
                s->window = WINDOW_MAX;
        }
    }
    unlock_state(h);
}

double zpi_throttle_window(zpi_throttle *th, const char *key)
{
    for (size_t i = 0; i < th->n; i++)
        if (!strcmp(th->hosts[i].key, key)) {
            host *h = &th->hosts[i];
            double w = lock_state(h)->window;
            unlock_state(h);
            return w;
        }
    return 0;
}
