/* gen.c - the synthetic dataset generator (gen.h).
 *
 * Text is built from whole words copied from a table (one 64-bit random
 * number drives several words), fast enough that zstd dominates. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zstd.h>

#include "formats/segment.h"

#include "api/gen.h"
#include "base/util.h"
#include "zephon/dataset.h"
#include "base/fsio.h"

/* ------------------------------------------------------------ vocabulary */

/* Roughly by frequency: the first words are drawn most often. Entries are
 * JSON-escaped already. The tail holds rare words: non-ASCII, emoji,
 * quoted words. */
static const char *const vocab[] = {
    "the", "of", "and", "to", "a", "in", "is", "it", "you", "that", "he", "was", "for", "on",
    "are", "with", "as", "I", "his", "they", "be", "at", "one", "have", "this", "from", "or",
    "had", "by", "not", "word", "but", "what", "some", "we", "can", "out", "other", "were",
    "all", "there", "when", "up", "use", "your", "how", "said", "an", "each", "she", "which",
    "do", "their", "time", "if", "will", "way", "about", "many", "then", "them", "write",
    "would", "like", "so", "these", "her", "long", "make", "thing", "see", "him", "two", "has",
    "look", "more", "day", "could", "go", "come", "did", "number", "sound", "no", "most",
    "people", "my", "over", "know", "water", "than", "call", "first", "who", "may", "down",
    "side", "been", "now", "find", "any", "new", "work", "part", "take", "get", "place", "made",
    "live", "where", "after", "back", "little", "only", "round", "man", "year", "came", "show",
    "every", "good", "me", "give", "our", "under", "name", "very", "through", "just", "form",
    "sentence", "great", "think", "say", "help", "low", "line", "differ", "turn", "cause",
    "much", "mean", "before", "move", "right", "boy", "old", "too", "same", "tell", "does",
    "set", "three", "want", "air", "well", "also", "play", "small", "end", "put", "home",
    "read", "hand", "port", "large", "spell", "add", "even", "land", "here", "must", "big",
    "high", "such", "follow", "act", "why", "ask", "men", "change", "went", "light", "kind",
    "off", "need", "house", "picture", "try", "us", "again", "animal", "point", "mother",
    "world", "near", "build", "self", "earth", "father", "head", "stand", "own", "page",
    "should", "country", "found", "answer", "school", "grow", "study", "still", "learn",
    "plant", "cover", "food", "sun", "four", "between", "state", "keep", "eye", "never", "last",
    "let", "thought", "city", "tree", "cross", "farm", "hard", "start", "might", "story", "saw",
    "far", "sea", "draw", "left", "late", "run", "while", "press", "close", "night", "real",
    "life", "few", "north", "open", "seem", "together", "next", "white", "children", "begin",
    "got", "walk", "example", "ease", "paper", "group", "always", "music", "those", "both",
    "mark", "often", "letter", "until", "mile", "river", "car", "feet", "care", "second",
    "book", "carry", "took", "science", "eat", "room", "friend", "began", "idea", "fish",
    "mountain", "stop", "once", "base", "hear", "horse", "cut", "sure", "watch", "color", "face",
    "wood", "main", "enough", "plain", "girl", "usual", "young", "ready", "above", "ever", "red",
    "list", "though", "feel", "talk", "bird", "soon", "body", "dog", "family", "direct", "pose",
    "leave", "song", "measure", "door", "product", "black", "short", "numeral", "class", "wind",
    "question", "happen", "complete", "ship", "area", "half", "rock", "order", "fire", "south",
    "problem", "piece", "told", "knew", "pass", "since", "top", "whole", "king", "space",
    "heard", "best", "hour", "better", "true", "during", "hundred", "five", "remember", "step",
    "early", "hold", "west", "ground", "interest", "reach", "fast", "verb", "sing", "listen",
    "six", "table", "travel", "less", "morning", "ten", "simple", "several", "vowel", "toward",
    "war", "lay", "against", "pattern", "slow", "center", "love", "person", "money", "serve",
    "appear", "road", "map", "rain", "rule", "govern", "pull", "cold", "notice", "voice",
    "energy", "hunt", "probable", "bed", "brother", "egg", "ride", "cell", "believe", "perhaps",
    "pick", "sudden", "count", "square", "reason", "length", "represent", "art", "subject",
    "region", "size", "vary", "settle", "speak", "weight", "general", "ice", "matter", "circle",
    "pair", "include", "divide", "syllable", "felt", "grand", "ball", "yet", "wave", "drop",
    "heart", "present", "heavy", "dance", "engine", "position", "arm", "wide", "sail",
    "material", "fraction", "forest", "sit", "race", "window", "store", "summer", "train",
    "sleep", "prove", "lone", "leg", "exercise", "wall", "catch", "mount", "wish", "sky",
    "board", "joy", "winter", "sat", "written", "wild", "instrument", "kept", "glass", "grass",
    "cow", "job", "edge", "sign", "visit", "past", "soft", "fun", "bright", "gas", "weather",
    "month", "million", "bear", "finish", "happy", "hope", "flower", "clothe", "strange", "gone",
    "trade", "melody", "trip", "office", "receive", "row", "mouth", "exact", "symbol", "die",
    "least", "trouble", "shout", "except", "wrote", "seed", "tone", "join", "suggest", "clean",
    "break", "lady", "yard", "rise", "bad", "blow", "oil", "blood", "touch", "grew", "cent",
    "mix", "team", "wire", "cost", "lost", "brown", "wear", "garden", "equal", "sent", "choose",
    "fell", "fit", "flow", "fair", "bank", "collect", "save", "control", "decimal", "gentle",
    "woman", "captain", "practice", "separate", "difficult", "doctor", "please", "protect",
    "noon", "whose", "locate", "ring", "character", "insect", "caught", "period", "indicate",
    "radio", "spoke", "atom", "human", "history", "effect", "electric", "expect", "crop",
    "modern", "element", "hit", "student", "corner", "party", "supply", "bone", "rail",
    "imagine", "provide", "agree", "thus", "capital", "chair", "danger", "fruit", "rich",
    "thick", "soldier", "process", "operate", "guess", "necessary", "sharp", "wing", "create",
    "neighbor", "wash", "bat", "rather", "crowd", "corn", "compare", "poem", "string", "bell",
    "depend", "meat", "rub", "tube", "famous", "dollar", "stream", "fear", "sight", "thin",
    "triangle", "planet", "hurry", "chief", "colony", "clock", "mine", "tie", "enter", "major",
    "fresh", "search", "send", "yellow", "gun", "allow", "print", "dead", "spot", "desert",
    "suit", "current", "lift", "rose", "continue", "block", "chart", "hat", "sell", "success",
    "company", "subtract", "event", "particular", "deal", "swim", "term", "opposite", "wife",
    "shoe", "shoulder", "spread", "arrange", "camp", "invent", "cotton", "born", "determine",
    "quart", "nine", "truck", "noise", "level", "chance", "gather", "shop", "stretch", "throw",
    "shine", "property", "column", "molecule", "select", "wrong", "gray", "repeat", "require",
    "broad", "prepare", "salt", "nose", "plural", "anger", "claim", "continent", "oxygen",
    "sugar", "death", "pretty", "skill", "season", "solution", "magnet", "silver", "thank",
    "branch", "match", "suffix", "especially", "fig", "afraid", "huge", "sister", "steel",
    "discuss", "forward", "similar", "guide", "experience", "score", "apple", "bought", "led",
    "pitch", "coat", "mass", "card", "band", "rope", "slip", "win", "dream", "evening",
    "condition", "feed", "tool", "total", "basic", "smell", "valley", "nor", "double", "seat",
    "arrive", "master", "track", "parent", "shore", "division", "sheet", "substance", "favor",
    "connect", "post", "spend", "chord", "fat", "glad", "original", "share", "station", "dad",
    "bread", "charge", "proper", "bar", "offer", "segment", "slave", "duck", "instant",
    "market", "degree", "populate", "chick", "dear", "enemy", "reply", "drink", "occur",
    "support", "speech", "nature", "range", "steam", "motion", "path", "liquid", "log",
    "meant", "quotient", "teeth", "shell", "neck",
    /* rare tail */
    "caf\xc3\xa9", "na\xc3\xafve", "r\xc3\xa9sum\xc3\xa9", "fa\xc3\xa7" "ade", "\xc3\xbc" "ber",
    "M\xc3\xbcnchen", "S\xc3\xa3o Paulo", "\xe6\x9d\xb1\xe4\xba\xac",
    "\xe5\x8c\x97\xe4\xba\xac", "\xd0\x9c\xd0\xbe\xd1\x81\xd0\xba\xd0\xb2\xd0\xb0",
    "\xce\xb1\xce\xbb\xcf\x86\xce\xb1", "\xf0\x9f\x98\x80", "\xf0\x9f\x9a\x80",
    "\xe2\x9c\xa8", "\\\"indeed\\\"", "\\\"maybe\\\"", "(see above)", "e.g.", "etc.",
    "co-operate", "well-known", "it's", "don't", "O'Brien", "50/50", "\\\\n",
};
#define N_VOCAB (sizeof vocab / sizeof vocab[0])

