# The CUDA emulator (src/plumb/backend/gpu/emu, emu_cuda.h says what it is): the GPU backend and
# its kernel sources compiled by the host compiler against a CPU implementation of the CUDA
# runtime and device built-ins, so the GPU op harness runs on a machine without a GPU. A
# development build (scripts/build-emu.sh), never a release: its "device" is the CPU, slowly.
# Each kernels/*.cu is compiled through a generated one-line .cpp that includes it (the host
# compiler does not take .cu files), with -ffp-contract=off as on the device (the kernels' _rn
# arithmetic must not fuse) and -fno-strict-aliasing (kernels read shared memory through other
# types, as device code may). The device compilers' #pragma unroll is no warning here (g++ has no
# such pragma), in the backend and in the tests and benchmark that include its headers.
set(_emu_dir ${CMAKE_BINARY_DIR}/emu-kernels)
set(_emu_kernels)
foreach(src ${PLUMB_GPU_KERNEL_SOURCES})
  get_filename_component(_name ${src} NAME_WE)
  set(_wrapper ${_emu_dir}/${_name}.cpp)
  file(CONFIGURE OUTPUT ${_wrapper} CONTENT "#include \"${src}\"\n")
  list(APPEND _emu_kernels ${_wrapper})
endforeach()
# PLUMB_GPU=EMU_HIP, the HIP flavour (emu/emu_hip.h): the same sources compiled as hipcc compiles
# them for gfx90a (__HIP_PLATFORM_AMD__, so gpu_compat.h takes its HIP names, PLUMB_HIP and 64-lane
# warps) against the same emulator, plus its HIP-only files (emu_hip_*.cpp, emu_mfma.cpp); the
# tests take their HIP expectations (PLUMB_WITH_HIP).
file(GLOB PLUMB_GPU_EMU_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/plumb/backend/gpu/emu/*.cpp)
if(PLUMB_GPU_KIND STREQUAL "EMU_HIP")
  list(FILTER PLUMB_GPU_EMU_SOURCES EXCLUDE REGEX "/emu_mma\\.cpp$")  # mma.sync: CUDA's 32-lane instruction
  set(_emu_defs PLUMB_EMU __HIP_PLATFORM_AMD__)
  set(_emu_with PLUMB_WITH_HIP)
else()
  list(FILTER PLUMB_GPU_EMU_SOURCES EXCLUDE REGEX "/emu_(hip_[a-z_]+|mfma)\\.cpp$")
  set(_emu_defs PLUMB_EMU)
  set(_emu_with PLUMB_WITH_CUDA)
endif()
set_source_files_properties(${_emu_kernels} PROPERTIES COMPILE_OPTIONS "-ffp-contract=off;-fno-strict-aliasing;-Wno-unknown-pragmas")
set_source_files_properties(${PLUMB_GPU_HOST_SOURCES} ${PLUMB_GPU_EMU_SOURCES} PROPERTIES COMPILE_OPTIONS -Wno-unknown-pragmas)
add_compile_options(-Wno-unknown-pragmas)  # the targets defined after this file: tests, bench
target_sources(plumb_backend PRIVATE ${PLUMB_GPU_HOST_SOURCES} ${_emu_kernels} ${PLUMB_GPU_EMU_SOURCES})
set_source_files_properties(${PLUMB_GPU_HOST_SOURCES} ${_emu_kernels} ${PLUMB_GPU_EMU_SOURCES} PROPERTIES
  COMPILE_DEFINITIONS "${_emu_defs};PLUMB_GPU_TARGETS=\"emulator\"")
set_property(SOURCE ${PLUMB_REGISTRY_SOURCE} APPEND PROPERTY COMPILE_DEFINITIONS ${_emu_with})
set(PLUMB_GPU_TEST_DEFINITIONS ${_emu_with} ${_emu_defs})
set(PLUMB_GPU_TEST_INCLUDES "")
if(PLUMB_GPU_KIND STREQUAL "EMU_HIP")
  message(STATUS "plumb: the CUDA emulator's HIP flavour (gfx90a, wave64) as the GPU backend (a CPU; for tests)")
else()
  message(STATUS "plumb: the CUDA emulator as the GPU backend (a CPU; for tests, not for speed)")
endif()
