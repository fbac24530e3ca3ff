// A consumer in C++ as a program of its own, against the C header: connects to the producer
// at ADDRESS (default @hwtensor-example-c; examples/c/channel_producer.c is one), receives 30
// frames and checks every byte of each is its number. The C handles are owned by
// std::unique_ptr with the library's free functions, so every return path frees them.
//
//   c++ -std=c++17 channel_consumer.cpp $(pkg-config --cflags --libs hwtensor) -o channel_consumer
#include <hwtensor.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include <unistd.h>

namespace {

constexpr int kFrames = 30;
constexpr uint64_t kTenSecondsNs = 10'000'000'000ull;
// How often the consumer tries to connect before the producer listens, 100 ms apart.
constexpr int kConnectTries = 100;

struct ConsumerFree {
    void operator()(HwtConsumer *c) const { hwt_consumer_free(c); }
};
struct FrameRelease {
    void operator()(HwtFrame *f) const { hwt_frame_release(f); }
};
struct TensorRelease {
    void operator()(HwtTensor *t) const { hwt_tensor_release(t); }
};

int failed(const char *what) {
    char why[512];
    hwt_last_error(why, sizeof why);
    std::fprintf(stderr, "consumer: %s: %s\n", what, why);
    return 1;
}

}  // namespace

int main(int argc, char **argv) {
    const std::string address = argc > 1 ? argv[1] : "@hwtensor-example-c";
    int fd = -1;
    for (int i = 0; i < kConnectTries && hwt_connect(address.c_str(), &fd) != HWT_STATUS_OK; i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (fd < 0) return failed("hwt_connect");
    HwtConsumer *raw = nullptr;
    HwtStatus connected = hwt_consumer_connect(fd, &raw);
    close(fd);  // the consumer keeps its own
    if (connected != HWT_STATUS_OK) return failed("hwt_consumer_connect");
    std::unique_ptr<HwtConsumer, ConsumerFree> consumer(raw);
    size_t wrong = 0;
    for (int n = 0; n < kFrames; n++) {
        HwtFrame *f = nullptr;
        if (hwt_consumer_recv(consumer.get(), HWT_WAIT_TIMED, kTenSecondsNs, &f) != HWT_STATUS_OK)
            return failed("hwt_consumer_recv");
        std::unique_ptr<HwtFrame, FrameRelease> frame(f);  // released: the buffer goes back
        HwtFrameMeta meta;
        HwtTensor *t = nullptr;
        if (hwt_frame_meta(frame.get(), &meta, nullptr) != HWT_STATUS_OK ||
            hwt_frame_tensor(frame.get(), &t) != HWT_STATUS_OK)
            return failed("hwt_frame_meta");
        std::unique_ptr<HwtTensor, TensorRelease> tensor(t);
        HwtMap map;
        if (hwt_tensor_map(tensor.get(), HWT_ACCESS_READ, &map) != HWT_STATUS_OK)
            return failed("hwt_tensor_map");
        const auto *px = static_cast<const unsigned char *>(map.data);
        for (size_t i = 0; i < map.len; i++) wrong += px[i] != static_cast<unsigned char>(meta.seq & 0xff);
        hwt_map_end(&map);
    }
    std::printf("consumer (C++): %d frames from %s, %zu wrong bytes\n", kFrames, address.c_str(), wrong);
    return wrong != 0;
}
