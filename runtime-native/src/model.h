/* The model handle: an executable folder loaded onto a device (model.c), plus, for a chat model,
 * its tokenizer and chat configuration (session.c). */
#ifndef TSR_MODEL_H
#define TSR_MODEL_H

#include "device.h"
#include "executable.h"
#include "tensor_cache.h"
#include "vm/vm.h"

struct tsr_tokenizer;
struct tsr_chat_config;

struct tessera_model {
    tsr_alloc alloc;
    char *dir;
    int32_t n_threads;
    tsr_executable exe;
    tsr_tensor_cache weights;
    tsr_device *device;      /* devices[0] */
    tsr_device *devices[TSR_MAX_DEVICES]; /* one per entry of a split build's `devices`, else devices[0] alone */
    int32_t n_devices;
    char device_choice[480]; /* tessera_model_device(): the device (each, for a split build) and why */
    tsr_vm vm;
    bool vm_ready;
    /* chat models only (NULL otherwise) */
    struct tsr_tokenizer *tokenizer;
    struct tsr_chat_config *chat;
    tessera_session *sessions; /* open sessions, freed with the model */
};

/* session.c: reads chat-config.json and tokenizer.json when the folder has them. */
int tsr_chat_attach(tessera_model *m);
void tsr_chat_detach(tessera_model *m);
/* Frees the sessions still open on m. */
void tsr_free_sessions(tessera_model *m);

#endif
