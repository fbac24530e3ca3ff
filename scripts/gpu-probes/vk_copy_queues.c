/* Issue #27 item 5: can Vulkan move host <-> GPU bytes as fast as pinned cuMemcpy if one copy is
 * split over several queues at once? hwtensor's copies from heap tensors reach 0.83-0.91x of
 * cuMemcpy on NVIDIA with one queue, whichever queue, region size or host memory type (commit
 * fe8b46b); what was never tried is running parts of one copy on several queues together, each
 * maybe on its own copy engine. This probe measures, with the loader and the driver alone (no
 * hwtensor), one copy of malloc'd host memory imported with VK_EXT_external_memory_host (as
 * hwtensor imports heap tensors) into device-local memory and back:
 *   1q      one region on the first transfer-only queue (hwtensor today),
 *   2q-t+m  halves on that queue and the main queue at once,
 *   2q-tt   halves on two queues of the transfer-only family (where it has two),
 *   3q      thirds on both transfer queues and the main queue,
 * each timed from the submits to the last fence seen signalled (the CPU spins on the fences),
 * alternated round by round with a synchronous pinned cuMemcpy of the same bytes (libcuda
 * loaded at run time, the first CUDA device: the machine has one GPU). Prints GB/s medians and
 * each against cuMemcpy. Built by `scripts/gpu-suite build`, run by its `bench` leg.
 *
 * Answer on H100s (driver 580, 2026-12-06, four runs on two machines; the transfer-only family
 * has 2 queues): hardly. One queue gave 0.90-0.91x / 0.92-0.93x (h2d / d2h) at 256 MiB, two or
 * three queues at once 0.92-0.94x / 0.94-0.95x: at most 0.03x more, and uploads stay below
 * 0.95x. The driver moves imported host memory at 49-52 GB/s however the copy is spread, where
 * cuMemcpy reaches 54-55 (one run's slower cuMemcpy, 48.8-54.6 GB/s, put the split copies at
 * 0.95-0.98x for 1080p and 4K, and still 0.94x for 256 MiB uploads). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vulkan/vulkan.h>

/* Rounds per size: each contender's median over this many alternated copies. */
#define ROUNDS 25
/* Host memory imported by the driver must start on a page; the import's alignment is checked
 * against the driver's own minimum below. */
#define PAGE 4096
#define MAX_QUEUES 3
#define LARGEST (256u << 20)

static const struct {
    const char *name;
    size_t bytes;
} sizes[] = {{"1080p", 1920 * 1080 * 4}, {"4k", 3840 * 2160 * 4}, {"256MiB", LARGEST}};

#define CHECK(call)                                                                        \
    do {                                                                                   \
        VkResult r_ = (call);                                                              \
        if (r_ != VK_SUCCESS) return fprintf(stderr, "%s failed: %d\n", #call, r_), 1;     \
    } while (0)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, n, sizeof *v, by_value);
    return v[n / 2];
}

/* ---- CUDA, the reference: the driver API through dlopen, as hwtensor loads it ---- */
typedef int (*cu_init_t)(unsigned);
typedef int (*cu_device_get_t)(int *, int);
typedef int (*cu_retain_t)(void **, int);
typedef int (*cu_set_current_t)(void *);
typedef int (*cu_mem_alloc_t)(unsigned long long *, size_t);
typedef int (*cu_host_alloc_t)(void **, size_t, unsigned);
typedef int (*cu_htod_t)(unsigned long long, const void *, size_t);
typedef int (*cu_dtoh_t)(void *, unsigned long long, size_t);

static struct {
    cu_htod_t htod;
    cu_dtoh_t dtoh;
    unsigned long long dev;
    void *pinned;
} cuda;

