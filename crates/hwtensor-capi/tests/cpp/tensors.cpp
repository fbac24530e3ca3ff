// hwtensor from C++17 with RAII owners: create, map, view, hand a tensor to a child process and
// read its answer, and the error paths. Built by CMake through find_package(hwtensor), with
// -Wall -Wextra -Werror -pedantic. Exit 0 on success.
//
// Usage: tensors_cpp             the tests
//        tensors_cpp --child FD  the hand-off peer
#include <hwtensor.h>

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr uint64_t kTimeoutNs = 10'000'000'000ull;

// A failed call as an exception carrying the library's message.
struct Failure : std::runtime_error {
    HwtStatus status;
    Failure(const char *what, HwtStatus s) : std::runtime_error(message(what, s)), status(s) {}
    static std::string message(const char *what, HwtStatus s) {
        char msg[512];
        hwt_last_error(msg, sizeof msg);
        return std::string(what) + ": " + hwt_status_str(s) + ": " + msg;
    }
};

void check(HwtStatus s, const char *what) {
    if (s != HWT_STATUS_OK) throw Failure(what, s);
}

void expect(HwtStatus got, HwtStatus want, const char *what) {
    if (got != want)
        throw std::runtime_error(std::string(what) + " gave " + hwt_status_str(got) + ", expected " +
                                 hwt_status_str(want));
}

void require(bool ok, const char *what) {
    if (!ok) throw std::runtime_error(what);
}

struct Release {
    void operator()(HwtTensor *t) const { hwt_tensor_release(t); }
};
using Tensor = std::unique_ptr<HwtTensor, Release>;

Tensor image(size_t w, size_t h, uint32_t memory) {
    HwtTensor *t = nullptr;
    HwtImageSpec spec{};
    spec.format = HWT_PIXEL_FORMAT_RGBA;
    spec.width = w;
    spec.height = h;
    check(hwt_tensor_new_image(&spec, HWT_D_TYPE_U8, memory, HWT_ACCESS_READ_WRITE, &t), "hwt_tensor_new_image");
    return Tensor(t);
}

// A CPU map that ends when it goes out of scope.
class Map {
  public:
    Map(const Tensor &t, uint32_t mode) { check(hwt_tensor_map(t.get(), mode, &map_), "hwt_tensor_map"); }
    ~Map() { hwt_map_end(&map_); }
    // A live HwtMap must not be copied (each copy would end it).
    Map(const Map &) = delete;
    Map &operator=(const Map &) = delete;
    uint8_t *bytes() const { return static_cast<uint8_t *>(map_.data); }
    size_t size() const { return map_.len; }

  private:
    HwtMap map_;
};

struct Geometry {
    size_t width = 0, height = 0, stride = 0;
};

Geometry geometry(const Tensor &t) {
    Geometry g;
    check(hwt_tensor_image_size(t.get(), &g.width, &g.height, &g.stride), "hwt_tensor_image_size");
    return g;
}

uint8_t pattern(size_t y, size_t x) { return static_cast<uint8_t>(y * 13 + x * 5); }

void views_write_only_their_region() {
    Tensor img = image(32, 16, HWT_MEMORY_AUTO);
    HwtTensor *v = nullptr;
    check(hwt_tensor_view(img.get(), 4, 2, 4, 4, &v), "hwt_tensor_view");
    Tensor view(v);
    Geometry g = geometry(img);
    std::vector<size_t> strides(HWT_MAX_DIMS);
    check(hwt_tensor_strides(view.get(), strides.data(), strides.size()), "hwt_tensor_strides");
    {
        Map m(view, HWT_ACCESS_WRITE);
        for (size_t y = 0; y < 4; y++) std::memset(m.bytes() + y * strides[0], 0x5A, 4 * 4);
    }
    Map m(img, HWT_ACCESS_READ);
    size_t marked = 0;
    for (size_t y = 0; y < g.height; y++)
        for (size_t x = 0; x < g.width * 4; x++) marked += m.bytes()[y * g.stride + x] == 0x5A;
    require(marked == 4 * 4 * 4, "a view's write landed outside its region");
}

