/* fuzz_shard_jsonl.c - the "jsonl" shard reader (fuzz_shard.c says what is
 * checked). Input: the bytes of a .jsonl file. */
#include "fuzz_shard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_shard("jsonl", data, size);
    return 0;
}
