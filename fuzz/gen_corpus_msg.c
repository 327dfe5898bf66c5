/* Writes the seed corpus of fuzz_msg_decode: valid messages of each record
 * type the decoder knows, and edge cases (empty, header only).
 *   CUCORE_DRIVER=sim build/fuzz/gen_corpus_msg fuzz/corpus/msg_decode */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"
#include "wire.h"

static void emit(const char *dir, const char *name, uint8_t nfds, cuc_msg *m)
{
    const int *fds;
    size_t len, n;
    uint8_t *b;
    char path[4096];
    FILE *f;

    if (cuc__msg_encode(m, &b, &len, &fds, &n) || n != nfds)
        exit(1);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (!f || fwrite(&nfds, 1, 1, f) != 1 || fwrite(b, 1, len, f) != len)
        exit(1);
    fclose(f);
    free(b);
}

int main(int argc, char **argv)
{
    cuc_device *d;
    cuc_msg *m;
    int n;

    if (argc != 2 || cuc_device_count(&n) || cuc_device_get(n - 1, &d))
        return 1;
    cuc_msg_create(&m);
    emit(argv[1], "empty", 0, m);
    cuc_msg_add_device(m, d);
    emit(argv[1], "device", 0, m);
    cuc_msg_add_fd(m, 0, 42);
    emit(argv[1], "device_fd", 1, m);
    cuc_msg_add_device(m, d);
    cuc_msg_add_fd(m, 1, 43);
    cuc_msg_add_fd(m, 2, 44);
    emit(argv[1], "device_fd_device_fd_fd", 3, m);
    cuc_msg_destroy(m);
    cuc_msg_create(&m);
    for (int i = 0; i < 64; i++)
        cuc_msg_add_device(m, d);
    emit(argv[1], "devices64", 0, m);
    cuc_msg_destroy(m);
    return 0;
}
