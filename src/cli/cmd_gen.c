/* cmd_gen.c - `zephon gen --out DIR ...`: a synthetic English-like text
 * dataset of {"id": N, "text": "..."} records in jsonl or jsonl.zst shards,
 * plus DIR/manifest.json.
 *
 * Output depends only on the options (seed, shard count, sizes, level):
 * every shard has its own random streams, ids are assigned from a
 * precomputed plan, and each shard is compressed by one thread, so the
 * thread count changes nothing. Text is built from whole words copied from
 * a table (one 64-bit random number drives several words), fast enough that
 * zstd dominates. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <zstd.h>

#include "cli.h"
#include "util.h"
#include "zephon/dataset.h"

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

typedef struct gen_opts {
    const char *out;
    unsigned shards;
    uint64_t samples_per_shard;
    uint64_t total_bytes;
    int level;
    int zst;
    uint64_t seed;
    int uneven;
    int hash;
    unsigned threads;
} gen_opts;

typedef struct shard_job {
    uint64_t count;    /* records */
    uint64_t first_id; /* id of the first record */
    char *path;
    /* results */
    uint64_t decoded, written;
    int failed;
    char err[512];
} shard_job;

typedef struct gen_ctx {
    const gen_opts *o;
    const word_table *words;
    shard_job *jobs;
    pthread_mutex_t mu;
    unsigned next; /* next job to take */
} gen_ctx;

#define CHUNK ((size_t)4 << 20)         /* records are compressed in chunks this large */

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int gen_shard(const gen_ctx *g, unsigned si, shard_job *j)
{
    const gen_opts *o = g->o;
    int fd = open(j->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(j->err, sizeof j->err, "cannot create '%s': %s", j->path, strerror(errno));
        return -1;
    }
    const size_t in_cap = CHUNK + MAX_DOC + 512;
    const size_t out_cap = ZSTD_compressBound(in_cap);
    char *in = malloc(in_cap);
    char *outb = o->zst ? malloc(out_cap) : NULL;
    ZSTD_CCtx *cc = o->zst ? ZSTD_createCCtx() : NULL;
    int rc = -1;
    if (!in || (o->zst && (!outb || !cc))) {
        snprintf(j->err, sizeof j->err, "out of memory");
        goto out;
    }
    if (cc) {
        ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, o->level);
        ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
    }
    rng lens = rng_for(o->seed, si, 1), text = rng_for(o->seed, si, 2);
    size_t n = 0;
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
            if (write_all(fd, in, n) != 0)
                goto io_err;
            j->written += n;
            n = 0;
            continue;
        }
        /* Each chunk is one frame whose header records its size, so that
         * readers can decode a whole shard in one call into a buffer of
         * the exact size. */
        ZSTD_CCtx_reset(cc, ZSTD_reset_session_only);
        ZSTD_CCtx_setPledgedSrcSize(cc, n);
        ZSTD_inBuffer ib = {in, n, 0};
        size_t left;
        do {
            ZSTD_outBuffer ob = {outb, out_cap, 0};
            left = ZSTD_compressStream2(cc, &ob, &ib, ZSTD_e_end);
            if (ZSTD_isError(left)) {
                snprintf(j->err, sizeof j->err, "'%s': zstd: %s", j->path, ZSTD_getErrorName(left));
                goto out;
            }
            if (write_all(fd, outb, ob.pos) != 0)
                goto io_err;
            j->written += ob.pos;
        } while (left != 0);
        n = 0;
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
static int plan(const gen_opts *o, shard_job *jobs)
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

/* ------------------------------------------------------------ command */

static void gen_usage(FILE *f)
{
    fprintf(f,
            "usage: zephon gen --out DIR [--shards N] [--samples-per-shard N | --bytes TOTAL]\n"
            "                  [--format jsonl|jsonl.zst] [--zstd-level L] [--seed S]\n"
            "                  [--uneven] [--hash] [--threads T]\n"
            "\n"
            "Generate a synthetic text dataset: records {\"id\": N, \"text\": \"...\"} with\n"
            "English-like text (200 B - 20 KB per document), deterministic in the options.\n"
            "  --out DIR              output folder (created); writes shard-NNNNN.* and\n"
            "                         manifest.json\n"
            "  --shards N             number of shards (default 4)\n"
            "  --samples-per-shard N  records per shard (default 1000)\n"
            "  --bytes TOTAL          instead: about TOTAL bytes of JSONL in all (suffixes\n"
            "                         k, M, G = 10^3, 10^6, 10^9; Ki, Mi, Gi = 2^10, ...)\n"
            "  --format F             jsonl or jsonl.zst (default jsonl.zst)\n"
            "  --zstd-level L         zstd level (default 3)\n"
            "  --seed S               random seed (default 1)\n"
            "  --uneven               very uneven shard sizes (each half the previous)\n"
            "  --hash                 write XXH64 content hashes into the manifest\n"
            "  --threads T            worker threads (default: online CPUs); the output\n"
            "                         does not depend on it\n");
}

