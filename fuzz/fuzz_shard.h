/* fuzz_shard.h - the body shared by fuzz_shard_jsonl, fuzz_shard_zst and fuzz_shard_gz. */
#ifndef ZP_FUZZ_SHARD_H
#define ZP_FUZZ_SHARD_H

#include <stddef.h>
#include <stdint.h>

/* Load data[0..size) as a shard file of format fmt ("jsonl", "jsonl.zst", "jsonl.gz")
 * through the format's load function, check what it gives, and parse every
 * record with the record parser. */
void fuzz_shard(const char *fmt, const uint8_t *data, size_t size);

#endif
