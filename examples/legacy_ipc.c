/* legacy_ipc: share memory a program already has from cuMemAlloc (or
 * cudaMalloc) with another process, as existing C++ code has it.
 *
 * The producer allocates 1 MiB with cuMemAlloc, fills it, and wraps two
 * 4 KiB parts of it as cucore buffers (cuc_buffer_wrap: the buffers do
 * not own the memory). It starts a consumer (this program again, with
 * --consumer, given one end of a channel) and sends both parts in one
 * message. cucore sends each as the allocation's legacy IPC handle
 * (cuIpcGetMemHandle of the base) plus an offset; the consumer opens the
 * allocation once (cuIpcOpenMemHandle) and finds both parts in it, checks
 * every byte, writes into the second part and frees its buffers, which
 * closes the allocation and ends its leases. The producer reads back what
 * the consumer wrote, waits for the leases (after that nobody else maps
 * the memory) and only then frees its allocation with cuMemFree.
 *
 * cuMemAlloc is the driver's: this program takes it from the library that
 * cucore loaded (cuc_driver_load), so that it runs on the simulator too.
 */
#include <cucore.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BASE (1u << 20)
#define PART 4096u

typedef int (*mem_alloc_fn)(unsigned long long *ptr, size_t size);
typedef int (*mem_free_fn)(unsigned long long ptr);

static mem_alloc_fn mem_alloc;
static mem_free_fn mem_free;