static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v <= 0)
        return -1;
    double m = 1;
    if (*end) {
        int bin = end[1] == 'i';
        switch (end[0]) {
        case 'k': case 'K': m = bin ? 1024.0 : 1e3; break;
        case 'm': case 'M': m = bin ? 1048576.0 : 1e6; break;
        case 'g': case 'G': m = bin ? 1073741824.0 : 1e9; break;
        case 't': case 'T': m = bin ? 1099511627776.0 : 1e12; break;
        default: return -1;
        }
        const char *rest = end + 1 + bin;
        if (*rest == 'B')
            rest++;
        if (*rest)
            return -1;
    }
    *out = (uint64_t)(v * m);
    return *out ? 0 : -1;
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-')
        return -1;
    *out = v;
    return 0;
}

static int mkdir_p(const char *dir)
{
    char *p = strdup(dir);
    if (!p)
        return -1;
    for (char *s = p + 1; *s; s++) {
        if (*s == '/') {
            *s = '\0';
            if (mkdir(p, 0755) != 0 && errno != EEXIST) {
                free(p);
                return -1;
            }
            *s = '/';
        }
    }
    int r = mkdir(p, 0755) != 0 && errno != EEXIST ? -1 : 0;
    free(p);
    return r;
}

/* The manifest goes through the library's writer. Counts are known here, so
 * a small seed manifest carries them in and nothing is read back. */
static int write_manifest(const gen_opts *o, const shard_job *jobs, char *err, size_t errcap)
{
    size_t dl = strlen(o->out);
    char *seed = malloc(dl + 32), *final = malloc(dl + 32);
    json_t *root = json_object(), *arr = json_array();
    zp_dataset *ds = NULL;
    int rc = -1;
    if (!seed || !final || !root || !arr) {
        snprintf(err, errcap, "out of memory");
        goto out;
    }
    snprintf(seed, dl + 32, "%s/.zephon-gen-%ld.json", o->out, (long)getpid());
    snprintf(final, dl + 32, "%s/manifest.json", o->out);
    json_object_set_new(root, "format_version", json_integer(1));
    json_object_set(root, "shards", arr);
    for (unsigned s = 0; s < o->shards; s++) {
        json_t *e = json_object();
        json_object_set_new(e, "path", json_string(strrchr(jobs[s].path, '/') + 1));
        json_object_set_new(e, "samples", json_integer((json_int_t)jobs[s].count));
        json_array_append_new(arr, e);
    }
    if (json_dump_file(root, seed, 0) != 0) {
        snprintf(err, errcap, "cannot write '%s': %s", seed, strerror(errno));
        goto out;
    }
    if (zp_dataset_create(NULL, &ds) != ZP_OK) {
        snprintf(err, errcap, "out of memory");
        goto out;
    }
    if (zp_dataset_add(ds, seed) != ZP_OK ||
        zp_dataset_write_manifest(ds, final, o->hash) != ZP_OK) {
        snprintf(err, errcap, "%s", zp_dataset_errmsg(ds));
        goto out;
    }
    rc = 0;
out:
    if (seed)
        unlink(seed);
    zp_dataset_destroy(ds);
    json_decref(arr);
    json_decref(root);
    free(final);
    free(seed);
    return rc;
}