void errors_are_statuses_with_messages() {
    HwtTensor *t = nullptr;
    const size_t shape[2] = {2, 2};
    expect(hwt_tensor_new(shape, 2, 0, HWT_MEMORY_MEM, &t), HWT_STATUS_INVALID_ARGUMENT, "an unknown dtype");
    expect(hwt_tensor_new(nullptr, 2, HWT_D_TYPE_U8, HWT_MEMORY_MEM, &t), HWT_STATUS_INVALID_ARGUMENT, "a null shape");
    Tensor img = image(8, 8, HWT_MEMORY_MEM);
    size_t one[1];
    expect(hwt_tensor_shape(img.get(), one, 1), HWT_STATUS_INVALID_ARGUMENT, "a short shape buffer");
    expect(hwt_tensor_from_fd(1000000, 0, shape, 2, HWT_D_TYPE_U8, &t), HWT_STATUS_BAD_FD, "a closed fd");
    const uint8_t junk[64] = {1, 2, 3};
    expect(hwt_blob_import(junk, sizeof junk, nullptr, 0, 0, &t), HWT_STATUS_BAD_BLOB, "a hostile blob");
    Map w(img, HWT_ACCESS_WRITE);
    HwtMap other;
    expect(hwt_tensor_map(img.get(), HWT_ACCESS_READ, &other), HWT_STATUS_BUSY, "a map beside a write map");
    require(hwt_last_error(nullptr, 0) > 0, "no message for a busy map");
}

int child(int sock) {
    HwtTensor *t = nullptr;
    check(hwt_recv(sock, kTimeoutNs, 0, &t), "hwt_recv (child)");
    Tensor frame(t);
    Geometry g = geometry(frame);
    {
        Map m(frame, HWT_ACCESS_READ_WRITE);
        for (size_t y = 0; y < g.height; y++)
            for (size_t x = 0; x < g.width * 4; x++) m.bytes()[y * g.stride + x] ^= 0xFF;
    }
    check(hwt_send(sock, frame.get(), HWT_TRANSPORT_REFERENCE, kTimeoutNs), "hwt_send (child)");
    char done;
    return read(sock, &done, 1) == 1 ? 0 : 1;
}

void a_child_process_answers_in_the_same_buffer(const char *self) {
    Tensor frame = image(160, 120, HWT_MEMORY_SHM);
    Geometry g = geometry(frame);
    {
        Map m(frame, HWT_ACCESS_WRITE);
        for (size_t y = 0; y < g.height; y++)
            for (size_t x = 0; x < g.width * 4; x++) m.bytes()[y * g.stride + x] = pattern(y, x);
    }
    int sv[2];
    require(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
    pid_t pid = fork();
    require(pid >= 0, "fork");
    if (pid == 0) {
        int keep = dup(sv[1]);  // the peer's end, without close-on-exec
        std::string fd = std::to_string(keep);
        execl(self, self, "--child", fd.c_str(), static_cast<char *>(nullptr));
        _exit(127);
    }
    close(sv[1]);
    check(hwt_send(sv[0], frame.get(), HWT_TRANSPORT_REFERENCE, kTimeoutNs), "hwt_send");
    HwtTensor *b = nullptr;
    check(hwt_recv(sv[0], kTimeoutNs, 0, &b), "hwt_recv");
    Tensor back(b);
    size_t wrong = 0;
    {
        Map m(back, HWT_ACCESS_READ);
        for (size_t y = 0; y < g.height; y++)
            for (size_t x = 0; x < g.width * 4; x++)
                wrong += m.bytes()[y * g.stride + x] != static_cast<uint8_t>(pattern(y, x) ^ 0xFF);
    }
    require(write(sv[0], "x", 1) == 1, "write");
    int status = 0;
    require(waitpid(pid, &status, 0) == pid, "waitpid");
    close(sv[0]);
    require(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child failed");
    require(wrong == 0, "the child's answer is wrong");
}

}  // namespace

int main(int argc, char **argv) {
    try {
        if (argc == 3 && std::strcmp(argv[1], "--child") == 0) return child(std::atoi(argv[2]));
        require(hwt_version_compatible(HWT_VERSION) == 1, "the library does not serve this header");
        views_write_only_their_region();
        errors_are_statuses_with_messages();
        a_child_process_answers_in_the_same_buffer(argv[0]);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "c++ tensors: %s\n", e.what());
        return 1;
    }
    std::printf("c++ tensors: all passed\n");
    return 0;
}
