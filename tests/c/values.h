/*
 * values.h: values as the C tests in this directory make and read them, on top of check.h.
 *
 *   CELL(type, obj)                  an object's cell, right after its 24-byte header
 *   strong_count(obj), weak_count(obj)
 *                                    the two halves of an object's reference count
 *   any_of(type_index)               a DVMAny of that type, every other byte zero
 *   any_none(), any_int(x), any_float(x), any_bool(b), any_dtype(t)
 *                                    values to pass as arguments
 *   any_object(obj)                  an object as an argument (its type index read from its
 *                                    header; borrowed: no reference is taken)
 */
#ifndef DISCOVM_TESTS_VALUES_H
#define DISCOVM_TESTS_VALUES_H

#include <stdint.h>

#include "check.h"

#define CELL(type, obj) ((const type*)((const DVMObject*)(obj) + 1))

static inline uint32_t strong_count(const void* obj) {
  return (uint32_t)(((const DVMObject*)obj)->combined_ref_count & 0xffffffffu);
}

static inline uint32_t weak_count(const void* obj) {
  return (uint32_t)(((const DVMObject*)obj)->combined_ref_count >> 32);
}

static inline DVMAny any_of(int32_t type_index) {
  DVMAny v;
  memset(&v, 0, sizeof v); /* padding and unused payload bytes must be 0 */
  v.type_index = type_index;
  return v;
}

static inline DVMAny any_none(void) { return any_of(kDVMNone); }

static inline DVMAny any_int(int64_t x) {
  DVMAny v = any_of(kDVMInt);
  v.v_int64 = x;
  return v;
}

static inline DVMAny any_float(double x) {
  DVMAny v = any_of(kDVMFloat);
  v.v_float64 = x;
  return v;
}

static inline DVMAny any_bool(int b) {
  DVMAny v = any_of(kDVMBool);
  v.v_int64 = b ? 1 : 0;
  return v;
}

static inline DVMAny any_dtype(DLDataType dtype) {
  DVMAny v = any_of(kDVMDataType);
  v.v_dtype = dtype;
  return v;
}

static inline DVMAny any_object(void* obj) {
  DVMAny v = any_of(((const DVMObject*)obj)->type_index);
  v.v_obj = (DVMObject*)obj;
  return v;
}

#endif /* DISCOVM_TESTS_VALUES_H */
