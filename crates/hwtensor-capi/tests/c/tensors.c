/* Tensors from C the way an integrator uses them: create, map, view, batch, copy, blobs, a
 * hand-off to a child process and back, the GPU device's handles and queue, and every error
 * path a C caller can reach. Exit 0 on success, 1 on the first failure (with the library's
 * message). Built with -std=c11 -Wall -Wextra -Werror -pedantic, found through pkg-config, and
 * run once more under AddressSanitizer and LeakSanitizer.
 *
 * Usage: tensors                    the tests
 *        tensors --child FD         the hand-off peer (spawned by the tests)
 *        tensors --channel-child FD the pooled channel's consumer (spawned by the tests)
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hwtensor.h>

/* Bounds of the waits below: generous, so a slow CI machine is not a failure. */
#define SECOND_NS 1000000000ull
#define HANDOFF_TIMEOUT_NS (10 * SECOND_NS)
#define IDLE_TIMEOUT_NS (20 * 1000000ull)

static int fail(const char *what, HwtStatus s) {
    char msg[512];
    hwt_last_error(msg, sizeof msg);
    fprintf(stderr, "c tensors: %s failed (status %d, %s): %s\n", what, (int)s, hwt_status_str(s), msg);
    return 1;
}

#define CHECK(call)                                                                            \
    do {                                                                                       \
        HwtStatus s_ = (call);                                                                 \
        if (s_ != HWT_STATUS_OK) return fail(#call, s_);                                       \
    } while (0)

/* A call that must fail with `want`, and leave a message saying why. */
#define EXPECT(call, want)                                                                     \
    do {                                                                                       \
        HwtStatus s_ = (call);                                                                 \
        if (s_ != (want)) {                                                                    \
            fprintf(stderr, "c tensors: %s gave %s, expected %s\n", #call, hwt_status_str(s_), \
                    hwt_status_str(want));                                                     \
            return 1;                                                                          \
        }                                                                                      \
        if (hwt_last_error(NULL, 0) == 0) {                                                    \
            fprintf(stderr, "c tensors: %s left no message\n", #call);                         \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

#define ASSERT(cond)                                                                           \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "c tensors: %s:%d: %s\n", __FILE__, __LINE__, #cond);              \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

static size_t open_fds(void) {
    size_t n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return 0;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

/* The byte at (row, col) of the test pattern. */
static uint8_t pattern(size_t row, size_t col) { return (uint8_t)(row * 31 + col * 7); }

static int plain_tensors_map_and_refuse_a_second_writer(void) {
    const size_t shape[2] = {4, 6};
    HwtTensor *t = NULL;
    CHECK(hwt_tensor_new(shape, 2, HWT_D_TYPE_U8, HWT_MEMORY_MEM, &t));
    size_t ndim = 0, got[HWT_MAX_DIMS], strides[HWT_MAX_DIMS];
    uint32_t dtype = 0, memory = 0, format = 9;
    CHECK(hwt_tensor_ndim(t, &ndim));
    CHECK(hwt_tensor_shape(t, got, HWT_MAX_DIMS));
    CHECK(hwt_tensor_strides(t, strides, HWT_MAX_DIMS));
    CHECK(hwt_tensor_dtype(t, &dtype));
    CHECK(hwt_tensor_memory(t, &memory));
    CHECK(hwt_tensor_pixel_format(t, &format));
    ASSERT(ndim == 2 && got[0] == 4 && got[1] == 6 && strides[0] == 6 && strides[1] == 1);
    ASSERT(dtype == HWT_D_TYPE_U8 && memory == HWT_MEMORY_MEM && format == HWT_PIXEL_FORMAT_NONE);

    HwtMap w, other, r1, r2;
    CHECK(hwt_tensor_map(t, HWT_ACCESS_WRITE, &w));
    ASSERT(w.len == 24);
    for (size_t i = 0; i < w.len; i++) ((uint8_t *)w.data)[i] = (uint8_t)i;
    EXPECT(hwt_tensor_map(t, HWT_ACCESS_WRITE, &other), HWT_STATUS_BUSY);
    EXPECT(hwt_tensor_map(t, HWT_ACCESS_READ, &other), HWT_STATUS_BUSY);
    EXPECT(hwt_map_end(&other), HWT_STATUS_INVALID_OPERATION); /* a refused map is not live */
    CHECK(hwt_map_end(&w));
    ASSERT(w.data == NULL);
    EXPECT(hwt_map_end(&w), HWT_STATUS_INVALID_OPERATION); /* a second end is caught */
    CHECK(hwt_tensor_map(t, HWT_ACCESS_READ, &r1));
    CHECK(hwt_tensor_map(t, HWT_ACCESS_READ, &r2)); /* readers share */
    for (size_t i = 0; i < r1.len; i++) ASSERT(((const uint8_t *)r1.data)[i] == (uint8_t)i);
    ASSERT(((const uint8_t *)r2.data)[23] == 23);
    /* Maps end before the tensor's last release. */
    CHECK(hwt_map_end(&r1));
    CHECK(hwt_map_end(&r2));
    hwt_tensor_release(t);
    return 0;
}

/* A DMA-BUF from the dma-heap, as a C caller on a board makes one: its map brackets the CPU
 * access, and its fd imports again (the receiving side of a hand-off) as a DMA-BUF over the same
 * bytes. Without a dma-heap (CI's own machine) a SKIPPED line; scripts/dma-vm has one, and sets
 * HWTENSOR_TEST_REQUIRE_DMABUF=1, which makes the skip a failure. */
static int a_dmabuf_tensor_maps_and_its_fd_imports_as_the_same_dmabuf(void) {
    const size_t shape[1] = {3 * 4096 + 100};
    HwtTensor *t = NULL;
    HwtStatus s = hwt_tensor_new(shape, 1, HWT_D_TYPE_U8, HWT_MEMORY_DMA_BUF, &t);
    if (s == HWT_STATUS_UNAVAILABLE) {
        char msg[256];
        hwt_last_error(msg, sizeof msg);
        const char *required = getenv("HWTENSOR_TEST_REQUIRE_DMABUF");
        if (required && strcmp(required, "1") == 0) return fail("hwt_tensor_new(DMA_BUF)", s);
        fprintf(stderr, "SKIPPED: c tensors DMA-BUF part - %s\n", msg);
        return 0;
    }
    CHECK(s);
    uint32_t memory = 0;
    CHECK(hwt_tensor_memory(t, &memory));
    ASSERT(memory == HWT_MEMORY_DMA_BUF);
    HwtMap m;
    CHECK(hwt_tensor_map(t, HWT_ACCESS_WRITE, &m));
    for (size_t i = 0; i < m.len; i++) ((uint8_t *)m.data)[i] = pattern(i / 64, i % 64);
    CHECK(hwt_map_end(&m));
    int fd = -1;
    CHECK(hwt_tensor_clone_fd(t, &fd));
    char link[64], target[64] = {0};
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ASSERT(readlink(link, target, sizeof target - 1) > 0 && strncmp(target, "/dmabuf:", 8) == 0);
    HwtTensor *back = NULL;
    CHECK(hwt_tensor_from_fd(fd, 0, shape, 1, HWT_D_TYPE_U8, &back));
    close(fd);
    CHECK(hwt_tensor_memory(back, &memory));
    ASSERT(memory == HWT_MEMORY_DMA_BUF);
    CHECK(hwt_tensor_map(back, HWT_ACCESS_READ, &m));
    ASSERT(m.len == shape[0]);
    for (size_t i = 0; i < m.len; i++) ASSERT(((const uint8_t *)m.data)[i] == pattern(i / 64, i % 64));
    CHECK(hwt_map_end(&m));
    hwt_tensor_release(back);
    hwt_tensor_release(t);
    return 0;
}

/* GStreamer's default I420 at 1364 pixels: 1364-byte luma rows, chroma padded to 684 (the
 * I420 rule would give 682). */
static int an_i420_image_keeps_a_chroma_stride_of_its_own(void) {
    HwtTensor *img = NULL;
    CHECK(hwt_tensor_new_image(&(HwtImageSpec){.format = HWT_PIXEL_FORMAT_I420, .width = 1364, .height = 8, .row_stride = 1364, .chroma_stride = 684}, HWT_D_TYPE_U8, HWT_MEMORY_MEM, HWT_ACCESS_READ_WRITE, &img));
    size_t chroma = 0, nplanes = 0;
    CHECK(hwt_tensor_chroma_stride(img, &chroma));
    ASSERT(chroma == 684);
    HwtPlane planes[4];
    CHECK(hwt_tensor_plane_table(img, planes, 4, &nplanes));
    ASSERT(nplanes == 3 && planes[1].row_stride == 684 && planes[2].offset == 1364 * 8 + 684 * 4);
    hwt_tensor_release(img);
    EXPECT(hwt_tensor_new_image(&(HwtImageSpec){.format = HWT_PIXEL_FORMAT_I420, .width = 1364, .height = 8, .row_stride = 1364, .chroma_stride = 600}, HWT_D_TYPE_U8, HWT_MEMORY_MEM, HWT_ACCESS_READ_WRITE, &img),
           HWT_STATUS_INVALID_ARGUMENT); /* too narrow for a chroma row */
    /* The spec carries colours; a tiled modifier is an import's, never an allocation's. */
    HwtImageSpec bt709 = {.format = HWT_PIXEL_FORMAT_NV12, .width = 16, .height = 8,
                          .colorimetry = {.primaries = 1, .transfer = 1, .matrix = 2, .range = 1}};
    CHECK(hwt_tensor_new_image(&bt709, HWT_D_TYPE_U8, HWT_MEMORY_MEM, HWT_ACCESS_READ_WRITE, &img));
    HwtColorimetry said = {0};
    CHECK(hwt_tensor_colorimetry(img, &said));
    ASSERT(said.primaries == 1 && said.matrix == 2 && said.range == 1);
    hwt_tensor_release(img);
    img = NULL;
    HwtImageSpec tiled = {.format = HWT_PIXEL_FORMAT_NV12, .width = 16, .height = 8, .drm_modifier = 0x0100000000000001ull};
    EXPECT(hwt_tensor_new_image(&tiled, HWT_D_TYPE_U8, HWT_MEMORY_MEM, HWT_ACCESS_READ_WRITE, &img), HWT_STATUS_INVALID_ARGUMENT);
    EXPECT(hwt_tensor_new_image(NULL, HWT_D_TYPE_U8, HWT_MEMORY_MEM, HWT_ACCESS_READ_WRITE, &img), HWT_STATUS_INVALID_ARGUMENT);
    ASSERT(img == NULL);
    return 0;
}

/* Whether fd is open in this process. */
static int fcntl_is_open(int fd) { return dup2(fd, fd) == fd; }

/* A fence that is not a DMA-fence sync_file (an eventfd) is refused as a bad fd; the caller's
 * fd stays open. */
static int an_fd_that_is_no_sync_file_is_refused_as_a_fence(void) {
    HwtTensor *t = NULL, *fenced = NULL;
    size_t shape[1] = {64};
    CHECK(hwt_tensor_new(shape, 1, HWT_D_TYPE_U8, HWT_MEMORY_SHM, &t));
    int ev = eventfd(1, EFD_CLOEXEC);
    ASSERT(ev >= 0);
    EXPECT(hwt_tensor_with_sync_file(t, ev, &fenced), HWT_STATUS_BAD_FD);
    ASSERT(fenced == NULL && fcntl_is_open(ev));
    close(ev);
    hwt_tensor_release(t);
    return 0;
}

/* A tensor with no GPU write pending exports no sync_file: -1, and the call succeeds. */
static int a_tensor_without_pending_writes_exports_no_sync_file(void) {
    HwtTensor *t = NULL;
    size_t shape[1] = {64};
    CHECK(hwt_tensor_new(shape, 1, HWT_D_TYPE_U8, HWT_MEMORY_SHM, &t));
    int fd = 7;
    CHECK(hwt_tensor_export_sync_file(t, &fd));
    ASSERT(fd == -1);
    EXPECT(hwt_tensor_export_sync_file(t, NULL), HWT_STATUS_INVALID_ARGUMENT);
    hwt_tensor_release(t);
    return 0;
}

static int a_view_of_an_image_writes_only_its_region(void) {
    HwtTensor *img = NULL, *view = NULL;
    CHECK(hwt_tensor_new_image(&(HwtImageSpec){.format = HWT_PIXEL_FORMAT_RGBA, .width = 64, .height = 32}, HWT_D_TYPE_U8, HWT_MEMORY_SHM, HWT_ACCESS_READ_WRITE, &img));
    size_t w = 0, h = 0, stride = 0;
    CHECK(hwt_tensor_image_size(img, &w, &h, &stride));
    ASSERT(w == 64 && h == 32 && stride >= 64 * 4);
    size_t nplanes = 0;
    HwtPlane planes[4];
    CHECK(hwt_tensor_plane_table(img, planes, 4, &nplanes));
    ASSERT(nplanes == 1 && planes[0].row_stride == stride && planes[0].rows == 32);

    HwtTensor *pitched = NULL;
    CHECK(hwt_tensor_new_image(&(HwtImageSpec){.format = HWT_PIXEL_FORMAT_RGBA, .width = 40, .height = 8, .row_stride = 256}, HWT_D_TYPE_U8, HWT_MEMORY_MEM, HWT_ACCESS_READ_WRITE, &pitched));
    size_t pitch = 0;
    CHECK(hwt_tensor_image_size(pitched, NULL, NULL, &pitch));
    ASSERT(pitch == 256);
    hwt_tensor_release(pitched);
    EXPECT(hwt_tensor_new_image(&(HwtImageSpec){.format = HWT_PIXEL_FORMAT_RGBA, .width = 40, .height = 8, .row_stride = 100}, HWT_D_TYPE_U8, HWT_MEMORY_MEM, HWT_ACCESS_READ_WRITE, &pitched),
           HWT_STATUS_INVALID_ARGUMENT); /* a pitch that cannot hold a row */

    CHECK(hwt_tensor_view(img, 8, 4, 8, 8, &view));
    size_t vs[HWT_MAX_DIMS], vshape[HWT_MAX_DIMS];
    CHECK(hwt_tensor_shape(view, vshape, HWT_MAX_DIMS));
    CHECK(hwt_tensor_strides(view, vs, HWT_MAX_DIMS));
    ASSERT(vshape[0] == 8 && vshape[1] == 8 && vshape[2] == 4 && vs[0] == stride);
    HwtMap m;
    CHECK(hwt_tensor_map(view, HWT_ACCESS_WRITE, &m));
    for (size_t y = 0; y < 8; y++) memset((uint8_t *)m.data + y * vs[0], 0xAB, 8 * 4);
    CHECK(hwt_map_end(&m));
    hwt_tensor_release(view);

    CHECK(hwt_tensor_map(img, HWT_ACCESS_READ, &m));
    size_t inside = 0;
    for (size_t y = 0; y < 32; y++)
        for (size_t x = 0; x < 64 * 4; x++)
            if (((const uint8_t *)m.data)[y * stride + x] == 0xAB) inside++;
    CHECK(hwt_map_end(&m));
    hwt_tensor_release(img);
    ASSERT(inside == 8 * 8 * 4);
    return 0;
}

static int a_batch_item_and_a_copy_see_the_same_bytes(void) {
    const size_t shape[3] = {3, 4, 5};
    HwtTensor *batch = NULL, *item = NULL, *copy = NULL;
    CHECK(hwt_tensor_new(shape, 3, HWT_D_TYPE_F32, HWT_MEMORY_AUTO, &batch));
    HwtMap m;
    CHECK(hwt_tensor_map(batch, HWT_ACCESS_WRITE, &m));
    for (size_t i = 0; i < 60; i++) ((float *)m.data)[i] = (float)i;
    CHECK(hwt_map_end(&m));
    CHECK(hwt_tensor_batch(batch, 2, &item));
    const size_t item_shape[2] = {4, 5};
    CHECK(hwt_tensor_new(item_shape, 2, HWT_D_TYPE_F32, HWT_MEMORY_MEM, &copy));
    CHECK(hwt_tensor_copy_from(copy, item));
    CHECK(hwt_tensor_map(copy, HWT_ACCESS_READ, &m));
    ASSERT(m.len == 20 * sizeof(float) && ((const float *)m.data)[0] == 40.0f && ((const float *)m.data)[19] == 59.0f);
    CHECK(hwt_map_end(&m));
    HwtIdentity a, b;
    CHECK(hwt_tensor_identity(batch, &a));
    CHECK(hwt_tensor_identity(item, &b));
    ASSERT(a.kind == b.kind && a.a == b.a && a.b == b.b && a.c == b.c);
    hwt_tensor_release(item);
    hwt_tensor_release(copy);
    hwt_tensor_release(batch);
    return 0;
}

static int an_inline_blob_round_trips_and_a_hostile_one_is_refused(void) {
    const size_t shape[2] = {16, 16};
    HwtTensor *t = NULL, *back = NULL;
    CHECK(hwt_tensor_new(shape, 2, HWT_D_TYPE_U16, HWT_MEMORY_MEM, &t));
    HwtMap m;
    CHECK(hwt_tensor_map(t, HWT_ACCESS_WRITE, &m));
    for (size_t i = 0; i < 256; i++) ((uint16_t *)m.data)[i] = (uint16_t)(i * 257);
    CHECK(hwt_map_end(&m));
    HwtBlob *blob = NULL;
    CHECK(hwt_blob_export(t, HWT_TRANSPORT_INLINE, &blob));
    const uint8_t *data = NULL;
    const int *fds = NULL;
    size_t bytes = 0, nfds = 9;
    CHECK(hwt_blob_data(blob, &data, &bytes));
    CHECK(hwt_blob_fds(blob, &fds, &nfds));
    ASSERT(nfds == 0 && bytes > 512);
    CHECK(hwt_blob_import(data, bytes, NULL, 0, 0, &back));
    CHECK(hwt_tensor_map(back, HWT_ACCESS_READ, &m));
    ASSERT(((const uint16_t *)m.data)[255] == (uint16_t)(255 * 257));
    CHECK(hwt_map_end(&m));
    hwt_tensor_release(back);

    EXPECT(hwt_blob_import(data, bytes - 1, NULL, 0, 0, &back), HWT_STATUS_BAD_BLOB);
    uint8_t noise[256];
    for (size_t i = 0; i < sizeof noise; i++) noise[i] = (uint8_t)(i * 151 + 7);
    EXPECT(hwt_blob_import(noise, sizeof noise, NULL, 0, 0, &back), HWT_STATUS_BAD_BLOB);
    EXPECT(hwt_blob_import(NULL, 10, NULL, 0, 0, &back), HWT_STATUS_INVALID_ARGUMENT);
    hwt_blob_free(blob);
    hwt_tensor_release(t);

    /* A reference blob without the fd it names. */
    HwtTensor *shm = NULL;
    CHECK(hwt_tensor_new(shape, 2, HWT_D_TYPE_U8, HWT_MEMORY_SHM, &shm));
    CHECK(hwt_blob_export(shm, HWT_TRANSPORT_REFERENCE, &blob));
    CHECK(hwt_blob_data(blob, &data, &bytes));
    CHECK(hwt_blob_fds(blob, &fds, &nfds));
    ASSERT(nfds == 1);
    EXPECT(hwt_blob_import(data, bytes, NULL, 0, 0, &back), HWT_STATUS_BAD_BLOB);
    CHECK(hwt_blob_import(data, bytes, fds, nfds, 0, &back));
    HwtIdentity a, b;
    CHECK(hwt_tensor_identity(shm, &a));
    CHECK(hwt_tensor_identity(back, &b));
    ASSERT(a.kind == 1 && a.a == b.a && a.b == b.b);
    hwt_tensor_release(back);
    hwt_blob_free(blob);
    hwt_tensor_release(shm);
    return 0;
}

static int an_fd_imports_from_a_byte_offset(void) {
    int fd = memfd_create("hwt-offset", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ASSERT(fd >= 0 && ftruncate(fd, 8192) == 0);
    uint8_t frame[64];
    for (size_t i = 0; i < sizeof frame; i++) frame[i] = (uint8_t)(200 - i);
    ASSERT(pwrite(fd, frame, sizeof frame, 4096) == (ssize_t)sizeof frame);
    const size_t shape[2] = {8, 8};
    HwtTensor *t = NULL;
    CHECK(hwt_tensor_from_fd(fd, 4096, shape, 2, HWT_D_TYPE_U8, &t));
    HwtMap m;
    CHECK(hwt_tensor_map(t, HWT_ACCESS_READ, &m));
    ASSERT(m.len == 64 && memcmp(m.data, frame, 64) == 0);
    CHECK(hwt_map_end(&m));
    hwt_tensor_release(t);
    HwtTensor *bad = NULL;
    EXPECT(hwt_tensor_from_fd(fd, 8190, shape, 2, HWT_D_TYPE_U8, &bad), HWT_STATUS_BAD_FD); /* past the end */
    const size_t one[1] = {4};
    EXPECT(hwt_tensor_from_fd(fd, 3, one, 1, HWT_D_TYPE_U32, &bad), HWT_STATUS_INVALID_ARGUMENT); /* misaligned */
    close(fd);
    return 0;
}

/* A sealable memfd of `len` bytes whose byte i is `base + i` (mod 256). */
static int patterned_memfd(size_t len, uint8_t base) {
    int fd = memfd_create("hwt-plane", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) return -1;
    uint8_t *bytes = malloc(len);
    if (!bytes) return -1;
    for (size_t i = 0; i < len; i++) bytes[i] = (uint8_t)(base + i);
    ssize_t written = pwrite(fd, bytes, len, 0);
    free(bytes);
    return written == (ssize_t)len ? fd : -1;
}

static int an_nv12m_frame_in_two_buffers_imports_as_one_image(void) {
    size_t before = open_fds();
    const size_t w = 640, h = 480;
    int y = patterned_memfd(w * h, 0), uv = patterned_memfd(w * h / 2, 100);
    ASSERT(y >= 0 && uv >= 0);
    const HwtPlaneFd planes[2] = {{.fd = y, .offset = 0, .row_stride = w}, {.fd = uv, .offset = 0, .row_stride = w}};
    HwtTensor *t = NULL;
    CHECK(hwt_tensor_image_from_planes(planes, 2, &(HwtImageSpec){.format = HWT_PIXEL_FORMAT_NV12, .width = w, .height = h}, HWT_D_TYPE_U8, HWT_ACCESS_READ_WRITE, &t));
    HwtMap m;
    CHECK(hwt_tensor_map(t, HWT_ACCESS_READ, &m));
    const uint8_t *px = m.data;
    ASSERT(m.len == w * h * 3 / 2 && px[5] == 5 && px[w * h] == 100 && px[w * h + 7] == 107);
    CHECK(hwt_map_end(&m));
    int fd = -1;
    EXPECT(hwt_tensor_clone_fd(t, &fd), HWT_STATUS_UNAVAILABLE); /* no single fd: sent inline */
    hwt_tensor_release(t);

    HwtTensor *bad = NULL;
    const HwtPlaneFd skewed[2] = {{.fd = y, .offset = 0, .row_stride = w}, {.fd = uv, .offset = 0, .row_stride = w + 64}};
    EXPECT(hwt_tensor_image_from_planes(skewed, 2, &(HwtImageSpec){.format = HWT_PIXEL_FORMAT_NV12, .width = w, .height = h}, HWT_D_TYPE_U8, HWT_ACCESS_READ, &bad),
           HWT_STATUS_INVALID_ARGUMENT);
    EXPECT(hwt_tensor_image_from_planes(planes, 1, &(HwtImageSpec){.format = HWT_PIXEL_FORMAT_NV12, .width = w, .height = h}, HWT_D_TYPE_U8, HWT_ACCESS_READ, &bad),
           HWT_STATUS_INVALID_ARGUMENT); /* NV12 has two planes */
    EXPECT(hwt_tensor_image_from_planes(planes, 99, &(HwtImageSpec){.format = HWT_PIXEL_FORMAT_NV12, .width = w, .height = h}, HWT_D_TYPE_U8, HWT_ACCESS_READ, &bad),
           HWT_STATUS_INVALID_ARGUMENT);
    EXPECT(hwt_tensor_image_from_planes(NULL, 2, &(HwtImageSpec){.format = HWT_PIXEL_FORMAT_NV12, .width = w, .height = h}, HWT_D_TYPE_U8, HWT_ACCESS_READ, &bad),
           HWT_STATUS_INVALID_ARGUMENT);
    /* 1920x1080 luma does not end on a page: its chroma buffer cannot follow it in place... */
    const size_t fw = 1920, fh = 1080;
    int fy = patterned_memfd(fw * fh, 0), fuv = patterned_memfd(fw * fh / 2, 100);
    ASSERT(fy >= 0 && fuv >= 0);
    const HwtPlaneFd full[2] = {{.fd = fy, .offset = 0, .row_stride = fw}, {.fd = fuv, .offset = 0, .row_stride = fw}};
    EXPECT(hwt_tensor_image_from_planes(full, 2, &(HwtImageSpec){.format = HWT_PIXEL_FORMAT_NV12, .width = fw, .height = fh}, HWT_D_TYPE_U8, HWT_ACCESS_READ, &bad),
           HWT_STATUS_INVALID_ARGUMENT);
    /* ...so the caller asks for a copy. */
    CHECK(hwt_tensor_image_copied_from_planes(full, 2, &(HwtImageSpec){.format = HWT_PIXEL_FORMAT_NV12, .width = fw, .height = fh}, HWT_D_TYPE_U8, HWT_MEMORY_MEM, &t));
    CHECK(hwt_tensor_map(t, HWT_ACCESS_READ, &m));
    px = m.data;
    ASSERT(px[fw * 3 + 1] == (uint8_t)(fw * 3 + 1) && px[fw * fh + 5] == 105);
    CHECK(hwt_map_end(&m));
    hwt_tensor_release(t);
    close(fy);
    close(fuv);
    /* A closed plane fd (the first: a later one's number would be reused by the first's dup). */
    close(y);
    EXPECT(hwt_tensor_image_from_planes(planes, 2, &(HwtImageSpec){.format = HWT_PIXEL_FORMAT_NV12, .width = w, .height = h}, HWT_D_TYPE_U8, HWT_ACCESS_READ, &bad),
           HWT_STATUS_BAD_FD);
    close(uv);
    ASSERT(open_fds() == before);
    return 0;
}

static int every_bad_input_is_a_status_with_a_message_and_leaks_no_fd(void) {
    size_t before = open_fds();
    const size_t shape[2] = {4, 4};
    HwtTensor *t = NULL;
    EXPECT(hwt_tensor_new(shape, 2, 99, HWT_MEMORY_MEM, &t), HWT_STATUS_INVALID_ARGUMENT);
    EXPECT(hwt_tensor_new(shape, 2, HWT_D_TYPE_U8, 42, &t), HWT_STATUS_INVALID_ARGUMENT);
    EXPECT(hwt_tensor_new(NULL, 2, HWT_D_TYPE_U8, HWT_MEMORY_MEM, &t), HWT_STATUS_INVALID_ARGUMENT);
    EXPECT(hwt_tensor_new(shape, 2, HWT_D_TYPE_U8, HWT_MEMORY_MEM, NULL), HWT_STATUS_INVALID_ARGUMENT);
    EXPECT(hwt_tensor_new(shape, 1000, HWT_D_TYPE_U8, HWT_MEMORY_MEM, &t), HWT_STATUS_INVALID_ARGUMENT);
    EXPECT(hwt_tensor_new_image(&(HwtImageSpec){.format = 77, .width = 8, .height = 8}, HWT_D_TYPE_U8, HWT_MEMORY_MEM, HWT_ACCESS_READ_WRITE, &t),
           HWT_STATUS_INVALID_ARGUMENT);
    EXPECT(hwt_tensor_ndim(NULL, NULL), HWT_STATUS_INVALID_ARGUMENT);

    CHECK(hwt_tensor_new(shape, 2, HWT_D_TYPE_U8, HWT_MEMORY_MEM, &t));
    size_t one[1];
    EXPECT(hwt_tensor_shape(t, one, 1), HWT_STATUS_INVALID_ARGUMENT); /* a short buffer */
    HwtMap m;
    EXPECT(hwt_tensor_map(t, 0, &m), HWT_STATUS_INVALID_ARGUMENT);
    EXPECT(hwt_tensor_map(t, HWT_ACCESS_READ, NULL), HWT_STATUS_INVALID_ARGUMENT);
    HwtTensor *v = NULL;
    EXPECT(hwt_tensor_view(t, 3, 3, 4, 4, &v), HWT_STATUS_INVALID_ARGUMENT);
    EXPECT(hwt_tensor_batch(t, 9, &v), HWT_STATUS_INVALID_ARGUMENT);
    const size_t other_shape[2] = {2, 8};
    HwtTensor *other = NULL;
    CHECK(hwt_tensor_new(other_shape, 2, HWT_D_TYPE_U8, HWT_MEMORY_MEM, &other));
    EXPECT(hwt_tensor_copy_from(t, other), HWT_STATUS_INVALID_ARGUMENT);
    hwt_tensor_release(other);
    uint64_t buffer = 0, offset = 0;
    EXPECT(hwt_tensor_vk_buffer(t, &buffer, &offset), HWT_STATUS_INVALID_OPERATION);
    int fd = -1;
    EXPECT(hwt_tensor_clone_fd(t, &fd), HWT_STATUS_UNAVAILABLE); /* heap memory has no fd */
    EXPECT(hwt_send(-1, t, HWT_TRANSPORT_INLINE, SECOND_NS), HWT_STATUS_BAD_FD);
    /* The advice names the C call, not the Rust API. */
    int pair[2];
    ASSERT(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
    EXPECT(hwt_send(pair[0], t, HWT_TRANSPORT_REFERENCE, SECOND_NS), HWT_STATUS_UNAVAILABLE);
    char why[512];
    hwt_last_error(why, sizeof why);
    ASSERT(strstr(why, "hwt_send(socket, t, HWT_TRANSPORT_INLINE, timeout)") != NULL);
    ASSERT(strstr(why, "Transport::") == NULL);
    close(pair[0]);
    close(pair[1]);
    hwt_tensor_release(t);

    /* A tiled frame (I915_FORMAT_MOD_X_TILED) is carried, and refused where read as rows. */
    HwtTensor *linear = NULL, *tiled = NULL;
    CHECK(hwt_tensor_new_image(&(HwtImageSpec){.format = HWT_PIXEL_FORMAT_RGBA, .width = 8, .height = 8}, HWT_D_TYPE_U8, HWT_MEMORY_MEM, HWT_ACCESS_READ_WRITE, &linear));
    uint64_t modifier = 1;
    CHECK(hwt_tensor_drm_modifier(linear, &modifier));
    ASSERT(modifier == HWT_DRM_FORMAT_MOD_LINEAR);
    CHECK(hwt_tensor_with_drm_modifier(linear, 0x0100000000000001ull, &tiled));
    CHECK(hwt_tensor_drm_modifier(tiled, &modifier));
    ASSERT(modifier == 0x0100000000000001ull);
    EXPECT(hwt_tensor_map(tiled, HWT_ACCESS_READ, &m), HWT_STATUS_INVALID_ARGUMENT);
    char layout[512];
    hwt_last_error(layout, sizeof layout);
    ASSERT(strstr(layout, "DRM format modifier") != NULL && strstr(layout, "Intel") != NULL);
    hwt_tensor_release(tiled);
    hwt_tensor_release(linear);

    HwtTensor *ro = NULL;
    CHECK(hwt_tensor_new_image(&(HwtImageSpec){.format = HWT_PIXEL_FORMAT_GREY, .width = 8, .height = 8}, HWT_D_TYPE_U8, HWT_MEMORY_MEM, HWT_ACCESS_READ, &ro));
    EXPECT(hwt_tensor_map(ro, HWT_ACCESS_WRITE, &m), HWT_STATUS_INVALID_OPERATION);
    hwt_tensor_release(ro);

    int p[2];
    ASSERT(pipe(p) == 0);
    EXPECT(hwt_tensor_from_fd(p[0], 0, shape, 2, HWT_D_TYPE_U8, &t), HWT_STATUS_BAD_FD); /* a pipe */
    EXPECT(hwt_recv(p[0], IDLE_TIMEOUT_NS, 0, &t), HWT_STATUS_BAD_FD);                 /* not a socket */
    close(p[0]);
    close(p[1]);
    EXPECT(hwt_tensor_from_fd(p[0], 0, shape, 2, HWT_D_TYPE_U8, &t), HWT_STATUS_BAD_FD); /* closed */
    EXPECT(hwt_tensor_from_fd(-5, 0, shape, 2, HWT_D_TYPE_U8, &t), HWT_STATUS_BAD_FD);
    int small = memfd_create("hwt-small", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ASSERT(small >= 0 && ftruncate(small, 8) == 0);
    HwtStatus s = hwt_tensor_from_fd(small, 0, shape, 2, HWT_D_TYPE_U8, &t);
    ASSERT(s != HWT_STATUS_OK); /* 8 bytes hold no 4x4 tensor */
    close(small);

    int sv[2];
    ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    EXPECT(hwt_recv(sv[0], IDLE_TIMEOUT_NS, 0, &t), HWT_STATUS_TIMEOUT);
    EXPECT(hwt_recv(sv[0], IDLE_TIMEOUT_NS, 0x80, &t), HWT_STATUS_INVALID_ARGUMENT);
    close(sv[1]);
    EXPECT(hwt_recv(sv[0], IDLE_TIMEOUT_NS, 0, &t), HWT_STATUS_PEER_GONE);
    close(sv[0]);

    CHECK(hwt_map_end(NULL));
    hwt_tensor_release(NULL);
    hwt_blob_free(NULL);
    ASSERT(strcmp(hwt_status_str(HWT_STATUS_BUSY), "busy") == 0);
    ASSERT(strcmp(hwt_status_str(1000), "unknown status") == 0);
    size_t after = open_fds();
    if (after != before) {
        fprintf(stderr, "c tensors: %zu fds before the error paths, %zu after\n", before, after);
        return 1;
    }
    return 0;
}

/* Starts this program again as a peer (`self role FD`) on a socket pair: `sv[0]` is ours, the
 * child gets the other end. Only exec after fork: the library's threads are not in the child;
 * dup gives the child's end without close-on-exec. Returns the child's pid, or -1. */
static pid_t spawn_self(const char *self, const char *role, int sv[2]) {
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        char fdarg[16];
        int keep = dup(sv[1]);
        snprintf(fdarg, sizeof fdarg, "%d", keep);
        execl(self, self, role, fdarg, (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    return pid;
}

/* The hand-off peer: receives a tensor, adds one to every byte of its rows, sends it back. */
static int child(int sock) {
    HwtTensor *t = NULL;
    CHECK(hwt_recv(sock, HANDOFF_TIMEOUT_NS, 0, &t));
    size_t w = 0, h = 0, stride = 0;
    CHECK(hwt_tensor_image_size(t, &w, &h, &stride));
    HwtMap m;
    CHECK(hwt_tensor_map(t, HWT_ACCESS_READ_WRITE, &m));
    for (size_t y = 0; y < h; y++)
        for (size_t x = 0; x < w * 4; x++) ((uint8_t *)m.data)[y * stride + x]++;
    CHECK(hwt_map_end(&m));
    CHECK(hwt_send(sock, t, HWT_TRANSPORT_REFERENCE, HANDOFF_TIMEOUT_NS));
    hwt_tensor_release(t);
    char done;
    return read(sock, &done, 1) == 1 ? 0 : 1;
}

static int a_child_process_answers_in_the_same_buffer(const char *self) {
    HwtTensor *img = NULL, *back = NULL;
    CHECK(hwt_tensor_new_image(&(HwtImageSpec){.format = HWT_PIXEL_FORMAT_RGBA, .width = 320, .height = 240}, HWT_D_TYPE_U8, HWT_MEMORY_SHM, HWT_ACCESS_READ_WRITE, &img));
    size_t w = 0, h = 0, stride = 0;
    CHECK(hwt_tensor_image_size(img, &w, &h, &stride));
    HwtMap m;
    CHECK(hwt_tensor_map(img, HWT_ACCESS_WRITE, &m));
    for (size_t y = 0; y < h; y++)
        for (size_t x = 0; x < w * 4; x++) ((uint8_t *)m.data)[y * stride + x] = pattern(y, x);
    CHECK(hwt_map_end(&m));

    int sv[2];
    pid_t pid = spawn_self(self, "--child", sv);
    ASSERT(pid >= 0);
    CHECK(hwt_send(sv[0], img, HWT_TRANSPORT_REFERENCE, HANDOFF_TIMEOUT_NS));
    CHECK(hwt_recv(sv[0], HANDOFF_TIMEOUT_NS, 0, &back));
    HwtIdentity a, b;
    CHECK(hwt_tensor_identity(img, &a));
    CHECK(hwt_tensor_identity(back, &b));
    ASSERT(a.kind == 1 && a.a == b.a && a.b == b.b); /* the same buffer came home */
    CHECK(hwt_tensor_map(back, HWT_ACCESS_READ, &m));
    size_t wrong = 0;
    for (size_t y = 0; y < h; y++)
        for (size_t x = 0; x < w * 4; x++)
            if (((const uint8_t *)m.data)[y * stride + x] != (uint8_t)(pattern(y, x) + 1)) wrong++;
    CHECK(hwt_map_end(&m));
    ASSERT(write(sv[0], "x", 1) == 1);
    int status = 0;
    ASSERT(waitpid(pid, &status, 0) == pid);
    close(sv[0]);
    hwt_tensor_release(back);
    hwt_tensor_release(img);
    ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ASSERT(wrong == 0);
    return 0;
}

/* Frames through the pooled channel: a pool of two shm buffers, a child process as consumer. */
#define CHANNEL_FRAMES 5
#define CHANNEL_BYTES 4096

static int channel_child(int sock) {
    HwtConsumer *c = NULL;
    CHECK(hwt_consumer_connect(sock, &c));
    close(sock); /* the consumer keeps its own duplicate */
    for (uint64_t seq = 0; seq <= CHANNEL_FRAMES; seq++) {
        HwtFrame *f = NULL;
        CHECK(hwt_consumer_recv(c, HWT_WAIT_TIMED, HANDOFF_TIMEOUT_NS, &f));
        HwtFrameMeta meta;
        uint32_t slot = 9;
        CHECK(hwt_frame_meta(f, &meta, &slot));
        ASSERT(meta.seq == seq && meta.payload_len == 4 && memcmp(meta.payload, "ping", 4) == 0);
        /* The last frame comes in the buffer the producer added after attach. */
        ASSERT(seq < CHANNEL_FRAMES ? slot < 2 : slot == 2);
        HwtTensor *t = NULL;
        CHECK(hwt_frame_tensor(f, &t));
        HwtMap m;
        CHECK(hwt_tensor_map(t, HWT_ACCESS_READ, &m));
        for (size_t i = 0; i < m.len; i++) ASSERT(((const uint8_t *)m.data)[i] == pattern(seq, i));
        CHECK(hwt_map_end(&m));
        hwt_tensor_release(t);
        hwt_frame_release(f); /* hands the buffer back */
    }
    HwtFrame *none = NULL;
    EXPECT(hwt_consumer_recv(c, 99, 0, &none), HWT_STATUS_INVALID_ARGUMENT);
    hwt_consumer_free(c);
    return 0;
}

/* Writes frame `seq`'s pattern into `t`, the tensor of `slot`, and sends it saying "ping". */
static int send_frame(HwtProducer *p, uint32_t slot, HwtTensor *t, uint64_t seq) {
    HwtMap m;
    CHECK(hwt_tensor_map(t, HWT_ACCESS_WRITE, &m));
    for (size_t i = 0; i < m.len; i++) ((uint8_t *)m.data)[i] = pattern(seq, i);
    CHECK(hwt_map_end(&m));
    HwtFrameMeta meta = {.seq = seq, .timestamp_ns = 0, .payload_len = 4};
    memcpy(meta.payload, "ping", 4);
    CHECK(hwt_producer_send(p, slot, &meta));
    return 0;
}

static int a_child_process_consumes_frames_through_the_pooled_channel(const char *self) {
    const size_t shape[1] = {CHANNEL_BYTES};
    HwtTensor *pool[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) CHECK(hwt_tensor_new(shape, 1, HWT_D_TYPE_U8, HWT_MEMORY_SHM, &pool[i]));
    HwtProducer *p = NULL;
    CHECK(hwt_producer_new_with_room((const HwtTensor *const *)pool, 2, 3, &p));
    for (int i = 0; i < 2; i++) hwt_tensor_release(pool[i]); /* the producer keeps its own */
    int sv[2];
    pid_t pid = spawn_self(self, "--channel-child", sv);
    ASSERT(pid >= 0);
    CHECK(hwt_producer_attach(p, sv[0]));
    close(sv[0]); /* the producer keeps its own duplicate */
    for (uint64_t seq = 0; seq < CHANNEL_FRAMES; seq++) {
        uint32_t slot = 0;
        HwtTensor *t = NULL;
        CHECK(hwt_producer_acquire(p, HANDOFF_TIMEOUT_NS, &slot, &t));
        int failed = send_frame(p, slot, t, seq);
        hwt_tensor_release(t);
        ASSERT(!failed);
    }
    /* A third buffer, added while the consumer is attached, acquired by its slot. */
    HwtTensor *extra = NULL;
    uint32_t added = 0;
    CHECK(hwt_tensor_new(shape, 1, HWT_D_TYPE_U8, HWT_MEMORY_SHM, &extra));
    CHECK(hwt_producer_add(p, extra, &added));
    ASSERT(added == 2);
    EXPECT(hwt_producer_add(p, extra, &added), HWT_STATUS_INVALID_OPERATION); /* no room left */
    CHECK(hwt_producer_acquire_slot(p, added, HANDOFF_TIMEOUT_NS));
    int failed = send_frame(p, added, extra, CHANNEL_FRAMES);
    hwt_tensor_release(extra);
    ASSERT(!failed);
    HwtFrameMeta too_long = {.seq = 0, .timestamp_ns = 0, .payload_len = 33};
    EXPECT(hwt_producer_send(p, 0, &too_long), HWT_STATUS_INVALID_ARGUMENT);
    EXPECT(hwt_producer_send(p, 7, &too_long), HWT_STATUS_INVALID_ARGUMENT);
    int status = 0;
    ASSERT(waitpid(pid, &status, 0) == pid);
    hwt_producer_free(p);
    ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* A producer that never sends a set-up: the connect ends at its bound. */
    int silent[2];
    ASSERT(socketpair(AF_UNIX, SOCK_STREAM, 0, silent) == 0);
    HwtConsumer *none = NULL;
    EXPECT(hwt_consumer_connect_timeout(silent[1], 50000000, &none), HWT_STATUS_TIMEOUT);
    ASSERT(none == NULL);
    close(silent[0]);
    close(silent[1]);
    /* A peer that sends garbage is a bad message, not a peer gone; a pipe is no socket. */
    int garbage[2];
    ASSERT(socketpair(AF_UNIX, SOCK_STREAM, 0, garbage) == 0);
    const char junk[24] = "this is no set-up here!";
    ASSERT(write(garbage[0], junk, sizeof junk) == (ssize_t)sizeof junk);
    EXPECT(hwt_consumer_connect_timeout(garbage[1], 1000000000, &none), HWT_STATUS_BAD_MESSAGE);
    close(garbage[0]);
    close(garbage[1]);
    int pipefd[2];
    ASSERT(pipe(pipefd) == 0);
    EXPECT(hwt_consumer_connect_timeout(pipefd[0], 50000000, &none), HWT_STATUS_BAD_FD);
    close(pipefd[0]);
    close(pipefd[1]);
    return 0;
}

/* The attach policy from C: a consumer that asks to write is refused until the producer lets
 * its user write; an addition with no out-pointer for its slot reaches no consumer. */
static int a_writer_is_refused_until_admitted_and_a_failed_add_reaches_nobody(void) {
    HwtTensor *pool[2];
    for (int i = 0; i < 2; i++)
        CHECK(hwt_tensor_new(&(size_t){CHANNEL_BYTES}, 1, HWT_D_TYPE_U8, HWT_MEMORY_SHM, &pool[i]));
    HwtProducer *p = NULL;
    CHECK(hwt_producer_new_with_room((const HwtTensor *const *)pool, 2, 3, &p));
    int sv[2];
    ASSERT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    CHECK(hwt_producer_attach(p, sv[0]));
    HwtConsumer *c = NULL;
    EXPECT(hwt_consumer_connect_writable(sv[1], HANDOFF_TIMEOUT_NS, &c), HWT_STATUS_NOT_PERMITTED);
    close(sv[0]);
    close(sv[1]);
    EXPECT(hwt_producer_admit(p, 99, 0, HWT_RIGHT_ATTACH), HWT_STATUS_INVALID_ARGUMENT);
    EXPECT(hwt_producer_admit(p, HWT_PEER_OWN_USER, 0, HWT_RIGHT_WRITE), HWT_STATUS_INVALID_ARGUMENT);
    CHECK(hwt_producer_admit(p, HWT_PEER_OWN_USER, 0, HWT_RIGHT_ATTACH | HWT_RIGHT_WRITE));
    CHECK(hwt_producer_set_stream_info(p, (const uint8_t *)"fps=30", 6));
    ASSERT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    CHECK(hwt_producer_attach(p, sv[0]));
    CHECK(hwt_consumer_connect_writable(sv[1], HANDOFF_TIMEOUT_NS, &c));
    uint8_t info[16];
    size_t info_len = 0;
    EXPECT(hwt_consumer_stream_info(c, info, 2, &info_len), HWT_STATUS_INVALID_ARGUMENT);
    ASSERT(info_len == 6);
    CHECK(hwt_consumer_stream_info(c, info, sizeof info, &info_len));
    ASSERT(info_len == 6 && memcmp(info, "fps=30", 6) == 0);
    close(sv[0]);
    close(sv[1]);
    uint64_t refused = 9;
    CHECK(hwt_producer_refused(p, &refused));
    ASSERT(refused == 0);
    HwtTensor *extra = NULL;
    CHECK(hwt_tensor_new(&(size_t){CHANNEL_BYTES}, 1, HWT_D_TYPE_U8, HWT_MEMORY_SHM, &extra));
    EXPECT(hwt_producer_add(p, extra, NULL), HWT_STATUS_INVALID_ARGUMENT);
    uint32_t slot = 0;
    CHECK(hwt_producer_add(p, extra, &slot)); /* the room is still there: nothing was added */
    ASSERT(slot == 2);
    hwt_tensor_release(extra);
    hwt_consumer_free(c);
    hwt_producer_free(p);
    for (int i = 0; i < 2; i++) hwt_tensor_release(pool[i]);
    return 0;
}

static int submitted = 0;
static uint64_t submitted_queue = 0;

static void count_submit(void *user, uint64_t queue) {
    (void)user;
    submitted++;
    submitted_queue = queue;
}

static int gpu_tensors_expose_their_buffer_queue_and_timeline(void) {
    uint8_t software = 0;
    HwtStatus s = hwt_gpu_is_software(&software);
    if (s == HWT_STATUS_UNAVAILABLE) {
        const char *required = getenv("HWTENSOR_TEST_REQUIRE_GPU");
        char msg[512];
        hwt_last_error(msg, sizeof msg);
        fprintf(stderr, "SKIPPED: c tensors GPU part - %s\n", msg);
        return required && strcmp(required, "1") == 0 ? 1 : 0;
    }
    CHECK(s);
    HwtVulkanHandles vk;
    CHECK(hwt_gpu_vulkan_handles(&vk));
    ASSERT(vk.instance && vk.physical_device && vk.device && vk.queue && vk.timeline);
    CHECK(hwt_gpu_with_queue(count_submit, NULL));
    ASSERT(submitted == 1 && submitted_queue == vk.queue);
    EXPECT(hwt_gpu_with_queue(NULL, NULL), HWT_STATUS_INVALID_ARGUMENT);

    const size_t shape[1] = {4096};
    HwtTensor *host = NULL, *gpu = NULL;
    CHECK(hwt_tensor_new(shape, 1, HWT_D_TYPE_U8, HWT_MEMORY_MEM, &host));
    CHECK(hwt_tensor_new(shape, 1, HWT_D_TYPE_U8, HWT_MEMORY_GPU, &gpu));
    HwtMap m;
    CHECK(hwt_tensor_map(host, HWT_ACCESS_WRITE, &m));
    for (size_t i = 0; i < m.len; i++) ((uint8_t *)m.data)[i] = (uint8_t)(i * 3);
    CHECK(hwt_map_end(&m));
    CHECK(hwt_tensor_copy_from(gpu, host));
    uint64_t buffer = 0, offset = 1, after = 0, value = 0, last = 0;
    CHECK(hwt_tensor_vk_buffer(gpu, &buffer, &offset));
    ASSERT(buffer != 0 && offset == 0);
    CHECK(hwt_tensor_gpu_after(gpu, HWT_ACCESS_READ, &after));
    ASSERT(after > 0); /* the copy wrote it */
    CHECK(hwt_gpu_signal(&value));
    CHECK(hwt_tensor_gpu_record(gpu, value, HWT_ACCESS_WRITE));
    CHECK(hwt_tensor_gpu_after(gpu, HWT_ACCESS_READ, &after));
    ASSERT(after == value);
    CHECK(hwt_gpu_last_signalled(&last));
    EXPECT(hwt_tensor_gpu_record(gpu, last + 1000, HWT_ACCESS_WRITE), HWT_STATUS_INVALID_ARGUMENT);
    EXPECT(hwt_tensor_gpu_record(host, value, HWT_ACCESS_WRITE), HWT_STATUS_INVALID_OPERATION);
    int fence = -1;
    s = hwt_tensor_gpu_completion(gpu, &fence, &after);
    ASSERT(s == HWT_STATUS_OK || s == HWT_STATUS_UNAVAILABLE); /* lavapipe exports no fence */
    if (s == HWT_STATUS_OK) close(fence);
    CHECK(hwt_tensor_map(gpu, HWT_ACCESS_READ, &m));
    for (size_t i = 0; i < m.len; i++) ASSERT(((const uint8_t *)m.data)[i] == (uint8_t)(i * 3));
    CHECK(hwt_map_end(&m));
    /* A write map of GPU memory ends with a write-back (the guarded end), once. */
    CHECK(hwt_tensor_map(gpu, HWT_ACCESS_WRITE, &m));
    ((uint8_t *)m.data)[0] = 0xEE;
    CHECK(hwt_map_end(&m));
    EXPECT(hwt_map_end(&m), HWT_STATUS_INVALID_OPERATION);
    CHECK(hwt_tensor_copy_from(host, gpu));
    CHECK(hwt_tensor_map(host, HWT_ACCESS_READ, &m));
    ASSERT(((const uint8_t *)m.data)[0] == 0xEE && ((const uint8_t *)m.data)[1] == 3);
    CHECK(hwt_map_end(&m));

    /* GPU memory by reference from an unknown sender is refused, and the advice names the
     * C flag that accepts it, not the Rust API. */
    HwtBlob *blob = NULL;
    const uint8_t *data = NULL;
    const int32_t *fds = NULL;
    size_t bytes = 0, nfds = 0;
    CHECK(hwt_blob_export(gpu, HWT_TRANSPORT_REFERENCE, &blob));
    CHECK(hwt_blob_data(blob, &data, &bytes));
    CHECK(hwt_blob_fds(blob, &fds, &nfds));
    HwtTensor *imported = NULL;
    EXPECT(hwt_blob_import(data, bytes, fds, nfds, 0, &imported), HWT_STATUS_BAD_BLOB);
    char why[512];
    hwt_last_error(why, sizeof why);
    ASSERT(strstr(why, "HWT_IMPORT_TRUSTED_PEER") != NULL);
    ASSERT(strstr(why, "ImportPolicy") == NULL);
    hwt_blob_free(blob);

    HwtCudaMap *cm = NULL;
    uint64_t device_ptr = 0;
    if (hwt_cuda_check() == HWT_STATUS_OK) {
        CHECK(hwt_tensor_cuda_map(gpu, HWT_ACCESS_READ, NULL, &cm, &device_ptr));
        ASSERT(device_ptr != 0);
        CHECK(hwt_cuda_map_end(cm, &value));
        ASSERT(value > 0);
        printf("c tensors: CUDA map of a GPU tensor at %#llx\n", (unsigned long long)device_ptr);
    } else {
        EXPECT(hwt_tensor_cuda_map(gpu, HWT_ACCESS_READ, NULL, &cm, &device_ptr), HWT_STATUS_UNAVAILABLE);
    }
    hwt_tensor_release(gpu);
    hwt_tensor_release(host);
    return 0;
}

static int a_pooled_buffer_is_reshaped_repointed_and_says_its_colours(void) {
    size_t shape[2] = {4, 6}, flat[1] = {24}, big[1] = {1000}, got[HWT_MAX_DIMS], ndim = 0;
    HwtTensor *t = NULL, *r = NULL, *img = NULL, *nv12 = NULL, *hd = NULL, *bad = NULL;
    CHECK(hwt_tensor_new(shape, 2, HWT_D_TYPE_U8, HWT_MEMORY_MEM, &t));
    CHECK(hwt_tensor_reshape(t, flat, 1, &r));
    CHECK(hwt_tensor_ndim(r, &ndim));
    CHECK(hwt_tensor_shape(r, got, HWT_MAX_DIMS));
    ASSERT(ndim == 1 && got[0] == 24);
    EXPECT(hwt_tensor_repoint(t, big, 1, &bad), HWT_STATUS_INVALID_ARGUMENT);
    CHECK(hwt_tensor_new_image(&(HwtImageSpec){.format = HWT_PIXEL_FORMAT_RGBA, .width = 64, .height = 32}, HWT_D_TYPE_U8, HWT_MEMORY_SHM, HWT_ACCESS_READ_WRITE, &img));
    CHECK(hwt_tensor_repoint_image(img, 64, 32, HWT_PIXEL_FORMAT_NV12, 128, &nv12));
    HwtColorimetry c = {0}, want = {1, 1, 2, 1}; /* BT.709 primaries, transfer, matrix; limited */
    CHECK(hwt_tensor_colorimetry(nv12, &c));
    ASSERT(c.primaries == 0 && c.range == 0); /* unspecified until said */
    CHECK(hwt_tensor_with_colorimetry(nv12, &want, &hd));
    CHECK(hwt_tensor_colorimetry(hd, &c));
    ASSERT(c.primaries == 1 && c.transfer == 1 && c.matrix == 2 && c.range == 1);
    HwtColorimetry unknown = {9, 0, 0, 0};
    EXPECT(hwt_tensor_with_colorimetry(nv12, &unknown, &bad), HWT_STATUS_INVALID_ARGUMENT);
    EXPECT(hwt_tensor_colorimetry(t, &c), HWT_STATUS_INVALID_ARGUMENT); /* a plain tensor */
    hwt_tensor_release(hd);
    hwt_tensor_release(nv12);
    hwt_tensor_release(img);
    hwt_tensor_release(r);
    hwt_tensor_release(t);
    return 0;
}

/* The frame marker: written into a frame's metadata and read back, a plain payload reads as a
 * frame, and a kind this library does not know is a bad message, not a frame. */
static int a_frame_marker_round_trips_and_an_unknown_kind_is_a_bad_message(void) {
    HwtFrameMeta meta = {.seq = 3, .timestamp_ns = 0, .payload_len = 0};
    HwtMarker m = {.kind = 9, .pts_ns = 0, .duration_ns = 0};
    CHECK(hwt_frame_meta_marker(&meta, &m));
    ASSERT(m.kind == HWT_FRAME_KIND_FRAME && m.pts_ns == HWT_NO_TIME && m.duration_ns == HWT_NO_TIME);
    HwtMarker eos = {.kind = HWT_FRAME_KIND_END_OF_STREAM, .pts_ns = 40000000, .duration_ns = HWT_NO_TIME};
    CHECK(hwt_frame_meta_set_marker(&meta, &eos));
    ASSERT(meta.seq == 3 && meta.payload_len == 24 && meta.payload[0] == 1);
    CHECK(hwt_frame_meta_marker(&meta, &m));
    ASSERT(m.kind == HWT_FRAME_KIND_END_OF_STREAM && m.pts_ns == 40000000 && m.duration_ns == HWT_NO_TIME);
    meta.payload[0] = 9;
    EXPECT(hwt_frame_meta_marker(&meta, &m), HWT_STATUS_BAD_MESSAGE);
    HwtMarker bad = {.kind = 7, .pts_ns = 0, .duration_ns = 0};
    EXPECT(hwt_frame_meta_set_marker(&meta, &bad), HWT_STATUS_INVALID_ARGUMENT);
    EXPECT(hwt_frame_meta_marker(NULL, &m), HWT_STATUS_INVALID_ARGUMENT);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--child") == 0) return child(atoi(argv[2]));
    if (argc == 3 && strcmp(argv[1], "--channel-child") == 0) return channel_child(atoi(argv[2]));
    if (!hwt_version_compatible(HWT_VERSION)) {
        fprintf(stderr, "c tensors: library version %#x does not serve header %#x\n", hwt_version(), HWT_VERSION);
        return 1;
    }
    if (plain_tensors_map_and_refuse_a_second_writer()) return 1;
    if (a_view_of_an_image_writes_only_its_region()) return 1;
    if (an_i420_image_keeps_a_chroma_stride_of_its_own()) return 1;
    if (an_fd_that_is_no_sync_file_is_refused_as_a_fence()) return 1;
    if (a_tensor_without_pending_writes_exports_no_sync_file()) return 1;
    if (a_batch_item_and_a_copy_see_the_same_bytes()) return 1;
    if (an_inline_blob_round_trips_and_a_hostile_one_is_refused()) return 1;
    if (an_fd_imports_from_a_byte_offset()) return 1;
    if (an_nv12m_frame_in_two_buffers_imports_as_one_image()) return 1;
    if (a_dmabuf_tensor_maps_and_its_fd_imports_as_the_same_dmabuf()) return 1;
    if (a_pooled_buffer_is_reshaped_repointed_and_says_its_colours()) return 1;
    if (every_bad_input_is_a_status_with_a_message_and_leaks_no_fd()) return 1;
    if (a_child_process_answers_in_the_same_buffer(argv[0])) return 1;
    if (a_child_process_consumes_frames_through_the_pooled_channel(argv[0])) return 1;
    if (gpu_tensors_expose_their_buffer_queue_and_timeline()) return 1;
    if (a_writer_is_refused_until_admitted_and_a_failed_add_reaches_nobody()) return 1;
    if (a_frame_marker_round_trips_and_an_unknown_kind_is_a_bad_message()) return 1;
    printf("c tensors: all passed\n");
    return 0;
}
