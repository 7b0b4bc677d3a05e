/* test_outq.c - the output queue's hand-over to a consumer faster than the
 * pipeline (output/outq.h): after its first batch, a waiting consumer that
 * spends no time with its batches is woken when 4 are ready (half the queue
 * when that is less), not for each, and one with a step for each; with fewer
 * ready it still gets them, woken by the producer
 * before it waits for a free buffer (no deadlock with a queue that cannot
 * hold 4) or by its own 10 ms timeout (a producer that stalls); and every
 * batch arrives once, in order. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "base/util.h"
#include "output/outq.h"

typedef struct prod {
    zpi_outq *q;
    int n;           /* batches to push */
    int stall_after; /* > 0: sleep 300 ms after this many (a stalled producer) */
} prod;

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void *producer(void *arg)
{
    prod *p = arg;
    for (int i = 0; i < p->n; i++) {
        zpi_batchbuf *bb;
        if (zpi_outq_get_free(p->q, NULL, &bb) != ZP_OK)
            return NULL;
        bb->b.index = (uint64_t)i;
        zpi_outq_push(p->q, bb);
        if (p->stall_after && i + 1 == p->stall_after)
            sleep_ms(300);
    }
    zpi_outq_finish(p->q, ZP_END, NULL, NULL);
    return NULL;
}

typedef struct cons {
    zpi_outq *q;
    long step_ms; /* time spent with each batch */
    int got;
    int out_of_order; /* a batch came with another index than its place */
} cons;

/* Takes every batch, spending step_ms with each: the count in got, and
 * out_of_order set if an index is not its place. (No assert here: a failed
 * one would leave the test without joining its threads.) */
static void *consume(void *arg)
{
    cons *c = arg;
    zpi_batchbuf *bb;
    zpi_err err;
    while (zpi_outq_next(c->q, &bb, &err, NULL) == ZP_OK) {
        if (bb->b.index != (uint64_t)c->got)
            c->out_of_order = 1;
        c->got++;
        if (c->step_ms)
            sleep_ms(c->step_ms);
    }
    return NULL;
}

/* 0, or -1 when no free buffer came (the queue finished). */
static int push(zpi_outq *q, uint64_t index)
{
    zpi_batchbuf *bb;
    if (zpi_outq_get_free(q, NULL, &bb) != ZP_OK)
        return -1;
    bb->b.index = index;
    zpi_outq_push(q, bb);
    return 0;
}

/* The batches the waiting consumer is woken for, once it has had its first
 * batch and waits again (0: it did not wait within 5 s). */
static size_t wake_at_after_first(zpi_outq *q)
{
    size_t w = 0;
    for (int k = 0; k < 5000; k++) {
        pthread_mutex_lock(&q->mu);
        w = q->counts.batches >= 1 ? q->wake_at : 0;
        pthread_mutex_unlock(&q->mu);
        if (w)
            break;
        sleep_ms(1);
    }
    return w;
}

/* One round: a consumer spending step_ms with each batch takes 21; the
 * count it waits for after its first batch. Every batch once, in order. */
static size_t wakes_once(long step_ms)
{
    zpi_outq q;
    assert_int_equal(zpi_outq_init(&q, 8, 2, 4, 0), ZP_OK);
    cons c = {&q, step_ms, 0, 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, consume, &c), 0);
    int pushed = push(&q, 0) == 0;
    size_t w = wake_at_after_first(&q);
    for (uint64_t i = 1; i < 21; i++)
        pushed += push(&q, i) == 0;
    zpi_outq_finish(&q, ZP_END, NULL, NULL);
    pthread_join(t, NULL);
    zpi_outq_fini(&q);
    assert_int_equal(pushed, 21);
    assert_int_equal(c.got, 21);
    assert_false(c.out_of_order);
    return w;
}

/* A consumer that passes batches on (no time with them) waits for 4 ready
 * (a queue of 8) after its first batch; one that spends 2 ms with each (a
 * training step) is woken for every batch. Both take every batch in order.
 * "No time" is under 20 us between two calls, which a consumer preempted
 * on a busy machine (or slowed by a sanitizer) can exceed: that case gets
 * up to 20 rounds to show it, the other one round (slowness only lengthens
 * a step). */
static void test_outq_wakes_for_several(void **state)
{
    (void)state;
    size_t w = 0;
    for (int round = 0; round < 20 && w != ZPI_OUTQ_WAKE_BATCHES; round++)
        w = wakes_once(0);
    assert_int_equal(w, ZPI_OUTQ_WAKE_BATCHES);
    assert_int_equal(wakes_once(2), 1);
}

/* Fewer ready than wanted: a stalled producer's batches still come (the
 * consumer's timeout), and a queue of 4 (woken for 2) or of 2 (woken for 1)
 * never deadlocks; every batch once, in order. */
static void run_pair(size_t bufs, int n, int stall_after)
{
    zpi_outq q;
    assert_int_equal(zpi_outq_init(&q, bufs, 2, 4, 0), ZP_OK);
    prod p = {&q, n, stall_after};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, producer, &p), 0);
    cons c = {&q, 0, 0, 0};
    consume(&c);
    pthread_join(t, NULL);
    zpi_outq_fini(&q);
    assert_int_equal(c.got, n);
    assert_false(c.out_of_order);
}

static void test_outq_fewer_than_wanted(void **state)
{
    (void)state;
    run_pair(8, 200, 0);
    run_pair(4, 200, 0);
    run_pair(2, 200, 0);
    run_pair(8, 3, 2);
    run_pair(8, 10, 6);
}

static void *late_producer(void *arg)
{
    zpi_outq *q = arg;
    if (push(q, 0) != 0)
        return NULL;
    sleep_ms(50); /* the consumer has batch 0 and waits again */
    if (push(q, 1) != 0)
        return NULL;
    sleep_ms(300); /* stalled */
    zpi_outq_finish(q, ZP_END, NULL, NULL);
    return NULL;
}

/* A producer that pushes 1 batch and stalls: the consumer, waiting for 4,
 * has it within its timeout, long before the stall ends. */
static void test_outq_stalled_producer(void **state)
{
    (void)state;
    zpi_outq q;
    assert_int_equal(zpi_outq_init(&q, 8, 2, 4, 0), ZP_OK);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, late_producer, &q), 0);
    zpi_batchbuf *bb;
    zpi_err err;
    zp_status s0 = zpi_outq_next(&q, &bb, &err, NULL);
    uint64_t t0 = zpi_now_ns();
    zp_status s1 = zpi_outq_next(&q, &bb, &err, NULL);
    uint64_t dt = zpi_now_ns() - t0, index = s1 == ZP_OK ? bb->b.index : UINT64_MAX;
    zp_status s2 = s1 == ZP_OK ? zpi_outq_next(&q, &bb, &err, NULL) : s1;
    pthread_join(t, NULL);
    zpi_outq_fini(&q);
    assert_int_equal(s0, ZP_OK);
    assert_int_equal(s1, ZP_OK);
    assert_int_equal(index, 1);
    assert_true(dt < (uint64_t)250 * 1000000u); /* before the stall ends */
    assert_int_equal(s2, ZP_END);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outq_wakes_for_several),
        cmocka_unit_test(test_outq_fewer_than_wanted),
        cmocka_unit_test(test_outq_stalled_producer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
