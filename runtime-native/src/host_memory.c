/* tsr_host_available_memory: Linux and Android read MemAvailable from /proc/meminfo (the kernel's estimate
 * of what can be allocated without swapping, page cache that can be dropped included); iOS asks
 * os_proc_available_memory() (what this app may still take before the system ends it); other Apple
 * platforms, and iOS when that call has no answer, report the machine's physical memory (hw.memsize). */
/* The build asks for plain POSIX (_POSIX_C_SOURCE), under which Apple's headers hide sysctlbyname. */
#if defined(__APPLE__) && !defined(_DARWIN_C_SOURCE)
#define _DARWIN_C_SOURCE 1
#endif

#include "host_memory.h"

#include <stdio.h>
#include <string.h>

#if defined(__APPLE__)
#include <TargetConditionals.h>
#include <sys/sysctl.h>
#include <sys/types.h>
#if TARGET_OS_IOS
#include <os/proc.h>
#endif
#endif

#if defined(__linux__)
static bool read_mem_available(uint64_t *bytes) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return false;
    char line[256];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long long kib;
        if (strncmp(line, "MemAvailable:", 13) == 0 && sscanf(line + 13, "%llu", &kib) == 1) {
            *bytes = (uint64_t)kib * 1024u;
            found = true;
        }
    }
    fclose(f);
    return found;
}
#endif

bool tsr_host_available_memory(uint64_t *bytes, const char **source) {
#if defined(__linux__)
    *source = "MemAvailable";
    return read_mem_available(bytes);
#elif defined(__APPLE__)
#if TARGET_OS_IOS
    size_t available = os_proc_available_memory(); /* 0 where the process has no memory limit */
    if (available > 0) {
        *bytes = (uint64_t)available;
        *source = "os_proc_available_memory";
        return true;
    }
#endif
    uint64_t physical = 0;
    size_t size = sizeof physical;
    if (sysctlbyname("hw.memsize", &physical, &size, NULL, 0) != 0 || physical == 0) return false;
    *bytes = physical;
    *source = "hw.memsize";
    return true;
#else
    (void)bytes;
    (void)source;
    return false;
#endif
}
