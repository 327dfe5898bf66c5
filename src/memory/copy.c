/* Copies and fills in stream order, on any pointers the driver knows
 * (unified addressing infers the direction of a copy). */
#include "cucore/memory.h"
#include "exec/stream.h"

static int copy_err(CUresult r, const char *call, void *dst, const void *src, size_t n,
                    const cuc_stream *s)
{
    return cuc__cuda_err(r, call, "%zu bytes from %p to %p on a stream of device %d "
                         "(%s)", n, src, dst, cuc_device_ordinal(s->dev),
                         cuc_device_uuid_string(s->dev));
}

/* The stream n bytes of work go on, its device current under g; *s NULL when
 * there is nothing to do (n 0). A NULL pointer with n > 0 is refused. */
static int start(const char *fn, int null_ptr, size_t n, cuc_stream *stream,
                 struct cuc__ctx_guard *g, cuc_stream **s)
{
    int rc;

    *s = NULL;
    if (n && null_ptr)
        return cuc__seterr(CUC_E_INVALID, "%s: NULL pointer", fn);
    if (n == 0)
        return 0;
    rc = cuc__stream_or_legacy(NULL, stream, s);
    return rc ? rc : cuc__stream_activate(g, *s);
}

int cuc_memcpy_async(void *dst, const void *src, size_t n, cuc_stream *stream)
{
    CUC__CTX_KEEP(guard);
    cuc_stream *s;
    CUresult r;
    int rc = start("cuc_memcpy_async", !dst || !src, n, stream, &guard, &s);

    if (rc || !s)
        return rc;
    r = CUC_DRV->cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src,
                               n, s->cu);
    if (r != CUDA_SUCCESS)
        return copy_err(r, "cuMemcpyAsync", dst, src, n, s);
    return 0;
}

/* Waits for the stream the work went on (none for 0 bytes: no work). */
static int finish(int rc, size_t n, cuc_stream *stream)
{
    cuc_stream *s;

    if (rc || n == 0)
        return rc;
    rc = cuc__stream_or_legacy(NULL, stream, &s);
    return rc ? rc : cuc_stream_synchronize(s);
}

int cuc_memcpy(void *dst, const void *src, size_t n, cuc_stream *stream)
{
    return finish(cuc_memcpy_async(dst, src, n, stream), n, stream);
}

int cuc_memset_async(void *dst, uint8_t value, size_t n, cuc_stream *stream)
{
    CUC__CTX_KEEP(guard);
    cuc_stream *s;
    CUresult r;
    int rc = start("cuc_memset_async", !dst, n, stream, &guard, &s);

    if (rc || !s)
        return rc;
    r = CUC_DRV->cuMemsetD8Async((CUdeviceptr)(uintptr_t)dst, value, n, s->cu);
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuMemsetD8Async", "%zu bytes of 0x%02x at %p on a "
                             "stream of device %d (%s)", n, value, dst,
                             cuc_device_ordinal(s->dev), cuc_device_uuid_string(s->dev));
    return 0;
}

int cuc_memset(void *dst, uint8_t value, size_t n, cuc_stream *stream)
{
    return finish(cuc_memset_async(dst, value, n, stream), n, stream);
}

/* The driver's fill of width bytes: cuMemsetD8/D16/D32Async. */
static CUresult fill_driver(CUdeviceptr dst, uint32_t value, unsigned width, size_t count,
                            CUstream cu, const char **call)
{
    if (width == 1) {
        *call = "cuMemsetD8Async";
        return CUC_DRV->cuMemsetD8Async(dst, (unsigned char)value, count, cu);
    }
    if (width == 2) {
        *call = "cuMemsetD16Async";
        return CUC_DRV->cuMemsetD16Async(dst, (unsigned short)value, count, cu);
    }
    *call = "cuMemsetD32Async";
    return CUC_DRV->cuMemsetD32Async(dst, value, count, cu);
}

static int check_fill(const void *dst, uint32_t value, unsigned width, size_t count)
{
    if (width != 1 && width != 2 && width != 4)
        return cuc__seterr(CUC_E_INVALID, "cuc_fill_async: width %u (use 1, 2 or 4 "
                           "bytes)", width);
    if (width < 4 && value >> (8 * width))
        return cuc__seterr(CUC_E_INVALID, "cuc_fill_async: value 0x%x does not fit in "
                           "%u byte%s", value, width, width == 1 ? "" : "s");
    if (count && (uintptr_t)dst % width)
        return cuc__seterr(CUC_E_INVALID, "cuc_fill_async: %p is not aligned to the "
                           "%u-byte width (the driver needs it)", dst, width);
    return 0;
}

int cuc_fill_async(void *dst, uint32_t value, unsigned width, size_t count,
                   cuc_stream *stream)
{
    CUC__CTX_KEEP(guard);
    const char *call = "";
    cuc_stream *s;
    CUresult r;
    int rc = check_fill(dst, value, width, count);

    if (!rc)
        rc = start("cuc_fill_async", !dst, count, stream, &guard, &s);
    if (rc || !s)
        return rc;
    r = fill_driver((CUdeviceptr)(uintptr_t)dst, value, width, count, s->cu, &call);
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, call, "%zu values of %u bytes (0x%x) at %p on a stream "
                             "of device %d (%s)", count, width, value, dst,
                             cuc_device_ordinal(s->dev), cuc_device_uuid_string(s->dev));
    return 0;
}

int cuc_fill(void *dst, uint32_t value, unsigned width, size_t count, cuc_stream *stream)
{
    return finish(cuc_fill_async(dst, value, width, count, stream), count, stream);
}
