/* The README's first C program: a frame in shared memory, written through a map, handed to a
 * child process over a Unix socket and checked there, without a copy.
 *
 *   cc quickstart.c $(pkg-config --cflags --libs hwtensor) -Wl,-rpath,"$(pkg-config
 *      --variable=libdir hwtensor)" -o quickstart && ./quickstart
 */
#include <hwtensor.h>

#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define WIDTH 640
#define HEIGHT 480
#define VALUE 42
#define TEN_SECONDS_NS 10000000000ull

/* Prints the library's reason for a failed call and returns 1. */
static int failed(const char *what) {
    char why[512];
    hwt_last_error(why, sizeof why);
    fprintf(stderr, "%s: %s\n", what, why);
    return 1;
}

/* The consumer: receives one tensor, maps it for reading, checks every byte. */
static int consume(int sock) {
    HwtTensor *t = NULL;
    if (hwt_recv(sock, TEN_SECONDS_NS, 0, &t) != HWT_STATUS_OK) return failed("hwt_recv");
    HwtMap map;
    if (hwt_tensor_map(t, HWT_ACCESS_READ, &map) != HWT_STATUS_OK) return failed("hwt_tensor_map");
    const unsigned char *px = map.data;
    size_t wrong = 0;
    for (size_t i = 0; i < map.len; i++) wrong += px[i] != VALUE;
    hwt_map_end(&map);
    hwt_tensor_release(t);
    return wrong != 0;
}

int main(void) {
    if (!hwt_version_compatible(HWT_VERSION)) {
        fprintf(stderr, "libhwtensor is not the version of this header\n");
        return 1;
    }
    HwtTensor *frame = NULL;
    const HwtImageSpec spec = {.format = HWT_PIXEL_FORMAT_RGBA, .width = WIDTH, .height = HEIGHT};
    if (hwt_tensor_new_image(&spec, HWT_D_TYPE_U8, HWT_MEMORY_SHM, HWT_ACCESS_READ_WRITE, &frame) != HWT_STATUS_OK)
        return failed("hwt_tensor_new_image");
    HwtMap map;
    if (hwt_tensor_map(frame, HWT_ACCESS_WRITE, &map) != HWT_STATUS_OK) return failed("hwt_tensor_map");
    memset(map.data, VALUE, map.len);
    hwt_map_end(&map);

    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        _exit(consume(sv[1]));
    }
    close(sv[1]);
    if (hwt_send(sv[0], frame, HWT_TRANSPORT_REFERENCE, TEN_SECONDS_NS) != HWT_STATUS_OK)
        return failed("hwt_send");
    int status = 0;
    waitpid(pid, &status, 0);
    hwt_tensor_release(frame);
    int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    printf("the consumer saw the producer's pixels: %s\n", ok ? "true" : "false");
    return !ok;
}
