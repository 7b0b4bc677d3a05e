/* placeholder for compile checks: replaced by the reader's header at merge */
#ifndef ZP_PARQUET_H
#define ZP_PARQUET_H
#include "formats/shard.h"
typedef struct zpi_pq_file zpi_pq_file;
zp_status zpi_pq_open(const char *path, const char *name, zpi_pq_file **out, zpi_err *err);
uint64_t zpi_pq_num_rows(const zpi_pq_file *f);
size_t zpi_pq_num_row_groups(const zpi_pq_file *f);
uint64_t zpi_pq_row_group_rows(const zpi_pq_file *f, size_t g);
uint64_t zpi_pq_file_size(const zpi_pq_file *f);
zp_status zpi_pq_footer_rows(const void *tail, size_t tail_len, uint64_t file_size,
                             const char *name, uint64_t *rows, size_t *need, zpi_err *err);
zp_status zpi_pq_read_rows(zpi_pq_file *f, uint64_t first, uint64_t n, zpi_load_bufs *bufs,
                           zpi_shard *out, zpi_err *err);
void zpi_pq_close(zpi_pq_file *f);
#endif
