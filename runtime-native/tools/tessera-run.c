/* tessera-run: placeholder until the chat API lands. */
#include <stdio.h>
#include "tessera.h"
int main(void) { printf("%s\n", tessera_status_name(TESSERA_OK)); return 0; }