static int open_cuda(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) return fprintf(stderr, "no libcuda.so.1: %s\n", dlerror()), 1;
    cu_init_t init = (cu_init_t)dlsym(lib, "cuInit");
    cu_device_get_t device_get = (cu_device_get_t)dlsym(lib, "cuDeviceGet");
    cu_retain_t retain = (cu_retain_t)dlsym(lib, "cuDevicePrimaryCtxRetain");
    cu_set_current_t set_current = (cu_set_current_t)dlsym(lib, "cuCtxSetCurrent");
    cu_mem_alloc_t mem_alloc = (cu_mem_alloc_t)dlsym(lib, "cuMemAlloc_v2");
    cu_host_alloc_t host_alloc = (cu_host_alloc_t)dlsym(lib, "cuMemHostAlloc");
    cuda.htod = (cu_htod_t)dlsym(lib, "cuMemcpyHtoD_v2");
    cuda.dtoh = (cu_dtoh_t)dlsym(lib, "cuMemcpyDtoH_v2");
    if (!init || !device_get || !retain || !set_current || !mem_alloc || !host_alloc || !cuda.htod ||
        !cuda.dtoh)
        return fprintf(stderr, "libcuda lacks a symbol\n"), 1;
    int device, r;
    void *ctx;
    if ((r = init(0))) return fprintf(stderr, "cuInit: CUresult %d\n", r), 1;
    if ((r = device_get(&device, 0))) return fprintf(stderr, "cuDeviceGet: CUresult %d\n", r), 1;
    if ((r = retain(&ctx, device))) return fprintf(stderr, "cuDevicePrimaryCtxRetain: CUresult %d\n", r), 1;
    if ((r = set_current(ctx))) return fprintf(stderr, "cuCtxSetCurrent: CUresult %d\n", r), 1;
    if ((r = mem_alloc(&cuda.dev, LARGEST))) return fprintf(stderr, "cuMemAlloc: CUresult %d\n", r), 1;
    if ((r = host_alloc(&cuda.pinned, LARGEST, 0)))
        return fprintf(stderr, "cuMemHostAlloc: CUresult %d\n", r), 1;
    memset(cuda.pinned, 1, LARGEST);
    return 0;
}

/* ---- Vulkan ---- */
static VkDevice dev;
static VkQueue queues[MAX_QUEUES]; /* transfer 0, transfer 1 (or none), main */
static VkCommandBuffer cmds[MAX_QUEUES];
static VkFence fences[MAX_QUEUES];
static VkBuffer host_buf, gpu_buf;

/* A contender: which of `queues` it splits one copy over. */
static const struct {
    const char *name;
    int count;
    int queue[MAX_QUEUES];
} ways[] = {
    {"1q", 1, {0}},
    {"2q-t+m", 2, {0, 2}},
    {"2q-tt", 2, {0, 1}},
    {"3q", 3, {0, 1, 2}},
};
#define WAYS (sizeof ways / sizeof ways[0])

static uint32_t type_with(VkPhysicalDevice pd, uint32_t bits, VkMemoryPropertyFlags want,
                          VkMemoryPropertyFlags avoid) {
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(pd, &mp);
    for (uint32_t i = 0; i < mp.memoryTypeCount; i++)
        if ((bits >> i & 1) && (mp.memoryTypes[i].propertyFlags & want) == want &&
            !(mp.memoryTypes[i].propertyFlags & avoid))
            return i;
    return UINT32_MAX;
}

/* Queue families: `main` draws or computes; `transfer` only transfers (a copy engine). */
static int families(VkPhysicalDevice pd, uint32_t *main, uint32_t *transfer, uint32_t *transfers) {
    VkQueueFamilyProperties f[16];
    uint32_t n = 16;
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, f);
    *main = *transfer = UINT32_MAX;
    for (uint32_t i = 0; i < n; i++) {
        VkQueueFlags q = f[i].queueFlags;
        if (*main == UINT32_MAX && (q & VK_QUEUE_GRAPHICS_BIT) && (q & VK_QUEUE_COMPUTE_BIT)) *main = i;
        if (*transfer == UINT32_MAX && (q & VK_QUEUE_TRANSFER_BIT) &&
            !(q & (VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_COMPUTE_BIT))) {
            *transfer = i;
            *transfers = f[i].queueCount < 2 ? f[i].queueCount : 2;
        }
    }
    if (*main == UINT32_MAX || *transfer == UINT32_MAX)
        return fprintf(stderr, "no main or no transfer-only queue family\n"), 1;
    return 0;
}

/* A buffer of LARGEST bytes both queue families use (concurrent sharing, no ownership
 * transfers): over `host` imported, or device-local memory when `host` is NULL. */
