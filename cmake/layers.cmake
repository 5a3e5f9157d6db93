# The layers of src/plumb, one static library each (shared with PLUMB_SHARED_LAYERS, the GPU
# machine's bundle; docs/ARCHITECTURE.md, "Layers and targets").
# plumb_layer(NAME DEPS...) builds src/plumb/NAME/**.cpp (globbed: new files join without an edit)
# into plumb_NAME, linked PUBLIC to its direct dependencies. A layer with no sources yet is an
# INTERFACE target. Dependencies point one way: every #include "plumb/X/..." of a layer must name
# the layer itself or one it depends on (directly or not). cmake/check_layering.cmake checks this
# before the layer compiles, so an upward include fails the build, naming the file and the include.
define_property(GLOBAL PROPERTY PLUMB_LAYER_ALLOWED BRIEF_DOCS "layers a plumb layer may include"
                FULL_DOCS "set by plumb_layer(): the layer and every layer below it")

function(plumb_layer name)
  set(dir ${CMAKE_SOURCE_DIR}/src/plumb/${name})
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${dir}/*.cpp)
  list(FILTER sources EXCLUDE REGEX "/backend/gpu/")  # added by cmake/gpu.cmake when built
  list(FILTER sources EXCLUDE REGEX "/dist/(mpi|nccl)_")  # added by cmake/dist.cmake where found
  file(GLOB_RECURSE files CONFIGURE_DEPENDS ${dir}/*.h ${dir}/*.cpp ${dir}/*.cu)

  set(allowed ${name})
  foreach(dep ${ARGN})
    if(NOT TARGET plumb_${dep})
      message(FATAL_ERROR "plumb_layer(${name}): declare layer '${dep}' before the layers that use it")
    endif()
    get_property(below GLOBAL PROPERTY PLUMB_LAYER_ALLOWED_${dep})
    list(APPEND allowed ${below})
  endforeach()
  list(REMOVE_DUPLICATES allowed)
  set_property(GLOBAL PROPERTY PLUMB_LAYER_ALLOWED_${name} ${allowed})

  list(TRANSFORM ARGN PREPEND plumb_ OUTPUT_VARIABLE deps)
  if(sources)
    if(PLUMB_SHARED_LAYERS)
      add_library(plumb_${name} SHARED ${sources})
    else()
      add_library(plumb_${name} STATIC ${sources})
    endif()
    target_link_libraries(plumb_${name} PUBLIC ${deps})
    target_compile_options(plumb_${name} PRIVATE ${PLUMB_WARNINGS})
  else()
    add_library(plumb_${name} INTERFACE)
    target_link_libraries(plumb_${name} INTERFACE ${deps})
  endif()

  set(stamp ${CMAKE_BINARY_DIR}/layering/${name}.ok)
  add_custom_command(OUTPUT ${stamp}
    COMMAND ${CMAKE_COMMAND} -DROOT=${CMAKE_SOURCE_DIR}/src -DLAYER=${name} "-DALLOWED=${allowed}"
            -DSTAMP=${stamp} -P ${CMAKE_SOURCE_DIR}/cmake/check_layering.cmake
    DEPENDS ${files} ${CMAKE_SOURCE_DIR}/cmake/check_layering.cmake
    COMMENT "layering: src/plumb/${name} includes only ${allowed}"
    VERBATIM)
  add_custom_target(plumb_${name}_layering DEPENDS ${stamp})
  add_dependencies(plumb_${name} plumb_${name}_layering)
endfunction()
