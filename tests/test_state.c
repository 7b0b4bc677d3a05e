/*
 * test_state.c - pipeline states (src/plan/state.c): JSON render and parse
 * (round trip, every malformed field refused by name), the settings check,
 * merging rank states, the elastic re-split against an independent
 * simulation of what the old ranks delivered, describe, and the
 * `zephon state` command.
 *
 * Single-threaded; every state is built in memory and freed.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <jansson.h>
#include <xxhash.h>

#include "plan/state.h"
#include "testutil.h"
#include "zephon/state.h"
#include "zephon/worksource.h"

#define SETTINGS "{\"seq_len\":2048,\"tokenizer\":\"gpt2\",\"weights\":[0.7,0.3],\"shuffle\":true}"

static uint64_t rng_state;
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static uint64_t rnd_below(uint64_t n) { return n ? rnd() % n : 0; }

static char *xstrdup(const char *s)
{
    char *p = strdup(s);
    assert_non_null(p);
    return p;
}

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz);
    assert_non_null(p);
    return p;
}

/* A state of world W with every rank (or only `only` when >= 0), two parts,
 * default ranges at position 0. */
static void make_state(zpi_state *s, uint32_t w, uint64_t n, int rem, int only)
{
    memset(s, 0, sizeof *s);
    s->version = ZP_STATE_VERSION;
    s->seed = 7;
    s->world_size = w;
    s->epoch_samples = n;
    s->remainder = rem;
    assert_int_equal(zpi_state_settings_canon(SETTINGS, &s->settings, &s->settings_hash, NULL),
                     ZP_OK);
    s->n_parts = 2;
    s->part_names = xcalloc(2, sizeof(char *));
    s->part_names[0] = xstrdup("web");
    s->part_names[1] = xstrdup("code");
    s->part_weights = xcalloc(2, sizeof(double));
    s->part_weights[0] = 0.7;
    s->part_weights[1] = 0.3;
    s->n_ranks = only >= 0 ? 1 : w;
    s->ranks = xcalloc(s->n_ranks, sizeof *s->ranks);
    for (size_t k = 0; k < s->n_ranks; k++) {
        zpi_rank_state *r = &s->ranks[k];
        r->rank = only >= 0 ? (uint32_t)only : (uint32_t)k;
        r->n_parts = 2;
        r->part_samples = xcalloc(2, sizeof(uint64_t));
        r->part_tokens = xcalloc(2, sizeof(uint64_t));
        r->skips = xcalloc(1, sizeof(zpi_skip));
        r->plans = xcalloc(1, sizeof(zpi_epoch_plan));
    }
}

static void add_plan(zpi_rank_state *r, uint32_t epoch, const uint64_t *triples, size_t n)
{
    r->plans = realloc(r->plans, (r->n_plans + 1) * sizeof *r->plans);
    assert_non_null(r->plans);
    zpi_epoch_plan *p = &r->plans[r->n_plans++];
    p->epoch = epoch;
    p->n = n;
    p->spans = xcalloc(n, sizeof(zpi_span));
    for (size_t i = 0; i < n; i++)
        p->spans[i] = (zpi_span){triples[3 * i], triples[3 * i + 1], triples[3 * i + 2]};
}

/* A state with every kind of field filled. */
static void rich_state(zpi_state *s)
{
    make_state(s, 4, 300000, ZP_REMAINDER_PAD, -1);
    s->seed = UINT64_MAX; /* >= 2^63: written as a string */
    for (uint32_t k = 0; k < 4; k++) {
        zpi_rank_state *r = &s->ranks[k];
        r->next_batch = 120;
        r->position = 4811 + k;
        r->token_offset = k == 1 ? 37 : 0;
        r->carry = k & 1;
        r->part_samples[0] = 3000 + k;
        r->part_samples[1] = 1300;
        r->part_tokens[0] = 1u << 20;
        r->part_tokens[1] = 1u << 19;
        r->n_skips = 1;
        r->skips[0] = (zpi_skip){.first = 100, .last = 109, .samples = 55, .tokens = 20480,
                                 .from_position = 4000, .to_position = 4055};
        r->counts = (zp_pipeline_counts){119, 4300 + k, 2, 1, 3, 1572864, 10, 20, 0, 0, 0, 0, 0};
    }
    /* every rank plans epochs 0 and 1 alike (zpi_state_check): as many
     * positions each, none twice */
    const uint64_t p0[] = {0, 70000, 0, 80000, 5000, 12};
    add_plan(&s->ranks[0], 0, p0, 2);
    const uint64_t p0_1[] = {70000, 10000, 0, 85000, 65000, 0};
    add_plan(&s->ranks[1], 0, p0_1, 2);
    const uint64_t p0_2[] = {150000, 75000, 0}, p0_3[] = {225000, 75000, 0};
    add_plan(&s->ranks[2], 0, p0_2, 1);
    add_plan(&s->ranks[3], 0, p0_3, 1);
    const uint64_t p1[] = {300000, 3, 0};
    add_plan(&s->ranks[0], 1, p1, 1);
    for (uint32_t k = 1; k < 4; k++) {
        const uint64_t q[] = {3 * (k - 1), 3, 0};
        add_plan(&s->ranks[k], 1, q, 1);
    }
    s->ranks[3].counts.tokens = (uint64_t)1 << 63; /* a large count */
}

static char *render(const zpi_state *s)
{
    char *t = NULL;
    size_t len = 0;
    zpi_err err = {0};
    zp_status st = zpi_state_render(s, &t, &len, &err);
    if (st != ZP_OK)
        fail_msg("render: %s", zpi_err_msg(&err));
    assert_int_equal(strlen(t), len);
    return t;
}

/* ------------------------------------------------------------ JSON */

static void test_round_trip(void **unused)
{
    zpi_state s, p;
    rich_state(&s);
    char *a = render(&s);
    zpi_err err = {0};
    assert_int_equal(zpi_state_parse(a, strlen(a), &p, &err), ZP_OK);
    char *b = render(&p);
    assert_string_equal(a, b);
    /* the values came back */
    assert_int_equal(p.seed, UINT64_MAX);
    assert_int_equal(p.ranks[3].counts.tokens, (uint64_t)1 << 63);
    assert_int_equal(p.ranks[1].token_offset, 37);
    assert_int_equal(p.ranks[0].plans[0].spans[1].token_offset, 12);
    assert_int_equal(p.ranks[0].plans[1].spans[0].start, 300000);
    assert_true(p.part_weights[0] == 0.7);
    assert_string_equal(p.part_names[1], "code");
    assert_string_equal(p.settings, s.settings);
    assert_int_equal(p.settings_hash, XXH64(s.settings, strlen(s.settings), 0));
    /* the shape: 2-space indent, large values as strings, the hash */
    assert_non_null(strstr(a, "{\n  \"version\": 1,\n  \"seed\": \"18446744073709551615\",\n"));
    assert_non_null(strstr(a, "\"tokens\": \"9223372036854775808\""));
    assert_non_null(strstr(a, "\"weight\": 0.7}"));
    assert_non_null(strstr(a, "[80000, 5000, 12]"));
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, p.settings_hash);
    assert_non_null(strstr(a, hex));
    free(a);
    free(b);
    zpi_state_clear(&p);
    zpi_state_clear(&s);
}

static void test_settings_canon(void **unused)
{
    char *c = NULL;
    uint64_t h = 0;
    const char *in = "{ \"b\" : 1.0, \"a\": [0.1, \"x\\n\"], \"c\": null }";
    assert_int_equal(zpi_state_settings_canon(in, &c, &h, NULL), ZP_OK);
    assert_string_equal(c, "{\"b\":1.0,\"a\":[0.1,\"x\\n\"],\"c\":null}");
    assert_int_equal(h, XXH64(c, strlen(c), 0));
    free(c);
    zpi_err err = {0};
    assert_int_equal(zpi_state_settings_canon("[1]", &c, NULL, &err), ZP_ERR_INVALID);
    assert_null(c);
    assert_non_null(strstr(zpi_err_msg(&err), "not a JSON object"));
}

/* Sets (or with val NULL, deletes) the member at path ("ranks/2/position")
 * of the JSON text and returns the new text. */
static char *mutate(const char *text, const char *path, const char *val)
{
    json_t *root = json_loads(text, 0, NULL);
    assert_non_null(root);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *cur = root;
    char *save = NULL, *tok = strtok_r(buf, "/", &save);
    while (tok) {
        char *next = strtok_r(NULL, "/", &save);
        json_t *nv = NULL;
        if (!next && val) {
            nv = json_loads(val, JSON_DECODE_ANY, NULL);
            assert_non_null(nv);
        }
        if (json_is_array(cur)) {
            size_t i = strtoul(tok, NULL, 10);
            if (!next) {
                if (nv)
                    assert_int_equal(json_array_set_new(cur, i, nv), 0);
                else
                    assert_int_equal(json_array_remove(cur, i), 0);
            }
            cur = json_array_get(cur, i);
        } else {
            if (!next) {
                if (nv)
                    assert_int_equal(json_object_set_new(cur, tok, nv), 0);
                else
                    assert_int_equal(json_object_del(cur, tok), 0);
            }
            cur = json_object_get(cur, tok);
        }
        assert_true(!next || cur);
        tok = next;
    }
    char *out = json_dumps(root, JSON_INDENT(1));
    json_decref(root);
    assert_non_null(out);
    return out;
}