static int buffer(VkPhysicalDevice pd, const uint32_t families2[2], VkBuffer *b, void *host) {
    VkExternalMemoryBufferCreateInfo external = {
        .sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO,
        .handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT};
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                             .pNext = host ? &external : NULL,
                             .size = LARGEST,
                             .usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                             .sharingMode = VK_SHARING_MODE_CONCURRENT};
    bi.queueFamilyIndexCount = 2;
    bi.pQueueFamilyIndices = families2;
    CHECK(vkCreateBuffer(dev, &bi, NULL, b));
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(dev, *b, &req);
    VkImportMemoryHostPointerInfoEXT import = {
        .sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT,
        .handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT,
        .pHostPointer = host};
    uint32_t type;
    if (host) {
        PFN_vkGetMemoryHostPointerPropertiesEXT props_of =
            (PFN_vkGetMemoryHostPointerPropertiesEXT)vkGetDeviceProcAddr(dev, "vkGetMemoryHostPointerPropertiesEXT");
        VkMemoryHostPointerPropertiesEXT hp = {.sType = VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT};
        CHECK(props_of(dev, VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT, host, &hp));
        type = type_with(pd, req.memoryTypeBits & hp.memoryTypeBits, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT, 0);
    } else {
        type = type_with(pd, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT,
                         VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT);
    }
    if (type == UINT32_MAX) return fprintf(stderr, "no memory type\n"), 1;
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                               .pNext = host ? &import : NULL,
                               .allocationSize = LARGEST,
                               .memoryTypeIndex = type};
    VkDeviceMemory mem;
    CHECK(vkAllocateMemory(dev, &ai, NULL, &mem));
    CHECK(vkBindBufferMemory(dev, *b, mem, 0));
    return 0;
}

static int open_vulkan(void **host, int *have_second_transfer) {
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .apiVersion = VK_API_VERSION_1_3};
    VkInstanceCreateInfo ii = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    VkInstance inst;
    CHECK(vkCreateInstance(&ii, NULL, &inst));
    uint32_t n = 1;
    VkPhysicalDevice pd;
    vkEnumeratePhysicalDevices(inst, &n, &pd);
    if (n == 0) return fprintf(stderr, "no Vulkan device\n"), 1;
    VkPhysicalDeviceExternalMemoryHostPropertiesEXT hostp = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT};
    VkPhysicalDeviceProperties2 props = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &hostp};
    vkGetPhysicalDeviceProperties2(pd, &props);
    if (hostp.minImportedHostPointerAlignment > PAGE)
        return fprintf(stderr, "host imports need %llu-byte alignment\n",
                       (unsigned long long)hostp.minImportedHostPointerAlignment), 1;
    uint32_t main, transfer, transfers = 0;
    if (families(pd, &main, &transfer, &transfers)) return 1;
    float priority[2] = {1.0f, 1.0f};
    VkDeviceQueueCreateInfo qi[2] = {
        {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = transfer,
         .queueCount = transfers, .pQueuePriorities = priority},
        {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = main, .queueCount = 1,
         .pQueuePriorities = priority},
    };
    const char *ext[] = {"VK_EXT_external_memory_host"};
    VkDeviceCreateInfo di = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .queueCreateInfoCount = 2,
                             .pQueueCreateInfos = qi, .enabledExtensionCount = 1, .ppEnabledExtensionNames = ext};
    CHECK(vkCreateDevice(pd, &di, NULL, &dev));
    *have_second_transfer = transfers == 2;
    uint32_t family_of[MAX_QUEUES] = {transfer, transfer, main};
    vkGetDeviceQueue(dev, transfer, 0, &queues[0]);
    if (transfers == 2) vkGetDeviceQueue(dev, transfer, 1, &queues[1]);
    vkGetDeviceQueue(dev, main, 0, &queues[2]);
    for (int q = 0; q < MAX_QUEUES; q++) {
        VkCommandPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                      .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                      .queueFamilyIndex = family_of[q]};
        VkCommandPool pool;
        CHECK(vkCreateCommandPool(dev, &pi, NULL, &pool));
        VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                          .commandPool = pool, .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                          .commandBufferCount = 1};
        CHECK(vkAllocateCommandBuffers(dev, &ai, &cmds[q]));
        VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
        CHECK(vkCreateFence(dev, &fi, NULL, &fences[q]));
    }
    if (posix_memalign(host, PAGE, LARGEST)) return fprintf(stderr, "no host memory\n"), 1;
    memset(*host, 1, LARGEST);
    uint32_t both[2] = {main, transfer};
    if (buffer(pd, both, &host_buf, *host) || buffer(pd, both, &gpu_buf, NULL)) return 1;
    printf("device: %s; transfer-only family %u with %u queue(s) used, main family %u\n",
           props.properties.deviceName, transfer, transfers, main);
    return 0;
}