int zp_cmd_gen(int argc, char **argv)
{
    static const struct option opts[] = {
        {"out", required_argument, NULL, 'o'},
        {"shards", required_argument, NULL, 'n'},
        {"samples-per-shard", required_argument, NULL, 's'},
        {"bytes", required_argument, NULL, 'b'},
        {"zstd-level", required_argument, NULL, 'l'},
        {"format", required_argument, NULL, 'f'},
        {"seed", required_argument, NULL, 'S'},
        {"uneven", no_argument, NULL, 'u'},
        {"hash", no_argument, NULL, 'H'},
        {"threads", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    gen_opts o = {.shards = 4, .level = 3, .zst = 1, .seed = 1};
    uint64_t v = 0;
    int c;
    optind = 0;
    while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        const char *bad = NULL;
        switch (c) {
        case 'o': o.out = optarg; break;
        case 'n':
            if (parse_u64(optarg, &v) || v == 0 || v > 1000000)
                bad = "--shards";
            o.shards = (unsigned)v;
            break;
        case 's':
            if (parse_u64(optarg, &v) || v == 0)
                bad = "--samples-per-shard";
            o.samples_per_shard = v;
            break;
        case 'b':
            if (parse_size(optarg, &o.total_bytes))
                bad = "--bytes";
            break;
        case 'l':
            if (parse_u64(optarg, &v) || v < 1 || (int)v > ZSTD_maxCLevel())
                bad = "--zstd-level";
            o.level = (int)v;
            break;
        case 'f':
            if (!strcmp(optarg, "jsonl"))
                o.zst = 0;
            else if (!strcmp(optarg, "jsonl.zst"))
                o.zst = 1;
            else
                bad = "--format";
            break;
        case 'S':
            if (parse_u64(optarg, &o.seed))
                bad = "--seed";
            break;
        case 'u': o.uneven = 1; break;
        case 'H': o.hash = 1; break;
        case 't':
            if (parse_u64(optarg, &v) || v == 0 || v > 1024)
                bad = "--threads";
            o.threads = (unsigned)v;
            break;
        case 'h': gen_usage(stdout); return 0;
        default: gen_usage(stderr); return 2;
        }
        if (bad) {
            fprintf(stderr, "zephon gen: %s: invalid value '%s'\n", bad, optarg);
            return 2;
        }
    }
    if (!o.out || optind < argc) {
        fprintf(stderr, "zephon gen: %s\n\n", !o.out ? "--out DIR is required" : "unexpected argument");
        gen_usage(stderr);
        return 2;
    }
    if (o.total_bytes && o.samples_per_shard) {
        fprintf(stderr, "zephon gen: give --samples-per-shard or --bytes, not both\n");
        return 2;
    }
    if (!o.total_bytes && !o.samples_per_shard)
        o.samples_per_shard = 1000;
    if (!o.threads) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        o.threads = nc > 0 ? (unsigned)nc : 1;
    }
    if (o.threads > o.shards)
        o.threads = o.shards;
    if (mkdir_p(o.out) != 0) {
        fprintf(stderr, "zephon gen: cannot create folder '%s': %s\n", o.out, strerror(errno));
        return 1;
    }

    double t0 = zpi_now();
    word_table *words = malloc(sizeof *words);
    shard_job *jobs = calloc(o.shards, sizeof *jobs);
    pthread_t *th = calloc(o.threads, sizeof *th);
    int rc = 1;
    if (!words || !jobs || !th) {
        fprintf(stderr, "zephon gen: out of memory\n");
        goto out;
    }
    word_table_init(words);
    if (plan(&o, jobs) != 0) {
        fprintf(stderr, "zephon gen: out of memory\n");
        goto out;
    }
    for (unsigned s = 0; s < o.shards; s++) {
        size_t n = strlen(o.out) + 40;
        jobs[s].path = malloc(n);
        if (!jobs[s].path) {
            fprintf(stderr, "zephon gen: out of memory\n");
            goto out;
        }
        snprintf(jobs[s].path, n, "%s/shard-%05u.%s", o.out, s, o.zst ? "jsonl.zst" : "jsonl");
    }
    gen_ctx g = {.o = &o, .words = words, .jobs = jobs};
    pthread_mutex_init(&g.mu, NULL);
    unsigned started = 0;
    for (; started < o.threads; started++)
        if (pthread_create(&th[started], NULL, gen_worker, &g) != 0)
            break;
    if (started == 0)
        gen_worker(&g);
    for (unsigned i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&g.mu);
    double t_gen = zpi_now() - t0;

    uint64_t samples = 0, decoded = 0, written = 0;
    for (unsigned s = 0; s < o.shards; s++) {
        if (jobs[s].failed) {
            fprintf(stderr, "zephon gen: shard %u: %s\n", s, jobs[s].err);
            goto out;
        }
        samples += jobs[s].count;
        decoded += jobs[s].decoded;
        written += jobs[s].written;
    }
    char err[1024];
    if (write_manifest(&o, jobs, err, sizeof err) != 0) {
        fprintf(stderr, "zephon gen: manifest: %s\n", err);
        goto out;
    }
    double t_all = zpi_now() - t0;
    printf("generated %u shards (%s), %llu samples, %.1f MB of JSONL", o.shards,
           o.zst ? "jsonl.zst" : "jsonl", (unsigned long long)samples, (double)decoded / 1e6);
    if (o.zst)
        printf(" -> %.1f MB compressed (ratio %.2f, level %d)", (double)written / 1e6,
               written ? (double)decoded / (double)written : 0.0, o.level);
    printf("\nin %.2f s (%.0f MB/s of JSONL, %u threads); wrote %s/manifest.json\n", t_all,
           t_gen > 0 ? (double)decoded / 1e6 / t_gen : 0.0, o.threads, o.out);
    rc = 0;
out:
    if (jobs)
        for (unsigned s = 0; s < o.shards; s++)
            free(jobs[s].path);
    free(jobs);
    free(th);
    free(words);
    return rc;
}
