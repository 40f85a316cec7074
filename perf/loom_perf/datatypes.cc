#include "datatypes.h"

#include <cstdint>
#include <cstring>

#include "algorithms/plan.h"

// The kernels' own fp16/bf16/fp8 conversions, in a namespace of loom-perf's (float16.h and
// float8.h are built once per instruction set, each in its own namespace).
#define LOOM_KERNELS_ISA perf
#include "kernels/float16.h"
#include "kernels/float8.h"

namespace loomperf {
namespace {

// nccl-tests' names differ from Loom's own ("half", not "float16"); sizes and op names are
// Loom's (algorithms/plan.h).
struct TypeInfo {
  loomDataType_t type;
  const char* name;   // nccl-tests'
  const char* alias;  // a short spelling, also accepted
};

constexpr TypeInfo kTypes[] = {
    {loomInt8, "int8", "char"},       {loomUint8, "uint8", "u8"},       {loomInt32, "int32", "int"},
    {loomUint32, "uint32", "u32"},    {loomInt64, "int64", "long"},     {loomUint64, "uint64", "u64"},
    {loomFloat16, "half", "fp16"},    {loomFloat32, "float", "fp32"},   {loomFloat64, "double", "fp64"},
    {loomBfloat16, "bfloat16", "bf16"}, {loomFloat8e4m3, "f8e4m3", "fp8e4m3"}, {loomFloat8e5m2, "f8e5m2", "fp8e5m2"},
};

const TypeInfo& info(loomDataType_t type) {
  for (const TypeInfo& t : kTypes)
    if (t.type == type) return t;
  return kTypes[7];  // unreachable: every loomDataType_t is in the table
}

template <typename T>
T at(const void* buffer, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(buffer) + i * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
void put(void* buffer, size_t i, T v) {
  std::memcpy(static_cast<char*>(buffer) + i * sizeof(T), &v, sizeof(T));
}

}  // namespace

const char* typeName(loomDataType_t type) { return info(type).name; }
size_t typeSize(loomDataType_t type) { return loom::typeSize(type); }
const char* opName(loomRedOp_t op) { return loom::opName(op); }

bool isFloating(loomDataType_t type) {
  return type == loomFloat16 || type == loomFloat32 || type == loomFloat64 || type == loomBfloat16 ||
         type == loomFloat8e4m3 || type == loomFloat8e5m2;
}

bool parseType(const char* name, loomDataType_t* out) {
  for (const TypeInfo& t : kTypes) {
    if (std::strcmp(name, t.name) == 0 || std::strcmp(name, t.alias) == 0) {
      *out = t.type;
      return true;
    }
  }
  return false;
}

bool parseOp(const char* name, loomRedOp_t* out) {
  for (int op = 0; op < loomNumOps; ++op) {
    if (std::strcmp(name, loom::opName(static_cast<loomRedOp_t>(op))) == 0) {
      *out = static_cast<loomRedOp_t>(op);
      return true;
    }
  }
  return false;
}

double loadElement(loomDataType_t type, const void* buffer, size_t i) {
  switch (type) {
    case loomInt8: return at<int8_t>(buffer, i);
    case loomUint8: return at<uint8_t>(buffer, i);
    case loomInt32: return at<int32_t>(buffer, i);
    case loomUint32: return at<uint32_t>(buffer, i);
    case loomInt64: return static_cast<double>(at<int64_t>(buffer, i));
    case loomUint64: return static_cast<double>(at<uint64_t>(buffer, i));
    case loomFloat16: return loom::kernels::perf::halfToFloat(at<uint16_t>(buffer, i));
    case loomFloat32: return at<float>(buffer, i);
    case loomFloat64: return at<double>(buffer, i);
    case loomBfloat16: return loom::kernels::perf::bfloat16ToFloat(at<uint16_t>(buffer, i));
    case loomFloat8e4m3: return loom::kernels::perf::float8ToFloat<4>(at<uint8_t>(buffer, i));
    case loomFloat8e5m2: return loom::kernels::perf::float8ToFloat<5>(at<uint8_t>(buffer, i));
    default: return 0;
  }
}

void storeElement(loomDataType_t type, void* buffer, size_t i, double value) {
  switch (type) {
    case loomInt8: return put(buffer, i, static_cast<int8_t>(value));
    case loomUint8: return put(buffer, i, static_cast<uint8_t>(value));
    case loomInt32: return put(buffer, i, static_cast<int32_t>(value));
    case loomUint32: return put(buffer, i, static_cast<uint32_t>(value));
    case loomInt64: return put(buffer, i, static_cast<int64_t>(value));
    case loomUint64: return put(buffer, i, static_cast<uint64_t>(value));
    case loomFloat16: return put(buffer, i, loom::kernels::perf::floatToHalf(static_cast<float>(value)));
    case loomFloat32: return put(buffer, i, static_cast<float>(value));
    case loomFloat64: return put(buffer, i, value);
    case loomBfloat16:
      return put(buffer, i, loom::kernels::perf::floatToBfloat16(static_cast<float>(value)));
    case loomFloat8e4m3: return put(buffer, i, loom::kernels::perf::floatToFloat8<4>(static_cast<float>(value)));
    case loomFloat8e5m2: return put(buffer, i, loom::kernels::perf::floatToFloat8<5>(static_cast<float>(value)));
    default: return;
  }
}

double roundingError(loomDataType_t type) {
  switch (type) {
    case loomFloat16: return 1.0 / 2048;  // 2^-11
    case loomBfloat16: return 1.0 / 256;  // 2^-8
    case loomFloat32: return 1.0 / 16777216;  // 2^-24
    case loomFloat64: return 1.0 / 9007199254740992.0;  // 2^-53
    case loomFloat8e4m3: return 1.0 / 16;  // 2^-4
    case loomFloat8e5m2: return 1.0 / 8;   // 2^-3
    default: return 0;
  }
}

int exactIntegers(loomDataType_t type) {
  switch (type) {
    case loomFloat8e4m3: return 16;
    case loomFloat8e5m2: return 8;
    default: return 127;
  }
}

}  // namespace loomperf
