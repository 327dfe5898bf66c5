/* A hex digit's value: the one reader of UUID strings (sim_device.c) and
 * PTX constants (sim_image.c), in a file of its own so that the image
 * scanner builds alone (fuzz/fuzz_sim_image.c). */
#include "sim_internal.h"

#include <ctype.h>

int sim_hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}
