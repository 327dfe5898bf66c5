/* `cucore`: the command-line tool. Dispatches to one subcommand. */
#include <string.h>

#include "cli.h"

struct subcommand {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
};

static const struct subcommand commands[] = {
    {"devices", cli_devices, "list the devices this process sees [--json]"},
    {"pack", cli_pack, "write a message holding one object to stdout [--json]"},
    {"inspect", cli_inspect, "show what a message's records mean here: FILE|- [--json]"},
    {"serve", cli_serve, "accept one peer at PATH and print the messages it sends"},
    {"connect", cli_connect, "send a message to PATH: [device N | --fd FILE]..."},
    {"demo", cli_demo, "producer and consumer with reversed GPU visibility share objects"},
};

static int usage(FILE *f)
{
    size_t i;

    fprintf(f, "usage: cucore <command> [options]\n\ncommands:\n");
    for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\nenvironment: CUCORE_DRIVER=sim uses the simulated driver "
               "(CUCORE_SIM_GPUS=N GPUs, default 4)\n");
    return f == stderr ? 2 : 0;
}

int main(int argc, char **argv)
{
    size_t i;

    if (argc < 2)
        return usage(stderr);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help"))
        return usage(stdout);
    if (!strcmp(argv[1], "--version")) {
        printf("cucore %s\n", CUC_VERSION_STRING);
        return 0;
    }
    for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 2, argv + 2);
    fprintf(stderr, "cucore: unknown command \"%s\"\n", argv[1]);
    return usage(stderr);
}
