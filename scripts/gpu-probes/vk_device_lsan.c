/* Evidence for a LeakSanitizer report seen on NVIDIA: creates and destroys a Vulkan instance
 * and device with the loader alone (no hwtensor), the device with the external-memory and
 * external-semaphore extensions hwtensor enables where the driver has them, and on it a timeline
 * semaphore exportable as an OPAQUE_FD, as hwtensor's process timeline is (the report's stack
 * ends in that vkCreateSemaphore), so a leak LSan reports here is the driver's, not ours. With the argument `keep` the device is left alive to
 * the end, as hwtensor's process device is (then a driver's own bookkeeping is still reachable
 * and only memory it lost is reported). Built with -fsanitize=address by scripts/gpu-suite;
 * prints the device's name and exits 0 (LSan, if it finds a leak, reports and exits 1). */
#include <stdio.h>
#include <string.h>
#include <vulkan/vulkan.h>

#define WANTED 4
static const char *wanted[WANTED] = {
    "VK_KHR_external_memory_fd",
    "VK_KHR_external_semaphore_fd",
    "VK_EXT_external_memory_host",
    "VK_KHR_external_fence_fd",
};

/* Kept where LeakSanitizer looks (globals), as hwtensor keeps its device in a static. */
static VkInstance inst;
static VkDevice dev;
static VkSemaphore sem;

static int create_once(int keep) {
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .apiVersion = VK_API_VERSION_1_3};
    VkInstanceCreateInfo ii = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    if (vkCreateInstance(&ii, NULL, &inst) != VK_SUCCESS) return fprintf(stderr, "no instance\n"), 1;
    uint32_t n = 1;
    VkPhysicalDevice pd;
    vkEnumeratePhysicalDevices(inst, &n, &pd);
    if (n == 0) return fprintf(stderr, "no device\n"), 1;
    VkPhysicalDeviceProperties props;
    vkGetPhysicalDeviceProperties(pd, &props);
    uint32_t count = 0;
    vkEnumerateDeviceExtensionProperties(pd, NULL, &count, NULL);
    VkExtensionProperties ext[512];
    if (count > 512) count = 512;
    vkEnumerateDeviceExtensionProperties(pd, NULL, &count, ext);
    const char *enabled[WANTED];
    uint32_t k = 0;
    int semaphore_fd = 0;
    for (int w = 0; w < WANTED; w++)
        for (uint32_t i = 0; i < count; i++)
            if (strcmp(ext[i].extensionName, wanted[w]) == 0) {
                enabled[k++] = wanted[w];
                semaphore_fd |= w == 1;
            }
    VkPhysicalDeviceTimelineSemaphoreFeatures timeline = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES, .timelineSemaphore = VK_TRUE};
    float priority = 1.0f;
    VkDeviceQueueCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueCount = 1,
                                  .pQueuePriorities = &priority};
    VkDeviceCreateInfo di = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &timeline,
                             .queueCreateInfoCount = 1, .pQueueCreateInfos = &qi,
                             .enabledExtensionCount = k, .ppEnabledExtensionNames = enabled};
    if (vkCreateDevice(pd, &di, NULL, &dev) != VK_SUCCESS) return fprintf(stderr, "no logical device\n"), 1;
    VkExportSemaphoreCreateInfo exportable = {.sType = VK_STRUCTURE_TYPE_EXPORT_SEMAPHORE_CREATE_INFO,
                                              .handleTypes = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT};
    VkSemaphoreTypeCreateInfo type = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                                      .pNext = semaphore_fd ? &exportable : NULL,
                                      .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE};
    VkSemaphoreCreateInfo si = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, .pNext = &type};
    if (vkCreateSemaphore(dev, &si, NULL, &sem) != VK_SUCCESS) return fprintf(stderr, "no semaphore\n"), 1;
    printf("created a device and a timeline (%s) on %s with %u of %d extensions%s\n",
           semaphore_fd ? "exportable" : "not exportable", props.deviceName, k, WANTED,
           keep ? ", kept to exit" : ", destroyed");
    if (keep) return 0;
    vkDestroySemaphore(dev, sem, NULL);
    vkDestroyDevice(dev, NULL);
    vkDestroyInstance(inst, NULL);
    return 0;
}

int main(int argc, char **argv) { return create_once(argc > 1 && strcmp(argv[1], "keep") == 0); }
