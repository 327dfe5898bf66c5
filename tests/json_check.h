/* A strict JSON validity check (RFC 8259) for the tests of the CLI's
 * --json output: json_valid(text) is 1 when text is exactly one JSON value,
 * with optional whitespace around it, and 0 otherwise (two values, a
 * trailing comma, a raw control character or a malformed UTF-8 byte in a
 * string, a bad escape, a leading zero, NaN...). It checks; it builds
 * nothing. Nesting is limited to JSON_MAX_DEPTH. */
#ifndef CUC_TEST_JSON_CHECK_H
#define CUC_TEST_JSON_CHECK_H

#include <string.h>

#define JSON_MAX_DEPTH 64

struct json_in {
    const unsigned char *p;
    int depth;
};

static int json_value_(struct json_in *in);

static void json_ws_(struct json_in *in)
{
    while (*in->p == ' ' || *in->p == '\t' || *in->p == '\n' || *in->p == '\r')
        in->p++;
}

static int json_lit_(struct json_in *in, const char *word)
{
    size_t n = strlen(word);

    if (strncmp((const char *)in->p, word, n) != 0)
        return 0;
    in->p += n;
    return 1;
}

static int json_digits_(struct json_in *in)
{
    const unsigned char *start = in->p;

    while (*in->p >= '0' && *in->p <= '9')
        in->p++;
    return in->p > start;
}

static int json_number_(struct json_in *in)
{
    if (*in->p == '-')
        in->p++;
    if (*in->p == '0')
        in->p++;
    else if (!json_digits_(in))
        return 0;
    if (*in->p == '.') {
        in->p++;
        if (!json_digits_(in))
            return 0;
    }
    if (*in->p == 'e' || *in->p == 'E') {
        in->p++;
        if (*in->p == '+' || *in->p == '-')
            in->p++;
        if (!json_digits_(in))
            return 0;
    }
    return 1;
}

static int json_hex4_(struct json_in *in)
{
    for (int i = 0; i < 4; i++, in->p++) {
        unsigned char c = *in->p;
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
            return 0;
    }
    return 1;
}

/* One well-formed UTF-8 sequence of 2 to 4 bytes (RFC 3629). */
static int json_utf8_(struct json_in *in)
{
    unsigned c = *in->p;
    unsigned long cp;
    int n, i;

    if (c >= 0xc2 && c <= 0xdf)
        n = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, cp = c & 0x07;
    else
        return 0;
    for (i = 1; i < n; i++) {
        if ((in->p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (in->p[i] & 0x3f);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    in->p += n;
    return 1;
}

static int json_string_(struct json_in *in)
{
    if (*in->p != '"')
        return 0;
    in->p++;
    for (;;) {
        unsigned char c = *in->p;
        if (c == '"') {
            in->p++;
            return 1;
        }
        if (c < 0x20) /* a raw control character, or the end of the text */
            return 0;
        if (c == '\\') {
            in->p++;
            if (strchr("\"\\/bfnrt", *in->p) && *in->p) {
                in->p++;
            } else if (*in->p == 'u') {
                in->p++;
                if (!json_hex4_(in))
                    return 0;
            } else {
                return 0;
            }
        } else if (c < 0x80) {
            in->p++;
        } else if (!json_utf8_(in)) {
            return 0;
        }
    }
}

/* Members or elements: open, then values (key: value for objects)
 * separated by commas, then close. */
static int json_container_(struct json_in *in, char open, char close)
{
    if (*in->p != open || ++in->depth > JSON_MAX_DEPTH)
        return 0;
    in->p++;
    json_ws_(in);
    if (*in->p == close) {
        in->p++;
        in->depth--;
        return 1;
    }
    for (;;) {
        if (open == '{') {
            if (!json_string_(in))
                return 0;
            json_ws_(in);
            if (*in->p++ != ':')
                return 0;
        }
        if (!json_value_(in))
            return 0;
        if (*in->p == ',') {
            in->p++;
            json_ws_(in);
            continue;
        }
        if (*in->p != close)
            return 0;
        in->p++;
        in->depth--;
        return 1;
    }
}

/* A value with the whitespace around it. */
static int json_value_(struct json_in *in)
{
    int ok;

    json_ws_(in);
    switch (*in->p) {
    case '{': ok = json_container_(in, '{', '}'); break;
    case '[': ok = json_container_(in, '[', ']'); break;
    case '"': ok = json_string_(in); break;
    case 't': ok = json_lit_(in, "true"); break;
    case 'f': ok = json_lit_(in, "false"); break;
    case 'n': ok = json_lit_(in, "null"); break;
    default: ok = json_number_(in); break;
    }
    json_ws_(in);
    return ok;
}

static inline int json_valid(const char *text)
{
    struct json_in in = {(const unsigned char *)text, 0};

    return json_value_(&in) && *in.p == '\0';
}

#endif