#define TABLE_BITS 12
#define TABLE_SIZE (1u << TABLE_BITS)
#define WORD_SLOT 32 /* bytes per word in the copy table: one 16/32-byte copy */

typedef struct word_table {
    uint8_t len[N_VOCAB];
    char text[N_VOCAB][WORD_SLOT];
    uint16_t pick[TABLE_SIZE]; /* uniform 12-bit index -> word, Zipf-like weights */
} word_table;

/* Built once per run; read-only afterwards (shared by the threads). */
static void word_table_init(word_table *t)
{
    memset(t, 0, sizeof *t);
    for (size_t i = 0; i < N_VOCAB; i++) {
        size_t n = strlen(vocab[i]);
        if (n >= WORD_SLOT)
            n = WORD_SLOT - 1;
        t->len[i] = (uint8_t)n;
        memcpy(t->text[i], vocab[i], n);
    }
    /* weight of word i ~ 1/(i+8): a Zipf-like head without letting "the"
     * take a third of the text; every word gets at least one slot. */
    double total = 0;
    for (size_t i = 0; i < N_VOCAB; i++)
        total += 1.0 / (double)(i + 8);
    size_t spare = TABLE_SIZE - N_VOCAB, pos = 0;
    for (size_t i = 0; i < N_VOCAB; i++) {
        size_t k = 1 + (size_t)((double)spare * (1.0 / (double)(i + 8)) / total);
        for (size_t j = 0; j < k && pos < TABLE_SIZE; j++)
            t->pick[pos++] = (uint16_t)i;
    }
    while (pos < TABLE_SIZE) /* rounding leftovers go to the head */
        t->pick[pos] = (uint16_t)(pos % 16), pos++;
}