static void test_malformed(void **unused)
{
    static const struct {
        const char *path, *val; /* val NULL: delete */
        zp_status code;
        const char *msg;
    } cases[] = {
        {"version", "2", ZP_ERR_UNSUPPORTED, "version 2"},
        {"version", "\"1\"", ZP_ERR_FORMAT, "version: not an integer"},
        {"version", NULL, ZP_ERR_FORMAT, "version: missing"},
        {"seed", "-1", ZP_ERR_FORMAT, "seed: not an unsigned integer"},
        {"seed", "\"12x\"", ZP_ERR_FORMAT, "seed: not an unsigned integer"},
        {"seed", "1.5", ZP_ERR_FORMAT, "seed: not an unsigned integer"},
        {"world_size", "0", ZP_ERR_FORMAT, "world_size: 0"},
        {"world_size", "4294967296", ZP_ERR_FORMAT, "world_size: 4294967296 is out of range"},
        {"epoch_samples", NULL, ZP_ERR_FORMAT, "epoch_samples: missing"},
        {"epoch_samples", "0", ZP_ERR_FORMAT, "epoch_samples: 0"},
        {"remainder", "\"pads\"", ZP_ERR_FORMAT, "remainder: \"pads\""},
        {"remainder", "0", ZP_ERR_FORMAT, "remainder: not a string"},
        {"settings_hash", "\"zz\"", ZP_ERR_FORMAT, "settings_hash: \"zz\""},
        {"settings_hash", "\"0000000000000000\"", ZP_ERR_FORMAT,
         "settings_hash: 0000000000000000 does not match"},
        {"settings/seq_len", "1024", ZP_ERR_FORMAT, "settings_hash: "},
        {"settings", "[]", ZP_ERR_FORMAT, "settings: not an object"},
        {"parts/1/weight", "0", ZP_ERR_FORMAT, "parts[1].weight: 0"},
        {"parts/1/weight", "1.5", ZP_ERR_FORMAT, "parts[1].weight: 1.5"},
        {"parts/1/weight", "\"x\"", ZP_ERR_FORMAT, "parts[1].weight: not a number"},
        {"parts/0/name", "\"\"", ZP_ERR_FORMAT, "parts[0].name: empty"},
        {"parts/1/name", "\"web\"", ZP_ERR_FORMAT, "parts[1].name: \"web\" is also"},
        {"parts/0/colour", "1", ZP_ERR_FORMAT, "parts[0].colour: unknown field"},
        {"parts/0", "3", ZP_ERR_FORMAT, "parts[0]: not an object"},
        {"ranks", "[]", ZP_ERR_FORMAT, "ranks: empty"},
        {"ranks/1/rank", "9", ZP_ERR_FORMAT, "ranks[1].rank: 9: must be below world_size 4"},
        {"ranks/1/rank", "0", ZP_ERR_FORMAT, "ranks[1].rank: 0: ranks must be ascending"},
        {"ranks/2/position", "-1", ZP_ERR_FORMAT, "ranks[2].position: not an unsigned integer"},
        {"ranks/2/position", "75001", ZP_ERR_FORMAT, "ranks[2].position: 75001: past the 75000"},
        {"ranks/2/next_batch", NULL, ZP_ERR_FORMAT, "ranks[2].next_batch: missing"},
        {"ranks/2/epoch", "\"e\"", ZP_ERR_FORMAT, "ranks[2].epoch: not an unsigned integer"},
        {"ranks/2/token_offset", "true", ZP_ERR_FORMAT, "ranks[2].token_offset: not an unsigned"},
        {"ranks/0/carry", "1", ZP_ERR_FORMAT, "ranks[0].carry: not true or false"},
        {"ranks/0/plans/0/epoch", "\"a\"", ZP_ERR_FORMAT, "ranks[0].plans[0].epoch: not an"},
        {"ranks/0/plans/1/epoch", "0", ZP_ERR_FORMAT, "ranks[0].plans[1].epoch: 0: plans must"},
        {"ranks/0/plans/0/spans/1", "[1]", ZP_ERR_FORMAT, "ranks[0].plans[0].spans[1]: not [start"},
        {"ranks/0/plans/0/spans/0/1", "0", ZP_ERR_FORMAT,
         "ranks[0].plans[0].spans[0]: an empty span"},
        {"ranks/0/plans/0/spans/0/0", "-5", ZP_ERR_FORMAT, "ranks[0].plans[0].spans[0][0]: not"},
        {"ranks/0/plans/0/spans/1/2", "\"x\"", ZP_ERR_FORMAT, "ranks[0].plans[0].spans[1][2]: not"},
        {"ranks/0/plans/0/spans", "{}", ZP_ERR_FORMAT, "ranks[0].plans[0].spans: not an array"},
        {"ranks/0/plans/0/more", "1", ZP_ERR_FORMAT, "ranks[0].plans[0].more: unknown field"},
        {"ranks/0/part_samples", "[1]", ZP_ERR_FORMAT, "ranks[0].part_samples: 1 values for 2"},
        {"ranks/0/part_tokens/1", "\"x\"", ZP_ERR_FORMAT, "ranks[0].part_tokens[1]: not an"},
        {"ranks/0/skipped/0/batches", "[5, 3]", ZP_ERR_FORMAT,
         "ranks[0].skipped[0].batches: 5 > 3"},
        {"ranks/0/skipped/0/from", "[1]", ZP_ERR_FORMAT, "ranks[0].skipped[0].from: not an array"},
        {"ranks/0/skipped/0/to/0", "4294967296", ZP_ERR_FORMAT,
         "ranks[0].skipped[0].to[0]: 4294967296 is out of range"},
        {"ranks/0/skipped/0/samples", NULL, ZP_ERR_FORMAT, "ranks[0].skipped[0].samples: missing"},
        {"ranks/0/counts/tokens", "-1", ZP_ERR_FORMAT, "ranks[0].counts.tokens: not an unsigned"},
        {"ranks/0/counts/extra", "1", ZP_ERR_FORMAT, "ranks[0].counts.extra: unknown field"},
        {"ranks/3/counts", NULL, ZP_ERR_FORMAT, "ranks[3].counts: missing"},
        {"comment", "\"hi\"", ZP_ERR_FORMAT, "comment: unknown field"},
    };
    zpi_state s;
    rich_state(&s);
    char *good = render(&s);
    zpi_state_clear(&s);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *bad = mutate(good, cases[i].path, cases[i].val);
        zpi_err err = {0};
        zpi_state p;
        zp_status st = zpi_state_parse(bad, strlen(bad), &p, &err);
        if (st != cases[i].code || strncmp(zpi_err_msg(&err), cases[i].msg,
                                           strlen(cases[i].msg)) != 0)
            fail_msg("%s = %s: status %d, message \"%s\"; expected %d, \"%s...\"", cases[i].path,
                     cases[i].val ? cases[i].val : "(deleted)", st, zpi_err_msg(&err),
                     cases[i].code, cases[i].msg);
        /* a failed parse leaves nothing to free */
        assert_null(p.ranks);
        assert_null(p.settings);
        free(bad);
    }
    /* texts that are not states */
    static const char *const texts[] = {"[]", "{", "", "{\"version\":1}"};
    static const char *const msgs[] = {"not a state: the text is not a JSON object",
                                       "not a state: not JSON", "not a state: not JSON",
                                       "seed: missing"};
    for (size_t i = 0; i < 4; i++) {
        zpi_err err = {0};
        zpi_state p;
        assert_int_equal(zpi_state_parse(texts[i], strlen(texts[i]), &p, &err), ZP_ERR_FORMAT);
        assert_non_null(strstr(zpi_err_msg(&err), msgs[i]));
    }
    free(good);
}

/* A large value may be written as a string; a negative one never. */
static void test_parse_big_strings(void **unused)
{
    zpi_state s;
    rich_state(&s);
    char *good = render(&s);
    zpi_state_clear(&s);
    char *t = mutate(good, "ranks/0/next_batch", "\"120\"");
    zpi_state p;
    zpi_err err = {0};
    assert_int_equal(zpi_state_parse(t, strlen(t), &p, &err), ZP_OK);
    assert_int_equal(p.ranks[0].next_batch, 120);
    zpi_state_clear(&p);
    free(t);
    t = mutate(good, "ranks/0/next_batch", "\"18446744073709551616\"");
    assert_int_equal(zpi_state_parse(t, strlen(t), &p, &err), ZP_ERR_FORMAT);
    assert_non_null(strstr(zpi_err_msg(&err), "ranks[0].next_batch: not an unsigned integer"));
    free(t);
    t = mutate(good, "ranks/0/next_batch", "\"-1\"");
    assert_int_equal(zpi_state_parse(t, strlen(t), &p, &err), ZP_ERR_FORMAT);
    free(t);
    free(good);
}

/* Render refuses what parse would refuse. */
static void test_render_refuses(void **unused)
{
    zpi_state s;
    rich_state(&s);
    char *t = NULL;
    zpi_err err = {0};
    s.ranks[2].position = 75001;
    assert_int_equal(zpi_state_render(&s, &t, NULL, &err), ZP_ERR_INVALID);
    assert_null(t);
    assert_non_null(strstr(zpi_err_msg(&err), "ranks[2].position"));
    s.ranks[2].position = 0;
    s.version = 2;
    assert_int_equal(zpi_state_render(&s, &t, NULL, &err), ZP_ERR_UNSUPPORTED);
    s.version = ZP_STATE_VERSION;
    free(s.settings);
    s.settings = xstrdup("{\"a\":");
    assert_int_equal(zpi_state_render(&s, &t, NULL, &err), ZP_ERR_INVALID);
    assert_non_null(strstr(zpi_err_msg(&err), "settings: not JSON"));
    zpi_state_clear(&s);
}

/* ------------------------------------------------------------ settings */

/* Settings that say what the top-level fields say (as a pipeline writes
 * them), for the state checks. */
#define CHECK_SETTINGS                                                                             \
    "{\"parts\":[{\"name\":\"web\",\"samples\":1000,\"weight\":0.7},{\"name\":\"code\","         \
    "\"samples\":500,\"weight\":0.3}],\"seed\":7,\"epoch_samples\":300000,\"remainder\":\"pad\","  \
    "\"pack\":\"concat\",\"seq_len\":2048}"

/* mutate() of a settings member, with settings_hash made to match, so
 * that only the contradiction is left. */
static char *mutate_settings(const char *text, const char *key, const char *val)
{
    char path[128];
    snprintf(path, sizeof path, "settings/%s", key);
    char *t = mutate(text, path, val);
    json_t *root = json_loads(t, 0, NULL);
    assert_non_null(root);
    char *set = json_dumps(json_object_get(root, "settings"), JSON_COMPACT);
    uint64_t h;
    assert_int_equal(zpi_state_settings_canon(set, NULL, &h, NULL), ZP_OK);
    char hex[40];
    snprintf(hex, sizeof hex, "\"%016" PRIx64 "\"", h);
    free(set);
    json_decref(root);
    char *u = mutate(t, "settings_hash", hex);
    free(t);
    return u;
}

