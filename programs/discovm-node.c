/*
 * discovm-node: runs one node of a session across machines. `discovm-node HOST PORT WORKERS`
 * joins the controller listening at HOST:PORT (dvm_session_new_socket), proves it holds
 * $DISCOVM_SESSION_TOKEN, starts WORKERS worker processes (discovm-worker, or $DISCOVM_WORKER)
 * and relays their frames until the controller shuts the session down. The rank comes from
 * `--rank R` or the launcher's environment (SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK, RANK).
 */
#include "discovm.h"

int main(int argc, char** argv) { return dvm_node_main(argc, argv); }
