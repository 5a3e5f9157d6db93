# Multi-process runs (src/plumb/dist, docs/DISTRIBUTED.md).
#   MPI: the host collectives (the CPU backend's layouts) and the bootstrap of NCCL. Found with
#        FindMPI (Debian: libopenmpi-dev, installed by scripts/install-deps.sh); without it plumb
#        still builds, runs one process, and refuses a launch of several, saying so.
#   NCCL (CUDA) / RCCL (HIP): the device communicator, built only beside that GPU backend and
#        where the library is found (NCCL_ROOT / RCCL_ROOT, as a CMake or environment variable,
#        name the install prefix). This machine has neither; it compiles out.
# The definitions are set on the files that test them only, so no other object's ccache key changes.
set(PLUMB_DIST_DIR ${CMAKE_SOURCE_DIR}/src/plumb/dist)
option(PLUMB_WITH_MPI "Build the MPI communicator when MPI is found" ON)
if(PLUMB_WITH_MPI)
  set(MPI_CXX_SKIP_MPICXX ON)  # the C API only (plumb is a C++ project: no C language enabled)
  find_package(MPI COMPONENTS CXX QUIET)
endif()
target_link_libraries(plumb_dist PRIVATE ${CMAKE_DL_LIBS})
if(MPI_CXX_FOUND)
  # A plugin beside the binary (world.cpp loads it for a launch of several processes), so the
  # plumb binary needs no MPI library to run one process.
  add_library(plumb_mpi MODULE ${PLUMB_DIST_DIR}/mpi_communicator.cpp)
  target_include_directories(plumb_mpi PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(plumb_mpi PRIVATE MPI::MPI_CXX fmt::fmt)
  target_compile_options(plumb_mpi PRIVATE ${PLUMB_WARNINGS})
  set_target_properties(plumb_mpi PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR} PREFIX "lib")
  set_property(SOURCE ${PLUMB_DIST_DIR}/world.cpp APPEND PROPERTY COMPILE_DEFINITIONS PLUMB_WITH_MPI)
  find_program(PLUMB_MPIEXEC NAMES mpirun mpiexec HINTS ${MPI_CXX_LIBRARY_DIRS}/../bin)
  message(STATUS "plumb: MPI ${MPI_CXX_VERSION} for multi-process runs (${PLUMB_MPIEXEC})")
else()
  set(PLUMB_MPIEXEC "")
  message(STATUS "plumb: no MPI found, multi-process runs are not built")
endif()

# The device communicator is its own library, plumb_nccl, linked by what uses it (today only its
# test, tests/dist/nccl_ranks.cpp): the plumb binary does not depend on libnccl until the GPU
# layouts call it.
set(PLUMB_NCCL_FOUND OFF)
if(MPI_CXX_FOUND AND PLUMB_GPU_KIND STREQUAL "CUDA")
  find_path(PLUMB_NCCL_INCLUDE nccl.h HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
  find_library(PLUMB_NCCL_LIBRARY nccl HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
  set(_nccl_runtime CUDA::cudart_static)
  set(_nccl_includes ${PLUMB_NCCL_INCLUDE} ${CUDAToolkit_INCLUDE_DIRS})
  set(PLUMB_NCCL_DEFINITIONS "")
elseif(MPI_CXX_FOUND AND PLUMB_GPU_KIND STREQUAL "HIP")
  find_path(PLUMB_NCCL_INCLUDE rccl/rccl.h HINTS ${RCCL_ROOT} $ENV{RCCL_ROOT} /opt/rocm PATH_SUFFIXES include)
  find_library(PLUMB_NCCL_LIBRARY rccl HINTS ${RCCL_ROOT} $ENV{RCCL_ROOT} /opt/rocm PATH_SUFFIXES lib lib64)
  set(_nccl_runtime amdhip64)
  set(_nccl_includes ${PLUMB_NCCL_INCLUDE})
  set(PLUMB_NCCL_DEFINITIONS PLUMB_WITH_RCCL __HIP_PLATFORM_AMD__)
endif()
if(PLUMB_NCCL_INCLUDE AND PLUMB_NCCL_LIBRARY)
  set(PLUMB_NCCL_FOUND ON)
  add_library(plumb_nccl STATIC ${PLUMB_DIST_DIR}/nccl_communicator.cpp)
  target_include_directories(plumb_nccl PRIVATE ${_nccl_includes})
  target_compile_definitions(plumb_nccl PRIVATE ${PLUMB_NCCL_DEFINITIONS})
  target_compile_options(plumb_nccl PRIVATE ${PLUMB_WARNINGS})
  target_link_libraries(plumb_nccl PUBLIC plumb_dist ${PLUMB_NCCL_LIBRARY} ${_nccl_runtime})
  message(STATUS "plumb: device communicator plumb_nccl over ${PLUMB_NCCL_LIBRARY}")
elseif(NOT PLUMB_GPU_KIND STREQUAL "OFF")
  message(STATUS "plumb: no NCCL / RCCL found (set NCCL_ROOT or RCCL_ROOT), the device communicator is not built")
endif()
