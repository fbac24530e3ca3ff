/* A C program that uses the hwtensor C ABI the way an integrator would. Exit 0 on success,
 * 1 on failure; without a GPU it prints a SKIPPED line (and fails when one is required). */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "smoke.h"

int main(void) {
    uint64_t device = 0;
    HwtStatus s = hwt_gpu_device_handle(&device);
    if (s == HWT_STATUS_UNAVAILABLE) return no_device("c_smoke");
    if (s != HWT_STATUS_OK) return fail("hwt_gpu_device_handle", s);
    if (hwt_gpu_device_handle(NULL) != HWT_STATUS_INVALID_ARGUMENT) return fail("null out-pointer check", s);

    uint8_t uuid[16];
    if ((s = hwt_gpu_device_uuid(&uuid)) != HWT_STATUS_OK) return fail("hwt_gpu_device_uuid", s);

    uint64_t a = 0, b = 0, last = 0, done = 0;
    if ((s = hwt_gpu_signal(&a)) != HWT_STATUS_OK) return fail("hwt_gpu_signal", s);
    if ((s = hwt_gpu_signal(&b)) != HWT_STATUS_OK) return fail("hwt_gpu_signal", s);
    if (b <= a) { fprintf(stderr, "c smoke: values not increasing: %llu then %llu\n", (unsigned long long)a, (unsigned long long)b); return 1; }
    if ((s = hwt_gpu_last_signalled(&last)) != HWT_STATUS_OK || last < b) return fail("hwt_gpu_last_signalled", s);
    if ((s = hwt_gpu_wait(b, 5000000000ull)) != HWT_STATUS_OK) return fail("hwt_gpu_wait", s);
    if ((s = hwt_gpu_completed_value(&done)) != HWT_STATUS_OK || done < b) return fail("hwt_gpu_completed_value", s);
    if ((s = hwt_gpu_wait(last + 1000000, 50000000ull)) != HWT_STATUS_TIMEOUT) return fail("a wait that must time out", s);

    int fd = -1;
    if ((s = hwt_gpu_completion_fd(b, &fd)) != HWT_STATUS_OK) return fail("hwt_gpu_completion_fd", s);
    struct pollfd p = { .fd = fd, .events = POLLIN };
    if (poll(&p, 1, 5000) != 1) { fprintf(stderr, "c smoke: completion fd not readable\n"); return 1; }
    close(fd);

    int fence = -1;
    s = hwt_gpu_export_fence(&fence);
    printf("c smoke: device %#llx, values %llu..%llu, fence %s\n", (unsigned long long)device,
           (unsigned long long)a, (unsigned long long)b, s == HWT_STATUS_OK ? "exported" : "not exportable here");
    if (s == HWT_STATUS_OK) close(fence);
    return 0;
}
