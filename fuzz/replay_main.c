/* main() for fuzz targets built without libFuzzer: runs
 * LLVMFuzzerTestOneInput once over every file in the directories (or
 * files) named on the command line. Used by ctest to replay the corpora. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf;
    long n;

    if (!f) {
        perror(path);
        return -1;
    }
    if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
        fclose(f);
        return -1;
    }
    buf = malloc(n ? (size_t)n : 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)n);
    free(buf);
    return 0;
}

static int run_path(const char *path, long *count)
{
    struct dirent *e;
    struct stat st;
    DIR *d;
    int rc = 0;

    if (stat(path, &st) != 0) {
        perror(path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        (*count)++;
        return run_file(path);
    }
    d = opendir(path);
    if (!d)
        return -1;
    while ((e = readdir(d)) != NULL) {
        char full[4096];
        if (e->d_name[0] == '.')
            continue;
        snprintf(full, sizeof(full), "%s/%s", path, e->d_name);
        if (stat(full, &st) == 0 && S_ISREG(st.st_mode)) {
            (*count)++;
            if (run_file(full))
                rc = -1;
        }
    }
    closedir(d);
    return rc;
}

int main(int argc, char **argv)
{
    long count = 0;
    int i, rc = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    for (i = 1; i < argc; i++)
        if (run_path(argv[i], &count))
            rc = 1;
    printf("replayed %ld inputs\n", count);
    if (count == 0) {
        fprintf(stderr, "no input found: the corpus is empty\n");
        return 1;
    }
    return rc;
}
