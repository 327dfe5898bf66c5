/* Decompressors for fatbin entries (sim_decompress.c). */
#ifndef CUC_SIM_DECOMPRESS_H
#define CUC_SIM_DECOMPRESS_H

#include <stddef.h>

#define SIM_DECOMPRESS_ERROR ((size_t)-1)
#define SIM_DECOMPRESS_UNAVAILABLE ((size_t)-2)

/* Decodes one LZ4 block into dst (at most dcap bytes). Returns the number
 * of bytes written or SIM_DECOMPRESS_ERROR. Never reads or writes out of
 * bounds, whatever src holds. */
size_t sim_lz4_block_decompress(const unsigned char *src, size_t slen,
                                unsigned char *dst, size_t dcap);

/* Decodes one zstd frame through libzstd.so.1; SIM_DECOMPRESS_UNAVAILABLE
 * when the library is not on the system. */
size_t sim_zstd_decompress(const unsigned char *src, size_t slen,
                           unsigned char *dst, size_t dcap);

#endif
