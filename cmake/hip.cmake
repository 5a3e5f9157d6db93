# HIP for gfx90a (MI250) with Debian's hipcc 5.2. CMake's enable_language(HIP) fails on Debian's
# layout, so kernels/*.cu are compiled by hipcc through custom commands (the same sources nvcc
# compiles) and the host side is plain C++ against the HIP runtime API. Nothing CUDA-only is
# compiled here: gpu_compat.h maps the gpu* names to HIP and the kernels size warps by kWarp.
find_program(PLUMB_HIPCC hipcc REQUIRED)
find_library(PLUMB_AMDHIP64 amdhip64 REQUIRED)
set(PLUMB_HIP_ARCH "gfx90a" CACHE STRING "HIP offload architecture")
set(_hip_objects)
foreach(src ${PLUMB_GPU_KERNEL_SOURCES})
  get_filename_component(_name ${src} NAME_WE)
  set(_obj ${CMAKE_BINARY_DIR}/hip-kernels/${_name}.o)
  # -ffp-contract=off: Debian's hipcc defines __fadd_rn / __fmul_rn as plain + and *, which clang
  # would fuse into FMAs (contraction is on by default for HIP): the kernels that reproduce the
  # CPU's rounding would then round differently on AMD. Where a kernel wants an FMA it calls fmaf.
  # --offload-arch is required: without it hipcc runs rocm_agent_enumerator, which fails on a
  # machine without /sys/class/kfd.
  add_custom_command(OUTPUT ${_obj}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/hip-kernels
    COMMAND ${PLUMB_HIPCC} --offload-arch=${PLUMB_HIP_ARCH} -std=c++20 -O3 -fPIC -Wall -ffp-contract=off
            -I${CMAKE_SOURCE_DIR}/src -x hip -c ${src} -o ${_obj}
    DEPENDS ${src} ${PLUMB_GPU_HEADERS}
    COMMENT "hipcc --offload-arch=${PLUMB_HIP_ARCH} ${_name}.cu"
    VERBATIM)
  list(APPEND _hip_objects ${_obj})
endforeach()
set_source_files_properties(${_hip_objects} PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)
target_sources(plumb_backend PRIVATE ${PLUMB_GPU_HOST_SOURCES} ${_hip_objects})
set_source_files_properties(${PLUMB_GPU_HOST_SOURCES} PROPERTIES
  COMPILE_DEFINITIONS "__HIP_PLATFORM_AMD__;PLUMB_GPU_TARGETS=\"${PLUMB_HIP_ARCH}\"")
set_property(SOURCE ${PLUMB_REGISTRY_SOURCE} APPEND PROPERTY COMPILE_DEFINITIONS PLUMB_WITH_HIP)
target_link_libraries(plumb_backend PUBLIC ${PLUMB_AMDHIP64})
set(PLUMB_GPU_TEST_DEFINITIONS PLUMB_WITH_HIP __HIP_PLATFORM_AMD__)
set(PLUMB_GPU_TEST_INCLUDES "")
message(STATUS "plumb: HIP GPU backend for ${PLUMB_HIP_ARCH} (hipcc: ${PLUMB_HIPCC})")
