/* A consumer as a program of its own: connects to the producer at ADDRESS (default
 * @hwtensor-example-c), receives FRAMES frames and checks every byte of each is its number.
 *
 *   cc channel_consumer.c $(pkg-config --cflags --libs hwtensor) -o channel_consumer
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep under -std=c11 */
#include <hwtensor.h>

#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define FRAMES 30
#define TEN_SECONDS_NS 10000000000ull
/* How often the consumer tries to connect before the producer listens: 100 ms apart. */
#define CONNECT_TRIES 100

static int failed(const char *what) {
    char why[512];
    hwt_last_error(why, sizeof why);
    fprintf(stderr, "consumer: %s: %s\n", what, why);
    return 1;
}

int main(int argc, char **argv) {
    const char *address = argc > 1 ? argv[1] : "@hwtensor-example-c";
    int fd = -1;
    const struct timespec pause = {.tv_sec = 0, .tv_nsec = 100000000};
    for (int i = 0; i < CONNECT_TRIES && hwt_connect(address, &fd) != HWT_STATUS_OK; i++)
        nanosleep(&pause, NULL);
    if (fd < 0) return failed("hwt_connect");
    HwtConsumer *c = NULL;
    HwtStatus connected = hwt_consumer_connect(fd, &c);
    close(fd); /* the consumer keeps its own */
    if (connected != HWT_STATUS_OK) return failed("hwt_consumer_connect");
    size_t wrong = 0;
    for (uint64_t n = 0; n < FRAMES; n++) {
        HwtFrame *f = NULL;
        if (hwt_consumer_recv(c, HWT_WAIT_TIMED, TEN_SECONDS_NS, &f) != HWT_STATUS_OK)
            return failed("hwt_consumer_recv");
        HwtFrameMeta meta;
        HwtTensor *t = NULL;
        if (hwt_frame_meta(f, &meta, NULL) != HWT_STATUS_OK || hwt_frame_tensor(f, &t) != HWT_STATUS_OK)
            return failed("hwt_frame_meta");
        HwtMap map;
        if (hwt_tensor_map(t, HWT_ACCESS_READ, &map) != HWT_STATUS_OK) return failed("hwt_tensor_map");
        const unsigned char *px = map.data;
        for (size_t i = 0; i < map.len; i++) wrong += px[i] != (unsigned char)(meta.seq & 0xff);
        hwt_map_end(&map);
        hwt_tensor_release(t);
        hwt_frame_release(f); /* hands the buffer back */
    }
    hwt_consumer_free(c);
    printf("consumer: %d frames from %s, %zu wrong bytes\n", FRAMES, address, wrong);
    return wrong != 0;
}
