/* A producer as a program of its own: lends a pool of three 640x480 RGBA shared-memory frames
 * to the consumer that connects to ADDRESS (default @hwtensor-example-c), then sends FRAMES
 * frames, each filled with its number. Only processes of this user may attach (the default
 * policy; hwt_producer_admit widens it), and they read only. Run channel_consumer beside it.
 *
 *   cc channel_producer.c $(pkg-config --cflags --libs hwtensor) -o channel_producer
 */
#include <hwtensor.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define POOL 3
#define FRAMES 30
#define TEN_SECONDS_NS 10000000000ull

static int failed(const char *what) {
    char why[512];
    hwt_last_error(why, sizeof why);
    fprintf(stderr, "producer: %s: %s\n", what, why);
    return 1;
}

int main(int argc, char **argv) {
    const char *address = argc > 1 ? argv[1] : "@hwtensor-example-c";
    HwtTensor *pool[POOL];
    for (int i = 0; i < POOL; i++)
        if (hwt_tensor_new_image(&(HwtImageSpec){.format = HWT_PIXEL_FORMAT_RGBA, .width = 640, .height = 480}, HWT_D_TYPE_U8, HWT_MEMORY_SHM, HWT_ACCESS_READ_WRITE, &pool[i]) != HWT_STATUS_OK)
            return failed("hwt_tensor_new_image");
    HwtProducer *p = NULL;
    if (hwt_producer_new((const HwtTensor *const *)pool, POOL, &p) != HWT_STATUS_OK)
        return failed("hwt_producer_new");
    for (int i = 0; i < POOL; i++) hwt_tensor_release(pool[i]); /* the producer keeps its own */

    HwtListener *listener = NULL;
    if (hwt_listener_bind(address, &listener) != HWT_STATUS_OK) return failed("hwt_listener_bind");
    int fd = -1;
    if (hwt_listener_accept(listener, TEN_SECONDS_NS, &fd) != HWT_STATUS_OK)
        return failed("hwt_listener_accept");
    HwtStatus attached = hwt_producer_attach(p, fd);
    close(fd); /* the producer keeps its own */
    if (attached != HWT_STATUS_OK) return failed("hwt_producer_attach");

    for (uint64_t seq = 0; seq < FRAMES; seq++) {
        uint32_t slot;
        HwtTensor *t = NULL;
        if (hwt_producer_acquire(p, TEN_SECONDS_NS, &slot, &t) != HWT_STATUS_OK)
            return failed("hwt_producer_acquire");
        HwtMap map;
        if (hwt_tensor_map(t, HWT_ACCESS_WRITE, &map) != HWT_STATUS_OK) return failed("hwt_tensor_map");
        memset(map.data, (int)(seq & 0xff), map.len);
        hwt_map_end(&map);
        hwt_tensor_release(t);
        HwtFrameMeta meta = {.seq = seq};
        if (hwt_producer_send(p, slot, &meta) != HWT_STATUS_OK) return failed("hwt_producer_send");
    }
    /* Stay until the consumer handed every frame back. */
    for (int i = 0; i < POOL; i++) {
        uint32_t slot;
        HwtTensor *t = NULL;
        if (hwt_producer_acquire(p, TEN_SECONDS_NS, &slot, &t) != HWT_STATUS_OK) break;
        hwt_tensor_release(t);
    }
    hwt_listener_free(listener);
    hwt_producer_free(p);
    printf("producer: sent %d frames to %s\n", FRAMES, address);
    return 0;
}
