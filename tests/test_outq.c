/* test_outq.c - the output queue's hand-over to a consumer faster than the
 * pipeline (output/outq.h): after its first batch, a waiting consumer is
 * woken when 4 batches are ready (half the queue when that is less), not
 * for each; with fewer ready it still gets them, woken by the producer
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

/* Takes every batch: returns the count; each index in order. */
static int consume(zpi_outq *q)
{
    int n = 0;
    zpi_batchbuf *bb;
    zpi_err err;
    while (zpi_outq_next(q, &bb, &err, NULL) == ZP_OK) {
        assert_int_equal(bb->b.index, (uint64_t)n);
        n++;
    }
    return n;
}

static void *consume_thread(void *arg)
{
    static int got;
    got = consume(arg);
    return &got;
}

/* The first batch, pushed and taken: the consumer's next wait is not its
 * first. */
static void first_batch(zpi_outq *q)
{
    zpi_batchbuf *bb;
    zpi_err err;
    assert_int_equal(zpi_outq_get_free(q, NULL, &bb), ZP_OK);
    bb->b.index = 0;
    zpi_outq_push(q, bb);
    assert_int_equal(zpi_outq_next(q, &bb, &err, NULL), ZP_OK);
}

/* A consumer waiting for its second batch wants 4 ready (a queue of 8),
 * and then takes every batch in order. */
static void test_outq_wakes_for_several(void **state)
{
    (void)state;
    zpi_outq q;
    assert_int_equal(zpi_outq_init(&q, 8, 2, 4, 0), ZP_OK);
    first_batch(&q);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, consume_thread, &q), 0);
    size_t w = 0;
    for (int k = 0; k < 5000 && !w; k++) { /* until it waits */
        pthread_mutex_lock(&q.mu);
        w = q.wake_at;
        pthread_mutex_unlock(&q.mu);
        if (!w)
            sleep_ms(1);
    }
    assert_int_equal(w, ZPI_OUTQ_WAKE_BATCHES);
    for (int i = 0; i < 20; i++) {
        zpi_batchbuf *bb;
        assert_int_equal(zpi_outq_get_free(&q, NULL, &bb), ZP_OK);
        bb->b.index = (uint64_t)i;
        zpi_outq_push(&q, bb);
    }
    zpi_outq_finish(&q, ZP_END, NULL, NULL);
    void *ret;
    pthread_join(t, &ret);
    assert_int_equal(*(int *)ret, 20);
    zpi_outq_fini(&q);
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
    uint64_t t0 = zpi_now_ns();
    assert_int_equal(consume(&q), n);
    pthread_join(t, NULL);
    /* the stall is 300 ms: the batches before it did not wait for it */
    assert_true(zpi_now_ns() - t0 < (uint64_t)5e9);
    zpi_outq_fini(&q);
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

/* A producer that pushes 1 batch and stalls: the consumer, waiting for 4,
 * has it within its timeout, long before the stall ends. */
static void test_outq_stalled_producer(void **state)
{
    (void)state;
    zpi_outq q;
    assert_int_equal(zpi_outq_init(&q, 8, 2, 4, 0), ZP_OK);
    first_batch(&q);
    prod p = {&q, 1, 1}; /* 1 batch, then 300 ms, then the end */
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, producer, &p), 0);
    uint64_t t0 = zpi_now_ns();
    zpi_batchbuf *bb;
    zpi_err err;
    assert_int_equal(zpi_outq_next(&q, &bb, &err, NULL), ZP_OK);
    assert_true(zpi_now_ns() - t0 < (uint64_t)250 * 1000000u);
    assert_int_equal(zpi_outq_next(&q, &bb, &err, NULL), ZP_END);
    pthread_join(t, NULL);
    zpi_outq_fini(&q);
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
