/* fuzz_shard_zst.c - the "jsonl.zst" shard reader (fuzz_shard.c says what
 * is checked). Input: the bytes of a .jsonl.zst file. */
#include "fuzz_shard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_shard("jsonl.zst", data, size);
    return 0;
}