/* ------------------------------------------------------------ randomness */

typedef struct rng {
    uint64_t s;
} rng;

static inline uint64_t rng_next(rng *r) /* splitmix64 */
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static rng rng_for(uint64_t seed, uint64_t shard, uint64_t stream)
{
    rng r = {seed * 0x9e3779b97f4a7c15ULL ^ (shard + 1) * 0xd1b54a32d192ed03ULL ^ stream};
    rng_next(&r);
    r.s ^= rng_next(&r);
    return r;
}

#define MIN_DOC 200
#define MAX_DOC 20000

/* Document length: log-normal-ish (median ~1.2 KB, mean ~2 KB), clamped to
 * [200 B, 20 KB]. The normal deviate is the Irwin-Hall sum of four
 * uniforms. */
static size_t draw_len(rng *r)
{
    uint64_t x = rng_next(r);
    double u = 0;
    for (int i = 0; i < 4; i++, x >>= 16)
        u += (double)(x & 0xffff) / 65536.0;
    double z = (u - 2.0) * 1.7320508075688772;
    double l = exp(7.09 + 1.0 * z);
    if (l < MIN_DOC)
        l = MIN_DOC;
    if (l > MAX_DOC)
        l = MAX_DOC;
    return (size_t)l;
}

/* ------------------------------------------------------------ text */

