/* tpshard inspect on a Megatron-LM checkpoint directory: the account is
 * formats/megatron/megatron_inspect.h's; this prints it. */
#ifndef TPS_INSPECT_MEGATRON_H
#define TPS_INSPECT_MEGATRON_H

#include <stdbool.h>

/* Prints the checkpoint (human or --json); returns the exit code. */
int tps_inspect_megatron(const char *path, bool json);

#endif