/* Hand edits that leave every field well formed and the state
 * contradicting itself: parsed, then refused by zpi_state_check naming the
 * field (and so by a resume, zp_state_merge and `zephon state show`'s
 * last line). */
static void test_check(void **unused)
{
    (void)unused;
    zpi_state s;
    rich_state(&s);
    s.seed = 7;
    free(s.settings);
    assert_int_equal(zpi_state_settings_canon(CHECK_SETTINGS, &s.settings, &s.settings_hash, NULL),
                     ZP_OK);
    zpi_err err = {0};
    assert_int_equal(zpi_state_check(&s, &err), ZP_OK);
    char *good = render(&s);
    zpi_state_clear(&s);
    static const struct {
        const char *path, *val, *path2, *val2; /* path "settings/K": K re-hashed */
        const char *msg;
    } cases[] = {
        {"seed", "8", NULL, NULL, "seed: 8, but the settings' seed is 7"},
        {"settings/seed", "9", NULL, NULL, "seed: 7, but the settings' seed is 9"},
        {"epoch_samples", "300004", NULL, NULL,
         "epoch_samples: 300004, but the settings' epoch_samples is 300000"},
        {"remainder", "\"drop\"", NULL, NULL, "remainder: \"drop\", but the settings' remainder"},
        {"parts/1/name", "\"cod\"", NULL, NULL,
         "parts[1].name: \"cod\", but the settings name part 1 \"code\""},
        {"parts/0/weight", "0.6", NULL, NULL, "parts[0].weight: 0.6"},
        {"settings/parts", "[{\"name\":\"web\"}]", NULL, NULL,
         "parts: 2 parts, but the settings list 1"},
        {"settings/pack", "\"records\"", NULL, NULL, "ranks[0].plans[0].spans[1]: a token offset"},
        {"settings/pack", "\"pad\"", "ranks/0/plans/0/spans/1/2", "0",
         "ranks[1].token_offset: a document carried over, but the settings pack no"},
        {"ranks/2/part_samples/0", "1", NULL, NULL,
         "ranks[2].part_samples: 1301 samples over the parts, but counts.samples is 4302"},
        {"ranks/0/counts/padded", "5000", NULL, NULL, "ranks[0].counts.padded: 5000 padded of"},
        {"ranks/3/skipped/0/batches", "[120, 130]", NULL, NULL,
         "ranks[3].skipped[0].batches: 120..130, but the rank's next batch is 120"},
        {"ranks/3/skipped/0/to", "[0, 3999]", NULL, NULL,
         "ranks[3].skipped[0]: to (0, 3999) comes before from (0, 4000)"},
        {"ranks/1/position", "75000", NULL, NULL,
         "ranks[1].token_offset: 37 tokens of the sample at position 75000, but the rank's "
         "epoch 0 ends at 75000"},
        {"ranks/3/epoch", "1", "ranks/3/position", "2",
         "ranks[3].plans[0].epoch: 0, before the rank's epoch 1"},
        {"ranks/2/plans/0/spans", "[[150000, 37500], [150000, 37500]]", NULL, NULL,
         "ranks[2].plans[0].spans[1]: positions 150000..187499 overlap ranks[2].plans[0].spans[0]"},
        {"ranks/1/plans/0/spans/0", "[69999, 10000]", NULL, NULL,
         "ranks[1].plans[0].spans[0]: positions 69999..79998 overlap "
         "ranks[0].plans[0].spans[0] (0..69999)"},
        {"ranks/3/plans/0/spans", "[[225000, 70000]]", NULL, NULL,
         "ranks[3].plans[0]: 70000 positions in epoch 0, but ranks[0] has 75000"},
        {"ranks/2/plans", "[{\"epoch\": 1, \"spans\": [[3, 3]]}]", NULL, NULL,
         "ranks[2].plans: no plan for epoch 0, which ranks[0] has a plan for"},
        {"remainder", "\"drop\"", "settings/remainder", "\"drop\"",
         "ranks[0].plans[1].spans[0]: [300000, 3] reaches past epoch_samples 300000 (padding), "
         "but the remainder is drop"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *t = !strncmp(cases[i].path, "settings/", 9)
                      ? mutate_settings(good, cases[i].path + 9, cases[i].val)
                      : mutate(good, cases[i].path, cases[i].val);
        if (cases[i].path2) {
            char *u = !strncmp(cases[i].path2, "settings/", 9)
                          ? mutate_settings(t, cases[i].path2 + 9, cases[i].val2)
                          : mutate(t, cases[i].path2, cases[i].val2);
            free(t);
            t = u;
        }
        zpi_state p;
        zp_status st = zpi_state_parse(t, strlen(t), &p, &err);
        if (st != ZP_OK)
            fail_msg("%s = %s: not parsed: %s", cases[i].path, cases[i].val, zpi_err_msg(&err));
        st = zpi_state_check(&p, &err);
        if (st != ZP_ERR_FORMAT || strncmp(zpi_err_msg(&err), cases[i].msg, strlen(cases[i].msg)))
            fail_msg("%s = %s: status %d, message \"%s\"; expected \"%s...\"", cases[i].path,
                     cases[i].val, st, zpi_err_msg(&err), cases[i].msg);
        /* the public calls: merge refuses it, describe says why a resume would */
        char *words = NULL, ebuf[512];
        assert_int_equal(zp_state_describe(t, strlen(t), &words, ebuf, sizeof ebuf), ZP_OK);
        assert_non_null(strstr(words, "a resume refuses this state: "));
        assert_non_null(strstr(words, cases[i].msg));
        free(words);
        zpi_state_clear(&p);
        free(t);
    }
    free(good);
}

static void test_check_settings(void **unused)
{
    zpi_state s;
    make_state(&s, 2, 100, ZP_REMAINDER_PAD, -1);
    zpi_err err = {0};
    assert_int_equal(zpi_state_check_settings(&s, SETTINGS, &err), ZP_OK);
    /* the same members in another order and spacing are the same settings */
    assert_int_equal(zpi_state_check_settings(&s,
                                              "{\"shuffle\": true, \"weights\": [0.7, 0.3], "
                                              "\"tokenizer\": \"gpt2\", \"seq_len\": 2048}",
                                              &err),
                     ZP_OK);
    const char *other =
        "{\"seq_len\":1024,\"weights\":[0.7,0.3],\"shuffle\":true,\"map\":\"strip\"}";
    assert_int_equal(zpi_state_check_settings(&s, other, &err), ZP_ERR_MISMATCH);
    const char *m = zpi_err_msg(&err);
    assert_non_null(strstr(m, "the state was saved with other settings"));
    assert_non_null(strstr(m, "seq_len = 2048 in the state, 1024 here"));
    assert_non_null(strstr(m, "tokenizer = \"gpt2\" in the state, absent here"));
    assert_non_null(strstr(m, "map absent in the state, \"strip\" here"));
    assert_null(strstr(m, "weights"));
    assert_null(strstr(m, "shuffle"));
    assert_int_equal(zpi_state_check_settings(&s, "nope", &err), ZP_ERR_INVALID);
    zpi_state_clear(&s);
}

/* ------------------------------------------------------------ merge */

static void test_merge(void **unused)
{
    zpi_state job;
    rich_state(&job);
    zpi_state one[4];
    for (uint32_t k = 0; k < 4; k++) {
        make_state(&one[k], 4, 300000, ZP_REMAINDER_PAD, (int)k);
        one[k].seed = job.seed;
        zpi_rank_state_clear(&one[k].ranks[0]);
        assert_int_equal(zpi_rank_state_copy(&one[k].ranks[0], &job.ranks[k]), ZP_OK);
    }
    const zpi_state *in[4] = {&one[2], &one[0], &one[3], &one[1]};
    zpi_state m;
    zpi_err err = {0};
    assert_int_equal(zpi_state_merge(in, 4, &m, &err), ZP_OK);
    char *a = render(&job), *b = render(&m);
    assert_string_equal(a, b);
    zpi_state_clear(&m);

    /* the public call on texts gives the same job state */
    char *texts[4];
    size_t lens[4];
    for (int k = 0; k < 4; k++) {
        texts[k] = render(&one[3 - k]);
        lens[k] = strlen(texts[k]);
    }
    char *out = NULL, ebuf[256];
    size_t olen = 0;
    assert_int_equal(zp_state_merge((const char *const *)texts, lens, 4, &out, &olen, ebuf,
                                    sizeof ebuf),
                     ZP_OK);
    assert_string_equal(out, a);
    assert_int_equal(olen, strlen(a));
    free(out);
    /* a text that is not a state: named by its index */
    lens[1] = 3;
    assert_int_equal(zp_state_merge((const char *const *)texts, lens, 4, &out, NULL, ebuf,
                                    sizeof ebuf),
                     ZP_ERR_FORMAT);
    assert_null(out);
    assert_non_null(strstr(ebuf, "state 1: not a state"));
    for (int k = 0; k < 4; k++)
        free(texts[k]);

    /* a missing rank */
    const zpi_state *three[3] = {&one[0], &one[1], &one[2]};
    assert_int_equal(zpi_state_merge(three, 3, &m, &err), ZP_ERR_MISMATCH);
    assert_non_null(strstr(zpi_err_msg(&err), "rank 3 is missing"));
    /* a duplicate rank */
    const zpi_state *dup[4] = {&one[0], &one[1], &one[1], &one[3]};
    assert_int_equal(zpi_state_merge(dup, 4, &m, &err), ZP_ERR_MISMATCH);
    assert_non_null(strstr(zpi_err_msg(&err), "rank 1 appears twice"));
    /* another next batch */
    one[2].ranks[0].next_batch = 119;
    assert_int_equal(zpi_state_merge(in, 4, &m, &err), ZP_ERR_MISMATCH);
    assert_non_null(strstr(zpi_err_msg(&err), "rank 0's state differs from rank 2's: next_batch "
                                              "120, 119 in rank 2's"));
    one[2].ranks[0].next_batch = 120;
    /* other settings */
    free(one[3].settings);
    assert_int_equal(zpi_state_settings_canon("{\"seq_len\":1024}", &one[3].settings,
                                              &one[3].settings_hash, NULL),
                     ZP_OK);
    assert_int_equal(zpi_state_merge(in, 4, &m, &err), ZP_ERR_MISMATCH);
    assert_non_null(strstr(zpi_err_msg(&err), "rank 3's state differs"));
    assert_non_null(strstr(zpi_err_msg(&err), "settings"));
    /* another seed */
    assert_int_equal(zpi_state_settings_canon(SETTINGS, NULL, NULL, NULL), ZP_OK);
    one[1].seed = 8;
    const zpi_state *in2[3] = {&one[0], &one[1], &one[2]};
    assert_int_equal(zpi_state_merge(in2, 3, &m, &err), ZP_ERR_MISMATCH);
    assert_non_null(strstr(zpi_err_msg(&err), "seed 8"));
    free(a);
    free(b);
    for (int k = 0; k < 4; k++)
        zpi_state_clear(&one[k]);
    zpi_state_clear(&job);
}

/* ------------------------------------------------------------ elastic */

#define EMAX 16

typedef struct iv {
    uint64_t a, b; /* [a, b) */
} iv;
typedef struct ivlist {
    iv *v;
    size_t n, cap;
} ivlist;

static void iv_add(ivlist *l, uint64_t a, uint64_t b)
{
    if (a >= b)
        return;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        assert_non_null(l->v);
    }
    l->v[l->n++] = (iv){a, b};
}