static char *put_u64(char *p, uint64_t v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

/* A number token: a year, a count, a decimal or a percentage. */
static char *put_number(char *p, uint64_t x)
{
    switch (x & 3) {
    case 0: return put_u64(p, 1800 + (x >> 2) % 230);
    case 1: return put_u64(p, (x >> 2) % 10000);
    case 2:
        p = put_u64(p, (x >> 2) % 100);
        *p++ = '.';
        return put_u64(p, (x >> 9) % 10);
    default:
        p = put_u64(p, (x >> 2) % 101);
        *p++ = '%';
        return p;
    }
}

/* Write the text of one document of about `target` bytes at p (which has
 * target + 256 bytes of room: word copies are WORD_SLOT wide). Each word
 * takes 24 random bits: 12 pick the word, the rest the sentence length,
 * numbers and punctuation. Returns the end. */
static char *gen_text(const word_table *t, rng *r, char *p, size_t target)
{
    char *const stop = p + target;
    int in_sentence = 0, sentence_left = 0, space = 0;
    int par_left = 2 + (int)(rng_next(r) % 6);
    uint64_t bits = 0;
    int nbits = 0;
    while (p < stop) {
        if (nbits < 24) {
            bits = rng_next(r);
            nbits = 64;
        }
        uint32_t x = (uint32_t)bits & 0xffffff;
        bits >>= 24;
        nbits -= 24;
        if (space)
            *p++ = ' ';
        space = 1;
        if (in_sentence && ((x >> 12) & 63) == 0) {
            p = put_number(p, rng_next(r));
        } else {
            unsigned w = t->pick[x & (TABLE_SIZE - 1)];
            memcpy(p, t->text[w], WORD_SLOT);
            if (!in_sentence) {
                sentence_left = 4 + (int)((x >> 12) & 15); /* 4..19 words */
                in_sentence = 1;
                if (*p >= 'a' && *p <= 'z')
                    *p = (char)(*p - 32); /* capitalised */
            }
            p += t->len[w];
        }
        uint32_t k = (x >> 18) & 63;
        if (--sentence_left == 0) {
            *p++ = (k & 15) == 0 ? '?' : (k & 15) == 1 ? '!' : '.';
            in_sentence = 0;
            if (--par_left == 0) {
                memcpy(p, "\\n\\n", 4); /* JSON-escaped paragraph break */
                p += 4;
                space = 0;
                par_left = 2 + (int)(k % 6);
            }
        } else if ((k & 15) == 0) {
            *p++ = ',';
        } else if (k == 1) {
            *p++ = ';';
        }
    }
    if (in_sentence)
        *p++ = '.';
    return p;
}

/* ------------------------------------------------------------ plan, output */

typedef struct shard_job {
    uint64_t count;    /* records */
    uint64_t first_id; /* id of the first record */
    char *path;
    /* results */
    uint64_t decoded, written;
    int failed, nomem;
    char err[512];
} shard_job;

typedef struct gen_ctx {
    const zpi_gen_config *o;
    const word_table *words;
    shard_job *jobs;
    pthread_mutex_t mu;
    unsigned next; /* next job to take */
} gen_ctx;

#define CHUNK ((size_t)4 << 20)         /* records are compressed in chunks this large */

static int gen_shard(const gen_ctx *g, unsigned si, shard_job *j)
{
    const zpi_gen_config *o = g->o;
    int fd = open(j->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(j->err, sizeof j->err, "cannot create '%s': %s", j->path, strerror(errno));
        return -1;
    }
    zpi_seek_table tab = {0};
    const size_t in_cap = CHUNK + MAX_DOC + 512;
    const size_t out_cap = ZSTD_compressBound(in_cap);
    char *in = malloc(in_cap);
    char *outb = o->zst ? malloc(out_cap) : NULL;
    ZSTD_CCtx *cc = o->zst ? ZSTD_createCCtx() : NULL;
    int rc = -1;
    if (!in || (o->zst && (!outb || !cc))) {
        snprintf(j->err, sizeof j->err, "out of memory");
        j->nomem = 1;
        goto out;
    }
    if (cc) {
        ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, o->level);
        ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
    }
    rng lens = rng_for(o->seed, si, 1), text = rng_for(o->seed, si, 2);
    size_t n = 0;
    if (cc && o->single_frame)
        ZSTD_CCtx_reset(cc, ZSTD_reset_session_only);
    for (uint64_t i = 0; i < j->count; i++) {
        size_t target = draw_len(&lens);
        char *p = in + n;
        memcpy(p, "{\"id\": ", 7);
        p = put_u64(p + 7, j->first_id + i);
        memcpy(p, ", \"text\": \"", 11);
        p = gen_text(g->words, &text, p + 11, target);
        memcpy(p, "\"}\n", 3);
        p += 3;
        n = (size_t)(p - in);
        int last = i + 1 == j->count;
        if (n < CHUNK && !last)
            continue;
        j->decoded += n;
        if (!o->zst) {
            if (zpi_write_all(fd, in, n) != 0)
                goto io_err;
            j->written += n;
            n = 0;
            continue;
        }
        /* Each chunk is one frame whose header records its size, so that
         * readers can decode a whole shard in one call into a buffer of
         * the exact size, and that a seek table lists it (the seekable
         * format); single_frame: one frame for the shard. */
        const ZSTD_EndDirective mode = o->single_frame && !last ? ZSTD_e_continue : ZSTD_e_end;
        if (!o->single_frame) {
            ZSTD_CCtx_reset(cc, ZSTD_reset_session_only);
            ZSTD_CCtx_setPledgedSrcSize(cc, n);
        }
        ZSTD_inBuffer ib = {in, n, 0};
        size_t left;
        uint64_t fbytes = 0;
        do {
            ZSTD_outBuffer ob = {outb, out_cap, 0};
            left = ZSTD_compressStream2(cc, &ob, &ib, mode);
            if (ZSTD_isError(left)) {
                snprintf(j->err, sizeof j->err, "'%s': zstd: %s", j->path, ZSTD_getErrorName(left));
                goto out;
            }
            if (zpi_write_all(fd, outb, ob.pos) != 0)
                goto io_err;
            j->written += ob.pos;
            fbytes += ob.pos;
        } while (mode == ZSTD_e_end ? left != 0 : ib.pos < ib.size);
        if (!o->single_frame && zpi_seek_table_add(&tab, fbytes, n) != 0) {
            snprintf(j->err, sizeof j->err, "'%s': a frame too large for a seek table", j->path);
            goto out;
        }
        n = 0;
    }
    if (o->zst && !o->single_frame) {
        char *t;
        size_t tl;
        if (zpi_seek_table_encode(&tab, &t, &tl) != 0) {
            snprintf(j->err, sizeof j->err, "out of memory");
            j->nomem = 1;
            goto out;
        }
        int w = zpi_write_all(fd, t, tl);
        free(t);
        if (w != 0)
            goto io_err;
        j->written += tl;
    }
    if (close(fd) != 0) {
        fd = -1;
        goto io_err;
    }
    fd = -1;
    rc = 0;
    goto out;
io_err:
    snprintf(j->err, sizeof j->err, "cannot write '%s': %s", j->path, strerror(errno));
out:
    if (fd >= 0)
        close(fd);
    ZSTD_freeCCtx(cc);
    zpi_seek_table_free(&tab);
    free(outb);
    free(in);
    return rc;
}

