/* Decompression of fatbin entries: LZ4 block format (fatbin flag 0x2000),
 * written here with every read and write bounds-checked, and zstd (flag
 * 0x8000) through libzstd.so.1 when the system has it (dlopen, optional). */
#include "sim_decompress.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

size_t sim_lz4_block_decompress(const unsigned char *src, size_t slen,
                                unsigned char *dst, size_t dcap)
{
    size_t ip = 0, op = 0;

    while (ip < slen) {
        unsigned token = src[ip++];
        size_t lit = token >> 4, ml, off;

        if (lit == 15) {
            unsigned b;
            do {
                if (ip >= slen)
                    return SIM_DECOMPRESS_ERROR;
                b = src[ip++];
                lit += b;
                if (lit > slen)
                    return SIM_DECOMPRESS_ERROR;
            } while (b == 255);
        }
        if (lit > slen - ip || lit > dcap - op)
            return SIM_DECOMPRESS_ERROR;
        memcpy(dst + op, src + ip, lit);
        ip += lit;
        op += lit;
        if (ip == slen)
            break; /* the last sequence has literals only */
        if (slen - ip < 2)
            return SIM_DECOMPRESS_ERROR;
        off = (size_t)src[ip] | (size_t)src[ip + 1] << 8;
        ip += 2;
        if (off == 0 || off > op)
            return SIM_DECOMPRESS_ERROR;
        ml = token & 15;
        if (ml == 15) {
            unsigned b;
            do {
                if (ip >= slen)
                    return SIM_DECOMPRESS_ERROR;
                b = src[ip++];
                ml += b;
                if (ml > dcap)
                    return SIM_DECOMPRESS_ERROR;
            } while (b == 255);
        }
        ml += 4;
        if (ml > dcap - op)
            return SIM_DECOMPRESS_ERROR;
        for (size_t i = 0; i < ml; i++, op++)
            dst[op] = dst[op - off]; /* overlapping copy is the format */
    }
    return op;
}

typedef size_t (*zstd_decompress_fn)(void *, size_t, const void *, size_t);
typedef unsigned (*zstd_iserror_fn)(size_t);

static pthread_once_t zstd_once = PTHREAD_ONCE_INIT;
static zstd_decompress_fn zstd_decompress;
static zstd_iserror_fn zstd_iserror;

static void zstd_load(void)
{
    void *h = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
    void *d, *e;

    if (!h)
        return;
    d = dlsym(h, "ZSTD_decompress");
    e = dlsym(h, "ZSTD_isError");
    if (!d || !e) {
        dlclose(h);
        return;
    }
    /* Kept loaded for the life of the process; it holds no fds. */
    memcpy(&zstd_decompress, &d, sizeof(d));
    memcpy(&zstd_iserror, &e, sizeof(e));
}

size_t sim_zstd_decompress(const unsigned char *src, size_t slen,
                           unsigned char *dst, size_t dcap)
{
    size_t n;

    pthread_once(&zstd_once, zstd_load);
    if (!zstd_decompress)
        return SIM_DECOMPRESS_UNAVAILABLE;
    n = zstd_decompress(dst, dcap, src, slen);
    if (zstd_iserror(n) || n > dcap)
        return SIM_DECOMPRESS_ERROR;
    return n;
}