static int iv_cmp(const void *x, const void *y)
{
    const iv *a = x, *b = y;
    return a->a < b->a ? -1 : a->a > b->a;
}

/* The sequence of rank r in epoch e: its plan or its default range. */
static void seq_of(const zpi_state *s, const zpi_rank_state *r, uint32_t e, zpi_span *def,
                   const zpi_span **sp, size_t *n)
{
    for (size_t i = 0; i < r->n_plans; i++)
        if (r->plans[i].epoch == e) {
            *sp = r->plans[i].spans;
            *n = r->plans[i].n;
            return;
        }
    zpi_state_default_range(s->epoch_samples, s->world_size, s->remainder, r->rank, &def->start,
                            &def->count);
    def->token_offset = 0;
    *sp = def;
    *n = 1;
}

static uint64_t seq_len(const zpi_span *sp, size_t n)
{
    uint64_t t = 0;
    for (size_t i = 0; i < n; i++)
        t += sp[i].count;
    return t;
}

/* Real positions of elements [from, to) of a sequence, into l. */
static void add_real(ivlist *l, const zpi_span *sp, size_t n, uint64_t from, uint64_t to,
                     uint64_t nn)
{
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t a = off, b = off + sp[i].count;
        off = b;
        uint64_t lo = a > from ? a : from, hi = b < to ? b : to;
        if (lo >= hi)
            continue;
        uint64_t ga = sp[i].start + (lo - a), gb = sp[i].start + (hi - a);
        if (gb > nn)
            gb = nn;
        iv_add(l, ga, gb);
    }
}

typedef struct tok3 {
    uint64_t epoch, pos, tok;
} tok3;
typedef struct toklist {
    tok3 v[4096];
    size_t n;
} toklist;

static int tok_cmp(const void *x, const void *y)
{
    const tok3 *a = x, *b = y;
    if (a->epoch != b->epoch)
        return a->epoch < b->epoch ? -1 : 1;
    return a->pos < b->pos ? -1 : a->pos > b->pos;
}

static void tok_set(toklist *l, uint64_t e, uint64_t g, uint64_t t)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i].epoch == e && l->v[i].pos == g) {
            if (t > l->v[i].tok)
                l->v[i].tok = t;
            return;
        }
    assert_true(l->n < 4096);
    l->v[l->n++] = (tok3){e, g, t};
}

/* The simulation: what was delivered in each epoch (real positions, over
 * every generation so far) and, per epoch that has plans, how many real
 * positions the plans left out (DROP). */
typedef struct sim {
    ivlist delivered[EMAX];
    uint64_t dropped[EMAX];
    int known[EMAX];
} sim;

static void sim_free(sim *m)
{
    for (int e = 0; e < EMAX; e++)
        free(m->delivered[e].v);
}

/* What the old ranks delivered since they started at epoch `start`, into
 * m; the token offsets they leave. */
static void sim_deliver(sim *m, const zpi_state *s, uint32_t start, toklist *toks)
{
    for (size_t k = 0; k < s->n_ranks; k++) {
        const zpi_rank_state *r = &s->ranks[k];
        for (uint32_t e = start; e < EMAX; e++) {
            zpi_span def;
            const zpi_span *sp;
            size_t n;
            seq_of(s, r, e, &def, &sp, &n);
            uint64_t len = seq_len(sp, n);
            uint64_t done = e < r->epoch ? len : e == r->epoch ? r->position : 0;
            add_real(&m->delivered[e], sp, n, 0, done, s->epoch_samples);
            if (e < r->epoch)
                continue;
            /* token offsets of the remaining elements: span starts, and the
             * rank's next element */
            uint64_t off = 0;
            for (size_t i = 0; i < n; i++) {
                if (off >= done && sp[i].token_offset && sp[i].start < s->epoch_samples)
                    tok_set(toks, e, sp[i].start, sp[i].token_offset);
                off += sp[i].count;
            }
            if (e == r->epoch && r->token_offset && r->position < len) {
                off = 0;
                for (size_t i = 0; i < n; i++) {
                    if (r->position < off + sp[i].count) {
                        uint64_t g = sp[i].start + (r->position - off);
                        if (g < s->epoch_samples)
                            tok_set(toks, e, g, r->token_offset);
                        break;
                    }
                    off += sp[i].count;
                }
            }
        }
    }
}

static uint64_t iv_total(const ivlist *l)
{
    uint64_t t = 0;
    for (size_t i = 0; i < l->n; i++)
        t += l->v[i].b - l->v[i].a;
    return t;
}

/* Checks the re-split of old (simulated in m, after sim_deliver) into the
 * new ranks nr[0 .. w). Updates m's dropped counts. */
static void check_split(sim *m, const zpi_state *old, const zpi_rank_state *nr, uint32_t w,
                        const toklist *expect_toks)
{
    uint64_t nn = old->epoch_samples;
    uint32_t e0 = UINT32_MAX;
    for (size_t k = 0; k < old->n_ranks; k++)
        if (old->ranks[k].epoch < e0)
            e0 = old->ranks[k].epoch;
    toklist *got = calloc(1, sizeof *got);
    assert_non_null(got);
    for (uint32_t r = 0; r < w; r++) {
        assert_int_equal(nr[r].rank, r);
        assert_int_equal(nr[r].epoch, e0);
        assert_int_equal(nr[r].position, 0);
        assert_int_equal(nr[r].token_offset, 0);
        assert_int_equal(nr[r].carry, 0);
        assert_int_equal(nr[r].next_batch, old->ranks[0].next_batch);
        assert_int_equal(nr[r].n_plans, nr[0].n_plans);
    }
    ivlist fresh[EMAX]; /* the new plans' real positions per epoch */
    memset(fresh, 0, sizeof fresh);
    zpi_state view = *old; /* default ranges of the new world */
    view.world_size = w;
    for (uint32_t e = e0; e < EMAX; e++) {
        const zpi_epoch_plan *p0 = NULL;
        for (size_t i = 0; i < nr[0].n_plans; i++)
            if (nr[0].plans[i].epoch == e)
                p0 = &nr[0].plans[i];
        if (!p0) {
            /* an untouched epoch: nothing delivered, no old plan */
            assert_int_equal(iv_total(&m->delivered[e]), 0);
            for (size_t k = 0; k < old->n_ranks; k++)
                for (size_t i = 0; i < old->ranks[k].n_plans; i++)
                    assert_true(old->ranks[k].plans[i].epoch != e);
            m->known[e] = 0;
            continue;
        }
        uint64_t prev_drop;
        if (m->known[e]) {
            prev_drop = m->dropped[e];
        } else {
            uint64_t a, c;
            zpi_state_default_range(nn, old->world_size, old->remainder, 0, &a, &c);
            prev_drop = old->remainder == ZP_REMAINDER_DROP ? nn - c * old->world_size : 0;
        }
        uint64_t dl = iv_total(&m->delivered[e]);
        assert_true(dl + prev_drop <= nn);
        uint64_t l = nn - prev_drop - dl;
        uint64_t per = l / w + (old->remainder == ZP_REMAINDER_PAD && l % w ? 1 : 0);
        ivlist all = {0};
        for (size_t i = 0; i < m->delivered[e].n; i++)
            iv_add(&all, m->delivered[e].v[i].a, m->delivered[e].v[i].b);
        uint64_t real_new = 0;
        for (uint32_t r = 0; r < w; r++) {
            zpi_span def;
            const zpi_span *sp;
            size_t n;
            seq_of(&view, &nr[r], e, &def, &sp, &n);
            assert_true(sp != &def); /* a plan */
            /* equal counts on every new rank */
            assert_int_equal(seq_len(sp, n), per);
            size_t before = all.n;
            add_real(&all, sp, n, 0, per, nn);
            add_real(&fresh[e], sp, n, 0, per, nn);
            for (size_t i = before; i < all.n; i++)
                real_new += all.v[i].b - all.v[i].a;
            for (size_t i = 0; i < n; i++) {
                assert_true(sp[i].count > 0);
                if (sp[i].token_offset) {
                    assert_true(sp[i].start < nn); /* never on padding */
                    assert_true(got->n < 4096);
                    got->v[got->n++] = (tok3){e, sp[i].start, sp[i].token_offset};
                }
            }
        }
        /* padding: N + 0, N + 1, ... over the ranks in order, each once */
        uint64_t next_pad = nn;
        for (uint32_t r = 0; r < w; r++) {
            zpi_span def;
            const zpi_span *sp;
            size_t n;
            seq_of(&view, &nr[r], e, &def, &sp, &n);
            for (size_t i = 0; i < n; i++) {
                uint64_t end = sp[i].start + sp[i].count;
                uint64_t from = sp[i].start > nn ? sp[i].start : nn;
                if (from < end) {
                    assert_int_equal(from, next_pad);
                    next_pad = end;
                }
            }
        }
        assert_int_equal(next_pad - nn, per * w - real_new);
        if (old->remainder == ZP_REMAINDER_PAD)
            assert_int_equal(real_new, l);
        else
            assert_int_equal(real_new, per * w);
        /* the union: each position once */
        if (all.n)
            qsort(all.v, all.n, sizeof *all.v, iv_cmp);
        uint64_t covered = 0;
        for (size_t i = 0; i < all.n; i++) {
            if (i)
                assert_true(all.v[i].a >= all.v[i - 1].b);
            assert_true(all.v[i].b <= nn);
            covered += all.v[i].b - all.v[i].a;
        }
        m->dropped[e] = prev_drop + (l - real_new);
        m->known[e] = 1;
        assert_int_equal(covered, nn - m->dropped[e]);
        if (old->remainder == ZP_REMAINDER_PAD)
            assert_int_equal(m->dropped[e], 0);
        free(all.v);
    }
    /* token offsets: exactly the expected ones, on the same positions */
    toklist *ex = calloc(1, sizeof *ex);
    assert_non_null(ex);
    for (size_t i = 0; i < expect_toks->n; i++) {
        const tok3 *x = &expect_toks->v[i];
        int in = 0; /* DROP leaves out the last positions */
        for (size_t j = 0; x->epoch >= e0 && j < fresh[x->epoch].n; j++)
            in |= fresh[x->epoch].v[j].a <= x->pos && x->pos < fresh[x->epoch].v[j].b;
        if (old->remainder == ZP_REMAINDER_PAD && x->epoch >= e0)
            assert_true(in);
        if (in)
            ex->v[ex->n++] = *x;
    }
    for (int e = 0; e < EMAX; e++)
        free(fresh[e].v);
    qsort(ex->v, ex->n, sizeof ex->v[0], tok_cmp);
    qsort(got->v, got->n, sizeof got->v[0], tok_cmp);
    assert_int_equal(got->n, ex->n);
    for (size_t i = 0; i < ex->n; i++) {
        assert_int_equal(got->v[i].epoch, ex->v[i].epoch);
        assert_int_equal(got->v[i].pos, ex->v[i].pos);
        assert_int_equal(got->v[i].tok, ex->v[i].tok);
    }
    free(ex);
    free(got);
}