/* The longest one copy may take before the probe gives up: 256 MiB moves in ~5 ms. */
#define COPY_BOUND_S 10.0

/* One copy of `bytes` split over contender `w`'s queues; seconds from submit to done, or -1
 * (said on stderr) when a call fails or the copy outlasts COPY_BOUND_S. */
static double vk_copy(int w, size_t bytes, int upload) {
    int k = ways[w].count;
    /* Parts start on a page so no two queues write one page. */
    size_t part = (bytes / k + PAGE - 1) / PAGE * PAGE;
    VkBuffer src = upload ? host_buf : gpu_buf, dst = upload ? gpu_buf : host_buf;
    for (int i = 0; i < k; i++) {
        VkCommandBuffer c = cmds[ways[w].queue[i]];
        size_t at = i * part, len = i == k - 1 ? bytes - at : part;
        VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                       .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
        VkBufferCopy region = {.srcOffset = at, .dstOffset = at, .size = len};
        if (vkResetCommandBuffer(c, 0) != VK_SUCCESS || vkBeginCommandBuffer(c, &bi) != VK_SUCCESS)
            return fprintf(stderr, "recording a copy failed\n"), -1;
        vkCmdCopyBuffer(c, src, dst, 1, &region);
        if (vkEndCommandBuffer(c) != VK_SUCCESS) return fprintf(stderr, "vkEndCommandBuffer failed\n"), -1;
    }
    double t0 = now();
    for (int i = 0; i < k; i++) {
        int q = ways[w].queue[i];
        VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1,
                           .pCommandBuffers = &cmds[q]};
        if (vkQueueSubmit(queues[q], 1, &si, fences[q]) != VK_SUCCESS)
            return fprintf(stderr, "vkQueueSubmit failed\n"), -1;
    }
    for (int i = 0; i < k; i++) {
        VkResult r;
        while ((r = vkGetFenceStatus(dev, fences[ways[w].queue[i]])) == VK_NOT_READY)
            if (now() - t0 > COPY_BOUND_S)
                return fprintf(stderr, "a %zu-byte copy (%s) ran past %.0f s\n", bytes, ways[w].name,
                               COPY_BOUND_S), -1;
        if (r != VK_SUCCESS) return fprintf(stderr, "vkGetFenceStatus: %d\n", r), -1;
    }
    double t = now() - t0;
    for (int i = 0; i < k; i++) vkResetFences(dev, 1, &fences[ways[w].queue[i]]);
    return t;
}

static double cuda_copy(size_t bytes, int upload) {
    double t0 = now();
    int r = upload ? cuda.htod(cuda.dev, cuda.pinned, bytes) : cuda.dtoh(cuda.pinned, cuda.dev, bytes);
    return r ? -1 : now() - t0;
}

int main(void) {
    void *host;
    int second;
    if (open_vulkan(&host, &second) || open_cuda()) return 1;
    printf("%-7s %-4s %10s", "size", "way", "cuMemcpy");
    for (size_t w = 0; w < WAYS; w++) printf(" %15s", ways[w].name);
    printf("   (GB/s, medians of %d alternated rounds; x: against cuMemcpy)\n", ROUNDS);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int upload = 1; upload >= 0; upload--) {
            double ref[ROUNDS], t[WAYS][ROUNDS];
            size_t bytes = sizes[s].bytes;
            for (int r = 0; r < ROUNDS; r++) {
                if ((ref[r] = cuda_copy(bytes, upload)) < 0)
                    return fprintf(stderr, "cuMemcpy%s of %zu bytes failed\n", upload ? "HtoD" : "DtoH", bytes), 1;
                for (size_t w = 0; w < WAYS; w++) {
                    if (!second && ways[w].queue[1] == 1) continue;
                    if ((t[w][r] = vk_copy(w, bytes, upload)) < 0) return 1; /* said by vk_copy */
                }
            }
            double cu = bytes / median(ref, ROUNDS) / 1e9;
            printf("%-7s %-4s %10.1f", sizes[s].name, upload ? "h2d" : "d2h", cu);
            for (size_t w = 0; w < WAYS; w++) {
                if (!second && ways[w].queue[1] == 1) {
                    printf(" %15s", "-");
                    continue;
                }
                double gb = bytes / median(t[w], ROUNDS) / 1e9;
                printf(" %8.1f %5.2fx", gb, gb / cu);
            }
            printf("\n");
        }
    return 0;
}
