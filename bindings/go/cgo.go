package discovm

// #cgo pkg-config: discovm
// #include "shim.h"
import "C"