/* Moves every rank of s to a random place: its epoch e0 or one later
 * (rarely), a random position within its sequence, sometimes inside a
 * document. */
static void advance(zpi_state *s, uint32_t base)
{
    uint64_t nb = rnd_below(1000);
    for (size_t k = 0; k < s->n_ranks; k++) {
        zpi_rank_state *r = &s->ranks[k];
        r->epoch = base + (rnd_below(4) == 0 ? 1 : 0);
        zpi_span def;
        const zpi_span *sp;
        size_t n;
        seq_of(s, r, r->epoch, &def, &sp, &n);
        uint64_t len = seq_len(sp, n);
        uint64_t pick = rnd_below(4);
        r->position = pick == 0 ? 0 : pick == 1 ? len : rnd_below(len + 1);
        r->token_offset = rnd_below(3) == 0 ? 1 + rnd_below(100) : 0;
        r->carry = (int)rnd_below(2);
        r->next_batch = nb;
    }
}

static int ranks_equal(const zpi_rank_state *a, const zpi_rank_state *b)
{
    if (a->rank != b->rank || a->next_batch != b->next_batch || a->epoch != b->epoch ||
        a->position != b->position || a->token_offset != b->token_offset ||
        a->carry != b->carry || a->n_plans != b->n_plans || a->n_parts != b->n_parts ||
        a->n_skips != b->n_skips || memcmp(&a->counts, &b->counts, sizeof a->counts) != 0)
        return 0;
    for (size_t i = 0; i < a->n_plans; i++) {
        if (a->plans[i].epoch != b->plans[i].epoch || a->plans[i].n != b->plans[i].n)
            return 0;
        for (size_t j = 0; j < a->plans[i].n; j++)
            if (a->plans[i].spans[j].start != b->plans[i].spans[j].start ||
                a->plans[i].spans[j].count != b->plans[i].spans[j].count ||
                a->plans[i].spans[j].token_offset != b->plans[i].spans[j].token_offset)
                return 0;
    }
    for (size_t i = 0; i < a->n_parts; i++)
        if (a->part_samples[i] != b->part_samples[i] || a->part_tokens[i] != b->part_tokens[i])
            return 0;
    for (size_t i = 0; i < a->n_skips; i++)
        if (memcmp(&a->skips[i], &b->skips[i], sizeof a->skips[i]) != 0)
            return 0;
    return 1;
}

static void check_totals(const zpi_state *old, const zpi_rank_state *nr, uint32_t w)
{
    zp_pipeline_counts c = {0};
    uint64_t ps[2] = {0, 0};
    for (size_t k = 0; k < old->n_ranks; k++) {
        c.samples += old->ranks[k].counts.samples;
        c.tokens += old->ranks[k].counts.tokens;
        c.batches += old->ranks[k].counts.batches;
        ps[0] += old->ranks[k].part_samples[0];
        ps[1] += old->ranks[k].part_tokens[1];
    }
    assert_int_equal(nr[0].counts.samples, c.samples);
    assert_int_equal(nr[0].counts.tokens, c.tokens);
    assert_int_equal(nr[0].counts.batches, c.batches);
    assert_int_equal(nr[0].part_samples[0], ps[0]);
    assert_int_equal(nr[0].part_tokens[1], ps[1]);
    /* the skipped range of every old rank, joined, its samples summed */
    uint64_t skipped = 0;
    for (size_t k = 0; k < old->n_ranks; k++)
        for (size_t i = 0; i < old->ranks[k].n_skips; i++)
            skipped += old->ranks[k].skips[i].samples;
    assert_int_equal(nr[0].n_skips, 1);
    assert_int_equal(nr[0].skips[0].first, 3);
    assert_int_equal(nr[0].skips[0].last, 4);
    assert_int_equal(nr[0].skips[0].samples, skipped);
    for (uint32_t r = 1; r < w; r++) {
        assert_int_equal(nr[r].counts.samples, 0);
        assert_int_equal(nr[r].part_samples[0], 0);
        assert_int_equal(nr[r].n_skips, 0);
    }
}

static void elastic_trials(uint64_t seed, int trials, int large)
{
    rng_state = seed;
    for (int t = 0; t < trials; t++) {
        uint32_t w = 1 + (uint32_t)rnd_below(8);
        uint64_t n = large ? 1000000 + rnd_below(1000000000000ULL) : 1 + rnd_below(40);
        int rem = (int)rnd_below(2);
        if (rem == ZP_REMAINDER_DROP && n < w)
            n = w + rnd_below(10);
        zpi_state s;
        make_state(&s, w, n, rem, -1);
        uint32_t base = (uint32_t)rnd_below(3);
        advance(&s, base);
        for (size_t k = 0; k < s.n_ranks; k++) {
            s.ranks[k].counts.samples = rnd_below(1000);
            s.ranks[k].counts.tokens = rnd_below(100000);
            s.ranks[k].counts.batches = 10;
            s.ranks[k].part_samples[0] = rnd_below(1000);
            s.ranks[k].part_tokens[1] = rnd_below(1000);
            s.ranks[k].n_skips = 1;
            s.ranks[k].skips[0] = (zpi_skip){.first = 3, .last = 4, .samples = 7, .tokens = 70,
                                              .from_epoch = base, .to_epoch = base,
                                              .to_position = 7};
        }
        sim m;
        memset(&m, 0, sizeof m);
        uint32_t start = 0; /* the epoch the ranks started at */
        for (int gen = 0; gen < 3; gen++) {
            toklist *toks = calloc(1, sizeof *toks);
            assert_non_null(toks);
            sim_deliver(&m, &s, start, toks);
            /* same world size: each rank's own state */
            for (uint32_t r = 0; r < s.world_size; r++) {
                zpi_rank_state o;
                zpi_err err = {0};
                assert_int_equal(zpi_state_rank_plan(&s, r, s.world_size, &o, &err), ZP_OK);
                assert_true(ranks_equal(&o, &s.ranks[r]));
                zpi_rank_state_clear(&o);
            }
            /* the next generation re-splits (a copy would not start anew) */
            uint32_t next_w = 1 + (uint32_t)rnd_below(8);
            if (next_w >= s.world_size)
                next_w++;
            zpi_rank_state *keep = NULL;
            sim keep_m;
            for (uint32_t w2 = 1; w2 <= 9; w2++) {
                if (w2 == s.world_size)
                    continue; /* checked above */
                sim mm;
                memcpy(&mm, &m, sizeof mm);
                for (int e = 0; e < EMAX; e++) { /* deep copy of the lists */
                    mm.delivered[e].v = NULL;
                    mm.delivered[e].n = mm.delivered[e].cap = 0;
                    for (size_t i = 0; i < m.delivered[e].n; i++)
                        iv_add(&mm.delivered[e], m.delivered[e].v[i].a, m.delivered[e].v[i].b);
                }
                zpi_rank_state *nr = xcalloc(w2, sizeof *nr);
                for (uint32_t r = 0; r < w2; r++) {
                    zpi_err err = {0};
                    zp_status st = zpi_state_rank_plan(&s, r, w2, &nr[r], &err);
                    if (st != ZP_OK)
                        fail_msg("rank_plan %u of %u: %s", r, w2, zpi_err_msg(&err));
                }
                check_split(&mm, &s, nr, w2, toks);
                check_totals(&s, nr, w2);
                if (w2 == next_w) {
                    keep = nr;
                    keep_m = mm;
                } else {
                    for (uint32_t r = 0; r < w2; r++)
                        zpi_rank_state_clear(&nr[r]);
                    free(nr);
                    sim_free(&mm);
                }
            }
            free(toks);
            /* the next generation: the new ranks, moved on */
            uint32_t e0 = keep[0].epoch;
            for (size_t k = 0; k < s.n_ranks; k++)
                zpi_rank_state_clear(&s.ranks[k]);
            free(s.ranks);
            s.ranks = keep;
            s.n_ranks = s.world_size = next_w;
            sim_free(&m);
            m = keep_m;
            /* the round trip holds for re-split states too */
            char *a = render(&s);
            zpi_state p;
            zpi_err err = {0};
            assert_int_equal(zpi_state_parse(a, strlen(a), &p, &err), ZP_OK);
            char *b = render(&p);
            assert_string_equal(a, b);
            free(a);
            free(b);
            zpi_state_clear(&p);
            advance(&s, e0);
            start = e0;
        }
        sim_free(&m);
        zpi_state_clear(&s);
    }
}

