/* What both C smoke programs share: reporting a failed call with the library's own message,
 * and the skip (or, with HWTENSOR_TEST_REQUIRE_GPU=1, the failure) when there is no device. */
#ifndef HWT_SMOKE_H
#define HWT_SMOKE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hwtensor.h"

static int fail(const char *what, HwtStatus s) {
    char msg[512];
    hwt_last_error(msg, sizeof msg);
    fprintf(stderr, "c smoke: %s failed (status %d): %s\n", what, (int)s, msg);
    return 1;
}

/* The exit status of a program that found no device: 0 (skipped) unless one is required. */
static int no_device(const char *program) {
    const char *required = getenv("HWTENSOR_TEST_REQUIRE_GPU");
    char msg[512];
    hwt_last_error(msg, sizeof msg);
    fprintf(stderr, "SKIPPED: %s - %s\n", program, msg);
    return required && strcmp(required, "1") == 0 ? 1 : 0;
}

#endif
