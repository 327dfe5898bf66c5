/* Kernels: a symbol of a loaded image (cubin, PTX or fatbin).
 *
 * Images are loaded with the driver's context-independent library API
 * (cuLibraryLoadData), so one loaded kernel launches on any device whose
 * context can run it. cucore keeps a process-wide cache of loaded images
 * keyed by (image kind, SHA-256 of the image bytes): loading a kernel from
 * an image already loaded (by cuc_kernel_load or by cuc_msg_get_kernel)
 * shares that library instead of loading it again. A library is unloaded
 * when the last kernel that uses it is destroyed.
 *
 * A kernel crosses processes as its image bytes, kind, symbol name and
 * hash; a receiver that does not hold the image checks the hash against
 * the bytes (on a second thread while the driver loads a large image: a
 * mismatch unloads it and caches nothing) and loads it through its own
 * cache, where the hash is the
 * image's identity from then on (a receiver that holds it reads none of
 * the bytes). Over a channel, once the receiver said it holds the image,
 * a kernel travels as a kernel ref record: hash and name only
 * (cucore/channel.h, docs/wire-format.md "Kernels by reference"). An image
 * received on a channel stays loaded until that channel's end is gone.
 *
 * Threads: every function here is thread-safe. Ownership: a kernel is a
 * single-owner object: each cuc_kernel_load / cuc_msg_get_kernel returns
 * a new one that the caller destroys (they share the library underneath).
 * Getters take a kernel that is not NULL, cannot fail, and what they
 * return lives as long as the kernel.
 */
#ifndef CUCORE_KERNEL_H
#define CUCORE_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#include <cucore/version.h>
#include <cucore/msg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuc_kernel cuc_kernel;

/* Image kinds; the values are also those on the wire. */
enum cuc_image_kind {
    CUC_IMAGE_CUBIN = 1, /* an ELF64 CUDA binary */
    CUC_IMAGE_PTX = 2,   /* PTX text */
    CUC_IMAGE_FATBIN = 3 /* a fat binary (not the wrapper struct nvcc emits) */
};

/* SHA-256. */
#define CUC_KERNEL_HASH_LEN 32
/* Longest symbol name, without the NUL. */
#define CUC_KERNEL_NAME_MAX 4095
/* Largest image cuc_kernel_load accepts (a message holds less: see
 * CUC_MSG_MAX_BYTES). */
#define CUC_KERNEL_IMAGE_MAX ((size_t)1 << 30)

/* A kernel record's fields (cuc_msg_read_kernel); the pointers point into
 * the message and live as long as it. The hash is as the sender wrote it:
 * cuc_msg_get_kernel checks it against the image. */
struct cuc_kernel_record {
    int kind;                           /* enum cuc_image_kind */
    uint8_t hash[CUC_KERNEL_HASH_LEN];  /* SHA-256 of the image, as sent */
    const char *name;                   /* NUL-terminated symbol name */
    const void *image;
    size_t image_len;
};

/* Loads symbol name from image (len bytes of the given kind) and returns a
 * new kernel (destroy it). The bytes are copied. For PTX, len may count a
 * terminating NUL (trailing NULs are not part of the image); a NUL inside
 * the text is CUC_E_INVALID. The bytes must match the kind (a cubin starts
 * with the ELF magic, a fatbin with 0xBA55ED50) and every extent the
 * image's headers declare must lie within len: CUC_E_INVALID otherwise.
 * An image the driver refuses gives its error (CUC_E_DRIVER, the message
 * names the CUDA error, e.g. CUDA_ERROR_INVALID_IMAGE, the kernel and the
 * image's kind and size); drivers load lazily, so that error usually comes
 * from cuLibraryGetKernel rather than cuLibraryLoadData. A symbol that is
 * not in the image is CUC_E_NOT_FOUND naming it. After either failure
 * nothing of the image stays loaded. */
CUC_API int cuc_kernel_load(enum cuc_image_kind kind, const void *image, size_t len,
                            const char *name, cuc_kernel **out);