static void test_elastic_small(void **unused) { elastic_trials(1, 300, 0); }
static void test_elastic_large(void **unused) { elastic_trials(2, 100, 1); }

/* A worked example (docs/state.md): 2 ranks, N = 10, PAD; rank 0 read 3 of
 * its 5 positions and is 17 tokens into the 4th; rank 1 read nothing. */
static void test_elastic_example(void **unused)
{
    zpi_state s;
    make_state(&s, 2, 10, ZP_REMAINDER_PAD, -1);
    s.ranks[0].position = 3;
    s.ranks[0].token_offset = 17;
    zpi_rank_state o[3];
    zpi_err err = {0};
    for (uint32_t r = 0; r < 3; r++)
        assert_int_equal(zpi_state_rank_plan(&s, r, 3, &o[r], &err), ZP_OK);
    /* L = 2 + 5 = 7, per = 3: [3, 4, 5], [6, 7, 8], [9] + two padding */
    assert_int_equal(o[0].n_plans, 1);
    assert_int_equal(o[0].plans[0].n, 1);
    assert_int_equal(o[0].plans[0].spans[0].start, 3);
    assert_int_equal(o[0].plans[0].spans[0].count, 3);
    assert_int_equal(o[0].plans[0].spans[0].token_offset, 17);
    assert_int_equal(o[1].plans[0].spans[0].start, 6);
    assert_int_equal(o[1].plans[0].spans[0].count, 3);
    assert_int_equal(o[1].plans[0].spans[0].token_offset, 0);
    assert_int_equal(o[2].plans[0].n, 2);
    assert_int_equal(o[2].plans[0].spans[0].start, 9);
    assert_int_equal(o[2].plans[0].spans[0].count, 1);
    assert_int_equal(o[2].plans[0].spans[1].start, 10); /* repeats positions 0, 1 */
    assert_int_equal(o[2].plans[0].spans[1].count, 2);
    for (int r = 0; r < 3; r++)
        zpi_rank_state_clear(&o[r]);
    /* on 1 rank, DROP: everything left, in order */
    s.remainder = ZP_REMAINDER_DROP;
    assert_int_equal(zpi_state_rank_plan(&s, 0, 1, &o[0], &err), ZP_OK);
    assert_int_equal(o[0].plans[0].n, 1);
    assert_int_equal(o[0].plans[0].spans[0].start, 3);
    assert_int_equal(o[0].plans[0].spans[0].count, 7);
    assert_int_equal(o[0].plans[0].spans[0].token_offset, 17);
    zpi_rank_state_clear(&o[0]);
    zpi_state_clear(&s);
}

/* Best-fit packing's fields (docs/packing.md): window_rows and window_done
 * round-trip and are written only when set; window_done without
 * window_rows is refused; the elastic re-split leaves out the documents
 * delivered whole and continues the others from their token offset. */
static void test_bestfit_fields(void **unused)
{
    zpi_state s, p;
    make_state(&s, 2, 10, ZP_REMAINDER_PAD, -1);
    char *plain = render(&s);
    assert_null(strstr(plain, "window"));
    assert_null(strstr(plain, "cut_documents"));
    /* rank 0 (positions 0..4) stopped in the window starting at 1:
     * position 2 delivered whole, position 4 its first 10 tokens */
    zpi_rank_state *r = &s.ranks[0];
    r->position = 1;
    r->window_rows = 3;
    r->n_window_done = 2;
    r->window_done = malloc(4 * sizeof *r->window_done);
    const uint64_t wd[4] = {1, 0, 3, 10};
    memcpy(r->window_done, wd, sizeof wd);
    r->counts.cut_documents = 1;
    char *a = render(&s);
    assert_non_null(strstr(a, "\"window_rows\": 3,\n      \"window_done\": [[1, 0], [3, 10]]"));
    assert_non_null(strstr(a, "\"cut_documents\": 1"));
    zpi_err err = {0};
    assert_int_equal(zpi_state_parse(a, strlen(a), &p, &err), ZP_OK);
    char *b = render(&p);
    assert_string_equal(a, b);
    assert_int_equal(p.ranks[0].n_window_done, 2);
    assert_int_equal(p.ranks[0].window_done[3], 10);
    zpi_state_clear(&p);
    /* window_done without window_rows: refused, naming the field */
    char *bad = strdup(a);
    char *w = strstr(bad, "\"window_rows\": 3");
    memcpy(w, "\"window_rows\": 0", strlen("\"window_rows\": 0"));
    assert_int_equal(zpi_state_parse(bad, strlen(bad), &p, &err), ZP_ERR_FORMAT);
    assert_non_null(strstr(zpi_err_msg(&err), "ranks[0].window_done"));
    free(bad);
    /* on 1 rank: rank 0's positions 1 and 3, 4 from token 10 on, then
     * rank 1's 5 .. 9 (joined onto it); 2 (delivered whole) left out */
    zpi_rank_state o;
    assert_int_equal(zpi_state_rank_plan(&s, 0, 1, &o, &err), ZP_OK);
    assert_int_equal(o.plans[0].n, 3);
    const uint64_t want[9] = {1, 1, 0, 3, 1, 0, 4, 6, 10};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(o.plans[0].spans[i].start, want[3 * i]);
        assert_int_equal(o.plans[0].spans[i].count, want[3 * i + 1]);
        assert_int_equal(o.plans[0].spans[i].token_offset, want[3 * i + 2]);
    }
    assert_int_equal(o.window_rows, 0); /* the new rank starts its own windows */
    zpi_rank_state_clear(&o);
    /* the schedule's high water: past position 4 (delivered in part), not
     * at position 1 (the window's start) */
    uint64_t hw = zpi_state_high_water(&s);
    r->n_window_done = 0;
    uint64_t hw0 = zpi_state_high_water(&s);
    r->n_window_done = 2;
    assert_true(hw > hw0);
    r->window_rows = 0;
    r->n_window_done = 0;
    s.ranks[0].position = 5; /* a rank that delivered positions 0 .. 4 */
    assert_int_equal(hw, zpi_state_high_water(&s));
    free(plain);
    free(a);
    free(b);
    zpi_state_clear(&s);
}

/* docs/state.md's example: its JSON is a state in the rendered form, and
 * its re-split on 3 ranks is the one the page describes. */
static void test_doc_example(void **unused)
{
    char *doc = zpt_read_file(ZP_TEST_DATA "/../../docs/state.md", NULL);
    assert_non_null(doc);
    char *a = strstr(doc, "```json\n"), *b = a ? strstr(a + 8, "\n```") : NULL;
    assert_non_null(b);
    a += 8;
    b[1] = '\0';
    zpi_state s;
    zpi_err err = {0};
    if (zpi_state_parse(a, strlen(a), &s, &err) != ZP_OK)
        fail_msg("docs/state.md: %s", zpi_err_msg(&err));
    char *t = render(&s);
    assert_string_equal(t, a);
    free(t);
    free(doc);
    static const uint64_t want[3][2][2] = {{{3, 2}}, {{7, 2}}, {{9, 1}, {10, 1}}};
    for (uint32_t r = 0; r < 3; r++) {
        zpi_rank_state o;
        assert_int_equal(zpi_state_rank_plan(&s, r, 3, &o, &err), ZP_OK);
        assert_int_equal(o.n_plans, 1);
        assert_int_equal(o.plans[0].n, r == 2 ? 2 : 1);
        for (size_t i = 0; i < o.plans[0].n; i++) {
            assert_int_equal(o.plans[0].spans[i].start, want[r][i][0]);
            assert_int_equal(o.plans[0].spans[i].count, want[r][i][1]);
            assert_int_equal(o.plans[0].spans[i].token_offset, r == 0 && i == 0 ? 17 : 0);
        }
        zpi_rank_state_clear(&o);
    }
    zpi_state_clear(&s);
}

static void test_rank_plan_refuses(void **unused)
{
    zpi_state s;
    make_state(&s, 4, 100, ZP_REMAINDER_PAD, 1);
    zpi_rank_state o;
    zpi_err err = {0};
    /* a rank's state on its own rank: its copy */
    assert_int_equal(zpi_state_rank_plan(&s, 1, 4, &o, &err), ZP_OK);
    assert_true(ranks_equal(&o, &s.ranks[0]));
    zpi_rank_state_clear(&o);
    assert_int_equal(zpi_state_rank_plan(&s, 0, 4, &o, &err), ZP_ERR_INVALID);
    assert_non_null(strstr(zpi_err_msg(&err), "the state holds rank 1 of 4 only"));
    assert_int_equal(zpi_state_rank_plan(&s, 0, 3, &o, &err), ZP_ERR_INVALID);
    assert_non_null(strstr(zpi_err_msg(&err), "the state holds rank 1 of 4 only; restoring on 3 "
                                              "ranks needs the job state of all 4"));
    assert_int_equal(zpi_state_rank_plan(&s, 3, 3, &o, &err), ZP_ERR_INVALID);
    zpi_state_clear(&s);
    /* a job state whose ranks disagree on the next batch */
    make_state(&s, 2, 100, ZP_REMAINDER_PAD, -1);
    s.ranks[1].next_batch = 3;
    assert_int_equal(zpi_state_rank_plan(&s, 0, 3, &o, &err), ZP_ERR_INVALID);
    assert_non_null(strstr(zpi_err_msg(&err), "next_batch"));
    zpi_state_clear(&s);
}

