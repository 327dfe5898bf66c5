/* `cucore`: the command-line tool. Dispatches to one subcommand; answers
 * `--help` for the tool and for each subcommand, and chooses where --json
 * output goes (cli.h): --json anywhere on the command line makes a usage
 * error JSON, whatever the command (an unknown one too). */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

struct subcommand {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
    const char *usage;
    FILE **json; /* where its --json output goes; NULL: it has no --json */
};

static const struct subcommand commands[] = {
    {"devices", cli_devices, "list the devices this process sees [--json]",
     cli_devices_usage, &stdout},
    {"pack", cli_pack, "write a message holding one object to stdout [--json]",
     cli_pack_usage, &stderr},
    {"inspect", cli_inspect, "show what a message's records mean here: FILE|- [--json]",
     cli_inspect_usage, &stdout},
    {"serve", cli_serve, "accept one peer at PATH and print the messages it sends",
     cli_serve_usage, NULL},
    {"connect", cli_connect, "send a message to PATH: [device N | --fd FILE]...",
     cli_connect_usage, NULL},
    {"demo", cli_demo, "producer and consumer with reversed GPU visibility share objects",
     cli_demo_usage, NULL},
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static int usage(FILE *f)
{
    size_t i;

    fprintf(f, "usage: cucore <command> [options]\n"
               "       cucore <command> --help\n\ncommands:\n");
    for (i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nexit status, for every command:\n"
               "  0  success\n"
               "  1  failure: the reason on stderr; with --json also as\n"
               "     {\"error\":{\"code\":\"CUC_E_...\",\"message\":\"...\"}}\n"
               "  2  usage error: the word at fault and the command's usage on stderr\n"
               "     (with --json anywhere, an unknown command too, also as\n"
               "     {\"error\":{\"code\":\"usage\",...}})\n"
               "--json writes JSON to stdout (pack: to stderr, its stdout being the\n"
               "message), also when the command fails.\n"
               "\nenvironment: CUCORE_DRIVER=sim uses the simulated driver "
               "(CUCORE_SIM_GPUS=N GPUs, default 4); cucore needs a CUDA 12.8 or\n"
               "newer driver otherwise\n");
    return f == stderr ? CLI_USAGE : CLI_OK;
}

static int has_arg(int argc, char **argv, const char *a, const char *b)
{
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], a) || (b && !strcmp(argv[i], b)))
            return 1;
    return 0;
}

static int run(const struct subcommand *c, int argc, char **argv)
{
    if (has_arg(argc, argv, "--help", "-h")) {
        fputs(c->usage, stdout);
        return CLI_OK;
    }
    /* A command without --json refuses the word as a usage error: JSON
     * on stdout, as the caller asked. */
    if (has_arg(argc, argv, "--json", NULL))
        cli_set_json(c->json ? *c->json : NULL, c->json ? *c->json : stdout);
    return c->run(argc, argv);
}

/* A usage error of the command line itself: the reason, then the tool's
 * usage, on stderr; with --json anywhere also {"error":{"code":"usage"}}
 * on stdout. */
static int usage_error(int argc, char **argv, const char *fmt, const char *word)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    int rc;

    if (!f)
        return usage(stderr);
    usage(f);
    fclose(f);
    if (has_arg(argc, argv, "--json", NULL))
        cli_set_json(NULL, stdout);
    rc = cli_usage_error(NULL, text, fmt, word);
    free(text);
    return rc;
}

int main(int argc, char **argv)
{
    size_t i;

    if (argc < 2)
        return usage_error(argc, argv, "%s", "missing the command");
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help"))
        return usage(stdout);
    if (!strcmp(argv[1], "--version")) {
        printf("cucore %s\n", CUC_VERSION_STRING);
        return CLI_OK;
    }
    for (i = 0; i < NCOMMANDS; i++)
        if (!strcmp(argv[1], commands[i].name))
            return run(&commands[i], argc - 2, argv + 2);
    if (argv[1][0] == '-')
        return usage_error(argc, argv, "\"%s\" is not a command (options come after the "
                           "command)", argv[1]);
    return usage_error(argc, argv, "unknown command \"%s\"", argv[1]);
}