static void *gen_worker(void *arg)
{
    gen_ctx *g = arg;
    for (;;) {
        pthread_mutex_lock(&g->mu);
        unsigned i = g->next++;
        pthread_mutex_unlock(&g->mu);
        if (i >= g->o->shards)
            return NULL;
        if (gen_shard(g, i, &g->jobs[i]) != 0)
            g->jobs[i].failed = 1;
    }
}

/* Records per shard. Shard weights are equal, or geometric (ratio 1/2) with
 * --uneven. With --bytes, each shard's count is how many documents of the
 * shard's own length stream fill its share of the bytes. */
static int plan(const zpi_gen_config *o, shard_job *jobs)
{
    double *w = calloc(o->shards, sizeof *w), wsum = 0;
    if (!w)
        return -1;
    for (unsigned s = 0; s < o->shards; s++) {
        w[s] = o->uneven ? ldexp(1.0, -(int)(s < 60 ? s : 60)) : 1.0;
        wsum += w[s];
    }
    uint64_t id = 0;
    for (unsigned s = 0; s < o->shards; s++) {
        uint64_t count;
        if (o->total_bytes) {
            double share = (double)o->total_bytes * w[s] / wsum;
            rng lens = rng_for(o->seed, s, 1);
            double acc = 0;
            count = 0;
            while (acc < share || count == 0) {
                acc += (double)draw_len(&lens) + 28.0; /* + the record's JSON frame */
                count++;
            }
        } else {
            double c = (double)o->samples_per_shard * o->shards * w[s] / wsum;
            count = (uint64_t)llround(c);
            if (count == 0)
                count = 1;
        }
        jobs[s].count = count;
        jobs[s].first_id = id;
        id += count;
    }
    free(w);
    return 0;
}