/* Releases the kernel (and its library, if it was the last user). In a
 * child that inherited the library through fork() no driver call unloads
 * it. NULL is a no-op. */
CUC_API void cuc_kernel_destroy(cuc_kernel *kernel);

/* The symbol name. */
CUC_API const char *cuc_kernel_name(const cuc_kernel *kernel);
/* The image kind. */
CUC_API enum cuc_image_kind cuc_kernel_kind(const cuc_kernel *kernel);
/* SHA-256 of the image bytes (CUC_KERNEL_HASH_LEN bytes): what
 * `sha256sum` prints for a cubin or fatbin file, or a PTX file without
 * trailing NULs. */
CUC_API const uint8_t *cuc_kernel_hash(const cuc_kernel *kernel);
/* The image as loaded (for PTX without trailing NULs); len may be NULL. */
CUC_API const void *cuc_kernel_image(const cuc_kernel *kernel, size_t *len);
/* The driver's CUkernel, for raw driver calls. */
CUC_API void *cuc_kernel_handle(const cuc_kernel *kernel);

/* One kernel parameter in the device-side parameter layout, as the driver
 * reports it (cuKernelGetParamInfo): its byte offset and size. */
typedef struct cuc_kernel_param {
    size_t offset;
    size_t size;
} cuc_kernel_param;

/* Most parameters a kernel can have (each at least a byte, in CUDA's
 * 32764-byte parameter space). */
#define CUC_KERNEL_PARAMS_MAX 32764

/* The kernel's parameters: *count gets how many it takes and params[0..
 * min(cap, count)) their offsets and sizes (params may be NULL when cap
 * is 0). The driver is asked once per kernel, at the first call; later
 * calls read what it said. It answers only in a context: the thread's
 * current one (the application's own too) when there is one, else the
 * implicit device's (device 0) is made current for the query and the
 * thread is left with none again. CUC_E_DRIVER naming the kernel when the driver
 * cannot tell; CUC_E_FORKED in a child that inherited the kernel through
 * fork() before it was asked. */
CUC_API int cuc_kernel_params(const cuc_kernel *kernel, cuc_kernel_param *params, size_t cap,
                              size_t *count);

/* Since the process started: images loaded into the driver for a kernel
 * found in them, and kernel loads that reused an image already loaded. A
 * load that failed (the driver refused the image, or the symbol is not in
 * it) counts as neither. Either may be NULL. */
CUC_API void cuc_kernel_cache_stats(size_t *loads, size_t *hits);

/* The kernel with its image (copied into the message). CUC_E_LIMIT when
 * the image does not fit a message. */
CUC_API int cuc_msg_add_kernel(cuc_msg *msg, const cuc_kernel *kernel);
/* The fields of kernel record index, resolving nothing (the hash is not
 * checked). A kernel ref record (CUC_RECORD_KERNEL_REF) reads too: image
 * NULL, image_len the length of the image it names. CUC_E_INVALID if the
 * record is neither; CUC_E_BADMSG for a malformed payload (kind, lengths,
 * name). */
CUC_API int cuc_msg_read_kernel(const cuc_msg *msg, size_t index,
                                struct cuc_kernel_record *rec);
/* Loads the record's kernel (through the cache: an image already loaded
 * here, found by kind, length and hash, is not loaded again, nor are its
 * bytes read) and returns a new kernel. CUC_E_BADMSG when the record is
 * malformed or, for an image not held here, its hash does not match its
 * bytes; a kernel ref record whose image is not held here is
 * CUC_E_NOT_FOUND naming the hash; a load failure gives the driver's
 * error, named. On a message received on a channel, the image is then
 * kept for that channel and the sender told (see cucore/channel.h). */
CUC_API int cuc_msg_get_kernel(const cuc_msg *msg, size_t index, cuc_kernel **kernel);

#ifdef __cplusplus
}
#endif
#endif
