/* Every subcommand's table entry, defined in its cmd/cmd_NAME.c. */
#ifndef TPS_COMMANDS_H
#define TPS_COMMANDS_H

#include "cli.h"

extern const tps_cmd tps_cmd_inspect;
extern const tps_cmd tps_cmd_layout;
extern const tps_cmd tps_cmd_split;
extern const tps_cmd tps_cmd_plan;
extern const tps_cmd tps_cmd_reshard;
extern const tps_cmd tps_cmd_merge;
extern const tps_cmd tps_cmd_check;
extern const tps_cmd tps_cmd_verify;
extern const tps_cmd tps_cmd_backends;

#endif
