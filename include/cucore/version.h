/* Version and export macros shared by every cucore header. */
#ifndef CUCORE_VERSION_H
#define CUCORE_VERSION_H

#define CUC_VERSION_MAJOR 0
#define CUC_VERSION_MINOR 1
#define CUC_VERSION_PATCH 0
#define CUC_VERSION_STRING "0.1.0"

#if defined(CUC_BUILDING) && defined(__GNUC__)
#define CUC_API __attribute__((visibility("default")))
#else
#define CUC_API
#endif

#endif
