/* What memory this machine has available now, for the check tessera_model_load makes before it allocates
 * (tessera_model_params.memory_limit = 0). The platform part is here alone. */
#ifndef TSR_HOST_MEMORY_H
#define TSR_HOST_MEMORY_H

#include <stdbool.h>
#include <stdint.h>

/* The bytes available to this process now, and where the number came from ("MemAvailable",
 * "os_proc_available_memory", "hw.memsize"). False when the platform has no such number or it cannot be
 * read (a /proc without meminfo, a sandbox): the caller then skips its check rather than fail. */
bool tsr_host_available_memory(uint64_t *bytes, const char **source);

#endif
