// encode_tensor_map (kernels/common/tensor_map.h): cuTensorMapEncodeTiled on a
// GPU, the simulator's encoding in the simulator build.
#include <stdexcept>
#include <string>

#include "runtime/cuda_compat.h"
#include "kernels/common/tensor_map.h"

#if !MT_SIM_BUILD
#include <cudaTypedefs.h>
#endif

namespace mt::MT_KERNEL_NS {
namespace {

std::uint32_t element_bytes(const kernels::TensorMapSpec& spec) {
  if (spec.bytes) return 1;
  switch (spec.dtype) {
    case kernels::KernelDType::F64: return 8;
    case kernels::KernelDType::F32: return 4;
    case kernels::KernelDType::F16:
    case kernels::KernelDType::BF16: return 2;
  }
  return 0;
}

#if MT_SIM_BUILD

void encode(kernels::TensorMap& map, const kernels::TensorMapSpec& spec) {
  simulator::TensorMapEncoding encoding;
  encoding.global_address = spec.address;
  encoding.rank = static_cast<std::uint32_t>(spec.rank);
  encoding.element_bytes = element_bytes(spec);
  for (int d = 0; d < 3; ++d) {
    encoding.dims[d] = spec.dims[d];
    encoding.strides[d] = spec.strides[d] * encoding.element_bytes;
    encoding.box[d] = spec.box[d];
  }
  encoding.swizzle_bytes = spec.swizzle_bytes;
  try {
    simulator::encode_tensor_map(&map, encoding);
  } catch (const std::exception& error) {
    throw std::invalid_argument(std::string("encode_tensor_map: ") + error.what());
  }
}

#else

CUtensorMapDataType tensor_map_type(const kernels::TensorMapSpec& spec) {
  if (spec.bytes) return CU_TENSOR_MAP_DATA_TYPE_UINT8;
  switch (spec.dtype) {
    case kernels::KernelDType::F64: return CU_TENSOR_MAP_DATA_TYPE_FLOAT64;
    case kernels::KernelDType::F32: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    case kernels::KernelDType::F16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case kernels::KernelDType::BF16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  }
  return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}

CUtensorMapSwizzle tensor_map_swizzle(std::uint32_t bytes) {
  switch (bytes) {
    case 32: return CU_TENSOR_MAP_SWIZZLE_32B;
    case 64: return CU_TENSOR_MAP_SWIZZLE_64B;
    case 128: return CU_TENSOR_MAP_SWIZZLE_128B;
    default: return CU_TENSOR_MAP_SWIZZLE_NONE;
  }
}

// The driver function, found once through the runtime (mixtape links only
// cudart, not libcuda).
PFN_cuTensorMapEncodeTiled_v12000 driver_encode() {
  static const PFN_cuTensorMapEncodeTiled_v12000 function = [] {
    void* found = nullptr;
    cudaDriverEntryPointQueryResult status{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &found, 12000, cudaEnableDefault, &status) !=
            cudaSuccess ||
        status != cudaDriverEntryPointSuccess || found == nullptr) {
      throw std::runtime_error("encode_tensor_map: the driver has no cuTensorMapEncodeTiled (CUDA 12+ needed)");
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(found);
  }();
  return function;
}

void encode(kernels::TensorMap& map, const kernels::TensorMapSpec& spec) {
  static_assert(sizeof(kernels::TensorMap) == sizeof(CUtensorMap), "TensorMap mirrors CUtensorMap");
  const std::uint32_t size = element_bytes(spec);
  cuuint64_t dims[3], strides[2];
  cuuint32_t box[3], element_strides[3] = {1, 1, 1};
  for (int d = 0; d < spec.rank; ++d) {
    dims[d] = spec.dims[d];
    box[d] = spec.box[d];
    if (d > 0) strides[d - 1] = spec.strides[d] * size;
  }
  const CUresult result = driver_encode()(
      reinterpret_cast<CUtensorMap*>(&map), tensor_map_type(spec), static_cast<cuuint32_t>(spec.rank),
      const_cast<void*>(spec.address), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      tensor_map_swizzle(spec.swizzle_bytes), CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) {
    throw std::invalid_argument("encode_tensor_map: cuTensorMapEncodeTiled refused the map (CUresult " +
                                std::to_string(static_cast<int>(result)) + ")");
  }
}

#endif

}  // namespace

void encode_tensor_map(kernels::TensorMap& map, const kernels::TensorMapSpec& spec) {
  if (spec.rank < 1 || spec.rank > 3) {
    throw std::invalid_argument("encode_tensor_map: rank " + std::to_string(spec.rank) + " (1..3)");
  }
  if (spec.strides[0] != 1)
    throw std::invalid_argument("encode_tensor_map: the innermost dimension must be contiguous");
  encode(map, spec);
}

}  // namespace mt::MT_KERNEL_NS
