/* The Windows counterpart of smoke.c: a C program against the header and the DLL, run as a
 * Windows integrator would (scripts/windows-test builds it with mingw and runs it under Wine).
 * Exit 0 on success, 1 on failure; without a device it prints a SKIPPED line (and fails when
 * one is required). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

#include "smoke.h"

int main(void) {
    uint64_t device = 0;
    HwtStatus s = hwt_gpu_device_handle(&device);
    if (s == HWT_STATUS_UNAVAILABLE) return no_device("c_smoke_windows");
    if (s != HWT_STATUS_OK) return fail("hwt_gpu_device_handle", s);

    uint64_t a = 0, b = 0;
    if ((s = hwt_gpu_signal(&a)) != HWT_STATUS_OK) return fail("hwt_gpu_signal", s);
    if ((s = hwt_gpu_signal(&b)) != HWT_STATUS_OK) return fail("hwt_gpu_signal", s);
    if (b <= a) { fprintf(stderr, "c smoke (windows): values not increasing\n"); return 1; }
    if ((s = hwt_gpu_wait(b, 5000000000ull)) != HWT_STATUS_OK) return fail("hwt_gpu_wait", s);
    if ((s = hwt_gpu_wait(b + 1000000, 50000000ull)) != HWT_STATUS_TIMEOUT) return fail("a wait that must time out", s);

    void *event = NULL;
    if ((s = hwt_gpu_completion_event(b, &event)) != HWT_STATUS_OK) return fail("hwt_gpu_completion_event", s);
    if (WaitForSingleObject((HANDLE)event, 5000) != WAIT_OBJECT_0) { fprintf(stderr, "c smoke (windows): event not set\n"); return 1; }
    CloseHandle((HANDLE)event);

    uint64_t fence = 0;
    s = hwt_gpu_fence_handle(&fence);
    printf("c smoke (windows): device %#llx, values %llu..%llu, fence %s\n", (unsigned long long)device,
           (unsigned long long)a, (unsigned long long)b, s == HWT_STATUS_OK ? "shared" : "none on this driver");
    return 0;
}
