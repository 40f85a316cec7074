// loom-perf's view of Loom's element types and ops: nccl-tests' names, sizes, and element
// access through double, which holds every value the check patterns produce exactly.
#pragma once

#include <loom/loom.h>

#include <cstddef>

namespace loomperf {

const char* typeName(loomDataType_t type);  // nccl-tests' names: "float", "half", "bfloat16"...
const char* opName(loomRedOp_t op);         // "sum", "prod", "max", "min", "avg"
size_t typeSize(loomDataType_t type);
bool isFloating(loomDataType_t type);

// Parses one name (nccl-tests' spelling; "fp16", "bf16"... accepted too); false if unknown.
bool parseType(const char* name, loomDataType_t* out);
bool parseOp(const char* name, loomRedOp_t* out);

// Element i of a buffer of `type`, read or written as a double (converted with the type's
// rounding: integers truncate, fp16/bf16/fp8 round to nearest even).
double loadElement(loomDataType_t type, const void* buffer, size_t i);
void storeElement(loomDataType_t type, void* buffer, size_t i, double value);

// The largest relative error one rounding to `type` can make (0 for integers).
double roundingError(loomDataType_t type);

// The largest n such that every integer 0..n is exact in `type`, at most 127 (int8's limit):
// the check patterns' values and partial results stay within it.
int exactIntegers(loomDataType_t type);

}  // namespace loomperf