static void test_default_range(void **unused)
{
    uint64_t a, c;
    zpi_state_default_range(10, 3, ZP_REMAINDER_PAD, 2, &a, &c);
    assert_int_equal(a, 8);
    assert_int_equal(c, 4);
    zpi_state_default_range(10, 3, ZP_REMAINDER_DROP, 2, &a, &c);
    assert_int_equal(a, 6);
    assert_int_equal(c, 3);
    zpi_state_default_range(9, 3, ZP_REMAINDER_PAD, 1, &a, &c);
    assert_int_equal(a, 3);
    assert_int_equal(c, 3);
}

/* ------------------------------------------------------------ describe */

static void test_describe(void **unused)
{
    zpi_state s;
    rich_state(&s);
    s.ranks[0].position = 4811;
    char *json = render(&s);
    char *text = NULL, ebuf[200];
    assert_int_equal(zp_state_describe(json, strlen(json), &text, ebuf, sizeof ebuf), ZP_OK);
    if (getenv("ZT_SHOW"))
        fputs(text, stderr);
    assert_non_null(strstr(text, "a job state"));
    assert_non_null(strstr(text, "rank 0: next batch 120; epoch 0, position 4811 of 75000"));
    assert_non_null(strstr(text, "rank 1: next batch 120; epoch 0, position 4812 of 75000 (37 "
                                 "tokens of that sample already delivered)"));
    assert_non_null(strstr(text, "epoch 0 plan: 75000 positions in 2 spans: 0..69999 "
                                 "80000..84999 (from token 12)"));
    assert_non_null(strstr(text, "300000..300002 (padding)"));
    assert_non_null(strstr(text, "web: 3000 samples (69.77%)"));
    assert_non_null(strstr(text, "weight 70%"));
    assert_non_null(strstr(text, "skipped batches 100..109: 55 samples, 20480 tokens, from epoch "
                                 "0 position 4000 to epoch 0 position 4055"));
    assert_non_null(strstr(text, "seq_len = 2048"));
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, s.settings_hash);
    assert_non_null(strstr(text, hex));
    assert_non_null(strstr(text, "all 4 ranks:"));
    free(text);
    assert_int_equal(zp_state_describe("{}", 2, &text, ebuf, sizeof ebuf), ZP_ERR_FORMAT);
    assert_null(text);
    assert_non_null(strstr(ebuf, "version: missing"));
    free(json);
    zpi_state_clear(&s);
}

/* ------------------------------------------------------------ command */

/* Runs `zephon ARGS`: exit status, stdout and stderr (caller frees). */
static int run_cli(const char *dir, const char *args, char **out, char **err)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s >%s/out 2>%s/err", ZP_CLI, args, dir, dir);
    int rc = system(cmd);
    assert_true(rc != -1 && WIFEXITED(rc));
    char *po = zpt_path(dir, "out"), *pe = zpt_path(dir, "err");
    *out = zpt_read_file(po, NULL);
    *err = zpt_read_file(pe, NULL);
    assert_non_null(*out);
    assert_non_null(*err);
    free(po);
    free(pe);
    return WEXITSTATUS(rc);
}

static void test_cli_state(void **unused)
{
    char *dir = zpt_tmpdir();
    assert_non_null(dir);
    zpi_state s;
    rich_state(&s);
    char *json = render(&s);
    char *good = zpt_path(dir, "job.json"), *bad = zpt_path(dir, "bad.json");
    char *messy = zpt_path(dir, "messy.json");
    assert_int_equal(zpt_write_file(good, json, (size_t)-1), 0);
    assert_int_equal(zpt_write_file(bad, "{\"version\":1,\"seed\":-4}", (size_t)-1), 0);
    char *m = mutate(json, "seed", "3"); /* other spacing, other seed */
    assert_int_equal(zpt_write_file(messy, m, (size_t)-1), 0);
    char args[1024], *out, *err;

    snprintf(args, sizeof args, "state show %s", good);
    assert_int_equal(run_cli(dir, args, &out, &err), 0);
    char *words = NULL;
    assert_int_equal(zp_state_describe(json, strlen(json), &words, NULL, 0), ZP_OK);
    assert_string_equal(out, words);
    free(words);
    free(out);
    free(err);

    snprintf(args, sizeof args, "state show --json %s", messy);
    assert_int_equal(run_cli(dir, args, &out, &err), 0);
    assert_non_null(strstr(out, "{\n  \"version\": 1,\n  \"seed\": 3,\n"));
    assert_int_equal(strlen(out), strlen(json) - strlen("\"18446744073709551615\"") + 1);
    free(out);
    free(err);

    snprintf(args, sizeof args, "state show %s", bad);
    assert_int_equal(run_cli(dir, args, &out, &err), 1);
    assert_non_null(strstr(err, bad));
    assert_non_null(strstr(err, "seed: not an unsigned integer"));
    free(out);
    free(err);

    snprintf(args, sizeof args, "state show %s/missing.json", dir);
    assert_int_equal(run_cli(dir, args, &out, &err), 1);
    assert_non_null(strstr(err, "missing.json: No such file"));
    free(out);
    free(err);

    assert_int_equal(run_cli(dir, "state show", &out, &err), 2);
    assert_non_null(strstr(err, "FILE missing"));
    free(out);
    free(err);
    assert_int_equal(run_cli(dir, "state show --frob x", &out, &err), 2);
    free(out);
    free(err);
    assert_int_equal(run_cli(dir, "state frob", &out, &err), 2);
    assert_non_null(strstr(err, "unknown subcommand 'frob'"));
    free(out);
    free(err);
    assert_int_equal(run_cli(dir, "state --help", &out, &err), 0);
    assert_non_null(strstr(out, "zephon state show"));
    free(out);
    free(err);

    /* merge: one file per rank */
    char *paths[4];
    for (uint32_t k = 0; k < 4; k++) {
        zpi_state one;
        make_state(&one, 4, 300000, ZP_REMAINDER_PAD, (int)k);
        one.seed = s.seed;
        zpi_rank_state_clear(&one.ranks[0]);
        assert_int_equal(zpi_rank_state_copy(&one.ranks[0], &s.ranks[k]), ZP_OK);
        char name[32];
        snprintf(name, sizeof name, "rank%u.json", k);
        paths[k] = zpt_path(dir, name);
        char *t = render(&one);
        assert_int_equal(zpt_write_file(paths[k], t, (size_t)-1), 0);
        free(t);
        zpi_state_clear(&one);
    }
    snprintf(args, sizeof args, "state merge -o %s/merged.json %s %s %s %s", dir, paths[3],
             paths[1], paths[0], paths[2]);
    assert_int_equal(run_cli(dir, args, &out, &err), 0);
    free(out);
    free(err);
    char *mp = zpt_path(dir, "merged.json");
    char *merged = zpt_read_file(mp, NULL);
    assert_non_null(merged);
    assert_string_equal(merged, json);
    free(merged);
    free(mp);
    snprintf(args, sizeof args, "state merge -o %s/merged2.json %s %s %s", dir, paths[3],
             paths[1], paths[0]);
    assert_int_equal(run_cli(dir, args, &out, &err), 1);
    assert_non_null(strstr(err, "rank 2 is missing"));
    free(out);
    free(err);
    snprintf(args, sizeof args, "state merge -o %s/merged2.json %s %s", dir, paths[0], bad);
    assert_int_equal(run_cli(dir, args, &out, &err), 1);
    assert_non_null(strstr(err, bad));
    free(out);
    free(err);
    for (int k = 0; k < 4; k++)
        free(paths[k]);

    free(m);
    free(json);
    free(good);
    free(bad);
    free(messy);
    zpi_state_clear(&s);
    zpt_rmtree(dir);
    free(dir);
}

/* The one plan lookup (plan/plan.h) that the worksource (prefix counts)
 * and the state (a walk) share: both ways give every position's span and
 * stream position as a brute-force expansion does, and past the end p->n;
 * find returns each epoch's plan and NULL between them. */
static void test_plan_lookup(void **state)
{
    (void)state;
    zpi_span spans[7];
    uint64_t pre[8] = {0}, x = 12345;
    for (size_t k = 0; k < 7; k++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        spans[k] = (zpi_span){1000 * k + (x >> 60), 1 + (x >> 59) % 9, 0};
        pre[k + 1] = pre[k] + spans[k].count;
    }
    zpi_epoch_plan p = {3, 7, spans};
    assert_int_equal(zpi_plan_total(&p), pre[7]);
    uint64_t pos = 0;
    for (size_t k = 0; k < 7; k++)
        for (uint64_t j = 0; j < spans[k].count; j++, pos++) {
            uint64_t a = 0, b = 0;
            assert_int_equal(zpi_plan_locate(&p, NULL, pos, &a), k);
            assert_int_equal(zpi_plan_locate(&p, pre, pos, &b), k);
            assert_int_equal(a, spans[k].start + j);
            assert_int_equal(b, a);
        }
    uint64_t g;
    assert_int_equal(zpi_plan_locate(&p, NULL, pos, &g), 7);
    assert_int_equal(zpi_plan_locate(&p, pre, pos, &g), 7);
    zpi_epoch_plan plans[3] = {{2, 7, spans}, {5, 7, spans}, {9, 7, spans}};
    assert_ptr_equal(zpi_plan_find(plans, 3, 5), &plans[1]);
    assert_ptr_equal(zpi_plan_find(plans, 3, 9), &plans[2]);
    assert_null(zpi_plan_find(plans, 3, 4));
    assert_null(zpi_plan_find(plans, 3, 10));
    assert_null(zpi_plan_find(plans, 0, 2));
}

/* ------------------------------------------------------------ merge at scale */

#define MANY_W 384u
#define MANY_PARTS 200u

/* The settings text of the many-ranks job: its parts with their weights,
 * concat packing (so token offsets are checked). */
static char *many_settings(void)
{
    char *t = xcalloc(64 * MANY_PARTS + 256, 1);
    size_t n = (size_t)sprintf(t, "{\"seed\":11,\"pack\":\"concat\",\"parts\":[");
    for (unsigned i = 0; i < MANY_PARTS; i++)
        n += (size_t)sprintf(t + n, "%s{\"name\":\"part-%03u\",\"weight\":%.17g}", i ? "," : "",
                             i, (double)(i + 1) / (MANY_PARTS + 1));
    sprintf(t + n, "],\"seq_len\":2048}");
    return t;
}

