// Package discovm drives sessions of workers (threads, processes, or processes on other
// machines) and the VM's streams and tensors from Go, over the discovm C library.
//
// The one idea: every C handle is owned by one Go value whose Close releases it (a finalizer
// is the safety net, runtime.KeepAlive keeps it alive through each C call), and every C call
// that can fail runs with its goroutine locked to its OS thread, so the error the library
// left in that thread's slot is read back as a Go error carrying the library's kind.
//
// The library is found with pkg-config (`make install` writes discovm.pc; for a build tree,
// point PKG_CONFIG_PATH at a discovm.pc naming it), and at run time by the loader.
package discovm
