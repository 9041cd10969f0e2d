/* The Vulkan loader, opened at run time (dlopen), and the functions the vulkan device calls, each
 * looked up through vkGetInstanceProcAddr / vkGetDeviceProcAddr into a table that lives in the
 * device: libtessera links no Vulkan symbol, so one build runs on machines with and without Vulkan. */
#ifndef TSR_VULKAN_LOADER_H
#define TSR_VULKAN_LOADER_H

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

/* Before an instance exists (vkGetInstanceProcAddr(NULL, ...)). */
#define TSR_VK_GLOBAL(X) X(vkCreateInstance) X(vkEnumerateInstanceLayerProperties) \
    X(vkEnumerateInstanceExtensionProperties)

#define TSR_VK_INSTANCE(X) X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties) \
    X(vkGetPhysicalDeviceProperties2) X(vkGetPhysicalDeviceFeatures2) X(vkGetPhysicalDeviceQueueFamilyProperties) \
    X(vkGetPhysicalDeviceMemoryProperties) X(vkEnumerateDeviceExtensionProperties) X(vkCreateDevice) \
    X(vkGetDeviceProcAddr)

#define TSR_VK_DEVICE(X) X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkDeviceWaitIdle) X(vkCreateBuffer) \
    X(vkDestroyBuffer) X(vkGetBufferMemoryRequirements) X(vkAllocateMemory) X(vkFreeMemory) X(vkBindBufferMemory) \
    X(vkMapMemory) X(vkUnmapMemory) X(vkCreateShaderModule) X(vkDestroyShaderModule) \
    X(vkCreateDescriptorSetLayout) X(vkDestroyDescriptorSetLayout) X(vkCreatePipelineLayout) \
    X(vkDestroyPipelineLayout) X(vkCreatePipelineCache) X(vkDestroyPipelineCache) X(vkGetPipelineCacheData) \
    X(vkCreateComputePipelines) X(vkDestroyPipeline) X(vkCreateDescriptorPool) X(vkDestroyDescriptorPool) \
    X(vkAllocateDescriptorSets) X(vkFreeDescriptorSets) X(vkUpdateDescriptorSets) X(vkCreateCommandPool) \
    X(vkDestroyCommandPool) X(vkAllocateCommandBuffers) X(vkBeginCommandBuffer) X(vkEndCommandBuffer) \
    X(vkResetCommandBuffer) X(vkCmdBindPipeline) X(vkCmdBindDescriptorSets) X(vkCmdPushConstants) \
    X(vkCmdDispatch) X(vkCmdPipelineBarrier) X(vkCmdCopyBuffer) X(vkCmdFillBuffer) X(vkCreateFence) \
    X(vkDestroyFence) X(vkResetFences) X(vkWaitForFences) X(vkQueueSubmit)

#define TSR_VK_MEMBER(name) PFN_##name name;

typedef struct tsr_vk_fns {
    void *library; /* the dlopen handle */
    PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;
    PFN_vkEnumerateInstanceVersion vkEnumerateInstanceVersion; /* NULL in a 1.0 loader */
    PFN_vkCreateDebugUtilsMessengerEXT vkCreateDebugUtilsMessengerEXT; /* with validation only */
    PFN_vkDestroyDebugUtilsMessengerEXT vkDestroyDebugUtilsMessengerEXT;
    TSR_VK_GLOBAL(TSR_VK_MEMBER)
    TSR_VK_INSTANCE(TSR_VK_MEMBER)
    TSR_VK_DEVICE(TSR_VK_MEMBER)
} tsr_vk_fns;

/* Opens the first of `libraries` (NULL-ended) that loads and looks up the global functions; the
 * error (TESSERA_ERROR_UNSUPPORTED) names the libraries tried and what the system lacks. */
int tsr_vk_open_loader(tsr_vk_fns *f, const char *const *libraries);
int tsr_vk_load_instance(tsr_vk_fns *f, VkInstance instance);
int tsr_vk_load_device(tsr_vk_fns *f, VkDevice device);
void tsr_vk_close_loader(tsr_vk_fns *f);

/* "VK_ERROR_DEVICE_LOST" for messages. */
const char *tsr_vk_result_name(VkResult r);

#endif
