/*
 * discovm-worker: the program the workers of a process session run unless the session names
 * another. It registers no functions of its own: its workers run the library's built-ins and
 * the functions of the modules the session loads on them (dvm_session_load_module). A program
 * of your own that registers functions and returns dvm_worker_main(argc, argv) from main
 * serves a session the same way, with them.
 */
#include "discovm.h"

int main(int argc, char** argv) { return dvm_worker_main(argc, argv); }