/* ------------------------------------------------------------ manifest */

/* The manifest, built in memory through the dataset's manifest writer:
 * the counts are known here, so a seed manifest (bytes) carries them in and
 * no shard is read back (except for its hash with cfg->hash). */
static zp_status build_manifest(const zpi_gen_config *o, const shard_job *jobs, zpi_gen_result *res,
                                zpi_err *err)
{
    zpi_buf seed = {0};
    zp_dataset *ds = NULL;
    zp_status st = ZP_ERR_NOMEM;
    int ok = zpi_buf_puts(&seed, "{\"format_version\": 1, \"shards\": [") == 0;
    for (uint32_t s = 0; ok && s < o->shards; s++)
        ok = zpi_buf_printf(&seed, "%s{\"path\": \"%s\", \"samples\": %llu}", s ? ", " : "",
                            strrchr(jobs[s].path, '/') + 1, (unsigned long long)jobs[s].count) == 0;
    ok = ok && zpi_buf_puts(&seed, "]}\n") == 0;
    if (!ok) {
        st = zpi_err_set(err, ZP_ERR_NOMEM, "out of memory building the manifest of '%s'", o->out);
        goto out;
    }
    st = zp_dataset_create(NULL, &ds);
    if (st != ZP_OK) {
        st = zpi_err_set(err, st, "manifest of '%s': %s", o->out,
                         ds ? zp_dataset_errmsg(ds) : "out of memory");
        goto out;
    }
    if ((st = zp_dataset_add_manifest_json(ds, seed.p, seed.len, o->out)) != ZP_OK ||
        (st = zp_dataset_manifest_json(ds, o->hash, o->out, &res->manifest, &res->manifest_len)) !=
            ZP_OK) {
        st = zpi_err_set(err, st, "manifest of '%s': %s", o->out, zp_dataset_errmsg(ds));
        goto out;
    }
    if (!o->no_manifest_file) {
        size_t n = strlen(o->out) + 16;
        char *path = malloc(n);
        if (!path) {
            st = zpi_err_set(err, ZP_ERR_NOMEM, "out of memory");
            goto out;
        }
        zpi_fmt(path, n, "%s/manifest.json", o->out);
        if (zpi_write_file_atomic(path, res->manifest, res->manifest_len) != 0)
            st = zpi_err_set(err, ZP_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
        free(path);
    }
out:
    if (st != ZP_OK) {
        free(res->manifest);
        res->manifest = NULL;
        res->manifest_len = 0;
    }
    zp_dataset_destroy(ds);
    zpi_buf_free(&seed);
    return st;
}

/* ------------------------------------------------------------ entry */

void zpi_gen_config_init(zpi_gen_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->shards = 4;
    cfg->zst = 1;
    cfg->level = 3;
    cfg->seed = 1;
}

zp_status zpi_gen(const zpi_gen_config *cfg, zpi_gen_result *res, zpi_err *err)
{
    memset(res, 0, sizeof *res);
    if (!cfg || !cfg->out || !*cfg->out)
        return zpi_err_set(err, ZP_ERR_INVALID, "no output folder given");
    zpi_gen_config o = *cfg;
    ZPI_RETURN_ERR_IF(o.shards < 1 || o.shards > 1000000, err, ZP_ERR_INVALID,
                      "shards = %u: must be from 1 to 1000000", o.shards);
    ZPI_RETURN_ERR_IF(o.zst && (o.level < 1 || o.level > ZSTD_maxCLevel()), err, ZP_ERR_INVALID,
                      "zstd level = %d: must be from 1 to %d", o.level, ZSTD_maxCLevel());
    ZPI_RETURN_ERR_IF(o.total_bytes && o.samples_per_shard, err, ZP_ERR_INVALID,
                      "samples_per_shard = %llu and total_bytes = %llu: give one of them",
                      (unsigned long long)o.samples_per_shard, (unsigned long long)o.total_bytes);
    ZPI_RETURN_ERR_IF(o.samples_per_shard > ((uint64_t)1 << 40) / o.shards, err, ZP_ERR_INVALID,
                      "samples_per_shard = %llu x shards = %u: more than 2^40 records",
                      (unsigned long long)o.samples_per_shard, o.shards);
    ZPI_RETURN_ERR_IF(o.total_bytes > ((uint64_t)1 << 50), err, ZP_ERR_INVALID,
                      "total_bytes = %llu: more than 2^50", (unsigned long long)o.total_bytes);
    if (!o.total_bytes && !o.samples_per_shard)
        o.samples_per_shard = 1000;
    if (!o.threads) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        o.threads = nc > 0 ? (uint32_t)nc : 1;
    }
    if (o.threads > o.shards)
        o.threads = o.shards;
    if (zpi_mkdir_p(o.out, 0755) != 0)
        return zpi_err_set(err, ZP_ERR_IO, "cannot create folder '%s': %s", o.out, strerror(errno));

    double t0 = zpi_now();
    word_table *words = malloc(sizeof *words);
    shard_job *jobs = calloc(o.shards, sizeof *jobs);
    pthread_t *th = calloc(o.threads, sizeof *th);
    zp_status st = ZP_ERR_NOMEM;
    if (!words || !jobs || !th || plan(&o, jobs) != 0) {
        zpi_err_set(err, st, "out of memory");
        goto out;
    }
    word_table_init(words);
    for (uint32_t s = 0; s < o.shards; s++) {
        size_t n = strlen(o.out) + 40;
        jobs[s].path = malloc(n);
        if (!jobs[s].path) {
            zpi_err_set(err, st, "out of memory");
            goto out;
        }
        zpi_fmt(jobs[s].path, n, "%s/shard-%05u.%s", o.out, s, o.zst ? "jsonl.zst" : "jsonl");
    }
    gen_ctx g = {.o = &o, .words = words, .jobs = jobs};
    pthread_mutex_init(&g.mu, NULL);
    uint32_t started = 0;
    for (; started < o.threads; started++)
        if (pthread_create(&th[started], NULL, gen_worker, &g) != 0)
            break;
    if (started == 0)
        gen_worker(&g);
    for (uint32_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&g.mu);
    res->gen_seconds = zpi_now() - t0;
    res->threads = started ? started : 1;

    for (uint32_t s = 0; s < o.shards; s++) {
        if (jobs[s].failed) {
            st = zpi_err_set(err, jobs[s].nomem ? ZP_ERR_NOMEM : ZP_ERR_IO, "shard %u: %s", s,
                             jobs[s].err);
            goto out;
        }
        res->samples += jobs[s].count;
        res->jsonl_bytes += jobs[s].decoded;
        res->written_bytes += jobs[s].written;
    }
    st = build_manifest(&o, jobs, res, err);
    res->seconds = zpi_now() - t0;
out:
    if (jobs)
        for (uint32_t s = 0; s < o.shards; s++)
            free(jobs[s].path);
    free(jobs);
    free(th);
    free(words);
    return st;
}