/* A job of MANY_W ranks with MANY_PARTS parts, every kind of rank field
 * filled (plans for epoch 1, skips, token offsets, coverage digests),
 * deterministic. */
static void many_state(zpi_state *s)
{
    memset(s, 0, sizeof *s);
    s->version = ZP_STATE_VERSION;
    s->seed = 11;
    s->world_size = MANY_W;
    s->epoch_samples = 1000003;
    s->remainder = ZP_REMAINDER_PAD;
    char *set = many_settings();
    assert_int_equal(zpi_state_settings_canon(set, &s->settings, &s->settings_hash, NULL), ZP_OK);
    free(set);
    s->n_parts = MANY_PARTS;
    s->part_names = xcalloc(MANY_PARTS, sizeof(char *));
    s->part_weights = xcalloc(MANY_PARTS, sizeof(double));
    for (unsigned i = 0; i < MANY_PARTS; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "part-%03u", i);
        s->part_names[i] = xstrdup(nm);
        s->part_weights[i] = (double)(i + 1) / (MANY_PARTS + 1);
    }
    s->n_ranks = MANY_W;
    s->ranks = xcalloc(MANY_W, sizeof *s->ranks);
    rng_state = 24;
    for (uint32_t k = 0; k < MANY_W; k++) {
        zpi_rank_state *r = &s->ranks[k];
        r->rank = k;
        r->next_batch = 900;
        r->epoch = 0;
        r->position = 1000 + rnd_below(1500);
        r->token_offset = k % 3 == 1 ? 1 + rnd_below(500) : 0;
        r->carry = (int)(k & 1);
        r->n_parts = MANY_PARTS;
        r->part_samples = xcalloc(MANY_PARTS, sizeof(uint64_t));
        r->part_tokens = xcalloc(MANY_PARTS, sizeof(uint64_t));
        uint64_t total = 0;
        for (unsigned i = 0; i < MANY_PARTS; i++) {
            r->part_samples[i] = rnd_below(20);
            r->part_tokens[i] = r->part_samples[i] * 600 + rnd_below(600);
            total += r->part_samples[i];
        }
        r->counts = (zp_pipeline_counts){899, total, 0, 0, 0, 1u << 20, 0, 0, 0, 0, 0, 0, 0};
        r->n_skips = k % 5 == 0;
        r->skips = xcalloc(1, sizeof(zpi_skip));
        if (r->n_skips)
            r->skips[0] = (zpi_skip){.first = 10 + k % 7, .last = 12 + k % 7, .samples = 5,
                                     .tokens = 3000, .from_position = 40, .to_position = 45};
        /* epoch 1: rank k plans 3 positions from 3k (none twice) */
        const uint64_t q[] = {3 * (uint64_t)k, 3, k % 4 == 2 ? 17 : 0};
        r->plans = xcalloc(1, sizeof(zpi_epoch_plan));
        add_plan(r, 1, q, 1);
        if (k % 2 == 0) {
            r->n_cov = 1;
            r->cov = xcalloc(1, sizeof *r->cov);
            r->cov[0].epoch = 0;
            r->cov[0].c.count = 100 + k;
            r->cov[0].c.sum = rnd();
            r->cov[0].c.xr = rnd();
        }
    }
}

/* The many-ranks job as MANY_W texts of one rank each, in a shuffled
 * order. */
static void many_texts(const zpi_state *job, char **texts, size_t *lens)
{
    uint32_t order[MANY_W];
    for (uint32_t k = 0; k < MANY_W; k++)
        order[k] = k;
    rng_state = 99;
    for (uint32_t k = MANY_W - 1; k > 0; k--) {
        uint32_t j = (uint32_t)rnd_below(k + 1), t = order[k];
        order[k] = order[j];
        order[j] = t;
    }
    for (uint32_t i = 0; i < MANY_W; i++) {
        zpi_state one = *job;
        one.n_ranks = 1;
        one.ranks = &job->ranks[order[i]];
        texts[i] = render(&one);
        lens[i] = strlen(texts[i]);
    }
}

/* The job state merged from many ranks' texts is the job state, byte for
 * byte, and the same bytes as before the merge was made linear (the
 * digest was measured with the quadratic merge of commit f3cd841 and must
 * not change). */
static void test_merge_many_ranks(void **unused)
{
    zpi_state job;
    many_state(&job);
    char *want = render(&job);
    char **texts = xcalloc(MANY_W, sizeof *texts);
    size_t *lens = xcalloc(MANY_W, sizeof *lens);
    many_texts(&job, texts, lens);
    char *out = NULL, ebuf[512] = "";
    size_t olen = 0;
    zp_status st = zp_state_merge((const char *const *)texts, lens, MANY_W, &out, &olen, ebuf,
                                  sizeof ebuf);
    if (st != ZP_OK)
        fail_msg("merge of %u ranks: %s", MANY_W, ebuf);
    assert_string_equal(out, want);
    assert_int_equal(olen, 956327);
    assert_int_equal(XXH64(out, olen, 0), 0x160e86506a187687ULL);
    free(out);

    /* a member after "ranks" that repeats one before it: refused as a text
     * parsed whole refuses it (the job-wide members are not taken from
     * state 0 then) */
    {
        char *t = texts[9];
        size_t n = lens[9];
        char *end = strstr(t, "\n  ]\n}");
        assert_non_null(end);
        size_t at = (size_t)(end - t) + 4; /* after "\n  ]" */
        char *dup = xcalloc(n + 32, 1);
        memcpy(dup, t, at);
        size_t m = at + (size_t)sprintf(dup + at, ",\n  \"seed\": 11");
        memcpy(dup + m, t + at, n - at);
        texts[9] = dup;
        lens[9] = m + n - at;
        st = zp_state_merge((const char *const *)texts, lens, MANY_W, &out, &olen, ebuf,
                            sizeof ebuf);
        assert_int_equal(st, ZP_ERR_FORMAT);
        assert_null(out);
        assert_non_null(strstr(ebuf, "state 9: not a state: not JSON: duplicate object key"));
        texts[9] = t;
        lens[9] = n;
        free(dup);
    }

    /* a rank twice (and so another missing): both named */
    char *keep = texts[7];
    size_t keep_len = lens[7];
    texts[7] = texts[300];
    lens[7] = lens[300];
    st = zp_state_merge((const char *const *)texts, lens, MANY_W, &out, &olen, ebuf, sizeof ebuf);
    assert_int_equal(st, ZP_ERR_MISMATCH);
    assert_null(out);
    assert_non_null(strstr(ebuf, "appears twice (state 300 and an earlier one)"));
    texts[7] = keep;
    lens[7] = keep_len;

    /* two parts of one name, in one rank's text: that text named */
    zpi_state one = job;
    one.n_ranks = 1;
    one.ranks = &job.ranks[123];
    char *last = one.part_names[MANY_PARTS - 1];
    one.part_names[MANY_PARTS - 1] = one.part_names[3];
    char *bad = NULL;
    size_t bad_len = 0;
    zpi_err err = {0};
    assert_int_equal(zpi_state_render(&one, &bad, &bad_len, &err), ZP_ERR_INVALID);
    assert_non_null(strstr(zpi_err_msg(&err), "parts[199].name: \"part-003\" is also parts[3]'s "
                                              "name"));
    one.part_names[MANY_PARTS - 1] = last;
    bad = render(&one);
    char *dupname = strstr(bad, "\n  \"parts\": [");
    assert_non_null(dupname);
    dupname = strstr(dupname, "\"part-199\"");
    assert_non_null(dupname);
    memcpy(dupname, "\"part-003\"", 10); /* in "parts" only: the settings keep theirs */
    keep = texts[200];
    texts[200] = bad;
    lens[200] = strlen(bad);
    st = zp_state_merge((const char *const *)texts, lens, MANY_W, &out, &olen, ebuf, sizeof ebuf);
    assert_int_equal(st, ZP_ERR_FORMAT);
    assert_non_null(strstr(ebuf, "state 200: parts[199].name: \"part-003\" is also parts[3]'s "
                                 "name"));
    free(bad);

    /* one rank's settings in another member order: other settings */
    char *set = many_settings(), *moved = xcalloc(strlen(set) + 1, 1);
    char *sl = strstr(set, ",\"seq_len\":2048}");
    assert_non_null(sl);
    *sl = '\0';
    sprintf(moved, "{\"seq_len\":2048,%s}", set + 1);
    one.settings = NULL;
    assert_int_equal(zpi_state_settings_canon(moved, &one.settings, &one.settings_hash, NULL),
                     ZP_OK);
    bad = render(&one);
    free(one.settings);
    texts[200] = bad;
    lens[200] = strlen(bad);
    st = zp_state_merge((const char *const *)texts, lens, MANY_W, &out, &olen, ebuf, sizeof ebuf);
    assert_int_equal(st, ZP_ERR_MISMATCH);
    assert_non_null(strstr(ebuf, "rank 123's state differs from rank"));
    assert_non_null(strstr(ebuf, "settings (hash"));
    free(bad);
    free(set);
    free(moved);
    texts[200] = keep;
    free(want);
    for (uint32_t i = 0; i < MANY_W; i++)
        free(texts[i]);
    free(texts);
    free(lens);
    zpi_state_clear(&job);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_plan_lookup),
        cmocka_unit_test(test_settings_canon),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_parse_big_strings),
        cmocka_unit_test(test_render_refuses),
        cmocka_unit_test(test_check_settings),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_merge),
        cmocka_unit_test(test_merge_many_ranks),
        cmocka_unit_test(test_default_range),
        cmocka_unit_test(test_elastic_example),
        cmocka_unit_test(test_bestfit_fields),
        cmocka_unit_test(test_doc_example),
        cmocka_unit_test(test_rank_plan_refuses),
        cmocka_unit_test(test_elastic_small),
        cmocka_unit_test(test_elastic_large),
        cmocka_unit_test(test_describe),
        cmocka_unit_test(test_cli_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
