# The GPU backend. PLUMB_GPU picks it:
#   AUTO (default): CUDA when a CUDA compiler is found, else none
#   CUDA: nvcc; kernels for sm_80 (the portable BF16 mma.sync path, also Ampere) and sm_90a
#         (Hopper), plus compute_80 PTX for newer GPUs
#   HIP:  Debian's hipcc for gfx90a (MI250), see cmake/hip.cmake
#   EMU:  the kernels on the CPU's CUDA emulator (cmake/emu.cmake): the GPU tests without a GPU
#   EMU_HIP: the same emulator, the kernels compiled as for HIP gfx90a (wave64, the MFMA tile)
#   OFF:  CPU only; `--backend cuda` then says plumb was built without a GPU backend.
# GPU-specific flags are set on the GPU sources only, so every other object is compiled exactly
# as in a CPU-only build (ccache shares them between the CUDA and the HIP build in CI).
set(PLUMB_GPU "AUTO" CACHE STRING "GPU backend: AUTO, CUDA, HIP, EMU, EMU_HIP or OFF")
set_property(CACHE PLUMB_GPU PROPERTY STRINGS AUTO CUDA HIP EMU EMU_HIP OFF)
# Host side (*.cpp, compiled as C++) and kernels (kernels/*.cu, compiled by nvcc or hipcc).
file(GLOB PLUMB_GPU_HOST_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/plumb/backend/gpu/*.cpp)
file(GLOB PLUMB_GPU_KERNEL_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/plumb/backend/gpu/kernels/*.cu)
file(GLOB_RECURSE PLUMB_GPU_HEADERS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/plumb/backend/gpu/*.h)
set(PLUMB_REGISTRY_SOURCE ${CMAKE_SOURCE_DIR}/src/plumb/backend/registry.cpp)

set(PLUMB_GPU_KIND ${PLUMB_GPU})
if(PLUMB_GPU STREQUAL "AUTO")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(PLUMB_GPU_KIND CUDA)
  else()
    set(PLUMB_GPU_KIND OFF)
    message(STATUS "plumb: no CUDA compiler found, building without a GPU backend")
  endif()
endif()

if(PLUMB_GPU_KIND STREQUAL "CUDA")
  set(PLUMB_CUDA_ARCHS "80-real;90a-real;80-virtual" CACHE STRING "CUDA architectures of the GPU backend")
  if(NOT CMAKE_CUDA_HOST_COMPILER)
    set(CMAKE_CUDA_HOST_COMPILER ${CMAKE_CXX_COMPILER})
  endif()
  enable_language(CUDA)
  # CMake 3.25 does not know nvcc 13's C++20 flag (it drops CUDA_STANDARD 20 or refuses it).
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  set_target_properties(plumb_backend PROPERTIES CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED ON CUDA_EXTENSIONS OFF
                                                 CUDA_ARCHITECTURES "${PLUMB_CUDA_ARCHS}")
  find_package(CUDAToolkit REQUIRED)
  if(CCACHE_PROGRAM)
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
  endif()
  target_sources(plumb_backend PRIVATE ${PLUMB_GPU_HOST_SOURCES} ${PLUMB_GPU_KERNEL_SOURCES})
  target_compile_options(plumb_backend PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall>)
  string(REPLACE ";" "," _targets "${PLUMB_CUDA_ARCHS}")
  set_source_files_properties(${PLUMB_GPU_HOST_SOURCES} PROPERTIES
    INCLUDE_DIRECTORIES "${CUDAToolkit_INCLUDE_DIRS}" COMPILE_DEFINITIONS "PLUMB_GPU_TARGETS=\"${_targets}\"")
  set_property(SOURCE ${PLUMB_REGISTRY_SOURCE} APPEND PROPERTY COMPILE_DEFINITIONS PLUMB_WITH_CUDA)
  target_link_libraries(plumb_backend PUBLIC $<LINK_ONLY:CUDA::cudart_static>)
  set(PLUMB_GPU_TEST_DEFINITIONS PLUMB_WITH_CUDA)
  set(PLUMB_GPU_TEST_INCLUDES ${CUDAToolkit_INCLUDE_DIRS})
  message(STATUS "plumb: CUDA GPU backend for ${PLUMB_CUDA_ARCHS}")
elseif(PLUMB_GPU_KIND STREQUAL "HIP")
  include(${CMAKE_SOURCE_DIR}/cmake/hip.cmake)
elseif(PLUMB_GPU_KIND STREQUAL "EMU" OR PLUMB_GPU_KIND STREQUAL "EMU_HIP")
  include(${CMAKE_SOURCE_DIR}/cmake/emu.cmake)
elseif(NOT PLUMB_GPU_KIND STREQUAL "OFF")
  message(FATAL_ERROR "PLUMB_GPU must be AUTO, CUDA, HIP, EMU, EMU_HIP or OFF (got '${PLUMB_GPU}')")
endif()