#define TRY(call)                                                             \
    do {                                                                      \
        int rc_ = (call);                                                     \
        if (rc_) {                                                            \
            fprintf(stderr, "%s: %s (%s)\n", #call, cuc_errmsg(), cuc_errname(rc_)); \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

static void *sym(void *lib, const char *a, const char *b)
{
    void *p = dlsym(lib, a);

    if (!p)
        p = dlsym(lib, b);
    if (!p) {
        fprintf(stderr, "the driver has neither %s nor %s\n", a, b);
        exit(1);
    }
    return p;
}

static void load_driver(void)
{
    struct cuc_driver_info info;
    void *lib;

    TRY(cuc_driver_load(&info));
    lib = dlopen(info.path, RTLD_NOW | RTLD_NOLOAD);
    if (!lib) {
        fprintf(stderr, "%s: %s\n", info.path, dlerror());
        exit(1);
    }
    *(void **)&mem_alloc = sym(lib, "cuMemAlloc_v2", "cuMemAlloc");
    *(void **)&mem_free = sym(lib, "cuMemFree_v2", "cuMemFree");
}

static uint8_t byte_at(size_t i) { return (uint8_t)(i * 7 + 3); }

static int consumer(int fd)
{
    cuc_channel *ch;
    cuc_buffer *part[2];
    cuc_msg *m;
    uint8_t *got = malloc(PART), mark[PART];

    TRY(cuc_channel_from_fd(fd, &ch));
    TRY(cuc_channel_recv(ch, 30000, &m));
    for (int i = 0; i < 2; i++) {
        TRY(cuc_msg_get_buffer(m, (size_t)i, &part[i]));
        TRY(cuc_memcpy(got, cuc_buffer_ptr(part[i]), PART, NULL));
        for (size_t k = 0; k < PART; k++)
            if (got[k] != byte_at(cuc_buffer_offset(part[i]) + k)) {
                fprintf(stderr, "consumer: part %d byte %zu differs\n", i, k);
                return 1;
            }
    }
    printf("consumer: 2 parts of one %zu-byte allocation of GPU %s, opened once "
           "(part 1 4096 bytes past part 0, in one mapping: %s), every byte verified\n",
           (size_t)BASE, cuc_device_uuid_string(cuc_buffer_device(part[0])),
           (char *)cuc_buffer_ptr(part[1]) - (char *)cuc_buffer_ptr(part[0]) ==
           (ptrdiff_t)PART ? "yes" : "no");
    memset(mark, 0x5a, sizeof(mark));
    TRY(cuc_memcpy(cuc_buffer_ptr(part[1]), mark, PART, NULL));
    cuc_msg_destroy(m);
    TRY(cuc_buffer_unref_async(part[0], NULL));
    TRY(cuc_buffer_unref_async(part[1], NULL)); /* closes the allocation */
    TRY(cuc_msg_create(&m));
    TRY(cuc_channel_send(ch, m)); /* done */
    cuc_msg_destroy(m);
    cuc_channel_destroy(ch);
    free(got);
    return 0;
}

static pid_t start_consumer(cuc_channel *theirs)
{
    int fd = cuc_channel_fd(theirs);
    pid_t pid = fork();

    if (pid == 0) { /* exec at once: no CUDA in a forked child */
        char arg[16];
        snprintf(arg, sizeof(arg), "%d", fd);
        fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) & ~FD_CLOEXEC);
        execl("/proc/self/exe", "legacy_ipc", "--consumer", arg, (char *)NULL);
        _exit(127);
    }
    return pid;
}

int main(int argc, char **argv)
{
    unsigned long long base = 0;
    cuc_channel *mine, *theirs;
    cuc_buffer *part[2];
    cuc_device *dev;
    uint8_t *host;
    size_t leases = 1;
    cuc_msg *m;
    int status;
    pid_t pid;

    if (argc == 3 && !strcmp(argv[1], "--consumer"))
        return consumer(atoi(argv[2]));
    host = malloc(BASE);
    if (!host)
        return 1;
    load_driver();
    TRY(cuc_device_get(0, &dev));
    TRY(cuc_device_set_current(dev));
    if (mem_alloc(&base, BASE) != 0) {
        fprintf(stderr, "cuMemAlloc of %u bytes failed\n", BASE);
        return 1;
    }
    for (size_t k = 0; k < BASE; k++)
        host[k] = byte_at(k);
    TRY(cuc_memcpy((void *)(uintptr_t)base, host, BASE, NULL));
    /* the user's pointers, as cucore buffers that do not own them */
    for (int i = 0; i < 2; i++)
        TRY(cuc_buffer_wrap(dev, (void *)(uintptr_t)(base + (size_t)i * PART), PART,
                            &part[i]));
    TRY(cuc_channel_pair(&mine, &theirs));
    pid = start_consumer(theirs);
    cuc_channel_destroy(theirs);
    TRY(cuc_msg_create(&m));
    TRY(cuc_msg_add_buffer(m, part[0]));
    TRY(cuc_msg_add_buffer(m, part[1]));
    TRY(cuc_channel_send(mine, m));
    cuc_msg_destroy(m);
    printf("producer: sent 2 parts of a cuMemAlloc allocation of GPU %s\n",
           cuc_device_uuid_string(dev));
    TRY(cuc_channel_recv(mine, 30000, &m));
    cuc_msg_destroy(m);
    for (int i = 0; i < 2; i++)
        TRY(cuc_buffer_lease_wait(part[i], mine, 0, 30000));
    TRY(cuc_buffer_lease_count(part[1], &leases));
    TRY(cuc_memcpy(host, (void *)(uintptr_t)(base + PART), PART, NULL));
    for (size_t k = 0; k < PART; k++)
        if (host[k] != 0x5a) {
            fprintf(stderr, "producer: the consumer's write is not there (byte %zu)\n", k);
            return 1;
        }
    printf("producer: the consumer's write came back; %zu leases left\n", leases);
    TRY(cuc_buffer_unref_async(part[0], NULL));
    TRY(cuc_buffer_unref_async(part[1], NULL));
    mem_free(base); /* ours, and nobody maps it any more */
    cuc_channel_destroy(mine);
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) {
        fprintf(stderr, "the consumer failed\n");
        return 1;
    }
    free(host);
    printf("legacy_ipc OK\n");
    return 0;
}
