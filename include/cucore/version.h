/* The version of cucore, at compile time (the macros) and at run time
 * (the functions: what the library that is loaded was built as), and the
 * export macro every cucore header uses. */
#ifndef CUCORE_VERSION_H
#define CUCORE_VERSION_H

#define CUC_VERSION_MAJOR 0
#define CUC_VERSION_MINOR 1
#define CUC_VERSION_PATCH 0
#define CUC_VERSION_STRING "0.1.0"
/* major * 10000 + minor * 100 + patch: comparable with < and >. */
#define CUC_VERSION_NUMBER (CUC_VERSION_MAJOR * 10000 + CUC_VERSION_MINOR * 100 + CUC_VERSION_PATCH)

#if defined(CUC_BUILDING) && defined(__GNUC__)
#define CUC_API __attribute__((visibility("default")))
#else
#define CUC_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* CUC_VERSION_NUMBER of the library in use, which may differ from the
 * headers a program was compiled with. Thread-safe; cannot fail. */
CUC_API int cuc_version(void);

/* CUC_VERSION_STRING of the library in use ("0.1.0"). Static storage,
 * never NULL. Thread-safe; cannot fail. */
CUC_API const char *cuc_version_string(void);

#ifdef __cplusplus
}
#endif
#endif
