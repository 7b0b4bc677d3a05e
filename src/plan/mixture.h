/*
 * mixture.h - the draw sequence of a weighted mixture (private).
 *
 * Draw g (0, 1, 2, ...) of a mixture of n parts comes from one part; the
 * sequence is a deterministic quota schedule, not random: for every prefix
 * of length g, part i has been drawn c_i(g) times with |c_i(g) - w_i g| < 1
 * (w_i its weight as a fraction of the total). The rule is Tijdeman's
 * solution of the chairman assignment problem: with s = 1 / (2n - 2),
 * draw g + 1 goes, among the parts with w_i (g + 1) - c_i >= s, to the one
 * with the earliest deadline (c_i + 1 - s) / w_i (ties: the lowest index);
 * it keeps every |c_i - w_i g| <= 1 - s. Two heaps (waiting parts by their
 * release draw, eligible parts by deadline) make a step O(log n).
 *
 * Weights are made integers W_i with total T (exact for integers and for
 * decimals of up to 6 places when T stays at most 2^24; otherwise rounded
 * so that T is about 2^20, every W_i >= 1, or, when that changes some
 * part's share W_i / T by more than 1% of the share given, about 2^24;
 * weights that both roundings change by more than 1% are refused; then
 * divided by their gcd). The bound holds for the shares as used; with
 * exact weights they are the shares given. With
 * integer weights the sequence repeats with period T (c_i(T) = W_i
 * exactly), so c_i(g) = (g / T) W_i + c_i(g mod T): a seek needs at most
 * one period's walk, shortened by checkpoints of the counts taken every K
 * draws of the first period at create (at most 256 checkpoints).
 *
 * All arithmetic is integer (unsigned __int128 where products can exceed
 * 64 bits): the sequence is the same on every machine.
 *
 * Thread safety: a zpi_mix is immutable after create and may be shared by
 * threads; a cursor is used by one thread at a time.
 */
#ifndef ZP_MIXTURE_H
#define ZP_MIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* At most this many parts. */
#define ZPI_MIX_MAX_PARTS 65536u

typedef struct zpi_mix zpi_mix;
typedef struct zpi_mix_cursor zpi_mix_cursor;

/* weights: n (1 .. ZPI_MIX_MAX_PARTS) positive finite numbers; names: the
 * parts' names for messages (borrowed; NULL: the messages say "weight i").
 * @return ZP_OK; ZP_ERR_INVALID naming the bad weight ("weight 2 = -1: must
 * be a positive finite number"), or naming the part whose share rounding
 * would change by more than 1% and the largest part, with their weights
 * (see above); ZP_ERR_NOMEM. The message goes to err.
 * OUT: *out, caller owns; release with zpi_mix_destroy(). */
zp_status zpi_mix_create(const double *weights, const char *const *names, size_t n,
                         zpi_mix **out, zpi_err *err);
/* Accepts NULL. */
void zpi_mix_destroy(zpi_mix *m);

/* The integer weights that zpi_mix_create() would draw by (reduced by
 * their gcd) into W[0 .. n); the same errors as zpi_mix_create(). */
zp_status zpi_mix_quantize(const double *weights, const char *const *names, size_t n,
                           uint32_t *W, zpi_err *err);

size_t zpi_mix_parts(const zpi_mix *m);
/* T: the sum of the integer weights (the period). */
uint64_t zpi_mix_period(const zpi_mix *m);
/* W_i: part i's integer weight. */
uint64_t zpi_mix_quantum(const zpi_mix *m, size_t i);

/* counts[0 .. n): how many of the draws [0, g) come from each part.
 * O(n + K log n); uses a temporary cursor (ZP_ERR_NOMEM when it cannot be
 * allocated). */
zp_status zpi_mix_counts(const zpi_mix *m, uint64_t g, uint64_t *counts);

/* A cursor walks the sequence from a position; it holds the counts and the
 * two heaps (O(n) memory).
 * OUT: *out, caller owns; release with zpi_mix_cursor_destroy(). Starts at
 * draw 0. */
zp_status zpi_mix_cursor_create(const zpi_mix *m, zpi_mix_cursor **out);
void zpi_mix_cursor_destroy(zpi_mix_cursor *c);
/* Move to draw g: O(n + K log n) (the nearest checkpoint, then a walk). */
void zpi_mix_cursor_seek(zpi_mix_cursor *c, uint64_t g);
/* Bind the cursor to another mixture of as many parts (no allocation);
 * it starts at draw 0. */
void zpi_mix_cursor_rebind(zpi_mix_cursor *c, const zpi_mix *m);
/* The draw the cursor is at. */
uint64_t zpi_mix_cursor_pos(const zpi_mix_cursor *c);
/* Draw at the cursor: its part, and how many draws of that part came before
 * it (the part's own draw index, counted from draw 0 of the sequence);
 * then the cursor moves to the next draw. O(log n). At draw UINT64_MAX the
 * cursor does not move. */
void zpi_mix_cursor_next(zpi_mix_cursor *c, uint32_t *part, uint64_t *part_draw);

#endif
