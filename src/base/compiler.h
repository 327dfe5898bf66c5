/* Compiler helpers every layer uses: printf checking, branch hints, scope
 * cleanup, array length and the enclosing object of an embedded member. */
#ifndef CUC_BASE_COMPILER_H
#define CUC_BASE_COMPILER_H

#include <stddef.h>

#if defined(__GNUC__)
#define CUC_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define CUC_LIKELY(x) __builtin_expect(!!(x), 1)
#define CUC_UNLIKELY(x) __builtin_expect(!!(x), 0)
/* A function off the hot path (errors, growth, the rare case): kept out of
 * line, so that the hot function that calls it needs no stack frame. */
#define CUC_COLD __attribute__((noinline, cold))
/* f(&var) runs when var goes out of scope, on every return path. */
#define CUC_CLEANUP(f) __attribute__((cleanup(f)))
#else
#error "cucore needs GCC or Clang (__atomic builtins, cleanup attributes)"
#endif

#define CUC_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* The object of type T whose member field is at p. */
#define CUC_CONTAINER_OF(p, T, field) ((T *)(void *)((char *)(p) - offsetof(T, field)))

#endif
